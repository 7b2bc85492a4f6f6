"""The parameter server as a state machine: arrivals in, decisions out; no parameters, no transport.

The same `Server` is driven by the virtual-clock simulator and by real worker processes; it only
tracks versions, who is busy, and which gradients wait, and asks the policy's strategies what to do.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from autosync.policies import Arrival, Strategies, Task


@dataclass
class Start:
    """Worker `worker` starts a task on the newest parameters with batch size `batch_size`, of `steps` local
    steps (1: one gradient)."""

    worker: int
    batch_size: int
    steps: int = 1


@dataclass
class Update:
    """Apply the aggregate of `arrivals` now, with the learning rate scaled by `lr_scale`."""

    arrivals: list[Arrival]
    lr_scale: float
    target_count: int | None  # k_t of the iteration, for the trace
    staleness: list[int]  # per arrival: updates applied since its parameters were sent


@dataclass
class Decision:
    """The server's answer to one arrival."""

    accepted: bool
    update: Update | None = None
    starts: list[Start] = field(default_factory=list)  # empty after an update: call Server.start() once applied
    # after an update, the workers whose tasks in flight the server gave up on (`Server.cancels`)
    cancelled: list[int] = field(default_factory=list)


class Server:
    """Synchronization state of one run; strategies read it through `autosync.policies.ServerView`."""

    def __init__(self, strategies: Strategies, n_workers: int, memory_caps: list[int | None] | None = None,
                 resources: Callable[[int, float], tuple[float, float]] | None = None, compute_model: str = "linear",
                 cancels: bool = False):
        """`cancels`: after each update of a barrier that `discards_stale`, give up on the tasks still
        computing on older parameters (`Decision.cancelled`), so that compute they share with other workers
        (a worker process's queue) can skip them; the arrival of a task given up on is discarded."""
        self.strategies = strategies
        self.cancels = cancels
        self.cancelled: set[int] = set()  # workers whose task in flight the server gave up on
        self.n_workers = n_workers
        self.compute_model = compute_model
        self.memory_caps = list(memory_caps) if memory_caps is not None else [None] * n_workers
        self._resources = resources
        self.version = 0
        self.buffer: list[Arrival] = []
        self.last_version = [-1] * n_workers
        self.applied = [0] * n_workers
        self.busy = [False] * n_workers
        self.time = 0.0

    def resources(self, worker: int) -> tuple[float, float]:
        """(CPU, memory) availability of `worker` now, as the backend measures it (1.0 when unknown)."""
        return self._resources(worker, self.time) if self._resources is not None else (1.0, 1.0)

    def start(self) -> list[Start]:
        """Every idle worker that the barrier lets start now (at the beginning, and after each update)."""
        return self._starts()

    def on_task_started(self, task: Task) -> None:
        self.busy[task.worker] = True
        self.last_version[task.worker] = task.version

    def on_arrival(self, arrival: Arrival) -> Decision:
        """Record `arrival`; decide whether it is used, whether to update, and who starts next."""
        self.time = arrival.time
        self.busy[arrival.worker] = False
        self.strategies.batching.on_arrival(self, arrival)
        self.strategies.local.on_arrival(self, arrival)
        barrier = self.strategies.barrier
        given_up = arrival.worker in self.cancelled
        self.cancelled.discard(arrival.worker)
        # the barrier hears every arrival (DBW times the late ones too); one given up on stays discarded,
        # even where a later barrier would take it (Sync-Switch's BSP -> ASP): its gradient may not exist
        accepted = barrier.accept(self, arrival) and not given_up
        if accepted:
            self.buffer.append(arrival)
        update = None
        group = barrier.ready(self)
        if group:
            update = Update(group, barrier.group_lr_scale(self, group), barrier.target_count(self),
                            [self.version - a.version for a in group])
            used = {id(a) for a in group}
            self.buffer = [a for a in self.buffer if id(a) not in used]
            for a in group:
                self.applied[a.worker] += 1
            self.version += 1
        # After an update the engine first applies it (strategies' hooks may re-balance batch sizes or
        # change the barrier), then asks `start()` who starts next, on the new version.
        if update is not None:
            return Decision(accepted, update, [], self._give_up() if self.cancels and barrier.discards_stale else [])
        # Every idle worker was refused at the last decision; where the barrier's answer changes only with
        # an update or with a worker's own arrival, only the arriving worker can start now.
        only = (arrival.worker,) if barrier.starts_change_only_at_updates else None
        return Decision(accepted, None, self._starts(only))

    def _give_up(self) -> list[int]:
        """The workers still computing on parameters older than the newest version, now given up on."""
        stale = [w for w in range(self.n_workers)
                 if self.busy[w] and self.last_version[w] < self.version and w not in self.cancelled]
        self.cancelled.update(stale)
        return stale

    def _starts(self, workers: tuple[int, ...] | None = None) -> list[Start]:
        """Start the idle workers among `workers` (all when None) that the barrier lets start now."""
        barrier, batching, local = self.strategies.barrier, self.strategies.batching, self.strategies.local
        asked = range(self.n_workers) if workers is None else workers
        return [Start(w, batching.batch_size(self, w), local.steps(self, w)) for w in asked
                if not self.busy[w] and barrier.may_start(self, w)]
