"""`autosync profile`: real round trips measured on worker processes, and the cluster model fitted to them."""

from __future__ import annotations

import csv

import pytest
import yaml

from autosync.job import load_job
from autosync.profiling import Sample, fit_cluster, time_scale
from tests.conftest import autosync, no_traceback, small_job

JOB = small_job()


def _samples(compute) -> list[Sample]:
    """Four workers, worker 3 half as fast, each round trip 1 ms longer than its compute."""
    out = []
    for b in (8, 16, 32):
        for r in range(3):
            for w in range(4):
                t = compute(b) * (2.0 if w == 3 else 1.0) * (1.0 + 0.01 * (r - 1))
                out.append(Sample(w, b, r, t, t + 1e-3))
    return out


def test_a_linear_machine_is_fitted_with_its_speed_factors_and_communication():
    cluster = fit_cluster(JOB, _samples(lambda b: 1e-4 * b))
    assert cluster["compute"]["model"] == "linear"
    assert cluster["compute"]["seconds_per_sample"] == pytest.approx(1.25e-4, rel=0.01)  # workers 1, 1, 1, 2: mean 1.25
    # against the mean time 1.25 units: the fast workers are 1.25x, the slow one 0.625x
    assert cluster["speed_factors"] == pytest.approx([1.25, 1.25, 1.25, 0.625], rel=0.01)
    assert cluster["communication_seconds"] == pytest.approx(1e-3)


def test_a_fixed_cost_per_task_is_fitted_as_the_flat_then_linear_model():
    cluster = fit_cluster(JOB, _samples(lambda b: 5e-3 + 1e-5 * (b - 8)))
    c = cluster["compute"]
    assert c["model"] == "gpu" and c["saturation_batch"] == 8
    assert c["launch_overhead"] == pytest.approx(6.25e-3, rel=0.02) and c["seconds_per_sample"] == pytest.approx(
        1.25e-5, rel=0.05)
    assert time_scale(JOB, cluster) < 0.1  # ms against the model's 0.5 s


def test_cli_profiles_real_processes_and_writes_a_job_that_tunes(tiny_job, tmp_path):
    proc = autosync("profile", str(tiny_job), "--rounds", "2", "--batch-sizes", "8,16", "--out", "prof", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    rows = list(csv.DictReader((tmp_path / "prof" / "profile.csv").open()))
    assert len(rows) == 4 * 2 * 2 and {r["worker"] for r in rows} == {"0", "1", "2", "3"}
    assert all(float(r["round_trip_seconds"]) >= float(r["compute_seconds"]) > 0 for r in rows)
    job = load_job(tmp_path / "prof" / "profiled_job.yaml")
    assert job.cluster.round_trip.kind == "trace" and len(job.cluster.speed_factors) == 4
    assert yaml.safe_load((tmp_path / "prof" / "cluster.yaml").read_text())["cluster"]["n_workers"] == 4
    run = autosync("run", str(tmp_path / "prof" / "profiled_job.yaml"), "--policy", "asp", "--out", "r", cwd=tmp_path)
    assert run.returncode == 0, run.stderr

    bad = autosync("profile", str(tiny_job), "--batch-sizes", "1", cwd=tmp_path)
    no_traceback(bad)
    assert bad.returncode == 2 and "--batch-sizes must be integers >= 2" in bad.stderr
