"""Repeat a logged run exactly: its job, policy and seed from summary.json, its arrivals from trace.json.

The rerun runs in this process on the per-worker kernel with one intra-op thread, the kernel and
setting of the worker processes, under `LoggedClock`: the same arrivals at the same times give the
same decisions, the same gradients and so bit-identical parameters when both runs are on the CPU (a
GPU on either side: equal up to the non-determinism of its kernels). Any difference in what the run
dispatches or decides stops the rerun at the first arrival that differs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from autosync.catalog import policy_from_dict
from autosync.engine.backends import check_device
from autosync.engine.clock import LoggedClock
from autosync.engine.drivers import PerWorkerDriver
from autosync.engine.simulator import ProgressFn, RunResult, Simulator
from autosync.engine.trace import ARRIVAL_COLUMNS, TRACE_FILES
from autosync.core.errors import UserError
from autosync.core.loader import short_repr
from autosync.core.job import JobSpec, job_from_dict
from autosync.core.record_checks import is_number, is_whole
from autosync.workloads.build import build_workload

PARAMS_FILE = "final_params.pt"  # a run's final parameters, which a rerun compares with its own
SUMMARY_FILE = "summary.json"  # a run's summary, job and execution, which a rerun reads its job from
BUFFERS_FILE = "final_buffers.pt"  # the model's final buffers (BatchNorm statistics), for models that have them


@dataclass
class LoggedRun:
    """What a run directory holds: its job, policy, arrival log, final parameters and device."""

    directory: Path
    job: JobSpec
    policy: Any
    arrivals: list[list[Any]]  # rows of ARRIVAL_COLUMNS
    final_params: torch.Tensor
    device: str
    final_buffers: torch.Tensor | None = None  # the model's final buffers, for a model that has them

    @classmethod
    def load(cls, run_dir: Path) -> "LoggedRun":
        """Read and check `run_dir` (written by `autosync run`); any problem is a one-line error naming the file."""
        summary = _read_json(run_dir / SUMMARY_FILE)
        arrivals = _read_json(run_dir / TRACE_FILES[0]).get("arrivals")
        params_path = run_dir / PARAMS_FILE
        if not isinstance(arrivals, list) or "job_spec" not in summary or "policy" not in summary:
            raise UserError(f"{run_dir}: not a run directory written by `autosync run` (summary.json needs job_spec "
                            "and policy, trace.json needs arrivals)")
        execution = summary.get("execution", {})
        if not isinstance(execution, dict):
            raise UserError(f"{run_dir / 'summary.json'}: execution must be an object (backend, device), but got "
                            f"{short_repr(execution)}")
        backend = execution.get("backend")
        if backend == "simulator":
            raise UserError(f"{run_dir}: a run of the simulator, which computes its workers' gradients together: "
                            "`autosync rerun` replays a run of --backend processes from its arrival log (the "
                            "simulator gives the same run again from the same job and seed: `autosync run`)")
        logged = summary.get("gradients_arrived")
        if isinstance(logged, int) and not isinstance(logged, bool) and len(arrivals) != logged:
            raise UserError(f"{run_dir / 'trace.json'}: holds {len(arrivals)} arrivals, but summary.json counts "
                            f"{logged}: the log is cut short or from another run (run the job again)")
        if not params_path.is_file():
            raise UserError(f"{params_path}: file not found (runs write it since the real-time clock; run again)")
        job = job_from_dict(summary["job_spec"], _job_source(run_dir, summary))
        try:
            policy = policy_from_dict(summary["policy"])
            rows = [[r[c] for c in ARRIVAL_COLUMNS] for r in arrivals]
            for i, row in enumerate(rows):
                _check_arrival(i, row)
        except (KeyError, TypeError, ValueError) as exc:
            raise UserError(f"{run_dir}: corrupt run log ({type(exc).__name__}: {exc})") from None
        params = _load_tensor(params_path, "the final parameters")
        buffers_path = run_dir / BUFFERS_FILE
        buffers = _load_tensor(buffers_path, "the final buffers") if buffers_path.is_file() else None
        device = str(execution.get("device", "cpu"))
        return cls(run_dir, job, policy, rows, params, device, buffers)


@dataclass
class Rerun:
    """A replayed run and how far its final parameters are from the logged ones."""

    result: RunResult
    logged_params: torch.Tensor
    max_abs_difference: float  # over the parameters and, for a model that has them, the buffers
    bit_reproducible: bool  # both runs computed on the CPU: any difference is a bug, not kernel noise
    logged_buffers: torch.Tensor | None = None

    @property
    def identical(self) -> bool:
        same_buffers = self.logged_buffers is None or (
            self.result.final_buffers is not None and torch.equal(self.result.final_buffers, self.logged_buffers))
        return torch.equal(self.result.final_params, self.logged_params) and same_buffers


def load_run(run_dir: Path, device: str = "cpu") -> LoggedRun:
    """The run `autosync run` wrote in `run_dir`, to replay on `device` (checked first: `rerun`)."""
    check_device(device)
    return LoggedRun.load(run_dir)


def rerun(logged: LoggedRun, device: str = "cpu", progress: ProgressFn | None = None) -> Rerun:
    """Replay `logged` in this process on `device`; `progress` as for the simulator."""
    job = logged.job
    workload = build_workload(job, device=device)
    result = Simulator(job, logged.policy, workload=workload, progress=progress,
                       driver=PerWorkerDriver(workload, job.seed),
                       clock=LoggedClock(logged.arrivals, source=str(logged.directory / TRACE_FILES[0])),
                       threads=1).run()  # the worker processes' setting: the same kernel gives the same bits
    final = result.final_params.detach().cpu()
    if final.shape != logged.final_params.shape:
        raise UserError(f"{logged.directory / PARAMS_FILE}: holds {logged.final_params.numel()} parameters, but the "
                        f"job's model has {final.numel()}")
    result.final_params = final
    difference = float((final - logged.final_params).abs().max()) if final.numel() else 0.0
    if logged.final_buffers is not None and result.final_buffers is not None:
        result.final_buffers = result.final_buffers.detach().cpu()
        if result.final_buffers.shape != logged.final_buffers.shape:
            raise UserError(f"{logged.directory / BUFFERS_FILE}: holds {logged.final_buffers.numel()} buffer values, "
                            f"but the job's model has {result.final_buffers.numel()}")
        difference = max(difference, float((result.final_buffers - logged.final_buffers).abs().max()))
    return Rerun(result, logged.final_params, difference, logged_buffers=logged.final_buffers,
                 bit_reproducible=logged.device == "cpu" and device == "cpu")


def _check_arrival(index: int, row: list[Any]) -> None:
    """ValueError naming the arrival (a row of `ARRIVAL_COLUMNS`) whose time is not a number >= 0 or whose
    worker, task, version or batch size is not a whole number >= 0 (the replay's clock reads them as such)."""
    time, *counts, _accepted = row
    if not is_number(time) or not time >= 0:
        raise ValueError(f"arrivals.{index}.time must be a number >= 0, but got {short_repr(time)}")
    for column, value in zip(ARRIVAL_COLUMNS[1:-1], counts):
        if not is_whole(value) or value < 0:
            raise ValueError(f"arrivals.{index}.{column} must be a whole number >= 0, but got {short_repr(value)}")


def _job_source(run_dir: Path, summary: dict) -> str:
    """Where the run's job is read from: the job file it was run from where it names the user's code and that
    file is still there (its folder holds the code, which a run folder does not: the rerun said "No module
    named ..."), else the run's summary.json."""
    job_file = summary.get("job_file")
    return job_file if isinstance(job_file, str) and Path(job_file).is_file() else str(run_dir / SUMMARY_FILE)


def _load_tensor(path: Path, what: str) -> torch.Tensor:
    """One tensor saved by `autosync run`; a damaged or foreign file is a one-line error naming it."""
    try:
        value = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises several types for a damaged file
        raise UserError(f"{path}: not a tensor saved by `autosync run` ({type(exc).__name__}); "
                        "run the job again to rewrite it") from None
    if not isinstance(value, torch.Tensor):
        raise UserError(f"{path}: expected {what} as one tensor, but got {type(value).__name__}")
    return value


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise UserError(f"{path}: file not found (give the directory `autosync run` wrote)") from None
    except (OSError, json.JSONDecodeError) as exc:
        raise UserError(f"{path}: not readable JSON ({exc})") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a JSON object, but got {type(data).__name__}")
    return data
