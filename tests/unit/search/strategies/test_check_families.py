"""A failed full-budget check rules its candidate, and a stale family, out of the race; the race checks a
stale leader as soon as it leads."""

from __future__ import annotations

import math

import optuna

from autosync.search.strategies.check_families import STALE, check_family, ruled_out
from autosync.search.strategies.full_budget import MAX_CHECKS, checks_left, race_checks, stale_leader
from autosync.search.strategies.portfolio import contenders, family_standing
from autosync.search.strategies.pruning import race_bar
from autosync.search.study.records import CONSTRAINT, FULL_BUDGET_OF, RACE_CHECK
from tests.unit.search.strategies.test_full_budget import _trial
from tests.unit.search.strategies.test_portfolio import POLICY_SPACE

LWP, SLIM = ("lwp", {}), ("dana_slim", {})
ASP_SQRT = ("asp", {"lr_rule": "sqrt_staleness"})
K9, K4 = ("backup", {"k": 9, "lr_rule": "sqrt"}), ("backup", {"k": 4, "lr_rule": "linear"})


def _inverse_000(*checks: optuna.trial.FrozenTrial) -> optuna.Study:
    """inverse-000's first round, as its study held it: LWP and DANA-Slim at 4.0 s, ASP with a staleness-scaled
    step at 5.0 s, backup k = 9 under `sqrt` at 7.4 s (all stopped at the target), BSP at 27 s."""
    study = optuna.create_study()
    for (policy, params), value in [(LWP, 4.0), (SLIM, 4.0), (ASP_SQRT, 5.0), (K9, 7.4)]:
        study.add_trial(_trial(policy, params, value=value))
    study.add_trial(_trial("bsp", {}, value=27.0, feasible=True))
    for check in checks:
        study.add_trial(check)
    return study


def test_a_failed_stale_check_rules_out_its_family_and_a_synchronous_one_its_own_policy():
    study = _inverse_000(_trial(*LWP, value=4.0, feasible=False, check_of=0),
                         _trial(*K4, value=3.0, feasible=False, check_of=9))
    trials = study.trials
    out = ruled_out(trials)
    assert check_family(trials[0]) == check_family(trials[1]) == STALE
    assert out(trials[0]) and out(trials[1])  # LWP's check failed: DANA-Slim, unchecked, goes with it
    assert not out(trials[2])  # ASP under a staleness-scaled step is a family of its own
    assert not out(trials[3])  # a synchronous candidate: only its own check rules it out
    assert out(_trial(*K4, value=3.0))  # backup k = 4 under `linear`, whose check failed


def test_the_bar_and_the_families_race_without_the_candidates_ruled_out():
    """Once LWP's check fails, the bar is ASP's 5.0 s, not 4.0 s, and backup (7.4 s) is back in the race."""
    families = POLICY_SPACE.policies
    before = _inverse_000()
    assert race_bar(before.trials)[1] == 4.0
    assert "backup" not in contenders(family_standing(before.trials, families))  # 7.4 s > 1.5 x 4.0 s
    after = _inverse_000(_trial(*LWP, value=4.0, feasible=False, check_of=0))
    assert race_bar(after.trials)[1] == 5.0
    standing = family_standing(after.trials, families)
    assert standing["lwp"] == standing["dana_slim"] == math.inf
    assert contenders(standing) == ["asp", "backup"]


def test_the_race_checks_a_stale_leader_and_the_next_once_it_fails_never_a_synchronous_one():
    study = _inverse_000()
    assert stale_leader(study).number == 0  # LWP leads and applies stale gradients to the end
    study.add_trial(_trial(*LWP, value=4.0, feasible=False, check_of=0))
    assert stale_leader(study).number == 2  # DANA-Slim is ruled out with LWP: ASP leads
    study.add_trial(_trial(*ASP_SQRT, value=5.0, feasible=True, check_of=2))
    assert stale_leader(study) is None  # the leader keeps the rule: nothing more to check
    running = _inverse_000()
    running.add_trial(optuna.trial.create_trial(state=optuna.trial.TrialState.RUNNING,
                                                user_attrs={FULL_BUDGET_OF: 0, RACE_CHECK: True}))
    assert stale_leader(running) is None  # another process checks it: its result decides the next leader
    synchronous = optuna.create_study()
    synchronous.add_trial(_trial(*K9, value=7.4))
    synchronous.add_trial(_trial(*ASP_SQRT, value=9.0))
    assert stale_leader(synchronous) is None  # checked after the search, as before


def test_the_race_runs_the_checks_budget_at_most_and_leaves_one_after_it():
    study = _inverse_000()
    assert checks_left(study.trials) == MAX_CHECKS
    for _ in range(MAX_CHECKS):
        check = _trial(*LWP, value=4.0, feasible=False, check_of=0)
        study.add_trial(optuna.trial.create_trial(value=4.0, user_attrs={**check.user_attrs, RACE_CHECK: True},
                                                  constraints={CONSTRAINT: 1.0}))
    assert race_checks(study.trials) == MAX_CHECKS
    assert stale_leader(study) is None and checks_left(study.trials) == 1
