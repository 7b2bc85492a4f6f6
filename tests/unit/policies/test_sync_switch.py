"""Sync-Switch at run time: protocol, configuration and straggler policies (its sec. IV)."""

from __future__ import annotations

import pytest
import torch

from autosync.engine import simulate
from autosync.engine.simulator import Simulator
from autosync.policies import BSP, SyncSwitch
from autosync.policies._base import Arrival, Task
from autosync.policies._sync_switch import StragglerDetector
from tests.conftest import small_job


def _epoch_budget(**changes):
    return small_job(budget={"max_epochs": 4.0}, **changes)


def _phases(result):
    return [v for _, v in result.trace.extras["phase_bsp"]]


def test_switching_at_the_end_is_bsp():
    job = _epoch_budget()
    a = simulate(job, BSP())
    b = simulate(job, SyncSwitch(switch_at=1.0, config="none"))
    assert torch.equal(a.final_params, b.final_params)


def test_bsp_then_asp_at_the_switch_point_of_the_workload():
    job = _epoch_budget()
    result = simulate(job, SyncSwitch(switch_at=0.25, config="none"))
    phases, epochs = _phases(result), result.trace.column("updates", "epoch")
    first_asp = phases.index(0)
    assert set(phases[:first_asp]) == {1} and set(phases[first_asp:]) == {0}
    assert epochs[first_asp - 1] >= 1.0 > epochs[first_asp - 2]  # 25% of 4 epochs
    n_aggregated = result.trace.column("updates", "n_aggregated")
    assert set(n_aggregated[:first_asp]) == {4} and set(n_aggregated[first_asp:]) == {1}


def test_reverse_order_starts_asynchronous():
    result = simulate(_epoch_budget(), SyncSwitch(switch_at=0.5, order="asp_bsp", config="none"))
    phases = _phases(result)
    assert phases[0] == 0 and phases[-1] == 1 and phases == sorted(phases)


def test_configuration_policy_scales_the_bsp_learning_rate_by_n():
    job = _epoch_budget()
    result = simulate(job, SyncSwitch(switch_at=0.25))
    lrs, phases = result.trace.column("updates", "lr"), _phases(result)
    eta, n = job.workload.optimizer.lr, job.cluster.n_workers
    assert lrs[0] == pytest.approx(n * eta)
    assert lrs[-1] == pytest.approx(eta) and phases[-1] == 0


def test_a_switch_costs_its_overhead_in_virtual_time():
    job = _epoch_budget(cluster__round_trip={"kind": "deterministic"})
    free = simulate(job, SyncSwitch(switch_at=0.25, config="none"))
    paid = simulate(job, SyncSwitch(switch_at=0.25, config="none", switch_seconds=7.0))
    assert paid.trace.column("updates", "time")[-1] == pytest.approx(free.trace.column("updates", "time")[-1] + 7.0)


@pytest.mark.parametrize("variant,expected", [("zero", 0.0), ("one_over_n", 0.25), ("same", None)])
def test_momentum_after_the_switch_follows_fig8(variant, expected):
    sim = Simulator(_epoch_budget(), SyncSwitch(switch_at=0.25, config="none", asp_momentum=variant))
    sim.run()
    assert sim.update_state["momentum_coefficient"] == expected


@pytest.mark.slow
def test_ramped_momentum_grows_and_is_capped():
    sim = Simulator(small_job(budget={"max_epochs": 40.0}),
                    SyncSwitch(switch_at=0.1, config="none", asp_momentum="ramp_n"))
    sim.run()
    assert sim.update_state["momentum_coefficient"] == pytest.approx(0.5)  # the job's gamma: the ramp hit it


def test_detector_flags_a_worker_slow_for_consecutive_windows():
    detector = StragglerDetector(4, window_seconds=1.0, consecutive=2)

    def window(t: float, slow: bool):
        arrivals = [Arrival(Task(w, 0, 0, 10, t - (5.0 if slow and w == 3 else 1.0)), t) for w in range(4)]
        detector.observe(arrivals, t)

    window(1.0, slow=True)
    assert detector.stragglers == set()
    window(2.0, slow=True)
    assert detector.stragglers == {3}
    window(3.0, slow=False)
    assert detector.stragglers == set()


def _straggling_job():
    return small_job(cluster__n_workers=6, cluster__round_trip={"kind": "deterministic"},
                     cluster__slowdowns=[{"at": 5.0, "duration": 20.0, "factor": 5.0, "workers": [0]}],
                     budget={"max_virtual_seconds": 60.0})


def test_elastic_excludes_a_detected_straggler_from_bsp():
    result = simulate(_straggling_job(), SyncSwitch(switch_at=0.5, config="none", stragglers="elastic",
                                                    window_seconds=2.0))
    times = result.trace.column("updates", "time")
    workers = result.trace.column("updates", "workers")
    during = [w for t, w, p in zip(times, workers, _phases(result)) if 12.0 < t < 24.0 and p == 1]
    assert during and all(0 not in w and len(w) == 5 for w in during)
    before = [w for t, w in zip(times, workers) if t < 5.0]
    assert all(len(w) == 6 for w in before)


def test_greedy_runs_asp_while_the_straggler_lasts_and_returns_to_bsp():
    result = simulate(_straggling_job(), SyncSwitch(switch_at=0.9, config="none", stragglers="greedy",
                                                    window_seconds=2.0))
    times, phases = result.trace.column("updates", "time"), _phases(result)
    assert any(p == 0 for t, p in zip(times, phases) if 10.0 < t < 25.0)
    assert any(p == 1 for t, p in zip(times, phases) if 30.0 < t < 50.0)


@pytest.mark.slow
def test_elastic_beats_agnostic_under_a_transient_straggler():
    job = _straggling_job()
    agnostic = simulate(job, SyncSwitch(switch_at=0.5, config="none"))
    elastic = simulate(job, SyncSwitch(switch_at=0.5, config="none", stragglers="elastic", window_seconds=2.0))
    assert elastic.metrics["updates"] > agnostic.metrics["updates"]
