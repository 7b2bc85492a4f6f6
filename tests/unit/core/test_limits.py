"""The bounds the commands share: `--n-jobs` on this machine is cut to its usable cores."""

from __future__ import annotations

import joblib

from autosync.core.limits import local_processes


def test_n_jobs_past_the_usable_cores_starts_one_process_per_core():
    """`leaderboard --n-jobs 100000` of one run started over a thousand processes, each an interpreter with
    torch, and ran the 24 GB machine out of memory."""
    cores = joblib.cpu_count()
    assert local_processes(100_000) == cores
    assert local_processes(1) == 1 and local_processes(-1) == -1  # -1: joblib's every core, as it was
    assert local_processes(cores) == cores


def test_a_tune_and_a_leaderboard_asked_for_more_processes_than_cores_run_on_the_cores(tiny_job, tmp_path,
                                                                                      monkeypatch):
    from autosync import api
    from autosync.search.space import SPACE_DIR, load_space
    from tests.conftest import tune_request

    job = api.load_job(tiny_job)
    space = load_space(SPACE_DIR / "policy.yaml", job.cluster.n_workers)
    assert tune_request(job, space, n_jobs=100_000).n_jobs == joblib.cpu_count()
    asked = []
    real = joblib.Parallel

    def parallel(n_jobs, **kwargs):  # what the leaderboard asks joblib for, its runs then run here
        asked.append(n_jobs)
        return real(n_jobs=1, **kwargs)

    monkeypatch.setattr(joblib, "Parallel", parallel)
    api.leaderboard(job, ["bsp"], seeds=1, n_jobs=100_000)
    assert asked == [joblib.cpu_count()]
