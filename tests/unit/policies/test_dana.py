"""DANA and its baselines: the equivalences the DANA paper proves, and what its trace records."""

from __future__ import annotations

import pytest
import torch

from autosync.engine.simulator import Simulator
from autosync.policies import DANADC, DCASGD, LWP, NAGASGD, DANASlim, DANAZero, MultiASGD
from tests.conftest import small_job, torch_sgd_reference

NESTEROV = {"lr": 0.1, "momentum": 0.9, "nesterov": True, "weight_decay": 1e-3}


def _look_ahead(sim: Simulator) -> torch.Tensor:
    return sim.strategies.update.params_for(0, sim.params, sim.update_state)


def test_dana_zero_with_one_worker_is_nesterov():
    """Sec. 4.1 / Algorithm 5: with N = 1 the parameters DANA-Zero sends are torch's Nesterov iterates."""
    job = small_job(cluster__n_workers=1, workload__optimizer=NESTEROV)
    sim = Simulator(job, DANAZero())
    sim.run()
    assert torch.allclose(_look_ahead(sim), torch_sgd_reference(job), atol=1e-5, rtol=1e-5)


def test_nag_asgd_with_one_worker_is_nesterov():
    job = small_job(cluster__n_workers=1, workload__optimizer=NESTEROV)
    sim = Simulator(job, NAGASGD())
    result = sim.run()
    assert torch.allclose(result.final_params, torch_sgd_reference(job), atol=1e-5, rtol=1e-5)


def test_dana_slim_is_dana_zero_up_to_the_parameter_change():
    """Eqs. (15)-(16): DANA-Slim's master parameters Theta equal DANA-Zero's look-ahead, update by update."""
    job = small_job(workload__optimizer={"lr": 0.05, "momentum": 0.9})
    zero, slim = Simulator(job, DANAZero()), Simulator(job, DANASlim())
    a, b = zero.run(), slim.run()
    assert a.trace.arrivals == b.trace.arrivals
    assert torch.allclose(_look_ahead(zero), b.final_params, atol=1e-5, rtol=1e-4)


def test_dana_zero_running_sum_equals_the_full_sum():
    """Appendix A.2: v0 kept in O(d) per update equals the sum of the workers' momentum vectors."""
    sim = Simulator(small_job(), DANAZero())
    sim.run()
    state = sim.update_state
    assert torch.allclose(state["v0"], sum(state["v"].values()), atol=1e-6)


@pytest.mark.slow
def test_momentum_widens_the_gap_and_dana_narrows_it():
    """Fig. 2(b): NAG-ASGD's gap is several times DANA-Zero's under the same lag (gamma times, app. A.4)."""
    job = small_job(cluster__n_workers=8, workload__optimizer={"lr": 0.05, "momentum": 0.9},
                    cluster__round_trip={"kind": "gamma", "v_task": 0.1, "v_mach": 0.1},
                    budget={"max_updates": 300})
    mean_gap = {}
    for policy in (NAGASGD(), DANAZero(), LWP(), MultiASGD()):
        trace = Simulator(job, policy).run().trace
        gaps = [v for _, v in trace.extras["gap"][50:]]
        mean_gap[policy.name] = sum(gaps) / len(gaps)
        assert [v for _, v in trace.extras["lag"]] == [s[0] for s in trace.column("updates", "staleness")]
    assert mean_gap["dana_zero"] < 0.33 * mean_gap["nag_asgd"]
    assert mean_gap["lwp"] < mean_gap["nag_asgd"]


@pytest.mark.slow
def test_delay_compensation_is_zero_without_staleness():
    """Eq. (17): with one worker theta_master = theta_worker, so DC-ASGD is Multi-ASGD."""
    job = small_job(cluster__n_workers=1)
    a = Simulator(job, DCASGD(dc_lambda=2.0)).run()
    b = Simulator(job, MultiASGD()).run()
    assert torch.allclose(a.final_params, b.final_params)
    c = Simulator(small_job(), DANADC(dc_lambda=2.0)).run()
    d = Simulator(small_job(), DANAZero()).run()
    assert not torch.allclose(c.final_params, d.final_params)
