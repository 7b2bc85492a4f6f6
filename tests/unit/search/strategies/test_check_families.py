"""A failed full-budget check rules its candidate, and a stale family, out of the search's bar."""

from __future__ import annotations

import optuna

from autosync.search.strategies.check_families import STALE, check_family, ruled_out
from autosync.search.strategies.pruning import race_bar
from autosync.search.study.records import FAIL_REASON, FULL_BUDGET_OF
from tests.unit.search.strategies.test_full_budget import _trial

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


def test_the_bar_is_set_without_the_candidates_ruled_out():
    """Once LWP's check fails, the bar is ASP's 5.0 s, not 4.0 s (DANA-Slim goes with LWP)."""
    before = _inverse_000()
    assert race_bar(before.trials)[1] == 4.0
    after = _inverse_000(_trial(*LWP, value=4.0, feasible=False, check_of=0))
    assert race_bar(after.trials)[1] == 5.0


def test_a_stale_candidate_whose_own_check_passed_stays_in_the_race():
    """With --verify-top 2: DANA-Slim's check passes, then LWP's fails: DANA-Slim, known to keep the rule,
    still sets the bar; LWP and the unchecked DANA-Zero of the same family do not."""
    study = _inverse_000(_trial(*SLIM, value=4.0, feasible=True, check_of=1),
                         _trial(*LWP, value=4.0, feasible=False, check_of=0))
    study.add_trial(_trial("dana_zero", {}, value=3.0))
    out = ruled_out(study.trials)
    assert not out(study.trials[1]) and out(study.trials[0]) and out(study.trials[-1])
    assert race_bar(study.trials)[1] == 4.0 and race_bar(study.trials)[0].number in (1, 5)


def test_a_queued_check_is_not_given_up_and_a_given_up_check_rules_nothing_out(tmp_path):
    """--patience fails the budget's queued trials, never a queued check (its process runs it); and a check
    failed that way (an older study's) is no diverged check."""
    from autosync.search.strategies.patience import give_up_queued
    from autosync.search.study.records import GIVEN_UP, diverged_check

    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'q.db'}")
    study.enqueue_trial({}, user_attrs={FULL_BUDGET_OF: 0})
    study.enqueue_trial({})
    give_up_queued(study, 3)
    states = [t.state for t in study.get_trials()]
    assert states == [optuna.trial.TrialState.WAITING, optuna.trial.TrialState.FAIL]
    given_up = optuna.trial.create_trial(state=optuna.trial.TrialState.FAIL, user_attrs={
        FULL_BUDGET_OF: 0, GIVEN_UP: 3, FAIL_REASON: "gave up"})
    assert not diverged_check(given_up)
