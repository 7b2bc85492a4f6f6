"""Trials stopped at the target, and the full-budget checks of the candidates that can still win."""

from __future__ import annotations

import optuna
import pytest

from autosync.search.objective import FINAL_PENDING, FULL_BUDGET_OF, ObjectiveSettings, evaluate, trial_seeds
from autosync.search.space import SPACE_DIR, load_space
from autosync.search.storage import open_storage
from autosync.search.trials import counted_trials
from autosync.search.tune import TuneRequest, tune
from tests.conftest import small_job


def _tune(tmp_path, job, stop: bool, tolerance: float, name: str):
    space = load_space(SPACE_DIR / "static_k.yaml", job.cluster.n_workers)
    url = f"sqlite:///{tmp_path / (name + '.db')}"
    outcome = tune(TuneRequest(job=job, space=space, n_trials=space.size(), sampler="grid", storage=url,
                               settings=ObjectiveSettings(stop_at_target=stop, tolerance=tolerance)))
    return outcome, optuna.load_study(study_name=outcome.study_name, storage=open_storage(url))


@pytest.mark.parametrize("tolerance", [0.01, 0.0])
def test_stopping_at_the_target_keeps_the_full_budget_answer_and_costs_less(tmp_path, tolerance):
    """Every point of a small space, both ways: the same winner (its full-budget run keeps the constraint,
    checked), the same time; trials that stopped at the target never answer unchecked."""
    job = small_job(budget={"max_virtual_seconds": 30}, target={"metric": "test_accuracy", "threshold": 0.8})
    full, _ = _tune(tmp_path, job, False, tolerance, "full")
    stop, study = _tune(tmp_path, job, True, tolerance, "stop")
    assert stop.cache["best_policy"] == full.cache["best_policy"]
    assert stop.cache["best_value"] == full.cache["best_value"]
    assert stop.cache["search_cost_virtual_seconds"] < full.cache["search_cost_virtual_seconds"]
    checks = [t for t in study.trials if FULL_BUDGET_OF in t.user_attrs]
    breakdown = stop.cache["search_breakdown"]
    assert breakdown["stopped_at_target"] > 0 and breakdown["full_budget_checks"] >= 1
    assert counted_trials(study) == load_space(SPACE_DIR / "static_k.yaml", 4).size()  # checks are not counted
    winner = study.trials[stop.cache["best_trial"]]
    assert not winner.user_attrs.get(FINAL_PENDING)  # the answer's final metric is a full-budget one
    check_of = {t.user_attrs[FULL_BUDGET_OF] for t in checks}
    faster_pending = [t for t in study.trials if t.user_attrs.get(FINAL_PENDING) and t.state.name == "COMPLETE"
                      and t.values[0] < winner.values[0]]
    assert all(t.number in check_of or t.user_attrs.get("same_as_trial") is not None for t in faster_pending)


def test_a_run_stopped_at_the_target_has_the_full_runs_time_to_target():
    job = small_job(budget={"max_virtual_seconds": 30}, target={"metric": "test_accuracy", "threshold": 0.8})
    policy = {"policy": "backup", "params": {"k": 2, "lr_rule": "fixed"}}
    full = evaluate(job, policy, trial_seeds(job, 2))
    stopped = evaluate(job, policy, trial_seeds(job, 2), stop_at_target=True)
    assert stopped["time_to_target"] == full["time_to_target"] and stopped["reached"] == full["reached"] == 2
    assert stopped["virtual_seconds"] < full["virtual_seconds"]


@pytest.mark.slow
def test_verify_top_k_checks_the_k_fastest_candidates_at_full_budget(tmp_path):
    """--verify-top / --confirm-top K re-run K candidates: the K fastest distinct policies are checked, so
    K feasible ones (full-budget results, none pending) are there to re-run."""
    from autosync.search.cache import best_policies

    job = small_job(budget={"max_virtual_seconds": 30}, target={"metric": "test_accuracy", "threshold": 0.8})
    space = load_space(SPACE_DIR / "static_k.yaml", job.cluster.n_workers)
    url = f"sqlite:///{tmp_path / 'top.db'}"
    outcome = tune(TuneRequest(job=job, space=space, n_trials=space.size(), sampler="grid", storage=url, verify_top=3))
    study = optuna.load_study(study_name=outcome.study_name, storage=open_storage(url))
    top = best_policies(study, count=3)
    assert len(top) == 3
    assert all(not study.trials[row["trial"]].user_attrs.get(FINAL_PENDING) for row in top)
    assert len({str(study.trials[row["trial"]].user_attrs["canonical_policy"]) for row in top}) == 3
