"""Repeat a logged run exactly: its job, policy and seed from summary.json, its arrivals from trace.json.

The replay runs in this process on the per-worker kernel with one intra-op thread, the kernel and
setting of the worker processes, under `ReplayClock`: the same arrivals at the same times give the
same decisions, the same gradients and so bit-identical parameters on the CPU (on a GPU, equal up to
the non-determinism of its kernels). Any difference in what the run dispatches or decides stops the
replay at the first arrival that differs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch

from autosync.engine.clock import ReplayClock
from autosync.engine.simulator import RunResult, Simulator
from autosync.errors import UserError
from autosync.job import job_from_dict

PARAMS_FILE = "final_params.pt"


@dataclass
class Rerun:
    """A replayed run and how far its final parameters are from the logged ones."""

    result: RunResult
    logged_params: torch.Tensor
    max_abs_difference: float

    @property
    def identical(self) -> bool:
        return torch.equal(self.result.final_params, self.logged_params)


def rerun(run_dir: Path, device: str = "cpu") -> Rerun:
    """Replay the run logged in `run_dir` (written by `autosync run`)."""
    from autosync.catalog import policy_from_dict
    from autosync.engine.drivers import PerWorkerDriver
    from autosync.workloads.workload import Workload

    summary = _read_json(run_dir / "summary.json")
    arrivals = _read_json(run_dir / "trace.json").get("arrivals")
    params_path = run_dir / PARAMS_FILE
    if not isinstance(arrivals, list) or "job_spec" not in summary or "policy" not in summary:
        raise UserError(f"{run_dir}: not a run directory written by `autosync run` (summary.json needs job_spec "
                        "and policy, trace.json needs arrivals)")
    if not params_path.is_file():
        raise UserError(f"{params_path}: file not found (runs write it since the real-time clock; run again)")
    job = job_from_dict(summary["job_spec"], str(run_dir / "summary.json"))
    try:
        policy = policy_from_dict(summary["policy"])
        rows = [[r[c] for c in ("time", "worker", "task", "version", "batch_size", "accepted")] for r in arrivals]
    except (KeyError, TypeError, ValueError) as exc:
        raise UserError(f"{run_dir}: corrupt run log ({type(exc).__name__}: {exc})") from None
    logged = torch.load(params_path, map_location="cpu", weights_only=True)
    workload = Workload(job, device=device)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the worker processes' setting: the same kernel gives the same bits
    try:
        result = Simulator(job, policy, workload=workload, driver=PerWorkerDriver(workload, job.seed),
                           clock=ReplayClock(rows, source=str(run_dir / "trace.json"))).run()
    finally:
        torch.set_num_threads(threads)
    final = result.final_params.detach().cpu()
    if final.shape != logged.shape:
        raise UserError(f"{params_path}: holds {logged.numel()} parameters, but the job's model has {final.numel()}")
    result.final_params = final
    return Rerun(result, logged, float((final - logged).abs().max()) if final.numel() else 0.0)


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
