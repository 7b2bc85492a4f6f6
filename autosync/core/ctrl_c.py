"""The worker processes a command starts are spared a terminal's Ctrl-C, which the command alone handles.

A terminal sends Ctrl-C (SIGINT) to every process of the command. joblib's workers (`autosync leaderboard`,
`autosync table`, `autosync robustness`) printed the traceback of whatever it cut short, the import of their
start-up above all, under the command's one line. Started within `workers_spared_ctrl_c`, they never take
it: the command does, and joblib ends its workers as the exception leaves its loop.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from multiprocessing import resource_tracker
from typing import Iterator

__all__ = ["children_start_without_sigint", "workers_spared_ctrl_c"]


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
