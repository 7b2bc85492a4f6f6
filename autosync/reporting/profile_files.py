"""`autosync profile`'s files: the timed rounds (profile.csv), the per-task multipliers (round_trips.csv),
the fitted cluster (cluster.yaml) and the job with it (profiled_job.yaml)."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Sequence

import yaml

from autosync.core.job import JobSpec, job_from_dict
from autosync.measure.profile import TRACE_FILE, Sample, multipliers, time_scale


def write_profile(job: JobSpec, samples: Sequence[Sample], cluster: dict, out: Path) -> list[Path]:
    """profile.csv, round_trips.csv, cluster.yaml and profiled_job.yaml in `out`; returns their paths."""
    out.mkdir(parents=True, exist_ok=True)
    profile, trace = out / "profile.csv", out / TRACE_FILE
    with profile.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["worker", "batch_size", "round", "compute_seconds", "round_trip_seconds",
                         "communication_seconds"])
        for s in samples:
            writer.writerow([s.worker, s.batch_size, s.round, f"{s.compute_seconds:.6g}", f"{s.round_trip_seconds:.6g}",
                             f"{s.communication_seconds:.6g}"])
    with trace.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["multiplier"])
        for m in multipliers(samples):
            writer.writerow([f"{m:.6g}"])
    cluster_file = out / "cluster.yaml"
    cluster_file.write_text(yaml.safe_dump({"cluster": cluster}, sort_keys=False))
    data = job.model_dump(mode="json")
    data["cluster"] = cluster
    data["name"] = f"{job.name}-profiled"
    scale = time_scale(job, cluster)
    data["workload"]["evaluation"]["every_seconds"] *= scale
    if data["budget"]["max_virtual_seconds"] is not None:
        data["budget"]["max_virtual_seconds"] *= scale
    job_from_dict(data, str(out / "profiled_job.yaml"))  # the fitted cluster must be a valid job
    job_file = out / "profiled_job.yaml"
    job_file.write_text(yaml.safe_dump(data, sort_keys=False))
    return [profile, trace, cluster_file, job_file]
