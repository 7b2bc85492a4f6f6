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

__all__ = ["workers_spared_ctrl_c"]


@contextlib.contextmanager
def workers_spared_ctrl_c(n_jobs: int) -> Iterator[None]:
    """Within: SIGINT blocked in this thread, so the processes started from it, or from a thread it starts
    meanwhile (joblib's pool starts its workers from either, and a blocked signal stays blocked in a child,
    across exec too), begin and stay with it blocked. This process still takes Ctrl-C: a thread started
    first, with SIGINT not blocked, receives it, and Python runs the handler in the main thread as it always
    does (at its next bytecode: joblib's loop polls). Nothing changes for `n_jobs` 1 (joblib starts no
    process), outside the main thread, or where signals cannot be blocked (not POSIX)."""
    if n_jobs == 1 or not hasattr(signal, "pthread_sigmask") \
            or threading.current_thread() is not threading.main_thread():
        yield
        return
    _start_resource_trackers()
    done = threading.Event()
    receiver = threading.Thread(target=done.wait, name="ctrl-c receiver", daemon=True)
    receiver.start()  # before the mask: it keeps SIGINT unblocked
    before = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)
        done.set()


def _start_resource_trackers() -> None:
    """Start the resource trackers of Python's multiprocessing and of joblib's pool (loky) now, before SIGINT is
    blocked for the processes about to start (as `autosync.search.study.helper_processes` does Python's): the
    first process a pool spawns starts its tracker, and starting one unblocks SIGINT in the spawning thread
    (both undo their own block with SIG_UNBLOCK, not by restoring the mask before it: bpo-33613), so the
    workers spawned after it began with SIGINT unblocked."""
    # not at the top: joblib (and numpy under it) load only in the commands that run workers
    from joblib.externals.loky.backend import resource_tracker as loky_tracker

    resource_tracker.ensure_running()
    loky_tracker.ensure_running()
