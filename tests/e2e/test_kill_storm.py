"""A shortened kill storm (tests/kill_storm.py): tunes sharing one SQLite study, SIGKILLed at random moments
and started again, end with the budget exact, nothing lost or trained twice, every killed trial re-run, and
the answer of the same command run once without a kill. The full storm (8 processes, 100 kills, SQLite
and PostgreSQL) is benchmarks/bench_kill_storm.py."""

from __future__ import annotations

import pytest

from tests.conftest import autosync
from tests.kill_storm import answer, check, run_storm, storm_job

pytestmark = [pytest.mark.slow, pytest.mark.processes]

BUDGET = 8  # static_k on 4 workers: 8 points, each tried once by the grid sampler, whatever the order


def test_tunes_killed_at_random_moments_keep_the_budget_and_the_answer(tmp_path):
    job = storm_job(tmp_path / "job.yaml", n_workers=4, seconds=30)
    argv = ["tune", str(job), "--space", "static_k", "--sampler", "grid", "--n-trials", str(BUDGET),
            "--patience", "0"]
    alone = tmp_path / "alone.db"
    assert autosync(*argv, "--storage", f"sqlite:///{alone}", cwd=tmp_path).returncode == 0
    url = f"sqlite:///{tmp_path / 'storm.db'}"
    # 3 processes, 6 kills: half at random moments, half aimed at a process in a trial
    storm = check(run_storm(argv, url, tmp_path, processes=3, kills=6, seed=3, lifetime=3.0, aim=0.5,
                            timeout=300), url, BUDGET)
    assert not storm.problems, "\n".join(storm.problems)
    assert storm.kills == 6 and storm.killed_trials, (storm.kills, storm.mid_trial, storm.roles)
    assert storm.answer == answer(f"sqlite:///{alone}") is not None
