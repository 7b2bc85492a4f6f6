"""Checks of a workload built from the user's code, once, before any run trains it.

Each finding is one `JobFileError` line naming the job file, the field and the problem: a model that fails
on the dataset's inputs, outputs that do not match the classes, a loss that is not a scalar or does not
reach the parameters, a model that is not a pure function of its parameters, buffers and the seeded
generator. What is allowed but slower is detected here too: randomness drawn outside a dropout module
(seeded per task from then on), a model that `torch.func.vmap` cannot batch (computed per worker) and one
whose samples' losses depend on each other (batch statistics: workers fused into one pass only where batch
norm is the only coupling and is computed per worker, `autosync.workloads.norm_groups`).
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, NamedTuple

import torch
from torch.func import grad, vmap

from autosync.core.errors import JobFileError
from autosync.workloads import _functorch_grad as functorch_grad
from autosync.workloads.norm_groups import batch_norm_per_group, groupable, interleave
from autosync.workloads.user_code import _one_line

if TYPE_CHECKING:
    from autosync.workloads.workload import Workload

PROBE_SAMPLES = 4  # a batch of a few training samples (two at least: batch norm needs two)


class Paths(NamedTuple):
    """The paths a user's workload takes, as the checks found them."""

    random: bool  # its forward pass draws random numbers (then seeded per task)
    batchable: bool  # torch.func.vmap can batch its gradients (else one pass per worker)
    independent_samples: bool  # each sample's loss is its own (else workers are fused only with norm_groups)
    norm_groups: bool  # batch norm per worker's slice makes the slices independent (a fused pass stays exact)


def check_user_workload(workload: "Workload", source: str) -> Paths:
    """Raise a one-line JobFileError for what cannot train; return the paths the workload takes (`Paths`).
    `workload` is left as it is: the checks switch the paths of a copy."""
    workload = copy.copy(workload)
    spec = workload.spec
    model_label = f"workload.model ({spec.model.label})"
    n = min(PROBE_SAMPLES, workload.data.n_train)
    x, y = workload.data.x_train[:n], workload.data.y_train[:n]
    theta = workload.init_params()
    fail = lambda field, problem: JobFileError(source, [f"{field}: {problem}"])
    if workload.dim == 0:
        raise fail(model_label, "has no parameters to train")

    def forward(seed: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        with workload.task_randomness(seed, 0, 0), torch.no_grad():
            out, after = workload.forward(theta, x)
        return out, after

    declared_random = workload.random
    workload.random = True  # while checking, every pass draws from the seeded generator
    try:
        out, after = forward(0)
    except Exception as exc:
        raise fail(model_label, f"fails on a batch of the dataset's inputs of shape {tuple(x.shape)}: "
                                f"{type(exc).__name__}: {_one_line(exc)}") from None
    if not isinstance(out, torch.Tensor):
        raise fail(model_label, f"must return a tensor of outputs, but returned a {type(out).__name__}")
    _check_outputs(workload, out, y, model_label, fail)
    repeat, repeat_after = forward(0)
    if not _same(out, repeat) or (after is not None and not _same(after, repeat_after)):
        raise fail(model_label, "is not a pure function of its parameters, buffers and the seeded random generator: "
                                "two forward passes on the same batch and seed differ (keep state in registered "
                                "buffers and draw random numbers from torch's generator)")
    other_seed, _ = forward(1)  # randomness outside a dropout module is seeded per task like dropout
    workload.random = declared_random or not _same(out, other_seed)
    loss_field = "workload.loss.factory" if workload.loss.per_sample is None else "workload.loss"
    try:
        with workload.task_randomness(0, 0, 0):
            params = workload.leaves(theta)
            loss, _ = workload.train_loss(params, x, y)
    except Exception as exc:
        raise fail(loss_field, f"{workload.loss.name!r} fails on the model's outputs: {type(exc).__name__}: "
                               f"{_one_line(exc)}") from None
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1 or loss.ndim > 1:
        shape = tuple(loss.shape) if isinstance(loss, torch.Tensor) else type(loss).__name__
        raise fail(loss_field, f"{workload.loss.name!r} must return a scalar (the batch's mean loss), but "
                               f"returned {shape}")
    try:
        g = workload.flat_gradient(loss.reshape(()), params)
    except RuntimeError as exc:
        raise fail(loss_field, f"the loss does not reach the model's parameters: {_one_line(exc)}") from None
    if not bool(torch.isfinite(g).all()) or not bool(torch.isfinite(loss)):
        raise fail(loss_field, "the loss or its gradient is not finite at the initial parameters")
    if workload.fast_path:
        workload.batchable = _vmaps(workload, x, y)
    if workload.fast_path and workload.independent_samples:
        workload.independent_samples = _independent(workload, theta, x, y)
    if workload.fast_path and not workload.independent_samples:
        workload.norm_groups = groupable(workload.model) and _independent_groups(workload, theta, x, y)
    return Paths(workload.random, workload.batchable, workload.independent_samples, workload.norm_groups)


def _check_outputs(workload: "Workload", out: torch.Tensor, y: torch.Tensor, field: str, fail) -> None:
    """Outputs of one row per sample; for classification one score per class (what accuracy takes the
    argmax of), for a built-in loss on real targets the targets' shape."""
    n = len(y)
    if out.ndim == 0 or out.shape[0] != n:
        raise fail(field, f"must return one row of outputs per sample, but returned shape {tuple(out.shape)} "
                          f"for {n} samples")
    builtin = workload.loss.per_sample is not None
    if not workload.regression and (builtin or workload.job.target.metric == "test_accuracy"):
        classes = workload.data.n_classes
        if tuple(out.shape) != (n, classes):
            raise fail(field, f"outputs of shape {tuple(out.shape)} do not match the dataset's {classes} classes "
                              f"(expected ({n}, {classes}))")
    elif workload.regression and builtin:
        per_sample = max(1, y[0].numel())
        if out[0].numel() != per_sample:
            raise fail(field, f"outputs of shape {tuple(out.shape)} do not match targets of shape {tuple(y.shape)}")


def _independent(workload: "Workload", theta: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> bool:
    """Whether each sample's loss is its own: the same in a pass over the first half of the batch as in a
    pass over all of it (batch statistics, as batch norm computes them, make it depend on the others)."""
    half = max(1, len(x) // 2)
    with torch.no_grad(), workload.task_randomness(0, 0, 0):
        whole = workload.per_sample_loss(theta, x, y)[:half]
    with torch.no_grad(), workload.task_randomness(0, 0, 0):
        part = workload.per_sample_loss(theta, x[:half], y[:half])
    return bool(torch.allclose(whole, part, rtol=1e-4, atol=1e-6))  # another batch size: another summation order


def _independent_groups(workload: "Workload", theta: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> bool:
    """Whether, with batch norm computed per slice (`batch_norm_per_group`), a pass over two slices gives each
    slice the losses of its own pass: batch norm is the only coupling of the samples."""
    half = len(x) // 2
    if half < 2:  # batch norm needs two samples a slice
        return False
    parts = [slice(0, half), slice(half, 2 * half)]
    with torch.no_grad(), workload.task_randomness(0, 0, 0), batch_norm_per_group(workload.model, 2):
        joined = workload.per_sample_loss(theta, interleave([x[p] for p in parts]), interleave([y[p] for p in parts]))
    with torch.no_grad(), workload.task_randomness(0, 0, 0):
        apart = interleave([workload.per_sample_loss(theta, x[p], y[p]) for p in parts])
    return bool(torch.allclose(joined, apart, rtol=1e-4, atol=1e-6))


def _vmaps(workload: "Workload", x: torch.Tensor, y: torch.Tensor) -> bool:
    """Whether per-worker gradients of this pure model can be batched with vmap (else: one pass each), as the
    in-process driver batches them: over parameters by name."""
    def mean_loss(params: dict[str, torch.Tensor], xs: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
        return workload.per_sample_loss(params, xs, ys).mean()

    functorch_grad.install()  # its first gradient without importing torch._dynamo (`functorch_grad`)
    try:
        params = workload.unflatten(torch.stack([workload.init_params()] * 2))
        vmap(grad(mean_loss), in_dims=(0, 0, 0))(params, torch.stack([x, x]), torch.stack([y, y]))
    except Exception:
        return False
    return True


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and bool(torch.equal(a, b))
