"""Ctrl-C during a storage call waits for the call to return, whether Optuna made it through a public
method or a private one (its cached storage reads through `_get_trials`)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from autosync import cli
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


_SWALLOWED = """
import gc, sys, time, weakref
from autosync.search.study.interrupts import ctrl_c_never_swallowed

class Thing:
    pass

def ctrl_c(ref):  # Ctrl-C landing in a weakref callback: Python swallows whatever it raises
    raise KeyboardInterrupt

with ctrl_c_never_swallowed() if sys.argv[1] == "guarded" else open(__file__):
    thing = Thing()
    ref = weakref.ref(thing, ctrl_c)
    del thing
    gc.collect()
    try:
        time.sleep(5)
        print("lost")
    except KeyboardInterrupt:
        print("raised again")
"""


@pytest.mark.parametrize("guard", ["guarded", "bare"])
def test_a_ctrl_c_swallowed_in_a_finalizer_is_raised_again(tmp_path, guard):
    """Python swallows an exception raised in a weakref callback or finalizer ('Exception ignored in ...'
    and its traceback): a Ctrl-C landing there was lost, and the command went on to its end. Within
    `ctrl_c_never_swallowed` it is sent again and raised where it can propagate, without that traceback."""
    script = tmp_path / "swallowed.py"
    script.write_text(_SWALLOWED)
    done = subprocess.run([sys.executable, str(script), guard], capture_output=True, text=True, timeout=60)
    if guard == "bare":  # what Python does on its own: the reason for the guard
        assert done.stdout.strip() == "lost" and "Exception ignored" in done.stderr
    else:
        assert done.stdout.strip() == "raised again" and "Traceback" not in done.stderr, done.stderr


def test_a_ctrl_c_caught_after_it_left_code_run_from_a_string_does_not_end_python_m_by_sigint(tmp_path):
    """CPython remembers a KeyboardInterrupt that left `exec`'d code even where it was caught later, and
    `python -m` then ends killed by SIGINT (-2) instead of with the command's status: the command line
    clears that record as it ends (`autosync.cli._forget_caught_interrupts`)."""
    for forget in (False, True):
        (tmp_path / f"caught_{forget}.py").write_text(
            "import sys\nfrom autosync.cli import _forget_caught_interrupts\ntry:\n"
            "    exec('raise KeyboardInterrupt')\nexcept KeyboardInterrupt:\n    pass\n"
            + ("_forget_caught_interrupts()\n" if forget else "") + "sys.exit(130)\n")
        done = subprocess.run([sys.executable, "-m", f"caught_{forget}"], cwd=tmp_path, timeout=60)
        assert done.returncode == (130 if forget else -signal.SIGINT)


def test_ctrl_c_while_the_command_line_loads_ends_it_in_one_line_and_python_s_handler_is_back_after():
    """A Ctrl-C in the fraction of a second the command's modules load ends it as one anywhere else does
    (one line, status 130; it printed the traceback of whichever import it cut), and importing the command
    line leaves SIGINT's handler as it found it."""
    with pytest.raises(SystemExit) as ended:
        cli._interrupted_at_start(signal.SIGINT, None)
    assert ended.value.code == 130
    done = subprocess.run([sys.executable, "-c", "import signal, autosync.cli; "
                           "print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)"],
                          capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "True", done.stderr


def test_a_ctrl_c_that_python_wrapped_in_another_exception_is_read_as_one():
    """Python turns a KeyboardInterrupt raised in `__set_name__` (pydantic building a model as a module is
    imported) into a RuntimeError caused by it: the command line ends as on any Ctrl-C, not with a traceback."""
    class Descriptor:
        def __set_name__(self, owner, name):
            raise KeyboardInterrupt

    with pytest.raises((RuntimeError, KeyboardInterrupt)) as wrapped:  # Python 3.11 wraps it, 3.12 does not
        type("Model", (), {"field": Descriptor()})
    assert cli._ctrl_c_beneath(wrapped.value)
    assert not cli._ctrl_c_beneath(RuntimeError("a failure of its own"))


_IN_AN_IMPORT = """
import sys, time
sys.path.insert(0, sys.argv[1])
from autosync.search.study.interrupts import storage_calls_finish_first

with storage_calls_finish_first():
    try:
        import slow_module  # Ctrl-C comes while its body runs
        print("import finished")
        time.sleep(5)
        print("lost")
    except KeyboardInterrupt:
        print("raised after the import" if "slow_module" in sys.modules else "raised inside the import")
"""
_SLOW_MODULE = """
import os, signal, time
os.kill(os.getpid(), signal.SIGINT)
time.sleep(0.3)  # several resends: each finds the import still running
"""


def test_ctrl_c_inside_an_import_waits_for_the_import_to_finish(tmp_path):
    """An import cut short by Ctrl-C can abort the interpreter (torch's C++ part calls std::terminate on the
    KeyboardInterrupt: exit -6): within the guard a Ctrl-C there is raised once the import is done."""
    (tmp_path / "slow_module.py").write_text(_SLOW_MODULE)
    script = tmp_path / "importing.py"
    script.write_text(_IN_AN_IMPORT)
    done = subprocess.run([sys.executable, str(script), str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["import", "finished", "raised", "after", "the", "import"], done.stdout + done.stderr
