"""The processes `--n-jobs` starts beside the command's own, each working on the same study (the TPE
search's trials, `autosync.search.tune`; the race's queued runs, `autosync.search.race_trials`).

They are spawned (a fresh interpreter: no fork of a process holding torch's threads or open storage
connections), daemonic (they end with the command), and run with the command's Optuna log level and warning
filters, whatever the caller chose (the library changes neither).
"""

from __future__ import annotations

import multiprocessing as mp
import warnings
from typing import Any, Callable

from autosync.core.errors import UserError

__all__ = ["follow_parent", "start_helpers"]


def start_helpers(storage: str, count: int, target: Callable[..., None],
                  args_of: Callable[[int], tuple[Any, ...]]) -> list[Any]:
    """`count` helper processes, the i-th running `target(*args_of(i), verbosity, filters)`, where the last two
    are this process's Optuna log level and warning filters (`follow_parent` applies them); none for a
    `count` below 1. A study in memory cannot be shared: refused in one line."""
    if count < 1:
        return []
    if storage.startswith("sqlite:///:memory:") or storage == "sqlite://":
        raise UserError("--n-jobs > 1 needs a storage file or server that processes share, not an in-memory one")
    import optuna  # not at the top: the command's own imports decide when Optuna loads

    ctx = mp.get_context("spawn")
    verbosity, filters = optuna.logging.get_verbosity(), list(warnings.filters)
    procs = [ctx.Process(target=target, args=(*args_of(i), verbosity, filters), daemon=True) for i in range(count)]
    for p in procs:
        p.start()
    return procs


def follow_parent(verbosity: int, filters: list[Any]) -> None:
    """In a helper: the command's Optuna log level and warning filters (`start_helpers` passes them)."""
    import optuna

    optuna.logging.set_verbosity(verbosity)
    warnings.filters[:] = filters
