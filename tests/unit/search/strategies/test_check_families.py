"""A failed full-budget check rules its candidate, and a stale family, out of the race; the race checks a
stale leader as soon as it leads."""

from __future__ import annotations

import math

import optuna

from autosync.search.strategies.check_families import STALE, check_family, ruled_out
from autosync.search.strategies.full_budget import MAX_CHECKS, checks_left, race_checks, stale_leader
from autosync.search.strategies.portfolio import contenders, family_standing
from autosync.search.strategies.pruning import race_bar
from autosync.search.study.records import CONSTRAINT, FAIL_REASON, FULL_BUDGET_OF, KILLED, RACE_CHECK
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


def test_a_stale_candidate_whose_own_check_passed_stays_in_the_race():
    """With --verify-top 2: DANA-Slim's check passes, then LWP's fails: DANA-Slim, known to keep the rule,
    still sets the bar; LWP and the unchecked DANA-Zero of the same family do not."""
    study = _inverse_000(_trial(*SLIM, value=4.0, feasible=True, check_of=1),
                         _trial(*LWP, value=4.0, feasible=False, check_of=0))
    study.add_trial(_trial("dana_zero", {}, value=3.0))
    out = ruled_out(study.trials)
    assert not out(study.trials[1]) and out(study.trials[0]) and out(study.trials[-1])
    assert race_bar(study.trials)[1] == 4.0 and race_bar(study.trials)[0].number in (1, 5)


def test_the_race_counts_its_own_checks_with_a_result_only():
    """A search's race counts the checks it ran (marked with its budget): a refreshed search (a larger
    budget) starts from none, and a check whose process died counts once, by its re-run."""
    study = _inverse_000()
    done = _trial(*LWP, value=4.0, feasible=False, check_of=0)
    killed = optuna.trial.create_trial(state=optuna.trial.TrialState.FAIL,
                                       user_attrs={FULL_BUDGET_OF: 0, RACE_CHECK: 20, KILLED: True,
                                                   FAIL_REASON: "process lost"})
    study.add_trial(killed)
    study.add_trial(optuna.trial.create_trial(value=4.0, user_attrs={**done.user_attrs, RACE_CHECK: 20},
                                              constraints={CONSTRAINT: 1.0}))
    assert race_checks(study.trials, 20) == 1 and race_checks(study.trials, 40) == 0
    assert checks_left(study.trials, 20) == MAX_CHECKS - 1 and checks_left(study.trials, 40) == MAX_CHECKS


def test_a_queued_check_is_not_given_up_and_a_given_up_check_rules_nothing_out(tmp_path):
    """--patience fails the budget's queued trials, never a queued check (its process runs it); and a check
    failed that way (an older study's) is no diverged check."""
    from autosync.search.strategies.patience import give_up_queued
    from autosync.search.study.records import GIVEN_UP, diverged_check

    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'q.db'}")
    study.enqueue_trial({}, user_attrs={FULL_BUDGET_OF: 0, RACE_CHECK: 20})
    study.enqueue_trial({})
    give_up_queued(study, 3)
    states = [t.state for t in study.get_trials()]
    assert states == [optuna.trial.TrialState.WAITING, optuna.trial.TrialState.FAIL]
    given_up = optuna.trial.create_trial(state=optuna.trial.TrialState.FAIL, user_attrs={
        FULL_BUDGET_OF: 0, GIVEN_UP: 3, FAIL_REASON: "gave up"})
    assert not diverged_check(given_up)


def test_a_portfolio_tune_checks_its_stale_leader_in_the_race_and_no_more_checks_than_its_bound(tmp_path):
    """On the 4-worker job with a 60 s budget, SSP leads the first round stopped at the target; the race
    checks it right after the first round (queued alone), and the checks in
    all are at most MAX_CHECKS + 1."""
    from autosync.search.space import SPACE_DIR, load_space
    from autosync.search.tune import tune
    from tests.conftest import small_job, tune_request

    job = small_job(budget={"max_virtual_seconds": 60})
    space = load_space(SPACE_DIR / "policy.yaml", job.cluster.n_workers)
    outcome = tune(tune_request(job, space, n_trials=20, storage=f"sqlite:///{tmp_path / 's.db'}", seed=0,
                                sampler="portfolio"))
    trials = outcome.study.trials
    race = [t for t in trials if t.user_attrs.get(RACE_CHECK)]
    checks = [t for t in trials if FULL_BUDGET_OF in t.user_attrs]
    searched = [t.number for t in trials if FULL_BUDGET_OF not in t.user_attrs]
    assert race, "a stale leader is checked in the race"
    assert all(t.user_attrs[RACE_CHECK] == 20 for t in race)
    assert min(t.number for t in race) < max(searched)  # in the race, not after it
    before = trials[race[0].number - 1]  # right after the first round: the last trial queued with its setting
    assert before.system_attrs.get("fixed_params") and not trials[race[0].number + 1].system_attrs.get("fixed_params")
    assert len(race) <= MAX_CHECKS and len(checks) <= MAX_CHECKS + 1
