"""Training losses: cross entropy, squared error, or the user's own (a factory returning a callable).

The built-in losses give one loss per sample, which the in-process driver's fused pass weights sample by
sample; a user's loss gives only the batch mean, so its workloads compute each worker's gradient alone.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn.functional as F

from autosync.core.errors import JobFileError
from autosync.core.job import LossSpec
from autosync.workloads.user_code import call_factory


class Loss:
    """A training loss: `mean(outputs, targets)` for any loss, `per_sample` for the built-in ones."""

    def __init__(self, name: str, per_sample: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None,
                 mean: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
                 total: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None):
        self.name = name
        self.per_sample = per_sample  # None for a user's loss: only its batch mean is known
        self._mean = mean
        self._total = total

    def total(self, outputs: torch.Tensor, targets: torch.Tensor) -> float:
        """The summed loss of a batch (evaluation adds these up over chunks)."""
        if self._total is not None:
            return float(self._total(outputs, targets))
        if self.per_sample is not None:
            return float(self.per_sample(outputs, targets).sum())
        return float(self.mean(outputs, targets)) * len(targets)

    def mean(self, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """The mean loss of a batch (a 0-dimensional tensor)."""
        if self._mean is not None:
            return self._mean(outputs, targets)
        assert self.per_sample is not None
        return self.per_sample(outputs, targets).mean()


def cross_entropy(outputs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Per-sample cross entropy of logits against integer labels."""
    return F.cross_entropy(outputs, labels, reduction="none")


def squared_error(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Per-sample squared error: against one real target per sample, the mean over a sample's target values,
    or, for integer labels, against their one-hot encoding."""
    if not torch.is_floating_point(targets):  # one-hot by comparison: F.one_hot reads its labels' values,
        # which per-sample gradients under torch.func.vmap cannot (a classification job with `loss: mse`
        # failed under every policy that takes per-sample gradients)
        targets = (targets.unsqueeze(-1) == torch.arange(outputs.shape[-1], device=targets.device)).to(outputs.dtype)
    if targets.ndim == 1:
        return (outputs.reshape(len(targets), -1).squeeze(-1) - targets) ** 2
    return ((outputs - targets) ** 2).reshape(len(targets), -1).mean(dim=1)


def build_loss(spec: str | LossSpec | None, classification: bool, source: str = "<job>") -> Loss:
    """The job's loss: None is the data's own (cross entropy for classes, squared error otherwise)."""
    if spec is None:
        spec = "cross_entropy" if classification else "mse"
    if spec == "cross_entropy":
        return Loss("cross_entropy", cross_entropy,
                    total=lambda out, labels: F.cross_entropy(out, labels, reduction="sum"))
    if spec == "mse":
        return Loss("mse", squared_error)
    user: Any = call_factory(str(spec.factory), spec.kwargs, {}, "workload.loss.factory", source)
    if not callable(user):
        raise JobFileError(source, [f"workload.loss.factory: {spec.factory!r} must return a callable "
                                    f"(outputs, targets) -> scalar loss, but returned a {type(user).__name__}"])
    return Loss(str(spec.factory), None, user)
