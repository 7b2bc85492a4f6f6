"""Tests against known answers: closed forms and equivalences the papers rely on."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from autosync.engine import simulate
from autosync.policies import ASP, BSP, SSP, BackupWorkers
from tests.conftest import small_job, torch_sgd_reference


def _iteration_times(result) -> np.ndarray:
    times = np.array([0.0] + result.trace.column("updates", "time"))
    return np.diff(times)


def test_bsp_iteration_time_is_slowest_round_trip_under_deterministic_times():
    speeds = [1.0, 0.5, 2.0, 0.25]
    job = small_job(cluster__round_trip={"kind": "deterministic"}, cluster__speed_factors=speeds,
                    cluster__communication_seconds=0.1)
    result = simulate(job, BSP())
    slowest = max(job.workload.batch_size * job.cluster.compute.seconds_per_sample / s for s in speeds) + 0.1
    assert np.allclose(_iteration_times(result), slowest)


def test_backup_k_equals_n_is_bsp_under_equal_round_trips():
    job = small_job(cluster__round_trip={"kind": "deterministic"})
    a, b = simulate(job, BSP()), simulate(job, BackupWorkers(k=4))
    assert torch.equal(a.final_params, b.final_params)
    assert a.trace.arrivals == b.trace.arrivals


@pytest.mark.slow
def test_backup_k_equals_n_gives_bsp_parameters_under_random_round_trips():
    job = small_job()
    a, b = simulate(job, BSP()), simulate(job, BackupWorkers(k=job.cluster.n_workers))
    assert torch.equal(a.final_params, b.final_params)


def test_asp_with_one_worker_is_sequential_sgd():
    job = small_job(cluster__n_workers=1, workload__optimizer={"lr": 0.1, "momentum": 0.9, "nesterov": True,
                                                              "weight_decay": 1e-3})
    result = simulate(job, ASP())
    assert torch.allclose(result.final_params, torch_sgd_reference(job), atol=1e-5, rtol=1e-5)
    assert set(result.trace.column("updates", "staleness")[0]) == {0}


@pytest.mark.slow
def test_mean_bsp_iteration_time_matches_harmonic_number():
    # Round trips a + Exp(mean mu): the max of n exponentials has mean mu * H_n.
    n, alpha, updates = 8, 0.6, 3000
    job = small_job(cluster__n_workers=n, cluster__round_trip={"kind": "shifted_exponential", "alpha": alpha},
                    cluster__compute={"model": "linear", "seconds_per_sample": 1 / 16},
                    budget={"max_updates": updates}, workload__evaluation={"every_seconds": 1e6})
    times = _iteration_times(simulate(job, BSP()))
    harmonic = sum(1 / i for i in range(1, n + 1))
    expected = (1 - alpha) + alpha * harmonic
    # Var(max of n Exp(1)) = sum 1/i^2, so the standard error of the mean is alpha * sqrt(that / updates).
    stderr = alpha * math.sqrt(sum(1 / i ** 2 for i in range(1, n + 1)) / updates)
    assert abs(times.mean() - expected) < 4 * stderr


def test_backup_workers_discard_late_gradients_and_restart_on_newest_version():
    job = small_job()
    result = simulate(job, BackupWorkers(k=2))
    per_update = result.trace.column("updates", "n_aggregated")
    assert set(per_update) == {2}
    assert set(s for row in result.trace.column("updates", "staleness") for s in row) == {0}
    discarded = [a for a in result.trace.arrivals if not a[5]]
    assert discarded, "with k=2 of 4 some gradients must arrive late"
    # Push & wait: a worker's next task after a discarded gradient is on a newer version.
    by_worker: dict[int, list[tuple]] = {}
    for a in result.trace.arrivals:
        by_worker.setdefault(a[1], []).append(a)
    for rows in by_worker.values():
        for before, after in zip(rows, rows[1:]):
            assert after[3] > before[3]


def test_ssp_bounds_how_far_a_worker_runs_ahead():
    s = 1
    job = small_job(cluster__speed_factors=[4.0, 1.0, 1.0, 0.25], budget={"max_updates": 200})
    result = simulate(job, SSP(staleness=s))
    applied = [0] * 4
    for row in result.trace.updates:
        for w in row[6]:
            applied[w] += 1
            # a worker can only have started this task if it was within s of the slowest before it
            assert applied[w] - 1 - min(applied) <= s + 1


def test_asp_staleness_grows_with_workers():
    few = simulate(small_job(cluster__n_workers=2), ASP())
    many = simulate(small_job(cluster__n_workers=8), ASP())
    mean = lambda r: np.mean([s for row in r.trace.column("updates", "staleness") for s in row])
    assert mean(many) > mean(few) > 0


def test_a_schedule_pause_delays_everything_in_flight():
    from autosync.policies import Policy, Schedule, Strategies
    from autosync.policies._barriers import FastestK

    class PauseOnce(Schedule):
        def after_update(self, server, strategies, stats, progress, update_state):
            return 10.0 if server.version == 1 else None

    class PausedBSP(Policy):
        name = "paused"

        def strategies(self, n_workers, batch_size):
            return Strategies(barrier=FastestK(), schedule=PauseOnce())

    job = small_job(cluster__round_trip={"kind": "deterministic"}, budget={"max_updates": 3})
    plain = _iteration_times(simulate(job, BSP()))
    paused = _iteration_times(simulate(job, PausedBSP()))
    assert paused == pytest.approx(plain + [10.0, 0.0, 0.0])
    arrivals = [a[0] for a in simulate(job, PausedBSP()).trace.arrivals]
    assert arrivals == sorted(arrivals)
