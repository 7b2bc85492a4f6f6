"""Ctrl-C between Optuna creating a RUNNING trial (`study.ask`) and autosync tagging it with its process leaves
no untagged RUNNING trial (a resumed command would wait out two heartbeat intervals for it) and no heartbeat
thread beating after the command gave up (the thread is not a daemon: the command would never exit).

The SIGINT is sent from inside Optuna's own steps in that gap (the ask, the heartbeat thread's start), with
the command's guard active, as a Ctrl-C typed at that moment would arrive."""

from __future__ import annotations

import os
import signal
import threading
import time

import optuna
import pytest

from autosync.search.study.interrupts import storage_calls_finish_first
from autosync.search.study.records import PROCESS
from autosync.search.study.storage import open_storage
from autosync.search.study.claim import process_tag
from autosync.search.study.trials import run_queued_trial, top_up


@pytest.fixture(autouse=True)
def _default_sigint():
    """Python's own SIGINT handler, as a command starts with (the guard steps aside for a program's own)."""
    before = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


def _heartbeats() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.endswith("(_record_heartbeat)") and t.is_alive()]


@pytest.fixture
def queued(tmp_path):
    url = f"sqlite:///{tmp_path / 'claim.db'}"
    study = optuna.create_study(storage=open_storage(url), study_name="claim")
    assert top_up(study, url, budget=1) == 1
    yield study, url
    for thread in _heartbeats():  # one left beating (the bug) must not keep the test process from exiting
        getattr(thread, "_args")[2].set()


def _ctrl_c_after(owner: type, name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    real = getattr(owner, name)

    def then_ctrl_c(self, *args, **kwargs):
        out = real(self, *args, **kwargs)
        os.kill(os.getpid(), signal.SIGINT)
        return out

    monkeypatch.setattr(owner, name, then_ctrl_c)


@pytest.mark.parametrize("point", ["the ask", "the heartbeat's start"])
def test_ctrl_c_before_the_process_tag_fails_the_trial_tagged_and_stops_its_heartbeat(queued, point, monkeypatch):
    from optuna.storages._heartbeat import HeartbeatThread

    study, url = queued
    _ctrl_c_after(*((optuna.Study, "ask") if point == "the ask" else (HeartbeatThread, "start")), monkeypatch)
    objective_ran = []
    started = time.monotonic()
    with storage_calls_finish_first(), pytest.raises(KeyboardInterrupt):
        run_queued_trial(study, url, lambda trial: objective_ran.append(trial.number) or 1.0, catch=())
    assert time.monotonic() - started < 10
    (trial,) = optuna.load_study(study_name="claim", storage=url).get_trials()
    assert trial.state == optuna.trial.TrialState.FAIL and trial.user_attrs.get(PROCESS) == process_tag()
    assert not objective_ran  # Ctrl-C was raised before the objective: it cut the trial short
    assert not _heartbeats()
