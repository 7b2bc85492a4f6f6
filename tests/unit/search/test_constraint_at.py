"""`tune --constraint-at bsp-target`: the final-metric constraint held where BSP reaches the target, so
neither BSP's reference nor a candidate's check trains past BSP's time to target."""

from __future__ import annotations

import optuna
import pytest

from autosync.engine.forks import FORKS, ForkStore
from autosync.policy_score import evaluate
from autosync.search.objective import trial_seeds
from autosync.search.study.records import BSP_TARGET, FINAL_PENDING, FORKED, FULL_BUDGET_OF, HORIZON
from autosync.search.space import SPACE_DIR, load_space
from autosync.search.study.storage import open_storage
from autosync.search.tune import _full_run_seconds, tune
from tests.conftest import small_job, tune_request

JOB = dict(budget={"max_virtual_seconds": 30}, target={"metric": "test_accuracy", "threshold": 0.8})


def test_a_run_stopped_at_a_horizon_forks_from_its_run_stopped_at_the_target():
    """A check to BSP's time to target continues the candidate's stopped run: bit-identical to a run from
    the start that stops at the same virtual time, trained only from the target to there."""
    job = small_job(**JOB)
    policy = {"policy": "backup", "params": {"k": 2, "lr_rule": "fixed"}}
    seeds = trial_seeds(job, 2)
    FORKS.clear()
    stopped = evaluate(job, policy, seeds, stop_at_target=True, details=True)
    horizon = max(stopped["seed_times"]) + 7.0
    forked = evaluate(job, policy, seeds, horizon=horizon)
    FORKS.clear()
    fresh = evaluate(job, policy, seeds, horizon=horizon)
    assert {k: v for k, v in forked.items() if k not in ("virtual_seconds", FORKED)} == \
        {k: v for k, v in fresh.items() if k != "virtual_seconds"}
    assert fresh["virtual_seconds"] == pytest.approx(2 * horizon)  # each seed ran to the horizon, no further
    assert forked[FORKED] == pytest.approx(stopped["virtual_seconds"])
    assert forked["virtual_seconds"] == pytest.approx(2 * horizon - stopped["virtual_seconds"])
    whole = evaluate(job, policy, seeds)  # the budget's end is later: another metric, more training
    assert whole["virtual_seconds"] > 2 * horizon


def test_stopped_early_counts_only_the_runs_stopped_before_the_horizon():
    job = small_job(**JOB)
    policy = {"policy": "backup", "params": {"k": 2, "lr_rule": "fixed"}}
    stopped = evaluate(job, policy, trial_seeds(job, 1), stop_at_target=True)
    assert stopped["stopped_early"] == stopped["reached"] == 1
    assert evaluate(job, policy, trial_seeds(job, 1), stop_at_target=True,
                    horizon=stopped["time_to_target"])["stopped_early"] == 0


def test_a_prefix_kept_past_the_horizon_is_not_resumed():
    store = ForkStore()
    store.put("k", b"early", 5.0, undecided_above=0.1)
    store.put("k", b"late", 20.0, undecided_above=0.2)
    assert store.prefix("k", 0.5).snapshot == b"late"
    assert store.prefix("k", 0.5, until=10.0).snapshot == b"early"
    assert store.prefix("k", 0.5, until=1.0) is None


def _tune(tmp_path, at: str, trials: int | None = None, settings: dict | None = None):
    job = small_job(**JOB)
    space = load_space(SPACE_DIR / "static_k.yaml", job.cluster.n_workers)
    url = f"sqlite:///{tmp_path / 'studies.db'}"
    FORKS.clear()
    outcome = tune(tune_request(job, space, n_trials=trials or space.size(), sampler="grid", storage=url,
                                constraint_at=at, settings=settings))
    return outcome, optuna.load_study(study_name=outcome.study_name, storage=open_storage(url))


@pytest.mark.slow  # two tunes of the whole grid: about 8 s on 2 cores
def test_a_tune_holding_the_constraint_at_bsps_target_trains_no_run_past_it(tmp_path):
    """Every point of a small space both ways, in one storage: each its own study and cache record; at
    bsp-target BSP's reference stops at its target, the checks there, and the search costs less in the same
    unit (one full BSP run: the budget's 30 virtual s) with the same winner."""
    budget, _ = _tune(tmp_path, "budget")
    at, study = _tune(tmp_path, BSP_TARGET)
    assert at.study_name == budget.study_name + "-at-bsp-target"
    reference = study.user_attrs["bsp_reference"]
    assert reference[HORIZON] == reference["time_to_target"] < 30
    assert reference["virtual_seconds"] == pytest.approx(reference[HORIZON])
    assert at.cache["constraint_at"] == BSP_TARGET and budget.cache["constraint_at"] == "budget"
    assert at.cache["search_cost_unit"] == budget.cache["search_cost_unit"]  # one = 30.0 virtual s
    assert at.cache["best_policy"] == budget.cache["best_policy"]
    assert at.cache["best_value"] == budget.cache["best_value"]
    assert at.cache["search_cost_bsp_trainings"] < budget.cache["search_cost_bsp_trainings"]
    assert at.cache["search_breakdown"]["checked_at"] == reference[HORIZON]
    checks = [t for t in study.trials if FULL_BUDGET_OF in t.user_attrs and t.state.name == "COMPLETE"]
    assert checks and all(t.user_attrs["virtual_seconds"] + t.user_attrs.get(FORKED, 0.0)
                          == pytest.approx(reference[HORIZON]) for t in checks)
    winner = study.trials[at.cache["best_trial"]]
    assert not winner.user_attrs.get(FINAL_PENDING)


@pytest.mark.slow  # a tune of the whole grid, unpruned: 3-4 s on 2 cores
def test_a_candidate_no_faster_than_bsp_to_the_target_is_never_checked(tmp_path):
    """BSP's reference reaches the target first and keeps the constraint, so a candidate that reached the
    target no earlier cannot win: no check trains it. Pruning is off, since it stops such a candidate
    before it finishes (here backup k=1 under the proportional rule, at a quarter of the step)."""
    at, study = _tune(tmp_path, BSP_TARGET, settings={"prune": False})
    reference = study.user_attrs["bsp_reference"]
    checked = {t.user_attrs[FULL_BUDGET_OF] for t in study.trials if FULL_BUDGET_OF in t.user_attrs}
    slower = [t for t in study.trials if t.state.name == "COMPLETE" and FULL_BUDGET_OF not in t.user_attrs
              and "same_as_trial" not in t.user_attrs and t.values[0] >= reference[HORIZON]]
    assert slower, "no candidate finished slower than BSP: nothing to check here"
    assert checked and all(t.number not in checked for t in slower)
    assert study.trials[at.cache["best_trial"]].values[0] < reference[HORIZON]


@pytest.mark.slow  # two tunes: about 2 s on 2 cores
def test_studies_holding_the_constraint_elsewhere_share_no_bsp_reference(tmp_path):
    """A study at the budget's end after one at bsp-target on the same job trains its own BSP reference
    (the other's final metric is read at another time), and answers its own trials."""
    _tune(tmp_path, BSP_TARGET, trials=3)
    budget, study = _tune(tmp_path, "budget", trials=3)
    reference = study.user_attrs["bsp_reference"]
    assert HORIZON not in reference and "reference_from" not in reference
    assert reference["virtual_seconds"] == pytest.approx(30.0)
    assert not any(str(t.user_attrs.get("same_as_trial", "")).count("#") for t in study.trials)


def test_one_full_bsp_run_is_measured_from_the_runs_to_the_target():
    """The cost unit where BSP stopped at its target: the budget's virtual seconds, or its updates (epochs)
    at the rate BSP kept, whichever ends first."""
    in_seconds = small_job(budget={"max_virtual_seconds": 30})
    assert _full_run_seconds(in_seconds, 10.0, {"updates": 8, "epochs": 0.2}) == 30.0
    in_updates = small_job(budget={"max_updates": 40})
    assert _full_run_seconds(in_updates, 10.0, {"updates": 8, "epochs": 0.2}) == pytest.approx(50.0)
    both = small_job(budget={"max_updates": 40, "max_virtual_seconds": 30})
    assert _full_run_seconds(both, 10.0, {"updates": 8, "epochs": 0.2}) == 30.0


def test_where_bsp_misses_the_target_its_reference_trains_the_budget_once(tmp_path):
    """No time to target, no horizon: the constraint falls back to the budget's end, BSP's runs (which
    trained the whole budget to miss) are its reference as they are, and the cost unit is one of them."""
    job = small_job(budget={"max_virtual_seconds": 20}, target={"metric": "test_accuracy", "threshold": 0.95})
    space = load_space(SPACE_DIR / "static_k.yaml", job.cluster.n_workers)
    FORKS.clear()
    outcome = tune(tune_request(job, space, n_trials=2, sampler="grid", storage=f"sqlite:///{tmp_path / 's.db'}",
                                constraint_at=BSP_TARGET))
    study = optuna.load_study(study_name=outcome.study_name, storage=open_storage(f"sqlite:///{tmp_path / 's.db'}"))
    reference = study.user_attrs["bsp_reference"]
    assert reference["reached"] == 0 and HORIZON not in reference
    assert reference["virtual_seconds"] == pytest.approx(20.0)
    assert outcome.cache["search_cost_unit"].endswith("(one = 20.0 virtual s)")
    assert outcome.cache["search_breakdown"]["checked_at"] is None
