"""`autosync tune --backend processes`: every trial trains on worker processes, virtual or real clock."""

from __future__ import annotations

import json
import multiprocessing

import pytest

from autosync.engine.backends import BackendChoice
from autosync.search.cache import study_name
from autosync.search.objective import RunFailed, evaluate
from tests.conftest import autosync, no_traceback, small_job


def _trials(db) -> list[tuple[dict, list[float]]]:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    (summary,) = optuna.get_all_study_summaries(f"sqlite:///{db}")
    study = optuna.load_study(study_name=summary.study_name, storage=f"sqlite:///{db}")
    return [(t.params, t.values) for t in study.trials], study


def test_a_processes_tune_on_the_virtual_clock_gives_the_simulators_trial_values(tiny_job, tmp_path):
    args = ("tune", str(tiny_job), "--n-trials", "3", "--sampler", "random", "--json")
    sim = autosync(*args, "--storage", "sqlite:///sim.db", cwd=tmp_path)
    proc = autosync(*args, "--storage", "sqlite:///proc.db", "--backend", "processes", cwd=tmp_path)
    assert sim.returncode == 0 and proc.returncode == 0, proc.stderr
    sim_trials, _ = _trials(tmp_path / "sim.db")
    proc_trials, study = _trials(tmp_path / "proc.db")
    assert proc_trials == sim_trials  # bit for bit: the same policies, the same values
    assert study.study_name.endswith("-static_k-processes-virtual-cpu")
    cache = json.loads(proc.stdout)["cache"]
    assert cache["execution"] == {"backend": "processes", "device": "cpu", "clock": "virtual", "processes": 2}
    assert json.loads(sim.stdout)["cache"]["execution"] == {"backend": "simulator", "device": "cpu"}


def test_a_real_clock_tune_finishes_and_caches_its_backend(tiny_job, tmp_path):
    args = ("tune", str(tiny_job), "--n-trials", "2", "--storage", "sqlite:///real.db", "--backend", "processes",
            "--clock", "real", "--stragglers", "model", "--time-scale", "0.02", "--json")
    first = autosync(*args, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    cache = json.loads(first.stdout)["cache"]
    assert cache["execution"]["clock"] == "real" and cache["execution"]["time_scale"] == 0.02
    again = autosync(*args, cwd=tmp_path)  # a recurring job on the same backend: the cache answers
    assert again.returncode == 0 and json.loads(again.stdout)["cached"] is True
    simulated = autosync("tune", str(tiny_job), "--n-trials", "2", "--storage", "sqlite:///real.db", "--json",
                         cwd=tmp_path)  # the simulator's study is another: a real result never answers for it
    assert simulated.returncode == 0 and json.loads(simulated.stdout)["cached"] is False


def test_the_cache_key_separates_backends():
    job = small_job()

    class Space:
        name = "static_k"

    names = {study_name(job, Space(), b) for b in (
        None, BackendChoice(), BackendChoice(backend="processes"),
        BackendChoice(backend="processes", clock="real"),
        BackendChoice(backend="processes", clock="real", stragglers="model", time_scale=0.05))}
    assert len(names) == 4  # the simulator is one, however it is named
    assert study_name(job, Space()) == f"{job.fingerprint()}-static_k"  # existing caches still match


def test_a_trial_whose_worker_processes_die_fails_with_its_reason():
    job = small_job(budget={"max_virtual_seconds": 60})
    backend = BackendChoice(backend="processes", processes=1, worker_timeout=20)

    def kill_workers(info: dict, step: int) -> None:
        for child in multiprocessing.active_children():
            child.kill()

    with pytest.raises(RunFailed, match="the processes backend failed"):
        evaluate(job, {"policy": "bsp", "params": {}}, [0], report=kill_workers, backend=backend)
    assert not multiprocessing.active_children()


@pytest.mark.parametrize("args, message", [
    (["--backend", "distributed"], "--backend distributed is not supported by tune yet"),
    (["--clock", "real"], "--clock real needs --backend processes or distributed"),
])
def test_bad_backend_options_for_tune_exit_2(tiny_job, tmp_path, args, message):
    proc = autosync("tune", str(tiny_job), "--n-trials", "1", *args, cwd=tmp_path)
    assert proc.returncode == 2
    no_traceback(proc)
    assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
