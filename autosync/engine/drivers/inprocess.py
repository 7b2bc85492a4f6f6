"""The default driver: computes gradients in this process, many workers in one batched call.

Two kernels:
- `aggregate`: workers that share one parameter version and whose individual gradients nobody needs
  (BSP, backup workers) get one fused forward/backward over the union of their batches, each sample
  weighted by w_i / b_i, which is exactly the weighted mean of their mini-batch gradients where samples
  are independent. Batch norm's statistics span the pass (`Workload.independent_samples`): there each
  worker's slice is normalised by its own statistics (`autosync.workloads.norm_groups`, equal batch sizes;
  unequal ones, LB-BSP's, take the per-worker kernel below).
- `worker_gradients`: per-worker gradients (different versions for ASP/SSP, or when a strategy needs
  them) through ``torch.func.vmap`` over workers, grouped by batch size.
A workload off the fast path (a model with buffers or random layers, a user's loss, a model vmap cannot
batch) takes neither: each task's gradient is computed alone by the reference kernel
(`perworker.worker_gradient`), as a worker process would.
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch.func import grad, vmap

from autosync.engine.drivers.perworker import worker_gradient
from autosync.policies import Task
from autosync.workloads import _functorch_grad as functorch_grad
from autosync.workloads.norm_groups import batch_norm_per_group, interleave
from autosync.workloads.workload import Workload


class InProcessDriver:
    """Computes the gradients of tasks on the CPU (or one device) of this process."""

    def __init__(self, workload: Workload, seed: int):
        self.workload = workload
        self.seed = seed
        # `aggregate` may fuse workers that share one parameter version, where a sample's loss does not depend
        # on the other samples of its pass, or does only through batch norm computed per worker's slice
        self.fuses_workers = workload.fast_path and (workload.independent_samples or workload.norm_groups)
        functorch_grad.install()  # the process's first gradient without importing torch._dynamo (1-4 s)
        self._grad_fn = grad(self._mean_loss, has_aux=True)

    def _mean_loss(self, params: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor):
        loss = self.workload.per_sample_loss(params, x, y).mean()
        return loss, loss

    def batch_of(self, task: Task) -> torch.Tensor:
        return self.workload.batch_index(self.seed, task.worker, task.index, task.batch_size)

    def aggregate(self, tasks: Sequence[Task], weights: Sequence[float]) -> tuple[torch.Tensor, list[float]]:
        """Weighted mean gradient of tasks that all hold the same parameters, in one fused pass.

        Returns the flat aggregate gradient and each task's mini-batch loss.
        """
        data = self.workload.data
        sizes = [t.batch_size for t in tasks]
        grouped = not self.workload.independent_samples
        if grouped and len(set(sizes)) > 1:  # batch norm per slice needs equal slices: each worker's own pass
            self.worker_gradients(tasks)
            g = torch.tensordot(torch.tensor(weights, dtype=tasks[0].gradient.dtype, device=tasks[0].gradient.device),
                                torch.stack([t.gradient for t in tasks]), dims=1)
            return g, [t.loss for t in tasks]
        params = self.workload.leaves(tasks[0].params)
        if grouped:  # the workers' samples interleaved, each batch norm computed per worker
            index = interleave([self.batch_of(t) for t in tasks])
            sample_weight = torch.tensor([w / b for w, b in zip(weights, sizes)], dtype=torch.float32,
                                         device=index.device).repeat(sizes[0])
            with batch_norm_per_group(self.workload.model, len(tasks)):
                losses = self.workload.per_sample_loss(params, data.x_train[index], data.y_train[index])
            per_task = losses.detach().reshape(sizes[0], len(tasks)).mean(0).tolist()
        else:
            index = torch.cat([self.batch_of(t) for t in tasks])
            sample_weight = torch.repeat_interleave(
                torch.tensor([w / b for w, b in zip(weights, sizes)], dtype=torch.float32),
                torch.tensor(sizes)).to(index.device)
            losses = self.workload.per_sample_loss(params, data.x_train[index], data.y_train[index])
            per_task = [float(seg.mean()) for seg in losses.detach().split(sizes)]
        g = self.workload.flat_gradient((losses * sample_weight).sum(), params)
        return g, per_task

    def close(self) -> None:
        """Nothing to release."""

    def worker_gradients(self, tasks: Sequence[Task]) -> None:
        """Fill `task.gradient` and `task.loss` of every task, batched over workers with vmap."""
        if not self.workload.fast_path:
            for t in tasks:
                t.gradient, t.loss, t.buffer_delta = worker_gradient(self.workload, self.seed, t.params, t.worker,
                                                                     t.index, t.batch_size, t.buffers)
            return
        by_size: dict[int, list[Task]] = {}
        for t in tasks:
            by_size.setdefault(t.batch_size, []).append(t)
        data = self.workload.data
        for group in by_size.values():
            index = torch.stack([self.batch_of(t) for t in group])
            x, y = data.x_train[index], data.y_train[index]
            first = group[0].params
            shared = all(t.params is first for t in group)  # by parameter tensor: no view of theta differentiated
            params = self.workload.unflatten(first if shared else torch.stack([t.params for t in group]))
            by_name, losses = vmap(self._grad_fn, in_dims=(None if shared else 0, 0, 0))(params, x, y)
            grads = torch.cat([g.reshape(len(group), -1) for g in by_name.values()], dim=1)
            for t, g, l in zip(group, grads, losses.tolist()):
                t.gradient, t.loss = g, l
