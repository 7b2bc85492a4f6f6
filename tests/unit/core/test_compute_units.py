"""Compute units in the cluster model: workers that share a worker process or a GPU queue behind each other."""

from __future__ import annotations

import math
import random

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


def test_backup_k_on_two_units_skips_the_leftover_tasks_not_started():
    """Backup k = 2 on 6 workers and 2 units (workers 0, 2, 4 on unit 0; 1, 3, 5 on unit 1), UNIT per task,
    round trips of 0.01 but worker 5's 0.35. Hand-computed event order:
    - t = 0: all start on version 0; unit 0 computes w0 [0, .1], then w2, w4; unit 1 w1, w3, w5.
    - t = .1: w0 and w1 arrive: update 1. The server gives up on w2..w5; the units take w2 and w3 at this
      instant (started: computed to .2), and will skip w4 and w5. w0 and w1 start on version 1, queued.
    - t = .2: w2 and w3 arrive, stale; w4's turn: skipped, it arrives at once, stale. w5's turn too, but its
      round trip holds it to .35. The units take w0 and w1 [.2, .3]; w2, w3, w4 start again behind them.
    - t = .3: w0 and w1 arrive: update 2, given up on: w2, w3 (started at .3), w4 (skipped at .4).
    - t = .35: w5 arrives, stale, and starts again behind w1. t = .4: w2, w3 and w4 arrive, stale.
    - t = .5: w0 and w1 arrive: update 3.
    Computing every stale task (as the model did before the server gave up on them) would put the
    updates at .1, .4, .7: the queue's leftover work costs a unit's task per round here, not two."""
    job = small_job(cluster__n_workers=6, cluster__round_trip={"kind": "deterministic"},
                    cluster__compute={"model": "linear", "seconds_per_sample": 0.01 / 16},
                    cluster__speed_factors=[1, 1, 1, 1, 1, 1 / 35],
                    cluster__compute_units=_units(2), budget={"max_updates": 3})
    trace = simulate(job, BackupWorkers(k=2)).trace
    assert trace.column("updates", "time") == pytest.approx([0.1, 0.3, 0.5])
    expected = [(0.1, 0, 0, 0, True), (0.1, 1, 0, 0, True), (0.2, 2, 0, 0, False), (0.2, 3, 0, 0, False),
                (0.2, 4, 0, 0, False), (0.3, 0, 1, 1, True), (0.3, 1, 1, 1, True), (0.35, 5, 0, 0, False),
                (0.4, 2, 1, 1, False), (0.4, 3, 1, 1, False), (0.4, 4, 1, 1, False), (0.5, 0, 2, 2, True),
                (0.5, 1, 2, 2, True)]
    got = [(t, w, i, v, ok) for t, w, i, v, _, ok in trace.arrivals]
    assert [a[1:] for a in got] == [e[1:] for e in expected]
    assert [a[0] for a in got] == pytest.approx([e[0] for e in expected])


def test_the_queue_gives_the_booked_times_to_the_bit_when_nothing_is_dropped():
    """Starting queued tasks at their turn (`start_next`) and booking them at dispatch (`compute`) are the
    same first come, first served: the same ready times, to the bit, whatever the speeds and batches."""
    rng = random.Random(0)
    spec = ComputeUnitsSpec(count=3, compute={"model": "gpu", "launch_overhead": 0.013, "saturation_batch": 8,
                                              "seconds_per_sample": 0.0017}, speed_factors=[1.0, 0.7, 1.3])
    booked, queued = ComputeUnits(spec), ComputeUnits(spec)
    expected, got, now = [], [], 0.0
    for index in range(200):
        now += rng.expovariate(20.0)
        worker, batch, trip = rng.randrange(7), rng.choice([4, 8, 16, 33]), rng.expovariate(5.0)
        steps = rng.choice([1, 1, 2])
        expected.append((max(now + trip, booked.compute(worker, now, batch, steps)), worker, index))
        queued.enqueue(worker, index, now, trip, batch, steps)
        while (started := queued.start_next(now)) is not None:
            got.append(started)
    while (started := queued.start_next(math.inf)) is not None:
        got.append(started)
    assert sorted(got, key=lambda e: e[2]) == expected


def test_with_a_unit_per_worker_the_server_gives_up_on_nothing():
    """A unit per worker starts every task at once: there is no queue to skip, and the server keeps the
    behaviour of a job without units (a stale gradient is discarded on arrival, as before)."""
    job = _job(4, _units(4), updates=6)
    sim = Simulator(job, BackupWorkers(k=2))
    sim.run()
    assert sim.server.cancels is False and not sim.server.cancelled
    shared = Simulator(_job(4, _units(2), updates=6), BackupWorkers(k=2))
    shared.run()
    assert shared.server.cancels is True


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
