"""A PostgreSQL server that goes away during a tune: the tune waits, saying what for, and goes on when it
comes back; past the bounded wait it stops with the command that resumes; nothing finished is lost."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.conftest import autosync, wait_for
from tests.postgres import postgres_cluster

pytestmark = [pytest.mark.slow, pytest.mark.processes, pytest.mark.postgres]

WAIT = 5  # AUTOSYNC_STORAGE_WAIT_SECONDS: the first outage is shorter, the second longer
HEARTBEAT = 2  # AUTOSYNC_HEARTBEAT_SECONDS, of the tune and of the resuming command alike


def _finished(url: str) -> dict[int, str]:
    """{trial number: state} of the finished trials, {} while the server does not answer or has no tables."""
    import psycopg

    try:
        with psycopg.connect(url, connect_timeout=5) as con:
            return dict(con.execute("select number, state from trials where state in ('COMPLETE', 'PRUNED', 'FAIL')"))
    except (psycopg.OperationalError, psycopg.errors.UndefinedTable):
        return {}


def test_a_tune_waits_for_a_restarted_server_and_stops_resumable_past_the_wait(tiny_job, tmp_path, monkeypatch):
    job = tmp_path / "long.yaml"  # trials of about a second, so the server goes away while the tune works
    job.write_text(re.sub(r"max_virtual_seconds: \d+", "max_virtual_seconds: 40", tiny_job.read_text()))
    env = {**os.environ, "AUTOSYNC_STORAGE_WAIT_SECONDS": str(WAIT), "AUTOSYNC_HEARTBEAT_SECONDS": str(HEARTBEAT)}
    with postgres_cluster() as server:
        args = ["tune", str(job), "--space", "static_k", "--n-trials", "3", "--patience", "0", "--storage", server.url]
        cmd = [sys.executable, "-m", "autosync.cli", *args]
        log = tmp_path / "tune.err"
        with log.open("w") as err:
            tune = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=err)
        try:
            wait_for(lambda: len(_finished(server.url)) >= 2 or tune.poll() is not None, 240, "two finished trials")
            assert tune.poll() is None, log.read_text()[-2000:]
            before = _finished(server.url)
            server.stop()  # every session ended; back before the wait runs out
            wait_for(lambda: "waiting for the study storage" in log.read_text(), 60,
                     lambda: f"the line saying what the tune waits for; stderr: {log.read_text()[-1500:]}")
            server.start()
            wait_for(lambda: "answers again" in log.read_text(), 60,
                     lambda: f"the line saying the storage answers again; stderr: {log.read_text()[-1500:]}")
            assert tune.poll() is None, log.read_text()[-2000:]  # it went on
            server.stop()  # and now for longer than the wait
            assert tune.wait(timeout=120) == 1
        finally:
            if tune.poll() is None:
                tune.kill()
        stderr = log.read_text()
        assert "Traceback" not in stderr, stderr[-3000:]
        (line,) = [x for x in stderr.splitlines() if x.startswith("error:")]
        assert f"did not answer for {WAIT} s" in line and "every finished trial is kept" in line, line
        assert line.endswith("--patience 0 --storage " + server.url.replace("pg-s3cret-pw", "***")), line
        server.start()
        after = _finished(server.url)
        assert all(after.get(n) == state for n, state in before.items()), (before, after)  # nothing finished lost
        # the same command, in this process (no imports to pay), with the tune's heartbeat interval, which
        # this process read from its environment when it imported autosync: a trial the tune left running
        # before it tagged it with its process (it stopped there) is failed as dead after two intervals, 4 s,
        # not the 60 s of the default (one resume, measured, took 65 s instead of the usual 15)
        from autosync.search.study import storage

        monkeypatch.setattr(storage, "HEARTBEAT_SECONDS", HEARTBEAT)
        resumed = autosync(*args, cwd=tmp_path)
        assert resumed.returncode == 0, resumed.stderr[-2000:]
        assert "resuming the study: " in resumed.stderr
        import psycopg

        with psycopg.connect(server.url) as con:
            roles = [r for (r,) in con.execute("select a.value_json from trial_user_attributes a join trials t "
                                               "using (trial_id) where a.key = 'role' and t.state <> 'RUNNING'")]
            running = con.execute("select count(*) from trials where state = 'RUNNING'").fetchone()[0]
    assert roles.count('"budget"') == 3 and running == 0, roles
