"""The worker processes a command starts are spared a terminal's Ctrl-C, which the command alone handles; and
a request to end (SIGTERM) is handled as a Ctrl-C.

A terminal sends Ctrl-C (SIGINT) to every process of the command. joblib's workers (`autosync leaderboard`,
`autosync table`, `autosync robustness`) printed the traceback of whatever it cut short, the import of their
start-up above all, under the command's one line. Started within `workers_spared_ctrl_c`, they never take
it: the command does, and joblib ends its workers as the exception leaves its loop.

`kill`, `timeout`, a batch scheduler at a job's time limit (Slurm's scancel) and a container's stop send
SIGTERM, whose default ends the process on the spot: a tune left its temporary folder of kept runs behind
(megabytes in /tmp, for every tune so ended), its trial running in the storage until its heartbeat expired,
and its semaphores for the resource tracker to report. Within `sigterm_as_ctrl_c` it is handled once as the
command handles Ctrl-C: what the command keeps, it keeps and says so, its temporary files are removed and it
exits with status 130. It is passed on to the helper processes registered with `pass_sigterm_on_to` (a tune's
`--n-jobs` helpers, which handle it the same way), so that a SIGTERM sent to the command's process alone
ends them as one sent to its whole process group (`timeout`, a scheduler) does. Where SIGINT is ignored (a
command started in the background by a script) and under torchrun (whose agent sends SIGTERM to ranks that
may be waiting inside a collective call, and SIGKILL 30 s later) SIGTERM keeps its default.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from typing import Any, Iterator

__all__ = ["children_start_without_sigint", "pass_sigterm_on_to", "sigterm_as_ctrl_c", "workers_spared_ctrl_c"]

_TOLD: list[Any] = []  # the child processes SIGTERM's handler passes it on to (`pass_sigterm_on_to`)
_ASKED: list[int] = []  # the SIGTERM being handled (empty: none yet), so that a second one is not (`_as_ctrl_c`)


@contextlib.contextmanager
def workers_spared_ctrl_c(n_jobs: int) -> Iterator[None]:
    """Within: joblib's workers start and stay with SIGINT blocked (`children_start_without_sigint`: joblib's
    pool starts them from this thread or from a thread it starts meanwhile, which inherits the mask). This
    process still takes Ctrl-C: a thread started first, with SIGINT not blocked, receives it, and Python runs
    the handler in the main thread as it always does (at its next bytecode: joblib's loop polls). Nothing
    changes for `n_jobs` 1 (joblib starts no process) or outside the main thread."""
    if n_jobs == 1 or threading.current_thread() is not threading.main_thread():
        yield
        return
    done = threading.Event()
    receiver = threading.Thread(target=done.wait, name="ctrl-c receiver", daemon=True)
    receiver.start()  # before the mask: it keeps SIGINT unblocked
    try:
        with children_start_without_sigint(joblib_pool=True):
            yield
    finally:
        done.set()


@contextlib.contextmanager
def children_start_without_sigint(*, joblib_pool: bool) -> Iterator[None]:
    """Within: SIGINT blocked in this thread, so the processes started from it begin with it blocked (a blocked
    signal stays blocked in a child, across exec too). The resource trackers such a start launches are started
    first, Python's multiprocessing's and, with `joblib_pool`, joblib's pool's (loky's): launching one undoes
    the block in the launching thread with SIG_UNBLOCK, not by restoring the mask before it (bpo-33613's code,
    in both), so the processes started after it began with SIGINT unblocked. Where signals cannot be blocked
    (not POSIX) nothing changes."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    # not at the top: multiprocessing, which the command line (importing this module for `sigterm_as_ctrl_c`)
    # loads only in the commands that start processes
    from multiprocessing import resource_tracker

    resource_tracker.ensure_running()
    if joblib_pool:
        # not at the top: joblib (and numpy under it) load only in the commands that run workers
        from joblib.externals.loky.backend import resource_tracker as loky_tracker

        loky_tracker.ensure_running()
    before = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


@contextlib.contextmanager
def sigterm_as_ctrl_c() -> Iterator[None]:
    """Within: SIGTERM runs whatever handles Ctrl-C at that moment (`_as_ctrl_c`), so a process asked to end
    ends as after Ctrl-C; the handler before is restored at the end. Nothing changes outside the main thread,
    under torchrun (`TORCHELASTIC_RUN_ID` set) or where SIGINT is ignored. Processes forked meanwhile (the
    processes backend's workers) start with SIGTERM's default again: they end at once, as before."""
    if threading.current_thread() is not threading.main_thread() or "TORCHELASTIC_RUN_ID" in os.environ \
            or signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        yield
        return
    _ASKED.clear()  # before the handler: a SIGTERM from then on is this context's
    before = signal.signal(signal.SIGTERM, _as_ctrl_c)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


def _as_ctrl_c(signum: int, frame: Any) -> None:
    """SIGTERM's handler: the registered helpers are sent SIGTERM (`pass_sigterm_on_to`), then SIGINT's handler
    of the moment runs (it may hold the interrupt until a storage write returns:
    `autosync.search.study.interrupts`), once: a second SIGTERM (a scheduler's to the whole process group, and
    the command's to its helper) is not a second Ctrl-C cutting the first's clean-up short. Where SIGINT has
    no handler of Python's (ignored, or its default), the process ends as SIGTERM ends it."""
    if _ASKED:
        return
    _ASKED.append(signum)
    for process in _TOLD:
        if _alive(process):
            with contextlib.suppress(OSError):  # ended meanwhile
                os.kill(process.pid, signal.SIGTERM)
    handler = signal.getsignal(signal.SIGINT)
    if callable(handler):
        handler(signal.SIGINT, frame)
        return
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


def pass_sigterm_on_to(processes: "list[Any]") -> None:
    """Have SIGTERM's handler (`sigterm_as_ctrl_c`) pass SIGTERM on to `processes` (multiprocessing's, started
    by this one, handling it as Ctrl-C in turn); those that have ended are forgotten."""
    _TOLD[:] = [p for p in _TOLD if _alive(p)] + list(processes)


def _alive(process: Any) -> bool:
    try:
        return process.is_alive()
    except (OSError, ValueError, AssertionError):  # closed, or not this process's child
        return False


def _default_sigterm_in_child() -> None:
    _TOLD.clear()  # its parent's children
    _ASKED.clear()
    if signal.getsignal(signal.SIGTERM) is _as_ctrl_c:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_default_sigterm_in_child)
