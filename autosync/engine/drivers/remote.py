"""The base of drivers whose gradients are computed elsewhere (worker processes, torch.distributed ranks).

Tasks go out with `submit` and answers come back from `collect`; the real-time clock
(`autosync.engine.realtime`) takes them in the order they come, the virtual clock through
`worker_gradients`, which is both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from autosync.core.errors import RuntimeFailure
from autosync.policies import Task

__all__ = ["Answer", "RemoteDriver", "WorkerProcessError"]


class WorkerProcessError(RuntimeFailure):
    """A worker process died or hung and no process is left to take its work."""


@dataclass
class Answer:
    """One computed task: its gradient is in `task.gradient`; `sent` is when it was sent, as this machine's
    time.monotonic() (a worker process's send time; across machines, when rank 0 received it)."""

    task: Task
    compute_seconds: float
    sent: float


class RemoteDriver:
    """A driver whose gradients are computed elsewhere: tasks go out with `submit`, answers come back
    from `collect`; the virtual clock's batch call is both."""

    fuses_workers = False  # every task's gradient comes back on its own; the engine aggregates them
    drops_superseded = False  # whether `cancel` can spare a task's computation (processes that share workers)

    def cancel(self, tasks: Sequence[Task]) -> None:
        """The server will discard these tasks' gradients: skip computing those not yet started, if this
        driver can (their answers still come, without a gradient)."""

    def submit(self, tasks: Sequence[Task]) -> None:
        raise NotImplementedError

    def collect(self, timeout: float | None = None) -> list[Answer]:
        raise NotImplementedError

    def worker_gradients(self, tasks: Sequence[Task]) -> None:
        """Fill `task.gradient` and `task.loss` of every task, computed in parallel elsewhere."""
        self.submit(tasks)
        waiting = {t.worker for t in tasks}
        while waiting:
            for answer in self.collect():
                waiting.discard(answer.task.worker)
