"""Runs kept where they stopped at the target, so a full-budget run of the same policy forks from them.

A search's trials stop at the target (`autosync.search.objective`); the candidates that can still win are
then checked at full budget (`autosync.search.strategies.full_budget`). Such a check would repeat, bit for bit, the
run up to the target: it continues instead from the stopped run's snapshot (`Simulator.snapshot`), and
trains only the rest of the budget. The store is this process's memory, bounded in bytes (the oldest
snapshots go first); a check whose snapshot is not here (another process ran the trial, or it was
evicted) trains from the start and gets the same result.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from autosync.core.job import JobSpec

MAX_BYTES = 512 * 2 ** 20  # what the kept snapshots may take, in all


@dataclass(frozen=True)
class Kept:
    snapshot: bytes  # `Simulator.snapshot()` of the stopped run
    at_seconds: float  # the virtual time it had trained: what a run forked from it does not train again


def fork_key(job: JobSpec, policy: dict[str, Any]) -> str:
    """What a run is, whatever its budget says of stopping at the target: the job (its seed included) and
    the policy. Runs with equal keys are the same run up to the target."""
    whole = job.model_copy(update={"budget": job.budget.model_copy(update={"stop_at_target": False})})
    return json.dumps([whole.fingerprint(), job.seed, policy], sort_keys=True)


class ForkStore:
    """Snapshots of stopped runs by `fork_key`, the newest kept while they fit in `max_bytes`."""

    def __init__(self, max_bytes: int = MAX_BYTES):
        self.max_bytes = max_bytes
        self._kept: OrderedDict[str, Kept] = OrderedDict()

    def put(self, key: str, snapshot: bytes, at_seconds: float) -> None:
        self._kept.pop(key, None)
        if len(snapshot) > self.max_bytes:
            return
        self._kept[key] = Kept(snapshot, at_seconds)
        while sum(len(k.snapshot) for k in self._kept.values()) > self.max_bytes:
            self._kept.popitem(last=False)

    def get(self, key: str) -> Kept | None:
        return self._kept.get(key)

    def clear(self) -> None:
        self._kept.clear()

    def __len__(self) -> int:
        return len(self._kept)


FORKS = ForkStore()  # this process's store: the search's trials and checks run in the same process
