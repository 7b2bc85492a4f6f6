"""Many `autosync tune` processes on one study: started together, killed mid-trial, restarted.

Afterwards the study holds exactly the budget of counted trials, none running or queued, no trial lost or
counted twice, and every trial of a killed process failed with its reason and was re-run.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import small_job, wait_for
from tests.kill_storm import Zygote
from tests.postgres import postgres_server, storage_rows
from tests.storage_open import open_when_ready

pytestmark = [pytest.mark.slow, pytest.mark.processes]

BUDGET = 16  # trials: enough that the late starters among six processes on 2 cores still find some to run (with
# 12, when each command was a new interpreter, the two single tunes were still starting when the two with
# --n-jobs 2 had run the whole budget, 1 run in 3; forked from the zygote they start at once, but their helpers
# still import torch, and the margin costs a few seconds)


def _job(tmp_path: Path, killable: bool = True) -> Path:
    """8 workers, static k over 16 points, 300 updates. `killable`: the target is out of reach, so a trial
    trains its 300 updates or, twice as slow as BSP to its metric, is pruned on its pace after 30% of BSP's
    run (one that meets the target stops there, in hundredths of a second). Else the target is met and
    trials stop there."""
    target = {"metric": "test_accuracy", "threshold": 0.97 if killable else 0.8}
    job = small_job(cluster__n_workers=8, budget={"max_updates": 300}, target=target)
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job.model_dump(mode="json")))
    return path


def _start(zygote: Zygote, job: Path, url: str, n_jobs: int, tmp_path: Path, name: str) -> int:
    """A tune forked by `zygote` (which imported autosync and torch once: a start-up costs no imports; its
    `--n-jobs` helpers are spawned, as always), leading its own process group; its pid."""
    argv = ["tune", str(job), "--sampler", "tpe", "--n-trials", str(BUDGET), "--tolerance", "0.5", "--storage", url,
            "--n-jobs", str(n_jobs), "--patience", "0"]  # the whole budget (give-ups: test_patience)
    return zygote.start(argv, tmp_path, tmp_path / f"{name}.log", session=True)


def _signal_group(pid: int, sig: int) -> None:
    """`sig` to the process group of a tune started by `_start` (its helper processes too), if any is left."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, sig)


@contextlib.contextmanager
def _storage(kind: str, tmp_path: Path):
    if kind == "sqlite":
        yield f"sqlite:///{tmp_path / 'shared.db'}"
    else:
        with postgres_server() as url:
            yield url


def test_six_processes_killed_and_restarted_keep_the_budget_exact(tmp_path):
    """On SQLite, whose file locks are the storage's most delicate part; PostgreSQL's sharing is the README
    recipe's test below (the heartbeats that find killed trials are the same on both)."""
    _six_processes_killed_and_restarted(tmp_path, f"sqlite:///{tmp_path / 'shared.db'}")


def _six_processes_killed_and_restarted(tmp_path: Path, db: str) -> None:
    zygote = Zygote({**os.environ, "AUTOSYNC_HEARTBEAT_SECONDS": "1"})
    try:
        _six_processes_killed_and_restarted_by(zygote, tmp_path, db)
    finally:
        zygote.close()


def _six_processes_killed_and_restarted_by(zygote: Zygote, tmp_path: Path, db: str) -> None:
    job = _job(tmp_path)
    plan = {"a": 2, "b": 2, "c": 1, "d": 1}  # two commands with --n-jobs 2 and two single ones: 6 processes
    procs = {name: _start(zygote, job, db, n, tmp_path, name) for name, n in plan.items()}  # name -> pid
    running = ("select a.value_json from trials t join trial_user_attributes a on a.trial_id = t.trial_id "
               "where t.state = 'RUNNING' and a.key = 'process'")

    def busy_groups() -> set[int]:  # process groups (one per tune command) with a trial running now
        groups = set()
        for (process,) in storage_rows(db, running, timeout=1):  # a frozen tune may hold the lock: looked at again
            try:
                groups.add(os.getpgid(int(json.loads(process).rsplit(":", 1)[1])))
            except ProcessLookupError:
                pass
        return groups

    def busy_pair() -> tuple[str, str] | None:  # a whole tune (its helper too) and a single one, both mid-trial
        """Looked at with every tune frozen (SIGSTOP on its process group), and left frozen where a pair is
        found: the trials seen running are still running when the pair is killed, however short a trial is
        and however long a look at the storage takes on a busy machine."""
        for pid in procs.values():
            _signal_group(pid, signal.SIGSTOP)
        pair = None
        try:
            groups = busy_groups()
            pair = next(((x, y) for x in ("a", "b") for y in ("c", "d") if {procs[x], procs[y]} <= groups),
                        None)
            return pair
        finally:
            for name, pid in procs.items():
                if pair is None or name not in pair:
                    _signal_group(pid, signal.SIGCONT)

    # before the first trial, the four commands each train BSP's reference (their helpers import torch first)
    victims = wait_for(busy_pair, 360, "a tune with --n-jobs 2 and a single one to run a trial at once", every=0.2)
    for name in victims:  # each mid-trial, frozen there
        os.killpg(procs[name], signal.SIGKILL)
        assert zygote.wait(procs[name], 60) == -signal.SIGKILL
    for name in victims:
        procs[name] = _start(zygote, job, db, plan[name], tmp_path, name)
    for name, pid in procs.items():
        assert zygote.wait(pid, 240) == 0, (tmp_path / f"{name}.log").read_text()[-2000:]

    trials = storage_rows(db, "select trial_id, number, state from trials")
    attrs: dict[int, dict] = {}
    for trial_id, key, value in storage_rows(db, "select trial_id, key, value_json from trial_user_attributes"):
        attrs.setdefault(trial_id, {})[key] = json.loads(value)
    states = [state for _, _, state in trials]
    assert "RUNNING" not in states and "WAITING" not in states, states
    numbers = [number for _, number, _ in trials]
    assert len(numbers) == len(set(numbers))
    checks = [n for tid, n, s in trials if "full_budget_check_of" in attrs.get(tid, {})]  # the winner's, uncounted
    answered = [n for tid, n, s in trials if attrs.get(tid, {}).get("answered_untrained")]  # take no slot
    counted = [n for tid, n, s in trials if n not in checks + answered and (s in ("COMPLETE", "PRUNED")
               or (s == "FAIL" and "fail_reason" in attrs.get(tid, {}) and not attrs[tid].get("process_lost")))]
    resampled = [n for tid, n, s in trials if s == "FAIL" and "resampled_from" in attrs.get(tid, {})]
    killed = [(tid, n) for tid, n, s in trials if s == "FAIL" and n not in counted + resampled + answered]  # a check too
    given_up = [json.loads(v)["places"] for (v,) in storage_rows(db, "select value_json from study_user_attributes "
                                                           "where key = 'given_up_places'")]  # --patience
    places = given_up[0] if given_up else 0  # places of the budget a search that stopped improving gave up
    assert len(counted) + places == BUDGET, (len(counted), places, trials)
    assert killed, "killing two tunes mid-trial left no trial to re-run"
    reruns = {attrs.get(tid, {}).get("retry_of"): s for tid, _, s in trials}
    for tid, number in killed:
        reason = attrs.get(tid, {}).get("fail_reason", "")  # a process of this machine is seen gone at once
        assert "no heartbeat" in reason or "is gone (killed)" in reason, f"killed trial {number} has no reason"
        assert reruns.get(number) in ("COMPLETE", "PRUNED", "FAIL"), f"killed trial {number} was not re-run"
    # nothing else: no surplus trial beyond the budget (a proposal of what another process trained is
    # proposed again, and that trial does not count); a check answered by another process's check of the
    # same policy is both a check and answered, and counts once
    assert len(trials) == BUDGET - places + len([n for _, n in killed if n not in checks]) + len(resampled) \
        + len(set(checks) | set(answered))


def test_processes_opening_a_new_storage_together_create_its_schema_once(tmp_path):
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    url = f"sqlite:///{tmp_path / 'new.db'}"
    created = tmp_path / "created"
    barrier = ctx.Barrier(6)
    procs = [ctx.Process(target=open_when_ready, args=(url, barrier, created)) for _ in range(6)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    assert [p.exitcode for p in procs] == [0] * 6
    creators = created.read_text().split()
    assert len(creators) == 1 and int(creators[0]) in {p.pid for p in procs}, creators  # one created, five opened
    assert storage_rows(url, "select count(*) from version_info") == [(1,)]
    assert storage_rows(url, "select count(*) from alembic_version") == [(1,)]


@pytest.mark.postgres
def test_readme_recipe_two_tunes_share_one_postgresql_study_and_no_output_shows_the_password(tmp_path):
    from tests.postgres import PASSWORD

    job = _job(tmp_path, killable=False)
    with postgres_server() as url:
        # the README's recipe for several machines: the same command, with the same --storage, on each
        cmd = [sys.executable, "-m", "autosync.cli", "tune", str(job), "--storage", url, "--n-trials", "6",
               "--tolerance", "0.5", "--sampler", "tpe"]
        procs = [subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for _ in range(2)]
        outputs = [p.communicate(timeout=240) for p in procs]
        assert [p.returncode for p in procs] == [0, 0], outputs
        resampled = {tid for (tid,) in storage_rows(url, "select trial_id from trial_user_attributes "
                                                  "where key = 'resampled_from'")}
        resampled |= {tid for (tid,) in storage_rows(url, "select trial_id from trial_user_attributes "
                                              "where key = 'full_budget_check_of'")}  # and the winner's check
        resampled |= {tid for (tid,) in storage_rows(url, "select trial_id from trial_user_attributes "
                                              "where key = 'answered_untrained'")}  # and points answered untrained
        states = [s for tid, s in storage_rows(url, "select trial_id, state from trials") if tid not in resampled]
        assert sorted(states) == ["COMPLETE"] * states.count("COMPLETE") + ["PRUNED"] * states.count("PRUNED")
        assert len(states) == 6  # a global budget: 6 trials between the two processes, not 6 each (a trial
        # proposing what the other process trains is proposed again: it fails and does not count)

        cached = storage_rows(url, "select value_json from study_user_attributes")
        bad = url.replace(PASSWORD, PASSWORD + "-wrong")
        failing = subprocess.run([*cmd[:6], bad, *cmd[7:]], cwd=tmp_path, capture_output=True, text=True,
                                 timeout=120)
    assert failing.returncode == 2 and "cannot open the study storage" in failing.stderr
    assert "autosync:***@127.0.0.1" in failing.stderr and "Traceback" not in failing.stderr
    written = [p.read_bytes() for p in tmp_path.rglob("*") if p.is_file() and p.suffix != ".log"]
    texts = [o for pair in outputs for o in pair] + [failing.stdout, failing.stderr] + [str(cached)]
    assert all(PASSWORD not in t for t in texts), "a storage password was printed"
    assert all(PASSWORD.encode() not in b for b in written), "a storage password was written to a file"


def test_an_sqlite_storage_commits_to_a_write_ahead_log_without_waiting_for_the_disk(tmp_path):
    """A tune commits some 40 times per trial: SQLite storages use the write-ahead log with synchronous=NORMAL
    (a commit survives the process being killed, which the test above checks, without an fsync each)."""
    from sqlalchemy import text

    from autosync.search.study.storage import open_storage

    storage = open_storage(f"sqlite:///{tmp_path / 'studies.db'}")
    with storage.engine.connect() as connection:
        assert connection.execute(text("PRAGMA journal_mode")).scalar() == "wal"
        assert connection.execute(text("PRAGMA synchronous")).scalar() == 1  # NORMAL
    assert sqlite3.connect(tmp_path / "studies.db").execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_the_command_closes_its_storage_as_it_ends_leaving_no_write_ahead_log(tiny_job, tmp_path):
    """The console script (and its --n-jobs helper) ends without the last garbage collection over torch's
    objects (`autosync.cli.run`: gc.freeze), which used to close the storage's connections: they are closed
    first, so the SQLite file alone holds every commit, with no write-ahead log beside it to copy with it."""
    url = f"sqlite:///{tmp_path / 'studies.db'}"
    proc = subprocess.run([sys.executable, "-m", "autosync.cli", "tune", str(tiny_job), "--sampler", "race",
                           "--n-jobs", "2", "--table", str(tmp_path / "table"), "--storage", url],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "studies.db").stat().st_size and not (tmp_path / "studies.db-wal").exists()
    assert storage_rows(url, "select count(*) from trials")[0][0] > 0
