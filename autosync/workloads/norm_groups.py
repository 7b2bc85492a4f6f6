"""Batch norm per worker inside one fused pass: several workers' batches joined, each normalised by its own
statistics.

Batch norm (Ioffe and Szegedy, 2015, Algorithm 1) normalises a batch by its own mean and variance, so one
forward/backward over the union of k workers' batches is not the mean of their own gradients. Computing
the statistics per group of consecutive samples instead ("ghost" batch norm, Hoffer et al., 2017, sec. 4)
makes the joined pass exactly k passes side by side: with equal batch sizes b and sample weights 1 / (k b),
its gradient is the mean of the workers' mini-batch gradients, as each worker computes it, in one pass.

Only batch norm that normalises by the batch's statistics is grouped: modules without running statistics
(`track_running_stats=False`, the built-in ResNets'); a model with running statistics has buffers and never
takes a fused pass.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch
from torch import nn


def _batch_norms(model: nn.Module) -> list[nn.modules.batchnorm._BatchNorm]:
    return [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]


def groupable(model: nn.Module) -> bool:
    """Whether every batch norm of `model` normalises by the batch's own statistics (no running ones), so
    that `batch_norm_per_group` applies to all of them."""
    norms = _batch_norms(model)
    return bool(norms) and all(not m.track_running_stats for m in norms)


def _grouped_forward(module: nn.modules.batchnorm._BatchNorm, groups: int, x: torch.Tensor) -> torch.Tensor:
    """Algorithm 1 of the batch-norm paper on each of `groups` equal, consecutive slices of the batch: mean
    and biased variance over the slice's samples and spatial positions, per channel."""
    size = x.shape[0] // groups
    xg = x.reshape(groups, size, *x.shape[1:])
    dims = (1, *range(3, xg.ndim))  # the samples of a slice and every position; not the channel (dim 2)
    var, mean = torch.var_mean(xg, dim=dims, correction=0, keepdim=True)
    y = (xg - mean) * torch.rsqrt(var + module.eps)
    if module.affine:
        shape = (1, 1, -1, *([1] * (xg.ndim - 3)))
        y = y * module.weight.reshape(shape) + module.bias.reshape(shape)
    return y.reshape(x.shape)


@contextlib.contextmanager
def batch_norm_per_group(model: nn.Module, groups: int) -> Iterator[None]:
    """Within: every batch norm of `model` (see `groupable`) normalises each of `groups` equal consecutive
    slices of its input by the slice's own statistics. Parameters given by `torch.func.functional_call`
    are used, as by the module's own forward."""
    norms = _batch_norms(model)
    for m in norms:
        m.forward = lambda x, m=m: _grouped_forward(m, groups, x)  # an instance attribute over the class's
    try:
        yield
    finally:
        for m in norms:
            del m.forward
