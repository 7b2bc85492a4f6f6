"""A job's fingerprint: the cache key of its tuned policy, stable across versions of autosync.

It hashes what makes two runs the same job: the workload, the cluster and the target (not the seed, the
budget or the name, so recurring runs of one job share one cache entry). A field of the job file that
version 1 of the fingerprint did not hash (any field not in `HASHED`, wherever it sits) is left out while
it equals its default: adding a field with a default keeps every cache key, and setting it makes another
job. The user's own code counts by its identity (import path, kwargs, version), not by the built-in fields
it replaces.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic import BaseModel

# Part of every fingerprint: bump it when the meaning of a hashed field changes, so old cache entries stop
# matching (a new field never needs it).
VERSION = 1

#: Per spec class, the fields version 1 hashed whatever their value. Frozen: a field added later is not
#: listed, and is hashed only once it differs from its default.
HASHED: dict[str, frozenset[str]] = {
    "BudgetSpec": frozenset({
        "max_epochs", "max_updates", "max_virtual_seconds", "stop_at_seconds", "stop_at_target"}),
    "ClusterSpec": frozenset({
        "communication_seconds", "compute", "n_workers", "resources", "round_trip", "slowdowns", "speed_factors"}),
    "ComputeUnitsSpec": frozenset({"compute", "count", "speed_factors"}),
    "DatasetSpec": frozenset({
        "download", "image_shape", "max_train_samples", "n_classes", "n_features", "n_samples", "name", "noise",
        "root", "seed", "test_fraction"}),
    "DeterministicRTT": frozenset({"kind"}),
    "EvaluationSpec": frozenset({"every_seconds", "max_samples"}),
    "GPUCompute": frozenset({
        "launch_overhead", "memory_cap_batch", "model", "saturation_batch", "seconds_per_sample"}),
    "GammaRTT": frozenset({"heterogeneous", "kind", "v_mach", "v_task"}),
    "LRScheduleSpec": frozenset({"gamma", "kind", "step_epochs", "total_epochs", "warmup_epochs", "warmup_from"}),
    "LinearCompute": frozenset({"model", "seconds_per_sample"}),
    "LossSpec": frozenset({"factory", "kwargs", "version"}),
    "ModelSpec": frozenset({"channels", "hidden", "name"}),
    "OptimizerSpec": frozenset({"lr", "momentum", "nesterov", "weight_decay"}),
    "ParetoRTT": frozenset({"kind", "scale", "shape"}),
    "ResourceSpec": frozenset({"cpu_min", "memory_min", "period_seconds", "smoothness"}),
    "ServerSpec": frozenset({"apply_seconds", "bandwidth", "model_bytes", "shards"}),
    "ShiftedExponentialRTT": frozenset({"alpha", "kind"}),
    "SlowdownSpec": frozenset({"at", "duration", "factor", "workers"}),
    "TargetSpec": frozenset({"metric", "threshold"}),
    "TraceRTT": frozenset({"column", "kind", "mode", "normalize", "path"}),
    "UniformRTT": frozenset({"high", "kind", "low"}),
    "WorkloadSpec": frozenset({"batch_size", "dataset", "evaluation", "lr_schedule", "model", "optimizer"}),
}


def fingerprint(job: Any) -> str:
    """The 16-hex-digit cache key of `job`, a `autosync.core.job.JobSpec` (see the module docstring)."""
    workload = _canonical(job.workload)
    for part in ("dataset", "model"):  # the user's code by its identity, a built-in by its fields
        spec = getattr(job.workload, part)
        if spec.factory is not None:
            workload[part] = {**{k: v for k, v in workload[part].items() if k not in spec.builtin_fields},
                              **spec.user_code_identity()}
    if job.workload.dataset.factory is None and workload["dataset"]["name"] != "synthetic_images":
        del workload["dataset"]["image_shape"]  # meaningless there (not a default: the images' shape)
    canonical = {
        "v": VERSION,
        "workload": workload,
        "cluster": _canonical(job.cluster),
        "target": _canonical(job.target),
    }
    blob = json.dumps(canonical, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _canonical(model: BaseModel) -> dict[str, Any]:
    """`model`'s JSON dump without the fields `HASHED` does not list for its class that equal their default,
    in every spec it holds (each spec dumped as itself: a field of a later version is seen wherever it sits)."""
    hashed = next((HASHED[c.__name__] for c in type(model).__mro__ if c.__name__ in HASHED), frozenset())
    fields = type(model).model_fields
    out = {}
    for name, dumped in model.model_dump(mode="json").items():
        field, value = fields.get(name), getattr(model, name, None)
        if field is not None and name not in hashed and _same(value, field.get_default(call_default_factory=True)):
            continue
        out[name] = _canonical_value(value, dumped)
    return out


def _same(value: Any, default: Any) -> bool:
    """Whether a field's value is its default; a spec by what it hashes (a spec of a later version, with
    more fields at their defaults, is the same)."""
    if isinstance(value, BaseModel) and isinstance(default, BaseModel):
        return _canonical(value) == _canonical(default)
    return value == default


def _canonical_value(value: Any, dumped: Any) -> Any:
    if isinstance(value, BaseModel):
        return _canonical(value)
    if isinstance(value, (list, tuple)) and isinstance(dumped, list) and len(value) == len(dumped):
        return [_canonical_value(v, d) for v, d in zip(value, dumped)]
    return dumped
