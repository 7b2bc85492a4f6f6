"""Many `autosync tune` processes on one study: started together, killed mid-trial, restarted.

Afterwards the study holds exactly the budget of counted trials, none running or queued, no trial lost or
counted twice, and every trial of a killed process failed with its reason and was re-run.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import yaml

from tests.conftest import small_job

BUDGET = 12


def _job(tmp_path: Path) -> Path:
    """8 workers, static k over 16 points, trials of about half a second: long enough to be killed in."""
    job = small_job(cluster__n_workers=8, budget={"max_updates": 300}, target={"metric": "test_accuracy",
                                                                              "threshold": 0.85})
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job.model_dump(mode="json")))
    return path


def _start(job: Path, db: Path, n_jobs: int, tmp_path: Path, name: str) -> subprocess.Popen:
    log = open(tmp_path / f"{name}.log", "a")
    env = {**os.environ, "AUTOSYNC_HEARTBEAT_SECONDS": "1"}
    cmd = [sys.executable, "-m", "autosync.cli", "tune", str(job), "--n-trials", str(BUDGET), "--tolerance", "0.5",
           "--storage", f"sqlite:///{db}", "--n-jobs", str(n_jobs)]
    return subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def _rows(db: Path, query: str) -> list[tuple]:
    try:
        with sqlite3.connect(db, timeout=30) as con:
            return con.execute(query).fetchall()
    except sqlite3.OperationalError:  # not created yet
        return []


def _wait_for(condition, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.2)
    return False


def test_six_processes_killed_and_restarted_keep_the_budget_exact(tmp_path):
    job, db = _job(tmp_path), tmp_path / "shared.db"
    plan = {"a": 2, "b": 2, "c": 1, "d": 1}  # two commands with --n-jobs 2 and two single ones: 6 processes
    procs = {name: _start(job, db, n, tmp_path, name) for name, n in plan.items()}
    running = "select count(*) from trials where state = 'RUNNING'"
    assert _wait_for(lambda: (_rows(db, running) or [(0,)])[0][0] >= 2, 90), "no trial started"
    for name in ("a", "c"):  # a whole tune (its helper too) and a single one, each mid-trial
        os.killpg(procs[name].pid, signal.SIGKILL)
        procs[name].wait()
    for name in ("a", "c"):
        procs[name] = _start(job, db, plan[name], tmp_path, name)
    for name, proc in procs.items():
        assert proc.wait(timeout=240) == 0, (tmp_path / f"{name}.log").read_text()[-2000:]

    trials = _rows(db, "select trial_id, number, state from trials")
    attrs: dict[int, dict] = {}
    for trial_id, key, value in _rows(db, "select trial_id, key, value_json from trial_user_attributes"):
        attrs.setdefault(trial_id, {})[key] = json.loads(value)
    states = [state for _, _, state in trials]
    assert "RUNNING" not in states and "WAITING" not in states, states
    numbers = [number for _, number, _ in trials]
    assert len(numbers) == len(set(numbers))
    counted = [n for tid, n, s in trials if s in ("COMPLETE", "PRUNED")
               or (s == "FAIL" and "fail_reason" in attrs.get(tid, {}) and not attrs[tid].get("process_lost"))]
    killed = [(tid, n) for tid, n, s in trials if s == "FAIL" and n not in counted]
    assert len(counted) == BUDGET, (len(counted), trials)
    assert killed, "killing two tunes mid-trial left no trial to re-run"
    reruns = {attrs.get(tid, {}).get("retry_of"): s for tid, _, s in trials}
    for tid, number in killed:
        assert "no heartbeat" in attrs.get(tid, {}).get("fail_reason", ""), f"killed trial {number} has no reason"
        assert reruns.get(number) in ("COMPLETE", "PRUNED", "FAIL"), f"killed trial {number} was not re-run"
    assert len(trials) == BUDGET + len(killed)  # nothing else: no surplus trial beyond the budget


def _open(url: str, barrier) -> None:
    from autosync.search.storage import open_storage

    barrier.wait()
    open_storage(url)


def test_processes_opening_a_new_storage_together_create_its_schema_once(tmp_path):
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    url = f"sqlite:///{tmp_path / 'new.db'}"
    barrier = ctx.Barrier(6)
    procs = [ctx.Process(target=_open, args=(url, barrier)) for _ in range(6)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    assert [p.exitcode for p in procs] == [0] * 6
