"""One contract suite run against every policy the catalog offers."""

from __future__ import annotations

import json

import pytest
import torch

from autosync.catalog import POLICIES, make_policy, policy_from_dict
from autosync.engine import simulate
from tests.conftest import small_job

# Parameters that make each policy non-trivial on a 4-worker job.
CONTRACT_PARAMS = {"backup": {"k": 3}, "ssp": {"staleness": 1}}


@pytest.fixture(params=sorted(POLICIES))
def policy(request):
    return make_policy(request.param, CONTRACT_PARAMS.get(request.param, {}))


def test_seeded_runs_reproduce_bit_for_bit(policy):
    job = small_job()
    a, b = simulate(job, policy), simulate(job, policy)
    assert torch.equal(a.final_params, b.final_params)
    assert a.trace.updates == [] or [r[:2] + r[3:] for r in a.trace.updates] == [r[:2] + r[3:] for r in b.trace.updates]
    assert a.trace.arrivals == b.trace.arrivals


def test_other_seed_gives_other_trace(policy):
    a, b = simulate(small_job(seed=1), policy), simulate(small_job(seed=2), policy)
    assert a.trace.arrivals != b.trace.arrivals


def test_decisions_name_only_valid_workers(policy):
    job = small_job()
    result = simulate(job, policy)
    n = job.cluster.n_workers
    assert result.trace.updates, "the policy made no update"
    for row in result.trace.updates:
        workers, staleness = row[6], row[7]
        assert all(0 <= w < n for w in workers)
        assert len(set(workers)) == len(workers), "one worker contributed twice to one update"
        assert all(s >= 0 for s in staleness)
    for time, worker, task, version, batch, accepted in result.trace.arrivals:
        assert 0 <= worker < n and batch >= 1


def test_parameters_round_trip_through_json(policy):
    text = policy.to_json()
    again = policy_from_dict(json.loads(text))
    assert again == policy and again.to_json() == text


def test_binding_does_not_mutate_policy(policy):
    before = policy.to_json()
    simulate(small_job(), policy)
    assert policy.to_json() == before


def test_every_arrival_is_logged_and_time_is_monotone(policy):
    result = simulate(small_job(), policy)
    times = [a[0] for a in result.trace.arrivals]
    assert times == sorted(times)
    used = sum(r[5] for r in result.trace.updates)
    accepted = sum(1 for a in result.trace.arrivals if a[5])
    assert used <= accepted
