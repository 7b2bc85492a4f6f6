"""A workload: dataset + model + loss as a pure function of a flat parameter vector."""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch.func import functional_call

from autosync.rng import STREAM_BATCH, rng_for
from autosync.job import JobSpec, LRScheduleSpec
from autosync.workloads.datasets import Dataset, load_dataset
from autosync.workloads.models import build_model


class Workload:
    """Everything needed to compute a loss and its gradient from a flat parameter vector."""

    def __init__(self, job: JobSpec, dataset: Dataset | None = None, device: str | torch.device = "cpu"):
        spec = job.workload
        self.spec = spec
        self.job = job
        self.device = torch.device(device)
        if self.device.type == "cuda":
            # cuDNN's fastest convolution kernels sum in a run-dependent order; deterministic ones make the
            # same seed give the same parameters on a GPU too (and a replayed run match its log).
            torch.backends.cudnn.deterministic = True
            torch.backends.cudnn.benchmark = False
        data = dataset if dataset is not None else load_dataset(spec.dataset)
        self.data = data.to(self.device)
        self.regression = self.data.n_classes is None
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(job.seed)  # initialised on the CPU: the same theta_0 on every device
            self.model = build_model(spec.model, self.data.input_shape, self.data.n_classes or 1).to(self.device)
        self.names = [n for n, _ in self.model.named_parameters()]
        self.shapes = [p.shape for _, p in self.model.named_parameters()]
        self.numels = [p.numel() for _, p in self.model.named_parameters()]
        self.dim = sum(self.numels)
        self._init = torch.cat([p.detach().reshape(-1) for p in self.model.parameters()]).clone()
        self._eval_x_train, self._eval_y_train = self._eval_subset(self.data.x_train, self.data.y_train)
        self._eval_x_test, self._eval_y_test = self._eval_subset(self.data.x_test, self.data.y_test)

    # ------------------------------------------------------------------ parameters
    def init_params(self) -> torch.Tensor:
        """The seeded initial parameters theta_0 as one flat vector."""
        return self._init.clone()

    def unflatten(self, theta: torch.Tensor) -> dict[str, torch.Tensor]:
        out, offset = {}, 0
        for name, shape, n in zip(self.names, self.shapes, self.numels):
            out[name] = theta[offset: offset + n].view(shape)
            offset += n
        return out

    # ------------------------------------------------------------------ losses
    def per_sample_loss(self, theta: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Loss of every sample of (x, y) under parameters theta (no reduction)."""
        out = functional_call(self.model, self.unflatten(theta), (x,))
        if self.regression:
            return (out.squeeze(-1) - y) ** 2
        return F.cross_entropy(out, y, reduction="none")

    def batch(self, seed: int, worker: int, task: int, size: int) -> np.ndarray:
        """Indices of `worker`'s `task`-th mini-batch: a pure function of (seed, worker, task)."""
        n = self.data.n_train
        rng = rng_for(seed, STREAM_BATCH, worker, task)
        return rng.choice(n, size, replace=False) if size <= n else rng.integers(0, n, size)

    def batch_index(self, seed: int, worker: int, task: int, size: int) -> torch.Tensor:
        """`batch` as an index tensor on the workload's device."""
        return torch.from_numpy(self.batch(seed, worker, task, size)).to(self.device)

    # ------------------------------------------------------------------ evaluation
    def _eval_subset(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        cap = self.spec.evaluation.max_samples
        if len(x) <= cap:
            return x, y
        keep = torch.from_numpy(np.random.default_rng(0).permutation(len(x))[:cap]).to(x.device)
        return x[keep], y[keep]

    @torch.no_grad()
    def evaluate(self, theta: torch.Tensor) -> dict[str, float]:
        """Training loss, test loss and (for classification) test accuracy of theta."""
        params = self.unflatten(theta)
        result = {"train_loss": self._mean_loss(params, self._eval_x_train, self._eval_y_train)}
        result["test_loss"] = self._mean_loss(params, self._eval_x_test, self._eval_y_test)
        if not self.regression:
            correct = 0
            for xs, ys in _chunks(self._eval_x_test, self._eval_y_test):
                correct += int((functional_call(self.model, params, (xs,)).argmax(1) == ys).sum())
            result["test_accuracy"] = correct / len(self._eval_y_test)
        return result

    def _mean_loss(self, params: dict, x: torch.Tensor, y: torch.Tensor) -> float:
        total = 0.0
        for xs, ys in _chunks(x, y):
            out = functional_call(self.model, params, (xs,))
            if self.regression:
                total += float(((out.squeeze(-1) - ys) ** 2).sum())
            else:
                total += float(F.cross_entropy(out, ys, reduction="sum"))
        return total / len(y)

    # ------------------------------------------------------------------ schedule
    def learning_rate(self, epoch: float) -> float:
        """eta at a training progress of `epoch` epochs (warm-up, then constant/step/cosine)."""
        return self.spec.optimizer.lr * lr_factor(self.spec.lr_schedule, epoch, self.job.budget.max_epochs,
                                                  self.job.cluster.n_workers)


def lr_factor(sched: LRScheduleSpec, epoch: float, budget_epochs: float | None, n_workers: int = 1) -> float:
    """Multiplier of the base learning rate at `epoch` (linear warm-up, then the schedule's decay).

    The warm-up ramps linearly from 0, or from 1/n_workers as in the DANA paper's appendix A.5
    (Goyal et al. 2017), to 1 over `warmup_epochs`.
    """
    if sched.warmup_epochs and epoch < sched.warmup_epochs:
        start = 1.0 / n_workers if sched.warmup_from == "lr_over_n" else 0.0
        return start + (1.0 - start) * (epoch + 1e-12) / sched.warmup_epochs
    if sched.kind == "constant":
        return 1.0
    if sched.kind == "step":
        return sched.gamma ** math.floor(epoch / sched.step_epochs)
    total = sched.total_epochs or budget_epochs
    progress = min(1.0, max(0.0, (epoch - sched.warmup_epochs) / max(total - sched.warmup_epochs, 1e-12)))
    return 0.5 * (1.0 + math.cos(math.pi * progress))


def _chunks(x: torch.Tensor, y: torch.Tensor, size: int = 1024):
    for i in range(0, len(x), size):
        yield x[i: i + size], y[i: i + size]
