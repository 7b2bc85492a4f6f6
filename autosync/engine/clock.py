"""Clocks: who decides when each dispatched task's gradient arrives at the server.

The engine dispatches tasks with the round trips the cluster model drew for them, then asks the clock
for the next arrival. Three clocks answer:
- `VirtualClock`: the arrival comes exactly one drawn round trip later (a heap of events; ties broken
  by worker id). Searches and the in-process simulator use it.
- `RealTimeClock` (`autosync.engine.realtime`): the order in which worker processes really answer.
- `LoggedClock`: the arrivals a real-time run logged, in their order and at their times, so the run
  can be repeated exactly (bit-identical parameters) in one process.
"""

from __future__ import annotations

import heapq
import math
from contextlib import nullcontext
from typing import ContextManager, Protocol, Sequence

from autosync.core.cluster import ComputeUnits, ServerModel
from autosync.core.errors import UserError
from autosync.policies import Task


class Clock(Protocol):
    """Orders gradient arrivals: the engine dispatches tasks and pops arrivals, never knowing whose time it is.

    Implemented by `VirtualClock` (simulated round trips), `LoggedClock` (a logged run's order) and
    `autosync.engine.realtime.RealTimeClock` (the order answers really come in).
    """

    def dispatch(self, tasks: Sequence[tuple[Task, float]]) -> None:
        """Tasks start now (at `task.start`), each with the round trip its worker drew."""

    def pop(self) -> tuple[float, int, int]:
        """The next arrival: (time, worker, task index)."""

    def peek_time(self) -> float:
        """The time of the next arrival."""

    def delay_all(self, seconds: float) -> None:
        """Postpone every pending arrival (a pause of the whole cluster)."""

    def cancel(self, tasks: Sequence[Task], at: float) -> None:
        """The server gave up on `tasks` at `at` (their gradients will be discarded): a task not yet started
        where it is computed need not be computed (`drops_superseded`)."""

    def check_decision(self, accepted: bool) -> None:
        """Told the server's decision on the arrival just popped (a replay checks it)."""

    def off_the_clock(self) -> ContextManager[None]:
        """A block of the server's own work, which a virtual clock does not count."""

    def serve_update(self, start: float) -> float:
        """When an update the server begins at `start` is applied (a virtual clock charges the server model)."""

    def __len__(self) -> int:
        """Arrivals pending."""


class VirtualClock:
    """Pending gradient arrivals ordered by (time, worker, task index).

    With a server model (`autosync.core.cluster.ServerModel`, not instant) a task's parameters first queue on
    the server's outbound link; the gradient is then ready after the drawn round trip and queues on the
    inbound link in the order gradients become ready: a heap entry is a gradient still to be pushed
    until the push is charged, which happens, in time order, before any later arrival is answered.
    With compute units (`autosync.core.cluster.ComputeUnits`), a gradient is ready once its round trip has
    passed and its unit has computed it, whichever is later. A unit starts its next task only when no
    earlier event is left (`_settle`), so that a task the server cancels before its turn (`cancel`, with
    `drops_superseded`: several workers share a unit) is answered at its turn without taking the unit's
    time, as a worker process does.
    """

    def __init__(self, server: ServerModel | None = None, units: ComputeUnits | None = None,
                 drops_superseded: bool = False) -> None:
        self._heap: list[tuple[float, int, int]] = []
        self.server = server if server is not None and not server.instant else None
        self.units = units
        # the server may cancel tasks whose gradients it will discard, and their units then skip them
        self.drops_superseded = drops_superseded and units is not None
        self._to_push: set[tuple[int, int]] = set()  # (worker, task index) whose gradient is not yet pushed

    def dispatch(self, tasks: Sequence[tuple[Task, float]]) -> None:
        """Each task starts now (at `task.start`) and arrives its round trip's virtual seconds later (plus
        the server's queueing and transfers when there is a server model, and its unit's queue when there
        are compute units)."""
        for task, round_trip in tasks:
            begin = task.start if self.server is None else self.server.pull(task.start)
            if self.units is not None:  # ready once its unit has computed it too (`_settle`)
                self.units.enqueue(task.worker, task.index, begin, round_trip, task.batch_size, task.steps)
            else:
                heapq.heappush(self._heap, (begin + round_trip, task.worker, task.index))
            if self.server is not None:
                self._to_push.add((task.worker, task.index))

    def _settle(self) -> None:
        """Bring the earliest arrival to the top of the heap: the units start, one at a time in the order
        of their turns, the tasks whose turn comes no later than it (each may be ready earlier than the
        arrival that was first), and with a server model the pushes of gradients ready before it are
        charged, in the order they are ready. A unit's turn is taken only once every earlier event is,
        so that a cancellation at an earlier update reaches the tasks still queued."""
        heap = self._heap
        while True:
            if self.units is not None:
                started = self.units.start_next(heap[0][0] if heap else math.inf)
                if started is not None:
                    heapq.heappush(heap, started)
                    continue
            if self.server is not None and heap and (heap[0][1], heap[0][2]) in self._to_push:
                ready, worker, index = heapq.heappop(heap)
                self._to_push.discard((worker, index))
                heapq.heappush(heap, (self.server.push(ready), worker, index))
                continue
            return

    def pop(self) -> tuple[float, int, int]:
        """The next arrival: (time, worker, task index); with a server model, the time its loop has handled it."""
        self._settle()
        if self.server is None:
            return heapq.heappop(self._heap)
        arrived, worker, index = heapq.heappop(self._heap)
        return self.server.receive(arrived), worker, index

    def peek_time(self) -> float:
        self._settle()
        return self._heap[0][0]

    def cancel(self, tasks: Sequence[Task], at: float) -> None:
        """The server gave up on `tasks` at `at`: each one its unit has not started by then is dropped
        (answered at its turn, uncomputed); one started is computed to the end. (Only with
        `drops_superseded`.) A turn at `at` itself was taken first: the unit had started it."""
        if not self.drops_superseded:
            return
        while (started := self.units.start_next(at)) is not None:
            heapq.heappush(self._heap, started)
        for task in tasks:
            self.units.drop(task.worker, task.index)

    def delay_all(self, seconds: float) -> None:
        """Postpone every pending arrival (a pause of the whole cluster, e.g. a checkpoint and restart)."""
        self._heap = [(t + seconds, w, k) for t, w, k in self._heap]  # order is unchanged: still a heap
        if self.server is not None:
            self.server.delay_all(seconds)
        if self.units is not None:
            self.units.delay_all(seconds)

    def serve_update(self, start: float) -> float:
        """The server model's update loop: `start` plus the apply cost once the loop is free."""
        return start if self.server is None else self.server.update(start)

    def check_decision(self, accepted: bool) -> None:
        """Any decision is right."""

    def off_the_clock(self) -> ContextManager[None]:
        """The server's own work never moves a virtual clock."""
        return nullcontext()

    def __len__(self) -> int:
        return len(self._heap) + (self.units.queued() if self.units is not None else 0)


class RerunMismatch(UserError):
    """A rerun (`autosync rerun`, under `LoggedClock`) asked for something other than what the logged run did."""


class LoggedClock:
    """The arrivals of a logged run, served in their logged order and at their logged times.

    `arrivals` are the rows (time, worker, task, version, batch_size, accepted) of a trace's arrival
    table. The rerun engine must dispatch exactly the logged tasks and decide exactly as logged; the
    first difference stops the rerun with a `RerunMismatch` naming the arrival.
    """

    def __init__(self, arrivals: Sequence[Sequence], source: str = "the log"):
        self.arrivals = list(arrivals)
        self.source = source
        self.position = 0
        self._inflight: dict[int, Task] = {}

    def dispatch(self, tasks: Sequence[tuple[Task, float]]) -> None:
        for task, _ in tasks:
            self._inflight[task.worker] = task

    def peek_time(self) -> float:
        """The next logged arrival's time; infinite once the log is spent (the run ended on its budget)."""
        return float(self.arrivals[self.position][0]) if self.position < len(self.arrivals) else math.inf

    def pop(self) -> tuple[float, int, int]:
        if self.position >= len(self.arrivals):
            raise RerunMismatch(f"{self.source}: the replayed run needs more than the {len(self.arrivals)} "
                                 "logged arrivals (was the logged run interrupted?)")
        time, worker, index, version, batch_size = self.arrivals[self.position][:5]
        task = self._inflight.pop(int(worker), None)
        if task is None or (task.index, task.version, task.batch_size) != (int(index), int(version), int(batch_size)):
            got = "nothing" if task is None else f"task {task.index} (version {task.version}, batch {task.batch_size})"
            raise RerunMismatch(f"{self.source}: arrival {self.position} is worker {worker}'s task {index} (version "
                                 f"{version}, batch {batch_size}), but the replayed run has {got} in flight there")
        self.position += 1
        return float(time), int(worker), int(index)

    def check_decision(self, accepted: bool) -> None:
        """The replayed server's decision on the arrival just popped must be the logged one."""
        logged = bool(self.arrivals[self.position - 1][5])
        if accepted != logged:
            raise RerunMismatch(f"{self.source}: arrival {self.position - 1} was "
                                 f"{'accepted' if logged else 'discarded'} in the logged run, but the replay "
                                 f"{'accepts' if accepted else 'discards'} it")

    def delay_all(self, seconds: float) -> None:
        """Logged times already include every pause."""

    def cancel(self, tasks: Sequence[Task], at: float) -> None:
        """Logged times already include what the units skipped."""

    def off_the_clock(self) -> ContextManager[None]:
        """Logged times already leave the server's evaluations out."""
        return nullcontext()

    def serve_update(self, start: float) -> float:
        """Logged arrival times already include whatever the server cost."""
        return start

    def __len__(self) -> int:
        return len(self._inflight)
