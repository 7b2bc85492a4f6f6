"""The reference kernel: each worker's gradient by its own forward/backward pass, as a real worker computes it.

`worker_gradient` is the one function both the in-process `PerWorkerDriver` and the worker processes of
`ProcessDriver` run, so under the same thread settings the two backends produce bit-identical gradients
(the default `InProcessDriver` fuses workers and vmaps over them: faster, equal only to ~1e-7).
"""

from __future__ import annotations

import time
from typing import Sequence

import torch

from autosync.policies import Task
from autosync.workloads.workload import Workload


def worker_gradient(workload: Workload, seed: int, theta: torch.Tensor, worker: int, index: int,
                    batch_size: int) -> tuple[torch.Tensor, float]:
    """The mean mini-batch gradient and loss of `worker`'s `index`-th task at parameters theta."""
    batch = workload.batch_index(seed, worker, index, batch_size)
    data = workload.data
    theta = theta.detach().requires_grad_(True)
    loss = workload.per_sample_loss(theta, data.x_train[batch], data.y_train[batch]).mean()
    (g,) = torch.autograd.grad(loss, theta)
    return g, float(loss.detach())


def timed_worker_gradient(workload: Workload, seed: int, theta: torch.Tensor, worker: int, index: int,
                          batch_size: int) -> tuple[torch.Tensor, float, float]:
    """`worker_gradient` and the seconds it took (on a GPU, until its kernels have finished)."""
    started = time.perf_counter()
    g, loss = worker_gradient(workload, seed, theta, worker, index, batch_size)
    if g.is_cuda:
        torch.cuda.current_stream(g.device).synchronize()
    return g, loss, time.perf_counter() - started


class PerWorkerDriver:
    """Computes each task's gradient separately in this process (no fusing across workers)."""

    fuses_workers = False  # the simulator aggregates the per-worker gradients itself

    def __init__(self, workload: Workload, seed: int):
        self.workload = workload
        self.seed = seed

    def worker_gradients(self, tasks: Sequence[Task]) -> None:
        """Fill `task.gradient` and `task.loss` of every task."""
        for t in tasks:
            t.gradient, t.loss = worker_gradient(self.workload, self.seed, t.params, t.worker, t.index,
                                                 t.batch_size)

    def close(self) -> None:
        """Nothing to release."""
