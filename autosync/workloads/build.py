"""A job's workload, built and, when it runs the user's code, checked: `build_workload`, the one way the
engine, the search and the API get one.

`Workload`'s constructor only builds; the checks (`autosync.workloads.checks`) read a built workload and
return what they found, and the workload takes the paths they found here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from autosync.core.job import JobSpec
from autosync.workloads.checks import check_user_workload
from autosync.workloads.workload import Workload

if TYPE_CHECKING:
    from autosync.workloads.datasets import Dataset


def build_workload(job: JobSpec, dataset: "Dataset | None" = None, device: str | torch.device = "cpu") -> Workload:
    """The job's workload (`Workload`: dataset, model, loss); one that runs the user's model, dataset or loss
    is checked on a batch first, each problem a one-line JobFileError naming the job file and field, and
    takes the paths the checks found (randomness seeded per task, vmap batching, fused workers)."""
    workload = Workload(job, dataset, device)
    if job.uses_user_code:
        paths = check_user_workload(workload, job.source)
        workload.random, workload.batchable = paths.random, paths.batchable
        workload.independent_samples, workload.norm_groups = paths.independent_samples, paths.norm_groups
    return workload
