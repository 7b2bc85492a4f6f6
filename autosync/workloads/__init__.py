"""Workloads: datasets, models and the flat-parameter loss they define.

The modules listed in `__all__` are the package's public surface; a name starting with `_` is internal.
"""

__all__ = ["build", "checks", "datasets", "losses", "models", "norm_groups", "tensors", "user_code", "user_datasets",
           "workload"]
