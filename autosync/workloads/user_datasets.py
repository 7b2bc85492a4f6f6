"""A dataset from the user's factory, turned into the in-memory tensors every backend indexes.

The factory (``workload.dataset.factory``) may return any of:
- ``(x_train, y_train, x_test, y_test)``: arrays or tensors;
- ``((x_train, y_train), (x_test, y_test))``: the same as two pairs, the shape of Keras's ``load_data()``;
- ``(x, y)``: one set of samples, split by the job's ``dataset.seed`` and ``dataset.test_fraction``;
- ``(train, test)``: two ``torch.utils.data.Dataset``s of ``(x, y)`` items, or one such dataset to split;
- a mapping with the four keys of the first form and, optionally, ``n_classes``.
Integer targets make a classification task (``n_classes`` = the largest label + 1 unless given), real ones
a regression. Real-valued inputs become float32; integer inputs (token ids for an embedding) keep their type. Batches are drawn by index as for the built-in datasets, so the data must fit in memory.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from autosync.core.errors import JobFileError
from autosync.core.job import DatasetSpec
from autosync.workloads.tensors import Dataset, split_indices
from autosync.workloads.user_code import call_factory

FIELD = "workload.dataset.factory"
FORMS = ("(x_train, y_train, x_test, y_test), ((x_train, y_train), (x_test, y_test)), (x, y), (train, test) torch "
         "Datasets, one torch Dataset, or a mapping with keys x_train, y_train, x_test, y_test")


def user_dataset(spec: DatasetSpec, source: str) -> Dataset:
    """Call the job's dataset factory and check and convert what it returns."""
    result = call_factory(str(spec.factory), spec.kwargs, {"seed": spec.seed}, FIELD, source)
    fail = lambda problem: JobFileError(source, [f"{FIELD}: {spec.factory!r} {problem}"])
    n_classes = None
    if isinstance(result, dict):
        missing = [k for k in ("x_train", "y_train", "x_test", "y_test") if k not in result]
        if missing:
            raise fail(f"returned a mapping without {', '.join(missing)} (keys {sorted(result)})")
        n_classes = result.get("n_classes")
        result = (result["x_train"], result["y_train"], result["x_test"], result["y_test"])
    if _is_torch_dataset(result):
        result = (result,)
    if isinstance(result, (tuple, list)) and len(result) == 2 and all(_is_pair(part) for part in result):
        result = (*result[0], *result[1])  # Keras's ((x_train, y_train), (x_test, y_test))
    if not isinstance(result, (tuple, list)) or len(result) not in (1, 2, 4):
        raise fail(f"must return {FORMS}, but returned {_kind(result)}")
    if all(_is_torch_dataset(part) for part in result):
        arrays = [a for part in result for a in _materialize(part, fail)]
    elif len(result) == 1:
        raise fail(f"must return {FORMS}, but returned {_kind(result)}")
    else:
        arrays = [_tensor(a, name, fail) for a, name in zip(result, ("x_train", "y_train", "x_test", "y_test"))]
    pairs = [(arrays[i], arrays[i + 1], ("train", "test")[i // 2]) for i in range(0, len(arrays), 2)]
    for x, y, part in pairs:
        if len(x) != len(y):
            raise fail(f"returned {part} inputs and targets of different lengths: {len(x)} and {len(y)}")
        if len(x) == 0:
            raise fail(f"returned no {part} samples")
    classification = not torch.is_floating_point(arrays[1])
    if classification:
        labels = torch.cat([arrays[i] for i in range(1, len(arrays), 2)])
        if labels.ndim != 1 or int(labels.min()) < 0:
            raise fail("returned integer targets that are not class labels (one non-negative label per sample)")
        n_classes = int(n_classes) if n_classes is not None else int(labels.max()) + 1
        if int(labels.max()) >= n_classes:
            raise fail(f"returned label {int(labels.max())}, but n_classes={n_classes}")
    y_dtype = torch.int64 if classification else torch.float32
    x_dtype = torch.float32 if torch.is_floating_point(arrays[0]) else torch.int64
    if len(arrays) == 2:
        x, y = arrays[0].to(x_dtype), arrays[1].to(y_dtype)
        test, train = (torch.from_numpy(i) for i in split_indices(len(x), spec))
        return Dataset(x[train], y[train], x[test], y[test], n_classes if classification else None)
    x_train, y_train, x_test, y_test = arrays
    if x_train.shape[1:] != x_test.shape[1:]:
        raise fail(f"returned train inputs of shape {tuple(x_train.shape[1:])} and test inputs of shape "
                   f"{tuple(x_test.shape[1:])}")
    return Dataset(x_train.to(x_dtype), y_train.to(y_dtype), x_test.to(x_dtype), y_test.to(y_dtype),
                   n_classes if classification else None)


def _is_pair(value: Any) -> bool:
    """An (inputs, targets) pair of arrays: a tuple or list of two array-likes (an array, a tensor or a list),
    not one sample of (x, y) (whose entries would be numbers)."""
    return (isinstance(value, (tuple, list)) and len(value) == 2 and not _is_torch_dataset(value[0])
            and all(isinstance(a, (tuple, list)) or getattr(a, "ndim", 0) >= 1 for a in value))


def _is_torch_dataset(value: Any) -> bool:
    return isinstance(value, torch.utils.data.Dataset) and hasattr(value, "__len__")


def _materialize(dataset: Any, fail: Any) -> list[torch.Tensor]:
    """All (x, y) items of a map-style Dataset as two stacked tensors."""
    xs, ys = [], []
    for i in range(len(dataset)):
        item = dataset[i]
        if not isinstance(item, (tuple, list)) or len(item) != 2:
            raise fail(f"returned a Dataset whose item {i} is {_kind(item)}, not an (input, target) pair")
        xs.append(torch.as_tensor(np.asarray(item[0]) if not isinstance(item[0], torch.Tensor) else item[0]))
        ys.append(torch.as_tensor(item[1]))
    if not xs:
        raise fail("returned an empty Dataset")
    try:
        return [torch.stack(xs), torch.stack(ys)]
    except RuntimeError as exc:
        raise fail(f"returned a Dataset whose items differ in shape ({str(exc).splitlines()[0]})") from None


def _tensor(value: Any, name: str, fail: Any) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    try:
        return torch.as_tensor(np.asarray(value))
    except (TypeError, ValueError, RuntimeError):
        raise fail(f"returned {name} as {_kind(value)}, which is not an array") from None


def _kind(value: Any) -> str:
    if isinstance(value, (tuple, list)):
        return f"a {type(value).__name__} of {len(value)} ({', '.join(type(v).__name__ for v in value[:5])})"
    return f"a {type(value).__name__}"

