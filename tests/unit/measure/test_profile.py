"""`autosync profile`: real round trips measured on worker processes, and the cluster model fitted to them."""

from __future__ import annotations

import csv
import json

import pytest
import yaml

from autosync.core.job import load_job
from autosync.core.job import job_from_dict
from autosync.measure.calibration import CLOSE_ENOUGH
from autosync.measure.profile import (
    Sample, ServerCosts, fit_cluster, fit_units, measure_server, time_scale, transfer_from_rounds,
)
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


def test_the_server_costs_go_into_the_cluster_and_out_of_communication():
    server = ServerCosts(apply_seconds=2e-4, transfer_seconds=1e-4, model_bytes=4000)
    cluster = fit_cluster(JOB, _samples(lambda b: 1e-4 * b), server)
    assert cluster["server"] == {"bandwidth": pytest.approx(4e7), "model_bytes": 4000, "apply_seconds": 2e-4}
    # worker p's 1 ms outside the kernel held its pull behind p others' and its own pull and push: (p + 2) 0.1 ms
    assert cluster["communication_seconds"] == pytest.approx(1e-3 - 3.5e-4)
    job_from_dict({**JOB.model_dump(mode="json"), "cluster": {**cluster, "round_trip": {"kind": "deterministic"}}})


def test_the_distributed_transport_is_timed_by_each_ranks_first_task_of_a_round():
    # 2 ranks: workers 0 and 1 are each rank's first task; 2 and 3 wait behind them and do not count
    samples = [Sample(w, 8, r, 1e-3, 1e-3 + (0.004 + 0.001 * r if w < 2 else 0.05)) for w in range(4) for r in range(3)]
    server = transfer_from_rounds(ServerCosts(2e-4, 1e-6, 4000), samples, ranks=2)
    assert server.transfer_seconds == pytest.approx(0.0025)  # half the median round trip outside the kernel
    assert server.apply_seconds == 2e-4 and server.bandwidth == pytest.approx(4000 / 0.0025)


def test_the_server_is_timed_on_the_model():
    import torch

    costs = measure_server(JOB, torch.zeros(250_000), repeats=5)
    assert costs.model_bytes == 1_000_000 and costs.apply_seconds > 0 and costs.transfer_seconds > 0
    assert costs.bandwidth == pytest.approx(1e6 / costs.transfer_seconds)


def test_a_fixed_cost_per_task_is_fitted_as_the_flat_then_linear_model():
    cluster = fit_cluster(JOB, _samples(lambda b: 5e-3 + 1e-5 * (b - 8)))
    c = cluster["compute"]
    assert c["model"] == "gpu" and c["saturation_batch"] == 8
    assert c["launch_overhead"] == pytest.approx(6.25e-3, rel=0.02) and c["seconds_per_sample"] == pytest.approx(
        1.25e-5, rel=0.05)
    assert time_scale(JOB, cluster) < 0.1  # ms against the model's 0.5 s


def _queued_samples(kernel, overhead: float, tau: float, slow_process: int = 1) -> list[Sample]:
    """Eight workers on two processes (worker w on w % 2), process `slow_process` half as fast: each round's
    tasks are computed one after another per process, each paying `overhead` besides its kernel, after
    its parameters' pull (w + 1 transfers) and before its push (one more)."""
    out = []
    for b in (8, 16):
        for r in range(3):
            done = [0.0, 0.0]
            for w in range(8):
                t = kernel(b) * (2.0 if w % 2 == slow_process else 1.0)
                done[w % 2] = max(done[w % 2], (w + 1) * tau) + t + overhead * (2.0 if w % 2 == slow_process else 1.0)
                out.append(Sample(w, b, r, t, done[w % 2] + tau))
    return out


def test_worker_processes_are_fitted_as_compute_units_with_their_overhead_and_speeds():
    tau, overhead = 1e-5, 4e-4
    samples = _queued_samples(lambda b: 1e-4 * b, overhead, tau)
    units = fit_units(samples, 2, tau)
    assert units["count"] == 2 and units["compute"]["model"] == "gpu"
    assert units["speed_factors"] == pytest.approx([1.5, 0.75], rel=0.01)  # kernels 1x and 2x against their mean
    c = units["compute"]  # at speed 1 (the mean): 1.5e-4 per sample; the overhead, averaged, besides
    assert c["seconds_per_sample"] == pytest.approx(1.5e-4, rel=0.02)
    assert c["launch_overhead"] == pytest.approx(1.5e-4 * 8 + overhead, rel=0.35)
    scaled = fit_units(samples, 2, tau, scale=0.02)  # injected stragglers: in the job's seconds
    assert scaled["compute"]["seconds_per_sample"] == pytest.approx(c["seconds_per_sample"] / 0.02)


def test_a_job_fitted_with_compute_units_reproduces_the_queued_rounds():
    """The fitted cluster, simulated, takes a BSP round as long as the synthetic processes took: the
    slowest task of a round (the slow process's last) within 10%."""
    from autosync.engine import simulate
    from autosync.policies import BSP

    tau, overhead = 1e-5, 4e-4
    samples = _queued_samples(lambda b: 1e-4 * b, overhead, tau)
    server = ServerCosts(apply_seconds=0.0, transfer_seconds=tau, model_bytes=4000)
    job = small_job(cluster__n_workers=8, workload__batch_size=16)
    cluster = fit_cluster(job, samples, server, units=2)
    assert cluster["compute"] == {"model": "linear", "seconds_per_sample": 0.0}
    assert cluster["compute_units"]["count"] == 2 and cluster["round_trip"] == {"kind": "deterministic"}
    fitted = job_from_dict({**job.model_dump(mode="json"), "cluster": cluster, "budget": {"max_updates": 1}})
    round_time = simulate(fitted, BSP()).trace.column("updates", "time")[0]
    real = max(s.round_trip_seconds for s in samples if s.batch_size == 16)
    assert round_time == pytest.approx(real, rel=0.1)


@pytest.mark.slow
@pytest.mark.processes
def test_cli_profiles_real_processes_and_writes_a_job_that_tunes(tiny_job, tmp_path):
    proc = autosync("profile", str(tiny_job), "--rounds", "2", "--batch-sizes", "8,16", "--out", "prof", "--check",
                    "--check-updates", "10", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "simulation against real runs of 10 updates" in proc.stdout  # --check: the calibration, recorded
    assert (tmp_path / "prof" / "calibration.json").is_file()
    assert (tmp_path / "prof" / "profiled_job.yaml").read_text().startswith("# Calibrated against real runs")
    rows = list(csv.DictReader((tmp_path / "prof" / "profile.csv").open()))
    assert len(rows) == 4 * 2 * 2 and {r["worker"] for r in rows} == {"0", "1", "2", "3"}
    assert all(float(r["round_trip_seconds"]) >= float(r["compute_seconds"]) > 0 for r in rows)
    job = load_job(tmp_path / "prof" / "profiled_job.yaml")
    units = job.cluster.compute_units  # 2 worker processes (the default): two compute units
    assert units.count == 2 and len(units.speed_factors) == 2 and job.cluster.round_trip.kind == "deterministic"
    record = json.loads((tmp_path / "prof" / "calibration.json").read_text())  # what --check measured and fitted
    assert job.cluster.server.bandwidth > 0
    if record["server"] is None:  # nothing fitted: only where both runs already matched their simulation
        assert record["before"] and all(abs(r["ratio"] - 1.0) <= CLOSE_ENOUGH for r in record["before"])
        profiled = yaml.safe_load((tmp_path / "prof" / "cluster.yaml").read_text())["cluster"]
        assert job.cluster.server.apply_seconds == profiled["server"]["apply_seconds"]
    else:
        assert job.cluster.server.apply_seconds == record["server"]["apply_seconds"]
        assert job.cluster.server.gradient_seconds == record["server"]["gradient_seconds"]
    assert yaml.safe_load((tmp_path / "prof" / "cluster.yaml").read_text())["cluster"]["n_workers"] == 4
    run = autosync("run", str(tmp_path / "prof" / "profiled_job.yaml"), "--policy", "asp", "--out", "r", cwd=tmp_path)
    assert run.returncode == 0, run.stderr

    wrong = autosync("profile", str(tiny_job), "--backend", "simulator", cwd=tmp_path)
    no_traceback(wrong)
    assert wrong.returncode == 2 and "--backend must be processes or distributed for profile" in wrong.stderr
    for sizes in ("1", "99999999999999999999999"):  # the second: worker tracebacks, then exit 1
        bad = autosync("profile", str(tiny_job), "--batch-sizes", sizes, cwd=tmp_path)
        no_traceback(bad)
        assert bad.returncode == 2 and "--batch-sizes must be integers from 2 " in bad.stderr, bad.stderr
