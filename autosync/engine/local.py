"""Local steps: a task of H steps runs H SGD steps on the worker's own copy and sends its change.

Local SGD (Stich 2019, Algorithm 1; Lin et al. 2020), DiLoCo's inner loop (Douillard et al. 2023,
Algorithm 1, lines 4-7), EASGD's tau local steps (Zhang et al. 2015, Algorithm 1) and asynchronous local
SGD (Liu et al. 2024) all let a worker take H steps x_{j+1} = x_j - eta (g_j + lambda x_j) from the
parameters x_0 it received before it communicates. The change is sent in units of a gradient,

    u = g_0 + sum_{j=1}^{H-1} (g_j + lambda x_j)   so that   x_0 - eta (u + lambda x_0) = x_H,

which the server's update rule applies as it applies a gradient (it adds lambda x itself): with one step u
is the gradient g_0 itself, so H = 1 is today's policies bit for bit, and the job's plain SGD applied to the
mean u of k workers is the average of their local models (Stich 2019, Algorithm 1) for a job without momentum.

The driver computes each step's gradient (step j of a task starting at index i is the worker's step
i + j: its own mini-batch), so every backend that computes the same gradients gives the same changes;
the steps themselves run here, between the driver's calls, all tasks' j-th steps in one call.
"""

from __future__ import annotations

from typing import Sequence

import torch

from autosync.engine.drivers import Driver
from autosync.policies import Task


def run_local_steps(driver: Driver, tasks: Sequence[Task], weight_decay: float) -> None:
    """Fill each task's change (`task.gradient`, in gradient units as above), its loss (the mini-batch loss
    of its first step: the loss at the parameters it received, as a one-step task reports) and its buffers'
    change (the sum of its steps' changes: each step's forward pass starts from the buffers the step before
    left) by running its `task.steps` local SGD steps at `task.local_lr`."""
    x = [t.params for t in tasks]
    buffers = [t.buffers for t in tasks]
    change: list[torch.Tensor | None] = [None] * len(tasks)
    for j in range(max(t.steps for t in tasks)):
        active = [i for i, t in enumerate(tasks) if j < t.steps]
        steps = [Task(tasks[i].worker, tasks[i].index + j, tasks[i].version, tasks[i].batch_size, tasks[i].start,
                      params=x[i], buffers=buffers[i]) for i in active]
        driver.worker_gradients(steps)
        for i, step in zip(active, steps):
            task, g = tasks[i], step.gradient  # g may be the driver's memory, rewritten at its next call
            decayed = g + weight_decay * x[i] if weight_decay else g
            if j == 0:  # the server adds lambda x_0 itself, as to a gradient
                change[i] = g.clone()
                task.loss = step.loss
            else:
                change[i].add_(decayed)
            if j + 1 < task.steps:
                x[i] = x[i] - task.local_lr * decayed
            if step.buffer_delta is not None:
                buffers[i] = buffers[i] + step.buffer_delta
    for i, task in enumerate(tasks):
        task.gradient = change[i]
        if task.buffers is not None:
            task.buffer_delta = buffers[i] - task.buffers
