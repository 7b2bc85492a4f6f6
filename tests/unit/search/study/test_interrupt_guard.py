"""Ctrl-C during a storage call waits for the call to return, whether Optuna made it through a public
method or a private one (its cached storage reads through `_get_trials`)."""

from __future__ import annotations

import os
import signal

import pytest

from autosync.search.study.interrupts import guarded, interrupted, storage_calls_finish_first


@pytest.fixture(autouse=True)
def _default_sigint():
    """Each test starts as a command does: Python's own SIGINT handler (the guard steps aside for a
    program's own), whatever the tests before it in this process left."""
    before = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


class _Store:
    def __init__(self) -> None:
        self.finished: list[str] = []

    def _read(self) -> str:
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C in the middle of the call
        self.finished.append("_read")
        return "rows"

    def write(self) -> None:
        self.read_through_private()

    def read_through_private(self) -> None:
        self._read()
        self.finished.append("read_through_private")


@pytest.mark.parametrize("call", ["_read", "write"])
def test_ctrl_c_in_a_storage_call_is_raised_when_the_call_returns(call):
    store = guarded(_Store)()
    with storage_calls_finish_first(), pytest.raises(KeyboardInterrupt):
        getattr(store, call)()
    assert "_read" in store.finished and (call == "_read" or "read_through_private" in store.finished)
    assert interrupted()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_optunas_private_storage_calls_are_guarded():
    from optuna.storages import RDBStorage

    cls = guarded(RDBStorage)
    for name in ("_get_trials", "_create_new_trial", "_set_trial_param", "_get_best_trial_id",
                 "_get_stale_trial_ids", "get_all_trials"):
        assert getattr(cls, name) is not getattr(RDBStorage, name), name
    assert cls.__init__ is RDBStorage.__init__


def test_autosyncs_own_queries_are_storage_calls_too():
    """The heartbeat and study listings query the database past Optuna's methods, inside `storage_call`."""
    from autosync.search.study.interrupts import storage_call

    done = []
    with storage_calls_finish_first(), pytest.raises(KeyboardInterrupt):
        with storage_call():
            os.kill(os.getpid(), signal.SIGINT)
            done.append("query")
    assert done == ["query"] and interrupted()


def test_a_storage_call_left_open_by_an_earlier_search_in_the_process_does_not_swallow_ctrl_c():
    """A long-lived process (a notebook calling api.tune again) may carry an unbalanced count of storage
    calls from an earlier search: a new guard starts from none."""
    from autosync.search.study import interrupts
    from autosync.search.study.interrupts import storage_call

    interrupts._state["depth"] = 2
    with storage_calls_finish_first(), pytest.raises(KeyboardInterrupt):
        with storage_call():
            os.kill(os.getpid(), signal.SIGINT)
    assert interrupts._state["depth"] == 0
