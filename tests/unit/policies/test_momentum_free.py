"""Without momentum the DANA family runs as plainer policies (`_AsyncPolicy.without_momentum`): each such
canonical form is tested bit-identical to the policy, and a search trains each class once."""

from __future__ import annotations

import optuna
import pytest
import torch

from autosync.catalog import make_policy
from autosync.engine import simulate
from autosync.policy_score import evaluate
from autosync.search.objective import Objective, ObjectiveSettings, canonical_on, trial_scoring, trial_seeds
from autosync.search.space import load_space
from autosync.search.strategies.pruning import RaceLimit
from tests.conftest import small_job

NO_MOMENTUM = {"lr": 0.1, "momentum": 0.0}
NO_MOMENTUM_DECAY = {"lr": 0.1, "momentum": 0.0, "weight_decay": 0.01}


def _same_run(job, a, b) -> bool:
    ra, rb = simulate(job, a), simulate(job, b)
    return torch.equal(ra.final_params, rb.final_params) and ra.trace.arrivals == rb.trace.arrivals \
        and ra.metrics == rb.metrics


@pytest.mark.parametrize("optimizer,name,params,canonical", [
    (NO_MOMENTUM, "dana_slim", {}, "asp"), (NO_MOMENTUM, "dana_zero", {}, "asp"),
    (NO_MOMENTUM, "nag_asgd", {}, "asp"), (NO_MOMENTUM, "multi_asgd", {}, "asp"),
    (NO_MOMENTUM, "dana_dc", {"dc_lambda": 0.5}, "dc_asgd"),
    (NO_MOMENTUM_DECAY, "dana_slim", {}, "multi_asgd"), (NO_MOMENTUM_DECAY, "nag_asgd", {}, "multi_asgd"),
])
def test_without_momentum_a_dana_rule_runs_exactly_like_its_canonical_form(optimizer, name, params, canonical):
    job = small_job(workload__optimizer=optimizer, budget={"max_updates": 40})
    policy = make_policy(name, params)
    simple = policy.canonical(job.cluster.n_workers, job.workload.optimizer)
    assert simple.name == canonical and all(simple.params()[k] == v for k, v in params.items())
    assert _same_run(job, policy, simple)


def test_with_momentum_or_weight_decay_the_forms_that_differ_stay_apart():
    """The pairs the rule does not join really run differently: DANA-Slim and ASP with momentum, Multi-ASGD
    and ASP with weight decay (added at the sent parameters, not the master's), DANA-DC and ASP."""
    with_momentum = small_job(workload__optimizer={"lr": 0.1, "momentum": 0.5}, budget={"max_updates": 40})
    decayed = small_job(workload__optimizer=NO_MOMENTUM_DECAY, budget={"max_updates": 40})
    plain = small_job(workload__optimizer=NO_MOMENTUM, budget={"max_updates": 40})
    for job, name, other in ((with_momentum, "dana_slim", "asp"), (decayed, "multi_asgd", "asp"),
                             (plain, "dana_dc", "asp"), (plain, "lwp", "asp")):
        policy = make_policy(name)
        assert canonical_on(policy.to_dict(), job) != make_policy(other).to_dict()
        assert not _same_run(job, policy, make_policy(other)), (name, other)
    assert make_policy("dana_slim").canonical(4) == make_policy("dana_slim")  # no optimizer named: no guess


def test_a_search_without_momentum_trains_dana_slim_once_as_asp(tmp_path):
    job = small_job(workload__optimizer=NO_MOMENTUM, budget={"max_virtual_seconds": 60})
    space_file = tmp_path / "async.yaml"
    space_file.write_text("name: async\npolicies:\n  asp: {}\n  dana_slim: {}\n")
    space = load_space(space_file, job.cluster.n_workers)
    seeds = trial_seeds(job, 1)
    reference = {**evaluate(job, {"policy": "bsp", "params": {}}, seeds), **trial_scoring(job, seeds, 2.0)}
    objective = Objective(job, space, ObjectiveSettings(), reference["final_metric"], reference, race=RaceLimit)
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'p.db'}")
    study.enqueue_trial({"policy": "asp"})
    study.enqueue_trial({"policy": "dana_slim"})
    study.optimize(objective, n_trials=2)
    asp, slim = study.trials
    assert slim.user_attrs["same_as_trial"] == asp.number and slim.user_attrs["virtual_seconds"] == 0.0
    assert slim.values == asp.values
