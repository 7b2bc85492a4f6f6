"""Datasets as in-memory tensors: digits (embedded), synthetic, and torchvision sets from a local root."""

from __future__ import annotations

import functools
import math
from pathlib import Path

import numpy as np
import torch

from autosync.core.errors import UserError
from autosync.core.job import DatasetSpec
from autosync.workloads.tensors import Dataset, split_indices
from autosync.workloads.user_datasets import user_dataset

# Files torchvision needs under `root` for each dataset (checked before torchvision is asked).
_REQUIRED_FILES = {
    "mnist": ["MNIST/raw/train-images-idx3-ubyte", "MNIST/raw/train-labels-idx1-ubyte",
              "MNIST/raw/t10k-images-idx3-ubyte", "MNIST/raw/t10k-labels-idx1-ubyte"],
    "fashion_mnist": ["FashionMNIST/raw/train-images-idx3-ubyte", "FashionMNIST/raw/train-labels-idx1-ubyte",
                      "FashionMNIST/raw/t10k-images-idx3-ubyte", "FashionMNIST/raw/t10k-labels-idx1-ubyte"],
    "cifar10": [f"cifar-10-batches-py/data_batch_{i}" for i in range(1, 6)] + ["cifar-10-batches-py/test_batch"],
    "cifar100": ["cifar-100-python/train", "cifar-100-python/test"],
}


def load_dataset(spec: DatasetSpec, source: str = "<job>") -> Dataset:
    """Build the dataset a job names; never downloads unless ``spec.download`` is true.

    `source` is the job file, named by errors in the user's dataset factory.
    """
    if spec.factory is not None:
        ds = user_dataset(spec, source)
    elif spec.name == "digits":
        ds = _digits(spec)
    elif spec.name == "synthetic_classification":
        ds = _synthetic_classification(spec)
    elif spec.name == "synthetic_regression":
        ds = _synthetic_regression(spec)
    elif spec.name == "synthetic_images":
        ds = _synthetic_images(spec)
    else:
        ds = _torchvision(spec)
    if spec.max_train_samples is not None and spec.max_train_samples < ds.n_train:
        keep = torch.from_numpy(np.random.default_rng(spec.seed).permutation(ds.n_train)[: spec.max_train_samples])
        ds = Dataset(ds.x_train[keep], ds.y_train[keep], ds.x_test, ds.y_test, ds.n_classes)
    return ds


def _split(x: np.ndarray, y: np.ndarray, spec: DatasetSpec, n_classes: int | None) -> Dataset:
    """Train and test tensors from one set of samples (`split_indices`)."""
    test, train = split_indices(len(x), spec)
    y_dtype = torch.int64 if n_classes is not None else torch.float32
    return Dataset(
        torch.as_tensor(x[train], dtype=torch.float32), torch.as_tensor(y[train], dtype=y_dtype),
        torch.as_tensor(x[test], dtype=torch.float32), torch.as_tensor(y[test], dtype=y_dtype),
        n_classes,
    )


def _digits(spec: DatasetSpec) -> Dataset:
    data, target = digits_arrays()
    x = data.reshape(-1, 1, 8, 8).astype(np.float32)
    x = (x - x.mean()) / x.std()  # standardised pixels: the small CNN does not train on raw [0, 16]
    return _split(x, target, spec, 10)


@functools.lru_cache(maxsize=1)
def digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's digits (1797 x 64 pixels, labels), read from the file scikit-learn ships.

    Read directly, as `sklearn.datasets.load_digits` reads it, without importing scikit-learn: that
    import (about 1 s) was a third of a default `autosync run`. Falls back to `load_digits` if a
    scikit-learn release moves the file. Read once per process (27 ms a read; a tune builds the workload
    once per trial) and returned read-only, since every caller shares the arrays.
    """
    data, target = _read_digits()
    data.flags.writeable = False
    target.flags.writeable = False
    return data, target


def _read_digits() -> tuple[np.ndarray, np.ndarray]:
    import importlib.util

    found = importlib.util.find_spec("sklearn")
    path = Path(found.origin).parent / "datasets" / "data" / "digits.csv.gz" if found and found.origin else None
    if path is not None and path.is_file():
        table = np.loadtxt(path, delimiter=",")
        return table[:, :-1], table[:, -1].astype(int)
    from sklearn.datasets import load_digits

    bunch = load_digits()
    return bunch.data, bunch.target


def _synthetic_classification(spec: DatasetSpec) -> Dataset:
    from sklearn.datasets import make_classification

    informative = min(spec.n_features, max(2, math.ceil(math.log2(spec.n_classes)) + 2))
    x, y = make_classification(
        n_samples=spec.n_samples, n_features=spec.n_features, n_informative=informative,
        n_redundant=0, n_classes=spec.n_classes, n_clusters_per_class=1, random_state=spec.seed)
    return _split(x.astype(np.float32), y, spec, spec.n_classes)


def _synthetic_regression(spec: DatasetSpec) -> Dataset:
    from sklearn.datasets import make_regression

    x, y = make_regression(n_samples=spec.n_samples, n_features=spec.n_features, noise=0.0,
                           random_state=spec.seed)
    y = (y - y.mean()) / y.std()
    y = y + np.random.default_rng(spec.seed + 1).normal(0.0, spec.noise, size=y.shape)
    return _split(x.astype(np.float32), y.astype(np.float32), spec, None)


def _synthetic_images(spec: DatasetSpec) -> Dataset:
    """Images of `image_shape` (CIFAR's by default): a smooth random pattern per class under pixel noise.

    Each class's prototype is unit Gaussian noise drawn at a quarter of the resolution and repeated over
    4x4 blocks (edges padded when a side is not a multiple of 4); a sample is its class's prototype plus
    unit Gaussian noise per pixel, so the classes overlap and a convolutional network needs many updates
    to separate them.
    """
    c, h, w = spec.image_shape
    rng = np.random.default_rng(spec.seed)
    coarse = rng.normal(size=(spec.n_classes, c, max(1, h // 4), max(1, w // 4)))
    prototypes = np.repeat(np.repeat(coarse, 4, axis=2), 4, axis=3)[:, :, :h, :w]
    prototypes = np.pad(prototypes, ((0, 0), (0, 0), (0, h - prototypes.shape[2]), (0, w - prototypes.shape[3])),
                        mode="edge")
    y = rng.integers(0, spec.n_classes, spec.n_samples)
    x = prototypes[y] + rng.normal(size=(spec.n_samples, c, h, w))
    return _split(x.astype(np.float32), y, spec, spec.n_classes)


def missing_files(spec: DatasetSpec) -> list[str]:
    """Files a torchvision dataset needs under its root that are not there."""
    root = Path(spec.root or ".")
    return [f for f in _REQUIRED_FILES[spec.name] if not (root / f).is_file()]


def _torchvision(spec: DatasetSpec) -> Dataset:
    missing = missing_files(spec)
    if missing and not spec.download:
        raise UserError(
            f"workload.dataset: {spec.name} is not under root={spec.root!r}: missing {', '.join(missing[:3])}"
            f"{' ...' if len(missing) > 3 else ''}; set workload.dataset.download: true to fetch it")
    import torchvision.datasets as tvd

    cls = {"mnist": tvd.MNIST, "fashion_mnist": tvd.FashionMNIST,
           "cifar10": tvd.CIFAR10, "cifar100": tvd.CIFAR100}[spec.name]
    try:
        train = cls(spec.root, train=True, download=spec.download)
        test = cls(spec.root, train=False, download=spec.download)
    except Exception as exc:  # network or corrupt files: name the dataset and root
        raise UserError(f"workload.dataset: could not load {spec.name} from root={spec.root!r}: {exc}") from None
    x_train, x_test = _images(train.data), _images(test.data)
    mean = x_train.mean(dim=(0, 2, 3), keepdim=True)
    std = x_train.std(dim=(0, 2, 3), keepdim=True)
    n_classes = 100 if spec.name == "cifar100" else 10
    return Dataset((x_train - mean) / std, torch.as_tensor(train.targets, dtype=torch.int64),
                   (x_test - mean) / std, torch.as_tensor(test.targets, dtype=torch.int64), n_classes)


def _images(data) -> torch.Tensor:
    x = torch.as_tensor(np.asarray(data), dtype=torch.float32) / 255.0
    if x.ndim == 3:  # MNIST-like: N x H x W
        return x.unsqueeze(1)
    return x.permute(0, 3, 1, 2).contiguous()  # CIFAR: N x H x W x C
