"""What the engine asks of a gradient driver, whoever computes the gradients."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, Protocol, Sequence

if TYPE_CHECKING:
    import torch

    from autosync.policies import Task


class Driver(Protocol):
    """Computes the gradients of tasks: in the server's process, in worker processes, or on remote ranks.

    Every driver fills `task.gradient` and `task.loss` in `worker_gradients`; one that `fuses_workers`
    is a `FusingDriver`.
    """

    fuses_workers: ClassVar[bool]

    def worker_gradients(self, tasks: Sequence["Task"]) -> None:
        """Fill `task.gradient` (flat) and `task.loss` of every task."""

    def close(self) -> None:
        """Release processes, memory and connections; called once at the end of a run, also on failure."""


class FusingDriver(Driver, Protocol):
    """A driver that gives the weighted aggregate of several tasks in one pass, without each gradient."""

    def aggregate(self, tasks: Sequence["Task"], weights: Sequence[float]) -> tuple["torch.Tensor", list[float]]:
        """sum_i weights[i] * gradient(task i), and each task's loss."""
