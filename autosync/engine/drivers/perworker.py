"""The reference kernel: each worker's gradient by its own forward/backward pass, as a real worker computes it.

`worker_gradient` is the one function the in-process `PerWorkerDriver`, the worker processes of
`ProcessDriver` and the ranks of `DistributedDriver` run (the last two through `slot_gradient`, on a
transport slot holding the parameters and then the model's buffers), so under the same thread settings
the backends produce bit-identical gradients (the default `InProcessDriver` fuses workers and vmaps over
them: faster, equal only to ~1e-7; for models with buffers or random layers it runs this kernel too).
"""

from __future__ import annotations

import time
from typing import Sequence

import torch

from autosync.policies import Task
from autosync.workloads.workload import Workload

__all__ = ["PerWorkerDriver", "pack_slot", "slot_gradient", "unpack_answer", "worker_gradient"]


def worker_gradient(workload: Workload, seed: int, theta: torch.Tensor, worker: int, index: int,
                    batch_size: int, buffers: torch.Tensor | None = None, out: torch.Tensor | None = None,
                    ) -> tuple[torch.Tensor, float, torch.Tensor | None]:
    """The mean mini-batch gradient and loss of `worker`'s `index`-th task at parameters theta, and the change
    its forward pass made to the model's `buffers` (None for a model without buffers).

    With `out` (a transport slot of `workload.slot_dim` values) the gradient, then the buffers' change, are
    written into it and returned as views of it: no new memory per task.
    """
    batch = workload.batch_index(seed, worker, index, batch_size)
    data = workload.data
    params = workload.leaves(theta)
    with workload.task_randomness(seed, worker, index):
        loss, after = workload.train_loss(params, data.x_train[batch], data.y_train[batch], buffers)
    g = workload.flat_gradient(loss, params, None if out is None else out[:workload.dim])
    delta = None
    if after is not None:
        before = buffers if buffers is not None else workload.init_buffers()
        delta = torch.sub(after, before, out=None if out is None else out[workload.dim:])
    return g, float(loss.detach()), delta


def slot_gradient(workload: Workload, seed: int, slot: torch.Tensor, worker: int, index: int,
                  batch_size: int, out: torch.Tensor) -> tuple[float, float]:
    """`worker_gradient` on a transport slot (the parameters, then the buffers), answered into `out` in the
    same layout (the gradient, then the buffers' change); returns the loss and the seconds it took (on a GPU,
    until its kernels finished)."""
    started = time.perf_counter()
    buffers = slot[workload.dim:] if workload.n_buffer_values else None
    _, loss, _ = worker_gradient(workload, seed, slot[:workload.dim], worker, index, batch_size, buffers, out)
    if out.is_cuda:
        torch.cuda.current_stream(out.device).synchronize()
    return loss, time.perf_counter() - started


def pack_slot(task: Task, slot: torch.Tensor) -> None:
    """Write what `task`'s worker receives into its transport slot: the parameters, then the buffers."""
    dim = task.params.numel()
    slot[:dim].copy_(task.params)
    if task.buffers is not None:
        slot[dim:].copy_(task.buffers)


def unpack_answer(task: Task, answer: torch.Tensor, loss: float) -> None:
    """Fill `task`'s gradient, buffer change and loss from an answer laid out as `slot_gradient` sends it
    (as views of `answer`)."""
    dim = task.params.numel()
    task.gradient = answer[:dim]
    task.buffer_delta = answer[dim:] if task.buffers is not None else None
    task.loss = loss


class PerWorkerDriver:
    """Computes each task's gradient separately in this process (no fusing across workers)."""

    fuses_workers = False  # the simulator aggregates the per-worker gradients itself

    def __init__(self, workload: Workload, seed: int):
        self.workload = workload
        self.seed = seed

    def worker_gradients(self, tasks: Sequence[Task]) -> None:
        """Fill `task.gradient` and `task.loss` of every task."""
        for t in tasks:
            t.gradient, t.loss, t.buffer_delta = worker_gradient(self.workload, self.seed, t.params, t.worker,
                                                                 t.index, t.batch_size, t.buffers)

    def close(self) -> None:
        """Nothing to release."""
