"""The policy contract (`autosync.contract.check_policy`) run against every policy the catalog offers."""

from __future__ import annotations

import pytest
import torch

from autosync.catalog import POLICIES, make_policy
from autosync.contract import (
    check_decisions, check_policy, check_refuses_bad_parameters, check_round_trip,
)
from autosync.engine import simulate
from tests.conftest import small_job

# Parameters that make each policy non-trivial on a 4-worker job.
CONTRACT_PARAMS = {"backup": {"k": 3}, "ssp": {"staleness": 1},
                   "compose": {"barrier": "ssp", "update": "dana_slim"}}
# Compositions that no seed policy is, run through the same contract.
COMPOSITIONS = {"compose-switch": {"schedule": "elastic", "switch_at": 0.3, "batch": "lbbsp", "update": "dana_zero"},
                "compose-dbw-lbbsp": {"barrier": "dbw", "batch": "lbbsp"},
                "compose-backup-lbbsp": {"barrier": "backup", "k": 3, "batch": "lbbsp", "mode": "gpu"},
                "compose-ssp-dana_dc": {"barrier": "ssp", "staleness": 1, "update": "dana_dc", "dc_lambda": 0.5},
                "compose-sync_switch-lwp": {"schedule": "sync_switch", "switch_at": 0.3, "update": "lwp"},
                "compose-greedy-lbbsp": {"schedule": "greedy", "switch_at": 0.5, "batch": "lbbsp", "mode": "cpu"},
                "compose-backup-local": {"barrier": "backup", "k": 3, "local": "period", "period": 3},
                "compose-ssp-speed-delayed_nesterov": {"barrier": "ssp", "staleness": 1, "local": "speed", "period": 3,
                                                       "update": "delayed_nesterov"}}


@pytest.fixture(params=sorted(POLICIES) + sorted(COMPOSITIONS))
def policy(request):
    if request.param in COMPOSITIONS:
        return make_policy("compose", COMPOSITIONS[request.param])
    return make_policy(request.param, CONTRACT_PARAMS.get(request.param, {}))


def test_parameters_round_trip_through_json_and_refuse_a_wrong_type(policy):
    check_round_trip(policy)
    check_refuses_bad_parameters(policy, {}, n_workers=4, batch_size=16)


def test_decisions_name_only_valid_workers(policy):
    job = small_job()
    check_decisions(policy, simulate(job, policy), job.cluster.n_workers)


@pytest.mark.slow
def test_every_policy_keeps_the_contract(policy):
    """`check_policy`: JSON round trip, every parameter refuses a wrong type, a run leaves the policy
    unchanged, the same seed reproduces bit for bit and another seed differs, decisions name only valid
    workers, arrivals are logged in time order, and a run forked at the target equals the whole run."""
    check_policy(policy)


# Every parameter of every policy: a valid value other than its default, and a value it must refuse (and,
# where the contract parameters do not admit the valid value, the parameters it is tried with).
# A new policy's parameters go here (the test below fails until they do).
PARAMETER_CASES: dict[str, dict[str, tuple]] = {
    "asp": {"lr_rule": ("staleness", "sometimes")}, "bsp": {}, "dana_slim": {}, "dana_zero": {}, "multi_asgd": {}, "nag_asgd": {},
    "backup": {"k": (2, 0), "lr_rule": ("sqrt", "sometimes")},
    "bdbw": {"lr_rule": ("proportional", "sometimes"), "solve_every": (3, 0)},
    "dbw": {"window": (3, 0), "beta": (1.5, 0.5), "lr_rule": ("proportional", "sometimes"), "solve_every": (2, 0),
            "robust": (False, "yes"), "step_growth": (2.0, 0.5)},
    "dana_dc": {"dc_lambda": (1.0, -1.0)},
    "dc_asgd": {"dc_lambda": (1.0, -1.0)},
    "lwp": {"horizon": (2.0, -1.0)},
    "ssp": {"staleness": (1, -1)},
    "local_sgd": {"period": (4, 0), "steps": ("speed", "random")},
    "adacomm": {"period": (4, 0), "interval_seconds": (5.0, -1.0)},
    "diloco": {"period": (4, 0), "outer_lr": (1.0, -1.0), "outer_momentum": (0.5, 1.0)},
    "async_local_sgd": {"period": (4, 0), "outer_lr": (1.0, -1.0), "outer_momentum": (0.5, 1.0)},
    "easgd": {"period": (4, 0), "elastic_alpha": (0.5, 0.0)},
    "split": {"fractions": ([0.4, 0.3, 0.2, 0.1], [0.5, 0.5, 0.5, -0.5])},
    "lbbsp": {"mode": ("gpu", "tpu"), "delta": (3, 0), "window": (3, 0), "fine_delta": (2, 0), "fine_window": (10, 0),
              "memory_threshold": (0.9, 1.5), "predictor": ("ema", "oracle"), "warmup": (10, 1),
              "ema_alpha": (0.5, 0.0), "hidden": (4, 0), "lr_rule": ("sqrt", "sometimes")},
    "sync_switch": {"switch_at": (0.5, 1.5), "order": ("asp_bsp", "random"), "config": ("none", "all"),
                    "asp_momentum": ("zero", "more"), "switch_seconds": (1.0, -1.0),
                    "stragglers": ("greedy", "ignore"), "window_seconds": (2.0, 0.0), "consecutive": (3, 0),
                    "lr_rule": ("sqrt", "sometimes"), "asp_lr_rule": ("sqrt_staleness", "sometimes")},
    "compose": {"barrier": ("asp", "nope"), "batch": ("lbbsp", "tiny", {"barrier": "bsp"}),
                "update": ("dana_zero", "adam"), "schedule": ("elastic", "sometimes", {}),
                "k": (2, 0, {"barrier": "backup"}), "lr_rule": ("proportional", "sometimes", {"barrier": "dbw"}), "window": (3, 0, {"barrier": "dbw"}),
                "staleness": (1, -1), "mode": ("gpu", "tpu", {"batch": "lbbsp"}),
                "horizon": (2.0, -1.0, {"barrier": "asp", "update": "lwp"}),
                "dc_lambda": (1.0, -1.0, {"barrier": "asp", "update": "dc_asgd"}),
                "switch_at": (0.5, 1.5, {"schedule": "sync_switch"}), "config": ("none", "all", {"schedule": "sync_switch"}),
                "asp_lr_rule": ("staleness", "sometimes", {"barrier": "asp", "update": "dana_slim"}),
                "bsp_lr_rule": ("sqrt", "sometimes", {"schedule": "elastic", "update": "dana_slim"}),
                "local": ("period", "sometimes"), "period": (4, 0, {"local": "period"}),
                "outer_lr": (1.0, -1.0, {"local": "period", "update": "outer_nesterov"}),
                "outer_momentum": (0.5, 1.0, {"local": "period", "update": "outer_nesterov"}),
                "elastic_alpha": (0.5, 0.0, {"barrier": "asp", "local": "period", "update": "easgd"})},
}
# Policies no shipped search space offers, and why.
NOT_SEARCHED = {name: "a baseline the DANA paper compares against; DANA-Slim and DANA-DC dominate it there"
                for name in ("nag_asgd", "multi_asgd", "dc_asgd")}


def test_the_parameter_table_covers_every_parameter_of_every_policy():
    from autosync.catalog import policy_parameters

    assert sorted(PARAMETER_CASES) == sorted(POLICIES)
    for name, cls in POLICIES.items():
        assert sorted(PARAMETER_CASES[name]) == sorted(policy_parameters(cls)), name


@pytest.mark.parametrize("name,param", [(n, p) for n, cases in sorted(PARAMETER_CASES.items()) for p in cases])
def test_every_parameter_round_trips_and_bad_values_are_refused(name, param):
    good, bad, *with_params = PARAMETER_CASES[name][param]
    base = with_params[0] if with_params else CONTRACT_PARAMS.get(name, {})
    policy = make_policy(name, {**base, param: good})
    policy.bind(4, 8)
    assert policy.params()[param] == good
    check_round_trip(policy)
    check_refuses_bad_parameters(policy, {param: bad}, n_workers=4, batch_size=8, names=[param])


def test_every_policy_is_in_a_search_space_or_exempt_with_a_reason():
    import yaml

    from autosync.search.space import SPACE_DIR

    searched = set()
    for path in SPACE_DIR.glob("*.yaml"):
        searched |= set(yaml.safe_load(path.read_text())["policies"])
    for name in POLICIES:
        assert (name in searched) != (name in NOT_SEARCHED), f"{name}: searched by a space, or exempt, not both"


@pytest.mark.parametrize("spelling,name", [("DANA-Slim", "dana_slim"), ("dana-slim", "dana_slim"), ("B-DBW", "bdbw"),
                                           ("LB-BSP", "lbbsp"), ("Sync-Switch", "sync_switch"), ("nag-asgd", "nag_asgd"),
                                           ("BSP", "bsp")])
def test_the_papers_spellings_name_the_policy(spelling, name):
    assert make_policy(spelling).name == name


@pytest.mark.parametrize("name,params,canonical", [
    ("backup", {"k": 4}, "bsp"), ("backup", {"k": 4, "lr_rule": "proportional"}, "bsp"),
    ("sync_switch", {"switch_at": 1.0, "config": "none"}, "bsp"),
    ("split", {"fractions": [0.25] * 4}, "bsp"), ("split", {}, "bsp"),
])
@pytest.mark.slow
def test_a_canonical_form_runs_exactly_like_the_policy(name, params, canonical):
    policy = make_policy(name, params)
    simple = policy.canonical(4)
    assert simple.name == canonical
    job = small_job()
    a, b = simulate(job, policy), simulate(job, simple)
    assert torch.equal(a.final_params, b.final_params) and a.trace.arrivals == b.trace.arrivals
    assert {k: v for k, v in a.metrics.items()} == {k: v for k, v in b.metrics.items()}  # same times, same score


def test_a_policy_that_is_not_an_equivalent_keeps_its_form():
    for policy in (make_policy("backup", {"k": 3}), make_policy("sync_switch", {"switch_at": 1.0}),
                   make_policy("sync_switch", {"switch_at": 0.0, "config": "none"}),
                   make_policy("sync_switch", {"switch_at": 1.0, "config": "none", "switch_seconds": 30.0}),
                   make_policy("split", {"fractions": [0.4, 0.2, 0.2, 0.2]}), make_policy("ssp", {"staleness": 0})):
        assert policy.canonical(4) is policy


