"""Batch norm per worker inside one fused pass: several workers' batches joined, each normalised by its own
statistics.

Batch norm (Ioffe and Szegedy, 2015, Algorithm 1) normalises a batch by its own mean and variance, so one
forward/backward over the union of k workers' batches is not the mean of their own gradients. Computing
the statistics per worker's group of samples instead ("ghost" batch norm, Hoffer et al., 2017, sec. 4)
makes the joined pass exactly k passes side by side: with equal batch sizes b and sample weights 1 / (k b),
its gradient is the mean of the workers' mini-batch gradients, as each worker computes it, in one pass.
The workers' samples are interleaved in the joined batch, so that each batch-norm layer is one call of the
native kernel on a view of its input (the groups side by side as channels).

Only batch norm that normalises by the batch's statistics is grouped: modules without running statistics
(`track_running_stats=False`, the built-in ResNets'); a model with running statistics has buffers and never
takes a fused pass.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch
import torch.nn.functional as F
from torch import nn


def _batch_norms(model: nn.Module) -> list[nn.modules.batchnorm._BatchNorm]:
    return [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]


def groupable(model: nn.Module) -> bool:
    """Whether every batch norm of `model` normalises by the batch's own statistics (no running ones), so
    that `batch_norm_per_group` applies to all of them."""
    norms = _batch_norms(model)
    return bool(norms) and all(not m.track_running_stats for m in norms)


def interleave(parts: list[torch.Tensor]) -> torch.Tensor:
    """Equal-length `parts` joined sample by sample: row j * len(parts) + g holds parts[g][j] (the layout
    `batch_norm_per_group` reads its groups from)."""
    return torch.stack(parts, dim=1).reshape(-1, *parts[0].shape[1:])


def _grouped_forward(module: nn.modules.batchnorm._BatchNorm, groups: int, x: torch.Tensor) -> torch.Tensor:
    """Algorithm 1 of the batch-norm paper on each group of an interleaved batch (`interleave`): the batch
    [b0 g0, b0 g1, ..., b1 g0, ...] seen as b samples of groups x channels is one call of the native kernel,
    which normalises each (group, channel) by its own mean and biased variance, no copy."""
    size = x.shape[0] // groups
    wide = x.reshape(size, groups * x.shape[1], *x.shape[2:])
    weight = module.weight.repeat(groups) if module.affine else None
    bias = module.bias.repeat(groups) if module.affine else None
    return F.batch_norm(wide, None, None, weight, bias, training=True, eps=module.eps).reshape(x.shape)


@contextlib.contextmanager
def batch_norm_per_group(model: nn.Module, groups: int) -> Iterator[None]:
    """Within: every batch norm of `model` (see `groupable`) normalises each of `groups` interleaved groups of
    its input (`interleave`: row j * groups + g is sample j of group g) by the group's own statistics.
    Parameters given by `torch.func.functional_call` are used, as by the module's own forward."""
    norms = _batch_norms(model)
    for m in norms:
        m.forward = lambda x, m=m: _grouped_forward(m, groups, x)  # an instance attribute over the class's
    try:
        yield
    finally:
        for m in norms:
            del m.forward
