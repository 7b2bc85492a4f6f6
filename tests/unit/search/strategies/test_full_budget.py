"""Trials stopped at the target, and the full-budget checks of the candidates that can still win."""

from __future__ import annotations

from dataclasses import replace

import optuna
import pytest
import torch

from autosync.engine.forks import FORKS
from autosync.search.strategies.full_budget import next_to_check
from autosync.search.strategies.pruning import PACE_MARGIN, RaceLimit
from autosync.policy_score import evaluate
from autosync.search.objective import Objective, ObjectiveSettings, trial_scoring, trial_seeds
from autosync.search.study.records import CONSTRAINT, FINAL_PENDING, FORKED, FULL_BUDGET_OF, PRUNED_ON_PACE
from autosync.search.space import SPACE_DIR, load_space
from autosync.search.study.storage import open_storage
from autosync.search.study.trials import counted_trials
from autosync.search.tune import tune
from tests.conftest import small_job, tune_request


def _tune(tmp_path, job, stop: bool, tolerance: float, name: str):
    space = load_space(SPACE_DIR / "static_k.yaml", job.cluster.n_workers)
    url = f"sqlite:///{tmp_path / (name + '.db')}"
    outcome = tune(tune_request(job, space, n_trials=space.size(), sampler="grid", storage=url, tolerance=tolerance,
                                settings={"stop_at_target": stop}))
    return outcome, optuna.load_study(study_name=outcome.study_name, storage=open_storage(url))


@pytest.mark.slow
@pytest.mark.parametrize("tolerance", [0.01, 0.0])
def test_stopping_at_the_target_keeps_the_full_budget_answer_and_costs_less(tmp_path, tolerance):
    """Every point of a small space, both ways: the same winner (its full-budget run keeps the constraint,
    checked), the same time; trials that stopped at the target never answer unchecked."""
    # evaluated every virtual second, so that the pace rule sees a slow candidate's curve before the bar's
    # time (backup k=1 under the proportional rule, a quarter of the step, is pruned on pace)
    job = small_job(budget={"max_virtual_seconds": 30}, target={"metric": "test_accuracy", "threshold": 0.8},
                    workload__evaluation__every_seconds=1.0)
    full, _ = _tune(tmp_path, job, False, tolerance, "full")
    stop, study = _tune(tmp_path, job, True, tolerance, "stop")
    assert stop.cache["best_policy"] == full.cache["best_policy"]
    assert stop.cache["best_value"] == full.cache["best_value"]
    assert stop.cache["search_cost_virtual_seconds"] < full.cache["search_cost_virtual_seconds"]
    breakdown = stop.cache["search_breakdown"]
    assert breakdown["stopped_at_target"] > 0 and breakdown["full_budget_checks"] >= 1
    assert counted_trials(study) == load_space(SPACE_DIR / "static_k.yaml", 4).size()  # checks are not counted
    winner = study.trials[stop.cache["best_trial"]]
    assert not winner.user_attrs.get(FINAL_PENDING)  # the answer's final metric is a full-budget one
    paced = [t for t in study.trials if t.user_attrs.get(PRUNED_ON_PACE) and "same_as_trial" not in t.user_attrs]
    assert paced, "no trial was pruned on pace: nothing to check here"
    assert breakdown["pruned_on_pace"] == len(paced)  # each recorded its predicted time, at least 2x the bar's
    fastest = min(t.values[0] for t in study.trials if t.state.name == "COMPLETE")  # no bar was ever lower
    assert all(t.intermediate_values[t.last_step] >= PACE_MARGIN * fastest for t in paced)


@pytest.mark.slow
def test_every_candidate_faster_than_the_answer_left_pending_was_checked(tmp_path):
    """The answer is the fastest candidate whose full-budget check kept the constraint: each faster one whose
    final metric was pending at the target was checked and failed (or repeats a checked policy). On this
    seed a faster candidate fails its check, and the answer is found within the bound on checks."""
    job = small_job(budget={"max_virtual_seconds": 30}, target={"metric": "test_accuracy", "threshold": 0.8},
                    workload__evaluation__every_seconds=1.0, seed=2)
    stop, study = _tune(tmp_path, job, True, 0.01, "pending")
    winner = study.trials[stop.cache["best_trial"]]
    check_of = {t.user_attrs[FULL_BUDGET_OF] for t in study.trials if FULL_BUDGET_OF in t.user_attrs}
    faster_pending = [t for t in study.trials if t.user_attrs.get(FINAL_PENDING) and t.state.name == "COMPLETE"
                      and t.values[0] < winner.values[0]]
    assert faster_pending, "no candidate faster than the answer was left pending: nothing to check here"
    assert all(t.number in check_of or t.user_attrs.get("same_as_trial") is not None for t in faster_pending)
    assert stop.cache["search_breakdown"]["unchecked"] == []  # the bounded checks left none out


def test_the_cost_to_the_answer_ends_at_the_candidate_the_check_confirmed(tmp_path):
    """The answer is found by the trial its full-budget check confirms, not by the check (which runs after
    the search): the cost to it is the reference, the trials up to that candidate and the checks."""
    from autosync.search.study.cache import answer_trial, search_cost

    job = small_job(budget={"max_virtual_seconds": 30}, target={"metric": "test_accuracy", "threshold": 0.8})
    stop, study = _tune(tmp_path, job, True, 0.01, "answer")
    winner = study.trials[stop.cache["best_trial"]]
    found = answer_trial(study, winner)
    assert found == winner.user_attrs.get(FULL_BUDGET_OF, winner.number)
    assert FULL_BUDGET_OF not in study.trials[found].user_attrs
    bsp = study.user_attrs["bsp_reference"]["virtual_seconds"]
    expected = bsp + sum(t.user_attrs.get("virtual_seconds", 0.0) for t in study.trials
                         if t.number <= found or FULL_BUDGET_OF in t.user_attrs)
    assert search_cost(study, up_to=found) == pytest.approx(expected)
    assert stop.cache["cost_to_answer_bsp_trainings"] == pytest.approx(expected / bsp)
    later = [t for t in study.trials if t.number > found and FULL_BUDGET_OF not in t.user_attrs
             and t.user_attrs.get("virtual_seconds", 0.0) > 0]
    if later:  # trials after the answer's cost nothing towards it
        assert stop.cache["cost_to_answer_bsp_trainings"] < stop.cache["search_cost_bsp_trainings"]


def test_a_run_stopped_at_the_target_has_the_full_runs_time_to_target():
    job = small_job(budget={"max_virtual_seconds": 30}, target={"metric": "test_accuracy", "threshold": 0.8})
    policy = {"policy": "backup", "params": {"k": 2, "lr_rule": "fixed"}}
    full = evaluate(job, policy, trial_seeds(job, 2))
    stopped = evaluate(job, policy, trial_seeds(job, 2), stop_at_target=True)
    assert stopped["time_to_target"] == full["time_to_target"] and stopped["reached"] == full["reached"] == 2
    assert stopped["virtual_seconds"] < full["virtual_seconds"]


@pytest.mark.slow
@pytest.mark.parametrize("K", [3, 5])
def test_verify_top_k_checks_the_k_fastest_candidates_at_full_budget(tmp_path, K):
    """--verify-top K re-runs K candidates: the K fastest distinct policies are checked, so
    K feasible ones (full-budget results, none pending) are there to re-run; K above the checks a search runs
    otherwise (`MAX_CHECKS`) too (the checks stopped at 3, and --verify-top 8 re-ran 4 candidates)."""
    from autosync.search.study.cache import best_policies

    job = small_job(budget={"max_virtual_seconds": 30}, target={"metric": "test_accuracy", "threshold": 0.8})
    space = load_space(SPACE_DIR / "static_k.yaml", job.cluster.n_workers)
    url = f"sqlite:///{tmp_path / 'top.db'}"
    # The options refuse --verify-top on the simulator (it verifies on a real backend); this test asks only for
    # the K places the simulated search keeps, without the verification's worker processes, so the resolved
    # request is given verify_top after the options (its verify_backend stays None: nothing is verified).
    request = replace(tune_request(job, space, n_trials=space.size(), sampler="grid", storage=url), verify_top=K)
    outcome = tune(request)
    study = optuna.load_study(study_name=outcome.study_name, storage=open_storage(url))
    top = best_policies(study, count=K)
    assert len(top) == K
    assert all(not study.trials[row["trial"]].user_attrs.get(FINAL_PENDING) for row in top)
    assert len({str(study.trials[row["trial"]].user_attrs["canonical_policy"]) for row in top}) == K


def test_a_full_budget_run_forks_from_the_same_run_stopped_at_the_target():
    """The check of a candidate continues its stopped run (`autosync.engine.forks`): the same score as a run
    from the start, trained only past the target."""
    job = small_job(budget={"max_virtual_seconds": 30}, target={"metric": "test_accuracy", "threshold": 0.8})
    policy = {"policy": "backup", "params": {"k": 3, "lr_rule": "fixed"}}
    seeds = trial_seeds(job, 2)
    FORKS.clear()
    whole = evaluate(job, policy, seeds)
    stopped = evaluate(job, policy, seeds, stop_at_target=True)
    forked = evaluate(job, policy, seeds)
    assert {k: forked[k] for k in whole if k != "virtual_seconds"} == {k: v for k, v in whole.items()
                                                                     if k != "virtual_seconds"}
    assert forked[FORKED] == stopped["virtual_seconds"] > 0
    assert forked["virtual_seconds"] == pytest.approx(whole["virtual_seconds"] - stopped["virtual_seconds"])


def test_a_proposal_like_a_pruned_trial_is_pruned_again_without_training(tmp_path):
    job = small_job(budget={"max_virtual_seconds": 30}, target={"metric": "test_accuracy", "threshold": 0.8})
    space = load_space(SPACE_DIR / "static_k.yaml", job.cluster.n_workers)
    seeds = trial_seeds(job, 1)
    reference = {**evaluate(job, {"policy": "bsp", "params": {}}, seeds), **trial_scoring(job, seeds, 2.0)}
    objective = Objective(job, space, ObjectiveSettings(), reference["final_metric"], reference, race=RaceLimit)
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'p.db'}")
    for k in (2, 3, 3):  # k = 2 reaches the target first; k = 3 later, so it is pruned, twice
        study.enqueue_trial({"backup.k": k, "backup.lr_rule": "proportional"})
    study.optimize(objective, n_trials=3)
    fast, pruned, again = study.trials
    assert fast.state.name == "COMPLETE" and pruned.state.name == again.state.name == "PRUNED"
    assert pruned.user_attrs["virtual_seconds"] > 0 and "same_as_trial" not in pruned.user_attrs
    assert again.user_attrs["virtual_seconds"] == 0.0 and again.user_attrs["same_as_trial"] == pruned.number
    assert pruned.intermediate_values[pruned.last_step] > fast.values[0]


def _trial(policy: str, params: dict | None = None, value: float | None = None, pruned_at: float | None = None,
           feasible: bool | None = None, check_of: int | None = None) -> optuna.trial.FrozenTrial:
    """A finished trial of `policy` (with `params`, where given): completed at `value` (stopped at the target
    unless `feasible` is given: a full-budget result) or pruned at `pruned_at`; `check_of`: a check's."""
    recorded = {"policy": policy, **({"params": params} if params is not None else {})}
    attrs = {"policy": recorded, **({FINAL_PENDING: True} if feasible is None and value is not None else {}),
             **({FULL_BUDGET_OF: check_of} if check_of is not None else {})}
    constraints = {CONSTRAINT: -1.0 if feasible else 1.0} if feasible is not None else None
    if pruned_at is not None:
        return optuna.trial.create_trial(state=optuna.trial.TrialState.PRUNED, intermediate_values={3: pruned_at},
                                         user_attrs=attrs)
    return optuna.trial.create_trial(value=value, user_attrs=attrs, constraints=constraints)


def test_trials_pruned_against_a_candidate_that_fails_its_check_are_checked_in_turn():
    """A trial pruned against the leader could have won if the leader fails its full-budget check: it is
    checked next (at its bound), and the search ends once a feasible candidate is faster than every
    unchecked bound."""
    study = optuna.create_study()
    study.add_trial(_trial("leader", value=10.0))  # stopped at the target: unchecked
    study.add_trial(_trial("pruned", pruned_at=12.0))  # pruned against the leader
    study.add_trial(_trial("slow", value=20.0, feasible=True))
    study.add_trial(_trial("late", pruned_at=25.0))  # pruned against the slow one: never a rival
    assert next_to_check(study).number == 0
    study.add_trial(_trial("leader", value=10.0, feasible=False, check_of=0))  # the leader ends too inaccurate
    assert next_to_check(study).number == 1
    study.add_trial(_trial("pruned", value=15.0, feasible=True, check_of=1))
    assert next_to_check(study) is None


def test_a_candidate_that_reached_the_target_is_checked_before_one_pruned_at_a_lower_bound():
    """The fleet family's case: ASP (4.0 s) fails its check; two DANA trials pruned at 6.0 s against it (not at
    the target then) and backup at 6.8 s wait: backup, whose time is known, is checked first; once it fails
    too, the pruned ones are checked in time order (a failed check rules out its own policy only)."""
    study = optuna.create_study()
    study.add_trial(_trial("asp", value=4.0))
    study.add_trial(_trial("dana_zero", pruned_at=6.0))
    study.add_trial(_trial("dana_dc", pruned_at=6.0))
    study.add_trial(_trial("backup", value=6.8))
    study.add_trial(_trial("bsp", value=60.0, feasible=True))
    assert next_to_check(study).number == 0
    study.add_trial(_trial("asp", value=4.0, feasible=False, check_of=0))
    assert next_to_check(study).number == 3
    study.add_trial(_trial("backup", value=6.8, feasible=False, check_of=3))
    assert next_to_check(study).number == 1
    study.add_trial(_trial("dana_zero", value=6.0, feasible=False, check_of=1))
    assert next_to_check(study).number == 2


def test_a_failed_check_rules_out_its_own_setting_only():
    """Backup k = 5 under `linear` fails its check; backup k = 4 under `sqrt`, pruned at 4.9 s, is checked
    next, before DANA-Zero pruned at 6.0 s: a failed check says nothing of another setting."""
    study = optuna.create_study()
    study.add_trial(_trial("backup", {"k": 5, "lr_rule": "linear"}, value=6.8))
    study.add_trial(_trial("backup", {"k": 4, "lr_rule": "sqrt"}, pruned_at=4.9))
    study.add_trial(_trial("dana_zero", {}, pruned_at=6.0))
    study.add_trial(_trial("bsp", {}, value=60.0, feasible=True))
    study.add_trial(_trial("backup", {"k": 5, "lr_rule": "linear"}, value=6.8, feasible=False, check_of=0))
    assert next_to_check(study).number == 1


def test_a_check_that_diverged_rules_out_its_policy_as_a_failed_one_does():
    """The tiers family's case: SSP reached the target at the first evaluation and diverged by the budget's
    end; its check's failure rules that setting out, and SSP's other setting (1.8 s) is checked next."""
    study = optuna.create_study()
    study.add_trial(_trial("ssp", {"staleness": 3}, value=1.8))
    study.add_trial(_trial("ssp", {"staleness": 2}, value=1.8))
    study.add_trial(_trial("backup", {"k": 8, "lr_rule": "sqrt"}, value=7.3))
    study.add_trial(_trial("bsp", {}, value=66.4, feasible=True))
    assert next_to_check(study).number == 0
    diverged = optuna.trial.create_trial(state=optuna.trial.TrialState.FAIL, user_attrs={
        "policy": {"policy": "ssp", "params": {"staleness": 3}}, FULL_BUDGET_OF: 0,
        "fail_reason": "diverged at update 90"})
    study.add_trial(diverged)
    assert next_to_check(study).number == 1


def test_a_search_run_skips_the_training_loss_pass_and_scores_the_same():
    from autosync.catalog import make_policy
    from autosync.engine.simulator import Simulator

    job = small_job(budget={"max_virtual_seconds": 30}, target={"metric": "test_accuracy", "threshold": 0.8})
    whole = Simulator(job, make_policy("backup", {"k": 3})).run()
    lean = Simulator(job, make_policy("backup", {"k": 3}), target_metric_only=True).run()
    assert torch.equal(lean.final_params, whole.final_params)
    assert [e[:3] + e[4:] for e in lean.trace.evals] == [e[:3] + e[4:] for e in whole.trace.evals]
    assert all(e[3] is None for e in lean.trace.evals) and all(e[3] is not None for e in whole.trace.evals)
    assert lean.metrics["time_to_target"] == whole.metrics["time_to_target"]
    on_loss = small_job(target={"metric": "train_loss", "threshold": 0.5})
    assert Simulator(on_loss, make_policy("bsp", {}), target_metric_only=True).train_loss_evaluated


def test_candidates_tied_with_a_feasible_checked_one_are_not_checked():
    """Policies that run alike up to the target tie to the last digit; once one of them is checked feasible,
    the answer is known: the others, no faster, need no check."""
    study = optuna.create_study()
    study.add_trial(_trial("a", value=10.0))
    study.add_trial(_trial("b", value=10.0))
    study.add_trial(_trial("c", value=10.0))
    assert next_to_check(study).number == 0
    study.add_trial(_trial("a", value=10.0, feasible=True, check_of=0))
    assert next_to_check(study) is None


def test_the_checks_stop_after_max_checks_and_say_what_they_left():
    """Five candidates stopped at the target, every check fails: the three fastest are checked in time order;
    after MAX_CHECKS the checks stop, the two candidates left are recorded, and the output says the answer is
    not sure."""
    from autosync.reporting.console import breakdown_line, unchecked_line
    from autosync.search.strategies.full_budget import MAX_CHECKS, check_candidates
    from autosync.search.study.cache import search_breakdown
    from autosync.search.study.records import UNCHECKED

    study = optuna.create_study()
    for policy, params, value in [("asp", {"lr_rule": "fixed"}, 10.0), ("ssp", {"staleness": 1}, 11.0),
                                  ("backup", {"k": 2}, 12.0), ("backup", {"k": 3}, 13.0),
                                  ("dbw", {"window": 5}, 14.0)]:
        study.add_trial(_trial(policy, params, value=value))
    study.add_trial(_trial("bsp", {}, value=30.0, feasible=True))
    checked = []

    def run_check(number: int) -> None:
        checked.append(number)
        policy = study.trials[number].user_attrs["policy"]
        study.add_trial(_trial(policy["policy"], policy["params"], value=study.trials[number].values[0],
                               feasible=False, check_of=number))

    assert check_candidates(study, run_check) == MAX_CHECKS == 3
    assert checked == [0, 1, 2]
    left = study.user_attrs[UNCHECKED]
    assert [(row["trial"], row["time_to_target"]) for row in left] == [(3, 13.0), (4, 14.0)]
    breakdown = search_breakdown(study)
    assert breakdown["unchecked"] == left
    assert "2 faster candidates left unchecked" in breakdown_line(breakdown)
    line = unchecked_line(left, MAX_CHECKS, "test_accuracy")
    assert line.startswith("not sure: the full-budget checks stop after 3; 2 faster candidates")
    assert "fastest backup(k=3) (13.00 s)" in line
    assert "the answer is the fastest known to keep BSP's final test_accuracy" in line


def test_checks_that_find_the_answer_leave_nothing_unchecked():
    from autosync.search.strategies.full_budget import check_candidates
    from autosync.search.study.records import UNCHECKED

    study = optuna.create_study()
    study.add_trial(_trial("asp", value=10.0))
    study.add_trial(_trial("bsp", value=30.0, feasible=True))
    assert check_candidates(study, lambda n: study.add_trial(_trial("asp", value=10.0, feasible=True,
                                                                    check_of=n))) == 1
    assert study.user_attrs[UNCHECKED] == []


def test_with_the_k_fastest_wanted_the_unchecked_candidates_recorded_are_those_faster_than_the_answer():
    """--verify-top K wants K candidates checked: where the checks stop first, the candidates left waiting for
    a later place are slower than the answer; the output called them faster candidates (fastest 1.16 s after
    an answer at 0.64 s). Only those that could still be the answer are recorded."""
    from autosync.search.strategies.full_budget import check_candidates
    from autosync.search.study.records import UNCHECKED

    study = optuna.create_study()
    for policy, params, value in [("asp", {"lr_rule": "fixed"}, 10.0), ("ssp", {"staleness": 1}, 11.0),
                                  ("backup", {"k": 2}, 12.0), ("backup", {"k": 3}, 13.0)]:
        study.add_trial(_trial(policy, params, value=value))
    study.add_trial(_trial("bsp", {}, value=30.0, feasible=True))

    def run_check(number: int) -> None:
        policy = study.trials[number].user_attrs["policy"]
        study.add_trial(_trial(policy["policy"], policy["params"], value=study.trials[number].values[0],
                               feasible=True, check_of=number))

    assert check_candidates(study, run_check, wanted=4, limit=2) == 2  # the answer (asp) and the next known
    assert study.user_attrs[UNCHECKED] == []
