"""Compute units in the cluster model: workers that share a worker process or a GPU queue behind each other."""

from __future__ import annotations

import pytest

from autosync.core.cluster import ComputeUnits
from autosync.engine import Simulator, simulate
from autosync.core.errors import UserError
from autosync.core.job import ComputeUnitsSpec, job_from_dict
from autosync.policies import ASP, BSP, BackupWorkers
from tests.conftest import small_job

ROUND_TRIP = 0.5  # seconds: batch 16 at 1/32 s per sample, no noise
UNIT = 0.1  # seconds of a unit's compute per gradient (batch 16)


def _job(n: int, units: dict | None, updates: int = 3, **cluster):
    return small_job(cluster__n_workers=n, cluster__round_trip={"kind": "deterministic"},
                     cluster__compute_units=units, budget={"max_updates": updates}, **cluster)


def _units(count: int, speeds: list[float] | None = None) -> dict:
    return {"count": count, "compute": {"model": "linear", "seconds_per_sample": UNIT / 16}, "speed_factors": speeds}


def test_no_units_leaves_runs_and_fingerprints_alone():
    plain = job_from_dict({"name": "x"})
    assert plain.cluster.compute_units is None
    assert plain.fingerprint() != job_from_dict({"name": "x", "cluster": {"compute_units": {"count": 2}}}).fingerprint()
    assert "compute_units" not in plain.model_dump(mode="json")["cluster"] or plain.fingerprint() == job_from_dict(
        {"name": "x", "cluster": {"compute_units": None}}).fingerprint()


def test_a_unit_computes_its_workers_one_after_another_in_dispatch_order():
    units = ComputeUnits(ComputeUnitsSpec(count=2, compute={"model": "linear", "seconds_per_sample": 0.01},
                                          speed_factors=[1.0, 0.5]))
    assert [units.unit_of(w) for w in range(5)] == [0, 1, 0, 1, 0]
    assert [units.compute(w, 0.0, 10) for w in range(4)] == pytest.approx([0.1, 0.2, 0.2, 0.4])
    assert units.compute(0, 1.0, 10) == pytest.approx(1.1)  # an idle unit starts at once
    units.delay_all(2.0)
    assert units.compute(1, 0.0, 10) == pytest.approx(2.6)  # the pause postponed the unit's queue


def test_a_barrier_waits_for_the_busiest_unit_when_the_units_are_the_bottleneck():
    """8 workers on 2 units: each unit computes 4 gradients in turn, 4 UNIT; a slow unit (speed 0.5) twice."""
    n, slow = 8, 0.05  # round trip shorter than the units' queue
    quick = small_job(cluster__n_workers=n, cluster__round_trip={"kind": "deterministic"},
                      cluster__compute={"model": "linear", "seconds_per_sample": slow / 16},
                      cluster__compute_units=_units(2), budget={"max_updates": 2})
    assert simulate(quick, BSP()).trace.column("updates", "time") == pytest.approx([4 * UNIT, 8 * UNIT])
    uneven = quick.model_copy(update={"cluster": quick.cluster.model_copy(update={
        "compute_units": ComputeUnitsSpec(**_units(2, [1.0, 0.5]))})})
    assert simulate(uneven, BSP()).trace.column("updates", "time") == pytest.approx([8 * UNIT, 16 * UNIT])


def test_a_round_trip_longer_than_the_queue_hides_it():
    """With the units idle enough, a gradient is ready one round trip after it starts, as without units."""
    n = 4
    with_units = simulate(_job(n, _units(2)), BSP()).trace.column("updates", "time")
    without = simulate(_job(n, None), BSP()).trace.column("updates", "time")
    assert with_units == pytest.approx(without)
    assert with_units == pytest.approx([ROUND_TRIP, 2 * ROUND_TRIP, 3 * ROUND_TRIP])


def test_updates_from_one_gradient_wait_for_the_leftover_task_the_unit_had_started():
    """Backup k = 1 on 4 workers and one unit with a round trip shorter than the unit's time: the tasks
    dispatched together are computed one after another, so the first update comes after one unit's time.
    At that instant the unit takes its next task (its turn is the update's instant: started), and the
    server gives up on the 3 stale ones; the 2 not started are answered at their turn without being
    computed, as a worker process skips them. The winner's next task, queued behind, waits for the one
    started: every next update comes 2 units' time later (4 if the stale tasks were computed). The queue,
    not the round trip, sets the rate."""
    job = small_job(cluster__n_workers=4, cluster__round_trip={"kind": "deterministic"},
                    cluster__compute={"model": "linear", "seconds_per_sample": 0.01 / 16},
                    cluster__compute_units=_units(1), budget={"max_updates": 6})
    times = simulate(job, BackupWorkers(k=1)).trace.column("updates", "time")
    assert times == pytest.approx([UNIT * (1 + 2 * i) for i in range(6)])


def test_asp_on_units_arrives_at_the_units_rate():
    job = small_job(cluster__n_workers=6, cluster__round_trip={"kind": "deterministic"},
                    cluster__compute={"model": "linear", "seconds_per_sample": 0.0},
                    cluster__compute_units=_units(3), budget={"max_updates": 30})
    times = simulate(job, ASP()).trace.column("updates", "time")
    assert times[-1] == pytest.approx(10 * UNIT)  # 30 gradients on 3 units, one UNIT each


def test_a_run_on_units_snapshots_and_resumes_bit_identically():
    job = _job(6, _units(2, [1.0, 0.7]), updates=12)
    whole = simulate(job, BackupWorkers(k=3))
    sim = Simulator(_job(6, _units(2, [1.0, 0.7]), updates=5), BackupWorkers(k=3))
    sim.run()
    resumed = Simulator.resume(sim.snapshot(), job).run_on()
    assert resumed.trace.column("updates", "time") == whole.trace.column("updates", "time")


def test_bad_units_are_one_line_errors():
    with pytest.raises(UserError, match="speed_factors must have count=2 entries, but got 3"):
        job_from_dict({"name": "x", "cluster": {"compute_units": {"count": 2, "speed_factors": [1, 1, 1]}}}, "job.yaml")
    with pytest.raises(UserError, match="count"):
        job_from_dict({"name": "x", "cluster": {"compute_units": {"count": 0}}}, "job.yaml")
