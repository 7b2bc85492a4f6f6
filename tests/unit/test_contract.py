"""`check_policy` fails where a policy breaks its contract, naming the check (the shipped policies pass it:
tests/unit/policies/test_policy_contract.py)."""

from __future__ import annotations

import itertools

import pytest

from autosync import contract
from autosync.catalog import make_policy
from autosync.contract import ContractError, check_policy, check_refuses_bad_parameters, contract_job
from autosync.policies import BSP, SSP, BoundedStaleness, Strategies


def _fails(check: str, policy, **kwargs) -> ContractError:
    with pytest.raises(ContractError) as caught:
        check_policy(policy, **kwargs)
    assert caught.value.check == check and f"'{check}'" in str(caught.value)
    return caught.value


def test_a_policy_the_catalog_does_not_know_fails_the_round_trip():
    class Unregistered(BSP):
        name = "not_registered"

    _fails(contract.ROUND_TRIP, Unregistered())


def test_a_value_a_parameter_takes_fails_as_a_bad_value():
    with pytest.raises(ContractError, match="staleness=2 is accepted") as caught:
        check_refuses_bad_parameters(make_policy("ssp"), {"staleness": 2}, n_workers=4, batch_size=16)
    assert caught.value.check == contract.REFUSES
    with pytest.raises(ValueError, match="bad_values must name parameters of ssp"):
        check_refuses_bad_parameters(make_policy("ssp"), {"k": 0}, n_workers=4, batch_size=16)


def test_a_policy_a_run_changes_fails(monkeypatch):
    def strategies(self, n_workers, batch_size):
        self.staleness += 1  # a policy that keeps run state in itself
        return Strategies(barrier=BoundedStaleness(staleness=self.staleness))

    monkeypatch.setattr(SSP, "strategies", strategies)
    _fails(contract.UNCHANGED, make_policy("ssp", {"staleness": 1}))


def test_a_policy_whose_runs_differ_on_one_seed_fails(monkeypatch):
    draws = itertools.cycle([0, 3])  # state outside the policy and the seed: each run gets another bound

    def strategies(self, n_workers, batch_size):
        return Strategies(barrier=BoundedStaleness(staleness=next(draws)))

    monkeypatch.setattr(SSP, "strategies", strategies)
    error = _fails(contract.SAME_SEED, make_policy("ssp"))
    assert "final parameters" in str(error) and "arrivals" in str(error)


def test_a_job_whose_target_is_out_of_reach_cannot_check_the_fork():
    job = contract_job().model_copy(update={"target": contract_job().target.model_copy(update={"threshold": 0.999})})
    error = _fails(contract.FORK, make_policy("bsp"), job=job)
    assert "give a job whose target it meets" in str(error)


@pytest.mark.slow
@pytest.mark.processes
def test_the_processes_check_runs_a_policy_on_worker_processes_bit_for_bit():
    """The opt-in check, on per-worker batch sizes, which tests/unit/engine/test_processes.py (BSP, backup,
    DBW, ASP, SSP) does not run on worker processes."""
    check_policy(make_policy("lbbsp"), processes=True)


def test_worker_processes_computing_other_gradients_fail_the_processes_check(monkeypatch):
    """A driver whose gradients differ from the in-process kernel's (here: another seed's batches) fails."""
    from autosync.engine.drivers import PerWorkerDriver

    monkeypatch.setattr(contract, "ProcessDriver", lambda workload, processes: PerWorkerDriver(workload, seed=99))
    _fails(contract.PROCESSES, make_policy("bsp"), processes=True)

