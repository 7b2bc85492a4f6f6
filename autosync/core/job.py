"""Job files: a YAML job file (or a mapping) loaded and validated into a `JobSpec`, every problem reported at
once in one line each, and the files the job names checked before training starts.

The schema itself is `autosync.core.job_schema` (its names are importable from here too), the YAML loader
and the error messages `autosync.core.loader`, the cache key `autosync.core.fingerprint`. Loading and
validating a job imports neither torch, optuna nor cvxpy, so ``autosync validate`` and ``autosync --help``
stay fast.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from autosync.core.errors import JobFileError, UserError
from autosync.core.job_schema import (  # noqa: F401  the schema, importable from here too
    BudgetSpec, ClusterSpec, ComputeSpec, ComputeUnitsSpec, DatasetName, DatasetSpec, DeterministicRTT,
    EvaluationSpec, FACTORY_PATTERN, GPUCompute, GammaRTT, JobSpec, LRScheduleSpec, LinearCompute, LossChoice,
    LossSpec, MAX_NAME, MAX_SEED, MAX_SIZE, ModelSpec, OptimizerSpec, ParetoRTT, ResourceSpec, RoundTripSpec,
    ServerSpec, ShiftedExponentialRTT, SlowdownSpec, TORCHVISION_DATASETS, TargetSpec, TraceRTT, UniformRTT,
    WorkloadSpec,
)
from autosync.core.loader import describe_error, read_yaml_file, short_repr
from autosync.core.traces import TraceProblem, read_trace
from autosync.data import DEFAULT_JOB_PATH

__all__ = ["load_job", "job_from_dict", "add_import_root", "BudgetSpec", "ClusterSpec", "ComputeSpec",
           "ComputeUnitsSpec", "DatasetName", "DatasetSpec", "DeterministicRTT", "EvaluationSpec", "FACTORY_PATTERN",
           "GPUCompute", "GammaRTT", "JobSpec", "LRScheduleSpec", "LinearCompute", "LossChoice", "LossSpec",
           "MAX_NAME", "MAX_SEED", "MAX_SIZE", "ModelSpec", "OptimizerSpec", "ParetoRTT", "ResourceSpec",
           "RoundTripSpec", "ServerSpec", "ShiftedExponentialRTT", "SlowdownSpec", "TORCHVISION_DATASETS",
           "TargetSpec", "TraceRTT", "UniformRTT", "WorkloadSpec"]


def job_from_dict(data: Any, source: str = "<job>") -> JobSpec:
    """Validate a mapping into a JobSpec, raising JobFileError with every problem at once (`source`: the
    label its messages and the job name where it came from; None data: every field's default)."""
    if isinstance(source, os.PathLike):
        source = os.fspath(source)
    if not isinstance(source, str):
        raise UserError(f"source must be a text labelling where the job came from, but got {short_repr(source)} "
                        "(the job's name is a field of `data`)")
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise JobFileError(source, [f"the top level must be a mapping of fields, but got {type(data).__name__}"])
    try:
        return JobSpec.model_validate(data).with_source(source)
    except ValidationError as exc:
        raise JobFileError(source, [describe_error(e) for e in exc.errors()]) from None


def load_job(path: str | Path | None = None, overrides: dict[str, Any] | None = None) -> JobSpec:
    """Load and validate a job file (the embedded default when ``path`` is None).

    Args:
        path: a YAML job file, or None for the embedded default digits job.
        overrides: top-level fields to replace after loading (for example ``{"seed": 3}``).
    """
    if path is not None and not isinstance(path, (str, os.PathLike)):
        raise UserError(f"a job file must be a path, but got {type(path).__name__}"
                        + (" (job_from_dict makes a job of a dict)" if isinstance(path, dict) else ""))
    file = Path(path) if path is not None else DEFAULT_JOB_PATH
    data = read_yaml_file(file, JobFileError)
    if data is None:  # empty or only comments: most likely saved by mistake, never "the default job"
        raise JobFileError(str(file), ["the file is empty (or only comments); a job sets at least its name, "
                                       "e.g. `name: my_job` to train the default workload"])
    if overrides is not None and not isinstance(overrides, dict):  # a TypeError from dict.update
        raise UserError(f"overrides must be a dict of top-level job fields, but got {overrides!r}")
    if overrides and isinstance(data, dict):  # anything else is refused by job_from_dict
        data = dict(data)
        data.update(overrides)
    if is_family_data(data):
        raise JobFileError(str(file), ["a job-family file (it draws from `workloads`), but a job file is needed "
                                       "(`autosync family` writes its jobs as job files)"])
    spec = job_from_dict(data, str(file))
    _check_files_exist(spec, file)
    if spec.uses_user_code:
        add_import_root(file.parent)
    return spec


def is_family_data(data: Any) -> bool:
    """Whether a YAML file's `data` is a job family rather than a job: a mapping that draws from `workloads`
    and has no `workload` of its own."""
    return isinstance(data, dict) and "workloads" in data and "workload" not in data


# the job files' folders on the search path (`add_import_root`), this process's and its parent's: a spawned
# child inherits the environment with the search path, and so tells a job's folder from an installed package's
IMPORT_ROOTS_VARIABLE = "AUTOSYNC_IMPORT_ROOTS"
IMPORT_ROOTS: set[str] = set(filter(None, os.environ.get(IMPORT_ROOTS_VARIABLE, "").split(os.pathsep)))


def add_import_root(directory: Path) -> None:
    """Let factories import from `directory` (a job file's folder), after the installed packages.

    Worker processes started with `spawn` inherit the search path and `IMPORT_ROOTS_VARIABLE`, so they import
    the same code.
    """
    import sys

    root = str(directory.resolve())
    if root not in IMPORT_ROOTS:
        IMPORT_ROOTS.add(root)
        os.environ[IMPORT_ROOTS_VARIABLE] = os.pathsep.join(sorted(IMPORT_ROOTS))
    if root not in sys.path:
        sys.path.append(root)


def _check_files_exist(spec: JobSpec, file: Path) -> None:
    """The files a job names, read now rather than once training has started: a round-trip trace (read
    whole, each value checked) and a torchvision dataset's root when nothing may be downloaded there."""
    rt = spec.cluster.round_trip
    if isinstance(rt, TraceRTT):
        trace = Path(rt.path)
        if not trace.is_absolute():
            trace = (file.parent / trace).resolve()
            spec.cluster.round_trip = rt.model_copy(update={"path": str(trace)})
        if not trace.is_file():
            raise JobFileError(str(file), [f"cluster.round_trip.path must name an existing CSV file, "
                                           f"but got {rt.path!r}"])
        try:
            read_trace(str(trace), rt.column)
        except TraceProblem as exc:
            raise JobFileError(str(file), [f"cluster.round_trip.path {rt.path}: {exc}"]) from None
    ds = spec.workload.dataset
    if ds.factory is None and ds.name in TORCHVISION_DATASETS and not ds.download and not Path(ds.root or "").is_dir():
        raise JobFileError(str(file), [f"workload.dataset.root must be an existing directory (download is false), "
                                       f"but got {ds.root!r}"])
