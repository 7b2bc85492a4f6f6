"""The real-time clock: gradients arrive in the order the worker processes really deliver them.

Every dispatched task goes to a worker process or rank at once (`RemoteDriver.submit`), and the next arrival
is the answer the server receives first. Stragglers come from the machine itself, or, with
`inject_stragglers`, also from the job's cluster model: a task's answer is then held back until the
round trip the model drew for it has passed in real time, scaled by `seconds_per_virtual_second`. So
a laptop can run the straggler scenarios of a search for real.

Clock readings are in the job's units: real seconds divided by `seconds_per_virtual_second` (1 when
stragglers are the machine's own). The server's evaluations are off the clock (they would run
elsewhere in a real deployment); the pauses a policy asks for (Sync-Switch's phase change) are added
to it. The trace's arrival table (time, worker, task, version, batch size, accepted) is the run's
complete log: `LoggedClock` repeats the run from it exactly.
"""

from __future__ import annotations

import bisect
import time
from contextlib import contextmanager
from typing import Iterator, Sequence

from autosync.core.errors import UserError
from autosync.engine.drivers.remote import Answer, RemoteDriver
from autosync.policies import Task

__all__ = ["RealTimeClock"]


class RealTimeClock:
    """Arrival order from the wall clock of this machine (see the module docstring)."""

    def __init__(self, driver: RemoteDriver, inject_stragglers: bool = False,
                 seconds_per_virtual_second: float = 1.0):
        self.driver = driver
        self.inject = inject_stragglers
        self.scale = seconds_per_virtual_second if inject_stragglers else 1.0
        self._origin: float | None = None  # time.monotonic() of the first dispatch
        self._due: dict[int, float] = {}  # worker -> earliest release of its answer (monotonic)
        self._answered: dict[int, Answer] = {}  # worker -> answer received, not yet released
        self._next: tuple[float, int, int] | None = None  # an arrival peeked at, not yet popped
        self._last = 0.0
        self._offset = 0.0  # clock seconds of pauses
        self._breaks: list[tuple[float, float]] = []  # (monotonic start, end) of time off the clock
        self._break_totals: list[float] = []  # seconds off the clock up to the end of each break

    # ------------------------------------------------------------------ the engine's interface
    def dispatch(self, tasks: Sequence[tuple[Task, float]]) -> None:
        now = time.monotonic()
        if self._origin is None:
            self._origin = now
        for task, round_trip in tasks:
            if task.steps != 1:  # worker processes compute one gradient per task; the engine runs local steps
                raise UserError(f"local steps run on the virtual clock only (the engine takes them between "
                                f"gradients), but worker {task.worker} got a task of steps={task.steps} on --clock real")
            self._due[task.worker] = now + (round_trip * self.scale if self.inject else 0.0)
        self.driver.submit([task for task, _ in tasks])

    def peek_time(self) -> float:
        if self._next is None:
            self._next = self._release()
        return self._next[0]

    def pop(self) -> tuple[float, int, int]:
        arrival = self._next if self._next is not None else self._release()
        self._next = None
        return arrival

    def check_decision(self, accepted: bool) -> None:
        """Any decision is right: this clock is the one being logged."""

    def delay_all(self, seconds: float) -> None:
        """A pause of the whole cluster: the clock jumps ahead by `seconds`."""
        self._offset += seconds

    @property
    def drops_superseded(self) -> bool:
        """Whether the driver's processes skip a cancelled task they have not started (`cancel`)."""
        return self.driver.drops_superseded

    def cancel(self, tasks: Sequence[Task], at: float) -> None:
        """The server gave up on `tasks`: the driver tells their processes, which skip those not yet started."""
        self.driver.cancel(tasks)

    def serve_update(self, start: float) -> float:
        """The real server's costs are in the real times already: nothing is charged on top."""
        return start

    @contextmanager
    def off_the_clock(self) -> Iterator[None]:
        """Wall time spent inside this block (the server's evaluations) does not count: the clock stands
        still, and the injected round trips of the tasks in flight are held back by as much."""
        start = time.monotonic()
        try:
            yield
        finally:
            end = time.monotonic()
            self._breaks.append((start, end))
            self._break_totals.append((self._break_totals[-1] if self._break_totals else 0.0) + end - start)
            if self.inject:
                for worker in self._due:
                    self._due[worker] += end - start

    def __len__(self) -> int:
        return len(self._due)

    # ------------------------------------------------------------------ internals
    def _release(self) -> tuple[float, int, int]:
        """Wait for the next answer whose release time has come; returns (clock time, worker, task index)."""
        while True:
            now = time.monotonic()
            releasable = sorted((max(a.sent, self._due[w]), w) for w, a in self._answered.items())
            if releasable and releasable[0][0] <= now:
                release, worker = releasable[0]
                answer = self._answered.pop(worker)
                del self._due[worker]
                self._last = max(self._last, self._reading(release))
                return self._last, worker, answer.task.index
            wait = releasable[0][0] - now if releasable else None
            if releasable and len(self._answered) == len(self._due):  # none in flight: none can come sooner
                time.sleep(wait)  # (the driver's collect returns at once with nothing to wait for)
                continue
            for answer in self.driver.collect(wait):
                self._answered[answer.task.worker] = answer

    def _reading(self, instant: float) -> float:
        """The clock's reading at a time.monotonic() instant: off-the-clock breaks removed, pauses added."""
        i = bisect.bisect_right(self._breaks, (instant, float("inf")))  # breaks that started before it
        off = self._break_totals[i - 1] if i else 0.0
        if i and instant < self._breaks[i - 1][1]:  # inside a break: the clock stood at its start
            off -= self._breaks[i - 1][1] - instant
        return (instant - self._origin - off) / self.scale + self._offset
