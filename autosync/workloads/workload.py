"""A workload: dataset + model + loss as a function of a flat parameter vector (and a flat buffer vector).

Parameters travel as one flat vector theta; a model's buffers (BatchNorm's running statistics) as a second
flat vector that the server owns. A worker computes its gradient in training mode on the parameters and
buffers it received, and returns the change its forward pass made to the buffers with the gradient; the
server moves its buffers by the same weighted mean it applies to the gradients (`Simulator._apply`), so
running statistics follow the batches the updates were made of, on every backend. Evaluation runs in
evaluation mode on the server's buffers (dropout off, BatchNorm on its running statistics).

Random layers (dropout) draw from a generator seeded by (seed, worker, task), like every other draw, so a
task's gradient is the same whichever process computes it. Models with buffers or random layers, and
user losses (which give only a batch mean), compute each worker's gradient in its own pass; the others
take the fused and batched fast paths of the in-process driver.
"""

from __future__ import annotations

import contextlib
import math
from typing import Iterator, Union

import numpy as np
import torch
from torch.func import functional_call

from autosync.core.errors import JobFileError
from autosync.core.rng import STREAM_BATCH, STREAM_DROPOUT, rng_for
from autosync.core.job import JobSpec, LRScheduleSpec
from autosync.workloads.datasets import Dataset, load_dataset
from autosync.workloads.losses import build_loss
from autosync.workloads.models import build_model
from autosync.workloads.norm_groups import groupable

__all__ = ["Params", "Workload", "lr_factor"]

Params = Union[torch.Tensor, dict[str, torch.Tensor]]  # flat parameters, or by name (`Workload.leaves`)


class Workload:
    """Everything needed to compute a loss and its gradient from a flat parameter vector.

    The constructor builds; it checks nothing of the user's code. `autosync.workloads.build.build_workload`
    builds a job's workload and checks a user's (the one way the engine, the search and the API get one)."""

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
        source = job.source
        data = dataset if dataset is not None else load_dataset(spec.dataset, source)
        self.data = data.to(self.device)
        self.regression = self.data.n_classes is None
        if self.regression and job.target.metric == "test_accuracy":
            raise JobFileError(source, [f"target.metric test_accuracy needs class labels, but "
                                        f"workload.dataset {spec.dataset.label!r} has real-valued targets "
                                        "(use train_loss or test_loss)"])
        self.loss = build_loss(spec.loss, not self.regression, source)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(job.seed)  # initialised on the CPU: the same theta_0 on every device
            model = build_model(spec.model, self.data.input_shape, self.data.n_classes or 1, source)
            self.model = model.to(self.device).train()
        self.names = [n for n, _ in self.model.named_parameters()]
        self.shapes = [p.shape for _, p in self.model.named_parameters()]
        self.numels = [p.numel() for _, p in self.model.named_parameters()]
        self.dim = sum(self.numels)
        self._init = torch.cat([p.detach().reshape(-1) for p in self.model.parameters()]).clone() if self.dim \
            else torch.zeros(0, device=self.device)
        buffers = list(self.model.named_buffers())
        self.buffer_names = [n for n, _ in buffers]
        self.buffer_shapes = [b.shape for _, b in buffers]
        self.buffer_dtypes = [b.dtype for _, b in buffers]
        self.buffer_numels = [b.numel() for _, b in buffers]
        self.n_buffer_values = sum(self.buffer_numels)
        self._init_buffers = torch.cat([b.detach().reshape(-1).float() for _, b in buffers]) if buffers \
            else torch.zeros(0, device=self.device)
        self.random = any(isinstance(m, torch.nn.modules.dropout._DropoutNd) for m in self.model.modules())
        self.batchable = True  # torch.func.vmap can batch it (checked for a user's model)
        # Batch norm computes its statistics over the whole batch it is given, so one pass over several workers'
        # batches differs from each worker's own pass: such a model's workers are never fused (checked for a
        # user's model too).
        self.independent_samples = not any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm)
                                           for m in self.model.modules())
        # ... unless each worker's slice of the joined batch is normalised by its own statistics
        # (`autosync.workloads.norm_groups`): exact where batch norm without running statistics is the only
        # coupling, as in the built-in models (checked for a user's model)
        self.norm_groups = not self.independent_samples and groupable(self.model)
        self._eval_x_train, self._eval_y_train = self._eval_subset(self.data.x_train, self.data.y_train)
        self._eval_x_test, self._eval_y_test = self._eval_subset(self.data.x_test, self.data.y_test)

    @property
    def fast_path(self) -> bool:
        """Whether gradients of several workers may be fused and vmapped: a pure function of theta alone,
        with a per-sample loss, that vmap can batch. Buffers, random layers and user losses need a pass
        per worker."""
        return not self.n_buffer_values and not self.random and self.loss.per_sample is not None and self.batchable

    @property
    def slot_dim(self) -> int:
        """Values a worker receives per task, and sends back: the parameters, then the buffers."""
        return self.dim + self.n_buffer_values

    # ------------------------------------------------------------------ parameters
    def init_params(self) -> torch.Tensor:
        """The seeded initial parameters theta_0 as one flat vector."""
        return self._init.clone()

    def init_buffers(self) -> torch.Tensor | None:
        """The model's initial buffers as one flat float vector (None for a model without buffers)."""
        return self._init_buffers.clone() if self.n_buffer_values else None

    def unflatten(self, theta: torch.Tensor) -> dict[str, torch.Tensor]:
        """The parameters by name, as views of theta (`theta` [dim] or a batch of them, [W, dim])."""
        out, offset, lead = {}, 0, theta.shape[:-1]
        for name, shape, n in zip(self.names, self.shapes, self.numels):
            out[name] = theta[..., offset: offset + n].view(*lead, *shape)
            offset += n
        return out

    def leaves(self, theta: torch.Tensor) -> dict[str, torch.Tensor]:
        """The parameters by name as leaf tensors that require grad, each a view of theta's storage (no copy).

        Gradients are taken with respect to these and joined by `flat_gradient`, not with respect to theta:
        autograd's backward of each view of theta allocates and adds a zero vector of theta's whole size, so
        a gradient with respect to theta costs one pass over theta per parameter tensor (for ResNet-18 on
        the CPU, 62 passes over 45 MB: 95% of its gradient's time).
        """
        return {name: v.detach().requires_grad_(True) for name, v in self.unflatten(theta.detach()).items()}

    @staticmethod
    def flat_gradient(loss: torch.Tensor, leaves: dict[str, torch.Tensor],
                      out: torch.Tensor | None = None) -> torch.Tensor:
        """d loss / d theta as one flat vector, from the `leaves` loss was computed on (an unused parameter's
        gradient is zero); written into `out` when given (a transport slot: no new memory)."""
        grads = torch.autograd.grad(loss, list(leaves.values()), allow_unused=True, materialize_grads=True)
        return torch.cat([g.reshape(-1) for g in grads], out=out)

    def unflatten_buffers(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        """Buffers by name, each its own tensor in its own dtype (BatchNorm's backward keeps the running
        statistics it was given, so one module's in-place update must not touch another's storage);
        `_write_back` copies them into a flat vector after a forward pass."""
        out, offset = {}, 0
        for name, shape, dtype, n in zip(self.buffer_names, self.buffer_shapes, self.buffer_dtypes, self.buffer_numels):
            out[name] = flat[offset: offset + n].view(shape).to(dtype, copy=True)
            offset += n
        return out

    def _write_back(self, buffers: dict[str, torch.Tensor], flat: torch.Tensor) -> None:
        offset = 0
        for name, n in zip(self.buffer_names, self.buffer_numels):
            flat[offset: offset + n] = buffers[name].detach().reshape(-1).to(flat.dtype)
            offset += n

    # ------------------------------------------------------------------ losses
    def _values(self, theta: Params) -> dict[str, torch.Tensor]:
        return theta if isinstance(theta, dict) else self.unflatten(theta)

    def per_sample_loss(self, theta: Params, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Loss of every sample of (x, y) under parameters theta, flat or by name (no reduction; fast-path
        workloads only)."""
        out = functional_call(self.model, self._values(theta), (x,))
        return self.loss.per_sample(out, y)

    def forward(self, theta: Params, x: torch.Tensor,
                buffers: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The model's outputs on x in training mode, and its buffers after the pass (None without buffers).

        `theta`: the flat parameters or the parameters by name (`leaves`). `buffers` (the initial ones when
        None) is not modified: the pass runs on a copy, which it returns.
        """
        values = self._values(theta)
        if not self.n_buffer_values:
            return functional_call(self.model, values, (x,)), None
        after = torch.empty_like(self._init_buffers)
        named = self.unflatten_buffers(buffers if buffers is not None else self._init_buffers)
        out = functional_call(self.model, {**values, **named}, (x,))
        self._write_back(named, after)
        return out, after

    def train_loss(self, theta: Params, x: torch.Tensor, y: torch.Tensor,
                   buffers: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The mean training loss of a batch, and the buffers after the forward pass (see `forward`)."""
        out, after = self.forward(theta, x, buffers)
        return self.loss.mean(out, y), after

    @contextlib.contextmanager
    def task_randomness(self, seed: int, worker: int, task: int) -> Iterator[None]:
        """Random layers draw from a generator seeded by (seed, worker, task) inside; no effect without them."""
        if not self.random:
            yield
            return
        cuda = self.device.type == "cuda"
        with torch.random.fork_rng(devices=[self.device] if cuda else []):
            drawn = int(rng_for(seed, STREAM_DROPOUT, worker, task).integers(2 ** 63 - 1))
            # the generators a random layer here draws from, as torch.manual_seed seeds them; not that, which
            # also queues a seed for every accelerator not initialised, each with its caller's stack formatted
            # (milliseconds a task: a tenth of a dropout model's tune, measured)
            torch.default_generator.manual_seed(drawn)
            if cuda:
                torch.cuda.manual_seed_all(drawn)
            yield

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
    def evaluate(self, theta: torch.Tensor, buffers: torch.Tensor | None = None,
                 train_loss: bool = True) -> dict[str, float]:
        """Training loss (unless `train_loss` is False: a search that only reads its target's metric skips
        that pass), test loss and (for classification) test accuracy of theta, in evaluation mode on the
        server's `buffers` (the initial ones when None). The test loss and accuracy come from one forward
        pass over the test set."""
        params = self.unflatten(theta)
        if self.n_buffer_values:
            params.update(self.unflatten_buffers(buffers if buffers is not None else self._init_buffers))
        self.model.eval()
        try:
            result = {"train_loss": self._mean_loss(params, self._eval_x_train, self._eval_y_train)} \
                if train_loss else {}
            total, correct = 0.0, 0
            for xs, ys in _chunks(self._eval_x_test, self._eval_y_test):
                out = functional_call(self.model, params, (xs,))
                total += self.loss.total(out, ys)
                if not self.regression:
                    correct += int((out.argmax(1) == ys).sum())
            result["test_loss"] = total / len(self._eval_y_test)
            if not self.regression:
                result["test_accuracy"] = correct / len(self._eval_y_test)
        finally:
            self.model.train()
        return result

    def _mean_loss(self, params: dict, x: torch.Tensor, y: torch.Tensor) -> float:
        total = 0.0
        for xs, ys in _chunks(x, y):
            total += self.loss.total(functional_call(self.model, params, (xs,)), ys)
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
