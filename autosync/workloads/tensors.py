"""A dataset as in-memory tensors, and the seeded train/test split every dataset source uses."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from autosync.core.job import DatasetSpec


@dataclass(frozen=True)
class Dataset:
    """Train and test tensors; for classification `n_classes` is set and targets are int64 labels."""

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    n_classes: int | None  # None for regression

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.x_train.shape[1:])

    @property
    def n_train(self) -> int:
        return int(self.x_train.shape[0])

    def shared(self) -> "Dataset":
        """Itself, its tensors moved into shared memory (in place), so that spawned processes map them."""
        for t in (self.x_train, self.y_train, self.x_test, self.y_test):
            t.share_memory_()
        return self

    def to(self, device: torch.device) -> "Dataset":
        """The same dataset with every tensor on `device` (itself when they are there already)."""
        if self.x_train.device == device:
            return self
        return Dataset(self.x_train.to(device), self.y_train.to(device), self.x_test.to(device),
                       self.y_test.to(device), self.n_classes)


def split_indices(n: int, spec: DatasetSpec) -> tuple[np.ndarray, np.ndarray]:
    """(test, train) indices of n samples: a shuffle seeded by `spec.seed`, `spec.test_fraction` held out."""
    order = np.random.default_rng(spec.seed).permutation(n)
    n_test = max(1, int(round(n * spec.test_fraction)))
    return order[:n_test], order[n_test:]
