"""A candidate whose full-budget check failed, repaired one step closer to BSP, and checked in turn."""

from __future__ import annotations

import optuna

from autosync.catalog import make_policy
from autosync.search.space import SPACE_DIR, load_space
from autosync.search.strategies.full_budget import check_candidates
from autosync.search.strategies.repair import MAX_REPAIR_ROUNDS, repair_points, repair_rounds
from autosync.search.study.records import CONSTRAINT, FINAL_PENDING, FULL_BUDGET_OF, REPAIR_OF, UNCHECKED
from autosync.search.study.trials import budget_used
from tests.conftest import small_job


def test_a_static_k_steps_to_bsps_step_and_halfway_to_n():
    assert make_policy("backup", {"k": 8, "lr_rule": "sqrt"}).toward_bsp(26) == (
        make_policy("backup", {"k": 8, "lr_rule": "fixed"}), make_policy("backup", {"k": 17, "lr_rule": "sqrt"}))
    assert make_policy("backup", {"k": 5, "lr_rule": "fixed"}).toward_bsp(40) == (
        make_policy("backup", {"k": 23, "lr_rule": "fixed"}),)
    assert make_policy("backup", {"k": 6, "lr_rule": "linear"}).toward_bsp(6) == (
        make_policy("backup", {"k": 6, "lr_rule": "fixed"}),)
    assert make_policy("backup", {"k": 6, "lr_rule": "fixed"}).toward_bsp(6) == ()
    assert make_policy("dbw", {}).toward_bsp(6) == ()  # no parameter that moves towards BSP


def _trial(policy: str, params: dict, value: float | None = None, feasible: bool | None = None,
           **attrs) -> optuna.trial.FrozenTrial:
    """A finished trial: stopped at the target at `value` unless `feasible` says how its full budget ended."""
    user_attrs = {"policy": {"policy": policy, "params": params}, **attrs,
                  **({FINAL_PENDING: True} if feasible is None else {})}
    constraints = {CONSTRAINT: -1.0 if feasible else 1.0} if feasible is not None else None
    return optuna.trial.create_trial(value=value, user_attrs=user_attrs, constraints=constraints)


def _policy_study(space, *trials) -> optuna.Study:
    study = optuna.create_study()
    for policy, params, kwargs in trials:
        trial = _trial(policy, params, **kwargs)
        trial.params = space.trial_params({"policy": policy, "params": params})
        trial.distributions = {k: optuna.distributions.CategoricalDistribution([v]) for k, v in trial.params.items()}
        study.add_trial(trial)
    return study


def test_repairs_are_the_spaces_untried_points_that_do_not_run_as_bsp():
    job = small_job()  # 4 workers
    space = load_space(SPACE_DIR / "policy.yaml", 4)
    study = _policy_study(space, ("backup", {"k": 1, "lr_rule": "sqrt"}, {"value": 5.0}),
                          ("backup", {"k": 3, "lr_rule": "fixed"}, {"value": 6.0}))
    points = repair_points(study.trials, 0, space, job)
    assert points == [space.trial_params({"policy": "backup", "params": {"k": 1, "lr_rule": "fixed"}}),
                      space.trial_params({"policy": "backup", "params": {"k": 3, "lr_rule": "sqrt"}})]
    assert repair_points(study.trials, 1, space, job) == []  # k = 4 under `fixed` is BSP: the reference's
    tried = _policy_study(space, ("backup", {"k": 1, "lr_rule": "sqrt"}, {"value": 5.0}),
                          ("backup", {"k": 1, "lr_rule": "fixed"}, {"value": 7.0}))
    assert repair_points(tried.trials, 0, space, job) == [
        space.trial_params({"policy": "backup", "params": {"k": 3, "lr_rule": "sqrt"}})]
    static = load_space(SPACE_DIR / "static_k.yaml", 4)  # lr rules fixed and proportional only
    assert repair_points(study.trials, 0, static, job) == [
        static.trial_params({"policy": "backup", "params": {"k": 1, "lr_rule": "fixed"}})]


def test_one_round_of_repairs_per_search():
    job = small_job()
    space = load_space(SPACE_DIR / "policy.yaml", 4)
    study = _policy_study(space, ("backup", {"k": 1, "lr_rule": "sqrt"}, {"value": 5.0}),
                          ("backup", {"k": 2, "lr_rule": "sqrt"}, {"value": 6.0, REPAIR_OF: 0}))
    assert repair_rounds(study.trials) == MAX_REPAIR_ROUNDS == 1
    assert repair_points(study.trials, 1, space, job) == []


def _cut_short(study: optuna.Study, policy: str, params: dict, space, **attrs) -> None:
    """A trial failed by Ctrl-C (no reason of its own) with `attrs`: a check or a repair cut short."""
    trial_params = space.trial_params({"policy": policy, "params": params}) if space is not None else {}
    study.add_trial(optuna.trial.create_trial(
        state=optuna.trial.TrialState.FAIL, params=trial_params,
        distributions={k: optuna.distributions.CategoricalDistribution([v]) for k, v in trial_params.items()},
        user_attrs={"policy": {"policy": policy, "params": params}, **attrs}))


def test_a_round_of_repairs_cut_short_goes_on_where_it_stopped_on_resume():
    """One repair of trial 0 ran, the other was cut short by Ctrl-C: the resumed search queues the cut one
    again (it counted as a round done, and was never run); another candidate's round still blocks a second."""
    job = small_job()
    space = load_space(SPACE_DIR / "policy.yaml", 4)
    study = _policy_study(space, ("backup", {"k": 1, "lr_rule": "sqrt"}, {"value": 5.0}),
                          ("backup", {"k": 1, "lr_rule": "fixed"}, {"value": 7.0, REPAIR_OF: 0}))
    _cut_short(study, "backup", {"k": 3, "lr_rule": "sqrt"}, space, **{REPAIR_OF: 0})
    assert repair_points(study.trials, 0, space, job) == [
        space.trial_params({"policy": "backup", "params": {"k": 3, "lr_rule": "sqrt"}})]
    assert repair_points(study.trials, 1, space, job) == []  # trial 0's round was this search's one


def test_a_check_cut_short_leaves_its_candidate_to_check_again():
    """A check failed by Ctrl-C did not run to the end of the budget: its candidate is still the next to check
    (a resumed search had counted it as checked and gone on to slower candidates, answering another policy)."""
    from autosync.search.strategies.full_budget import check_finished, next_to_check

    study = optuna.create_study()
    study.add_trial(_trial("backup", {"k": 2, "lr_rule": "fixed"}, value=10.0))
    study.add_trial(_trial("backup", {"k": 3, "lr_rule": "fixed"}, value=12.0))
    _cut_short(study, "backup", {"k": 2, "lr_rule": "fixed"}, None, **{FULL_BUDGET_OF: 0})
    assert next_to_check(study).number == 0 and not check_finished(study, 0)


def test_a_failed_candidate_is_repaired_and_its_repair_checked_before_a_pruned_rival_past_the_limit():
    """crest-003's case: backup k = 8 under `sqrt` fails its check (the last the limit allowed), while
    DANA-Zero was pruned at a lower bound; its repair, k = 8 at BSP's step, reaches the target, is checked
    next (one more check for the repair) and answers: BSP no longer does. Repairs take no slot of the budget."""
    study = optuna.create_study()
    study.add_trial(_trial("backup", {"k": 8, "lr_rule": "sqrt"}, value=16.2))
    study.add_trial(optuna.trial.create_trial(state=optuna.trial.TrialState.PRUNED, intermediate_values={3: 6.2},
                                              user_attrs={"policy": {"policy": "dana_zero", "params": {}}}))
    study.add_trial(_trial("bsp", {}, value=73.2, feasible=True))
    checked, repaired = [], []

    def run_check(number: int) -> None:
        checked.append(number)
        trial = study.trials[number]
        sqrt = trial.user_attrs["policy"]["params"].get("lr_rule") == "sqrt"
        study.add_trial(_trial("backup", trial.user_attrs["policy"]["params"], value=trial.values[0],
                               feasible=not sqrt, **{FULL_BUDGET_OF: number}))

    def repair(number: int) -> int:  # asked for every failed candidate before each check; repairs it once
        repaired.append(number)
        if repaired.count(number) > 1:
            return 0
        study.add_trial(_trial("backup", {"k": 8, "lr_rule": "fixed"}, value=30.0, **{REPAIR_OF: number}))
        return 1

    counted_before = budget_used(study)[0]
    assert check_candidates(study, run_check, limit=1, repair=repair) == 2
    assert set(repaired) == {0} and checked == [0, 4]  # the repair (trial 4) keeps the rule and answers
    assert budget_used(study)[0] == counted_before  # neither the checks nor the repair took a slot
    # the two checks are spent: DANA-Zero, pruned at a bound under the answer's time, is left unchecked
    assert [row["trial"] for row in study.user_attrs[UNCHECKED]] == [1]



def test_no_repair_after_a_check_that_kept_the_rule():
    study = optuna.create_study()
    study.add_trial(_trial("backup", {"k": 8, "lr_rule": "fixed"}, value=16.2))
    study.add_trial(_trial("bsp", {}, value=73.2, feasible=True))

    def run_check(number: int) -> None:
        study.add_trial(_trial("backup", {"k": 8, "lr_rule": "fixed"}, value=16.2, feasible=True,
                               **{FULL_BUDGET_OF: number}))

    def repair(number: int) -> int:
        raise AssertionError("a candidate that kept the rule needs no repair")

    assert check_candidates(study, run_check, repair=repair) == 1


def test_the_breakdown_names_the_repairs_that_ran():
    from autosync.reporting.console import breakdown_line
    from autosync.search.study.cache import search_breakdown

    study = optuna.create_study()
    study.add_trial(_trial("backup", {"k": 8, "lr_rule": "sqrt"}, value=16.2))
    study.add_trial(_trial("backup", {"k": 8, "lr_rule": "fixed"}, value=29.0, **{REPAIR_OF: 0}))
    breakdown = search_breakdown(study)
    assert breakdown["repairs"] == [{"of": 0, "policy": {"policy": "backup", "params": {"k": 8, "lr_rule": "fixed"}}}]
    assert ("A candidate that failed its check was moved towards BSP: backup(k=8,lr_rule=fixed) ran as candidates "
            "(repairs).") in breakdown_line(breakdown)
