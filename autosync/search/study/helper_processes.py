"""The processes `--n-jobs` starts beside the command's own, each working on the same study (the TPE
search's trials, `autosync.search.tune`; the race's queued runs, `autosync.search.race_trials`).

They are spawned (a fresh interpreter: no fork of a process holding torch's threads or open storage
connections), daemonic (they end with the command), and run with the command's Optuna log level and warning
filters, whatever the caller chose (the library changes neither), and with its kept runs: they share the
directory the command's fork store keeps them in (`autosync.engine.forks.sharing`), so a run one process
stopped at the target is continued, not trained again, whichever process runs its full-budget check.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import signal
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import joblib

from autosync.core.ctrl_c import children_start_without_sigint, pass_sigterm_on_to, sigterm_as_ctrl_c
from autosync.core.errors import UserError
from autosync.engine.forks import FORKS
from autosync.search.study.interrupts import interrupted, storage_call, storage_calls_finish_first
from autosync.search.study.storage import end_without_collection

__all__ = ["Parent", "follow_parent", "shared_storage", "start_helpers", "usable_cores"]


@dataclass(frozen=True)
class Parent:
    """What a helper takes over from the command's process (`follow_parent`)."""

    verbosity: int  # Optuna's log level
    filters: list[Any]  # the warning filters
    forks: str | None  # the directory its fork store shares (None: its memory only)
    pid: int  # the command's process

    def gone(self) -> bool:
        """Whether the command's process has ended (killed, say, so that nothing stops this helper but itself):
        a helper started by it has then been handed to another parent."""
        return os.getppid() != self.pid


def start_helpers(storage: str, count: int, target: Callable[..., None],
                  args_of: Callable[[int], tuple[Any, ...]]) -> list[Any]:
    """`count` helper processes, the i-th running `target(*args_of(i), parent)`, where `parent` is this
    process's Optuna log level, warning filters and fork store's shared directory (`Parent`: `follow_parent`
    applies them); none for a `count` below 1. A study in memory cannot be shared: refused in one line."""
    if count < 1:
        return []
    if not shared_storage(storage):
        raise UserError("--n-jobs > 1 needs a storage file or server that processes share, not an in-memory one")
    import optuna  # not at the top: the command's own imports decide when Optuna loads

    ctx = mp.get_context("spawn")
    parent = Parent(optuna.logging.get_verbosity(), list(warnings.filters),
                    None if FORKS.shared is None else FORKS.shared.directory, os.getpid())
    procs = [ctx.Process(target=_run_then_end, args=(target, *args_of(i), parent), daemon=True) for i in range(count)]
    with _ctrl_c_blocked():
        for p in procs:
            p.start()
            pass_sigterm_on_to([p])  # a SIGTERM to this process alone reaches them (one held by the block too)
    return procs


@contextlib.contextmanager
def _ctrl_c_blocked() -> Iterator[None]:
    """Within: the helpers spawned here start with SIGINT blocked (`children_start_without_sigint`) until
    `_run_then_end` can end them quietly; a Ctrl-C meanwhile is not lost but held, for this process as it
    leaves and for each helper as it unblocks it. Another thread (a progress bar's) may still take the signal,
    whose handler then runs in this one: held as a storage call is (`interrupts.storage_call`), it cannot cut
    a helper's start short (the helper then read half its start-up data: EOFError)."""
    with children_start_without_sigint(joblib_pool=False), storage_call():
        yield


def _run_then_end(target: Callable[..., None], *args: Any) -> None:
    """A helper's body: `target(*args)`, then an exit without the last garbage collection
    (`end_without_collection`), which the command would wait for where it joins its helpers. Where `target`
    raises, the exit is the usual one; on Ctrl-C, which a terminal sends to every process of the command,
    a quiet one (exit status 130), as on SIGTERM (`sigterm_as_ctrl_c`: a scheduler's to every process of the
    command, or the command's own passing one on): the command says in one line what was kept, and a trial
    cut short here is failed and run again on resume, as one of its own. That includes a Ctrl-C that Optuna's trial
    bookkeeping passed on as another exception (`interrupts.interrupted`), as the command reads it."""
    try:
        # Ctrl-C (and SIGTERM, handled as one) waits for a storage write, a trial's tag or an import (torch's
        # aborts if cut short)
        with sigterm_as_ctrl_c(), storage_calls_finish_first():
            if hasattr(signal, "pthread_sigmask"):
                signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # held since `start_helpers`
            target(*args)
    except (KeyboardInterrupt, Exception) as exc:
        if isinstance(exc, KeyboardInterrupt) or interrupted():
            raise SystemExit(130) from None
        raise
    end_without_collection()


def shared_storage(storage: str) -> bool:
    """Whether processes can share the storage at URL `storage`: a file or a server, not an in-memory SQLite."""
    return not (storage.startswith("sqlite:///:memory:") or storage == "sqlite://")


def usable_cores() -> int:
    """The cores this process may use, as joblib counts them for `-1` elsewhere (`autosync leaderboard
    --n-jobs -1`, `autosync table`): the fewest of the machine's, the process's CPU affinity and a
    container's CPU quota."""
    return joblib.cpu_count()


def follow_parent(parent: Parent) -> None:
    """In a helper: the command's Optuna log level, warning filters and shared kept runs (`start_helpers`
    passes them)."""
    import optuna

    optuna.logging.set_verbosity(parent.verbosity)
    warnings.filters[:] = parent.filters
    FORKS.share(parent.forks)
