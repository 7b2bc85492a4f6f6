"""A full-budget check near the rule's edge, judged on a second seed as the reference grid judges."""

from __future__ import annotations

import statistics
import warnings

import optuna
import pytest

from autosync.policy_score import constraint, evaluate
from autosync.search.objective import BSP, Objective, ObjectiveSettings
from autosync.search.space import SPACE_DIR, load_space
from autosync.search.strategies.second_seed import (
    RunStore, SecondSeedJudge, full_budget_run, near_the_edge, two_seed_margin,
)
from autosync.search.study.records import (
    FULL_BUDGET_OF, SECOND_SEED_CHECK, SECOND_SEED_RUNS, VIRTUAL_SECONDS, constraint_of,
)
from tests.conftest import small_job

CANDIDATE = {"policy": "backup", "params": {"k": 2, "lr_rule": "fixed"}}


def _job():
    return small_job(budget={"max_virtual_seconds": 30}, target={"metric": "test_accuracy", "threshold": 0.8})


def test_the_edge_is_a_tolerance_either_side():
    assert near_the_edge(0.004, 0.01) and near_the_edge(-0.0099, 0.01) and near_the_edge(0.0, 0.01)
    assert not near_the_edge(0.01, 0.01) and not near_the_edge(-0.02, 0.01) and not near_the_edge(0.0, 0.0)


def test_the_second_seed_verdict_is_the_mean_against_bsps_mean_and_its_runs_are_stored_once(tmp_path):
    """The candidate's mean final metric over both seeds against BSP's over the same two; both runs train the
    whole budget once (a second verdict reuses them)."""
    job = _job()
    runs = RunStore(optuna.create_study(storage=f"sqlite:///{tmp_path / 's.db'}"), [])
    first, bsp_first = 0.81, 0.83  # as the search's seed might have ended: 0.01 short of BSP's less the tolerance
    margin, record = two_seed_margin(job, CANDIDATE, first, bsp_first, 0.01, job.seed + 1, 2.0, runs)
    mine = evaluate(job, CANDIDATE, [job.seed + 1])
    bsp = evaluate(job, BSP, [job.seed + 1])
    assert record["final_metric"] == mine["final_metric"] and record["bsp_final_metric"] == bsp["final_metric"]
    assert margin == constraint(job, statistics.fmean([first, mine["final_metric"]]),
                                statistics.fmean([bsp_first, bsp["final_metric"]]), 0.01)
    assert record["one_seed_constraint"] == pytest.approx(0.01)
    stored = runs.study.user_attrs[SECOND_SEED_RUNS]
    assert len(stored) == 2  # each policy's full run
    trained = sum(run[VIRTUAL_SECONDS] for run in stored.values())
    assert trained == pytest.approx(mine[VIRTUAL_SECONDS] + bsp[VIRTUAL_SECONDS])
    again = two_seed_margin(job, CANDIDATE, first, bsp_first, 0.01, job.seed + 1, 2.0, runs)
    assert again == (margin, record)
    assert sum(run[VIRTUAL_SECONDS] for run in runs.study.user_attrs[SECOND_SEED_RUNS].values()) == trained


def test_a_candidate_that_diverges_on_the_second_seed_breaks_the_rule(tmp_path):
    job = small_job(budget={"max_virtual_seconds": 30}, workload__optimizer={"lr": 10.0, "momentum": 0.9},
                    workload__dataset={"name": "synthetic_regression", "n_samples": 600, "n_features": 10},
                    workload__model={"name": "mlp", "hidden": [16]}, workload__loss="mse",
                    target={"metric": "test_loss", "threshold": 0.1})
    runs = RunStore(optuna.create_study(storage=f"sqlite:///{tmp_path / 's.db'}"), [])
    margin, record = two_seed_margin(job, CANDIDATE, 0.5, 0.5, 0.01, job.seed + 1, 2.0, runs)
    assert margin > 0 and "reason" in record
    assert "reason" in full_budget_run(job, CANDIDATE, job.seed + 1, 2.0, runs)  # stored as failed: not trained again


@pytest.mark.parametrize("offset, judged", [(0.005, True), (0.05, False)])
def test_a_check_near_the_edge_is_judged_again_on_a_second_seed(tmp_path, offset, judged):
    """A full-budget check whose one-seed margin lies within the tolerance of the edge records its second
    seed and takes the two seeds' verdict; one far from the edge keeps its own."""
    job = _job()
    final = evaluate(job, CANDIDATE, [job.seed])["final_metric"]
    reference = final + 0.01 + offset  # the candidate ends `offset` short of BSP's final less the tolerance
    space = load_space(SPACE_DIR / "static_k.yaml", job.cluster.n_workers)
    objective = Objective(job, space, ObjectiveSettings(tolerance=0.01), reference,
                          edge=SecondSeedJudge(job, reference, 0.01, 2.0, [job.seed]))
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'c.db'}")
    study.enqueue_trial({"backup.k": 2, "backup.lr_rule": "fixed"}, user_attrs={FULL_BUDGET_OF: 0})
    study.optimize(objective, n_trials=1)
    check = study.trials[0]
    assert (SECOND_SEED_CHECK in check.user_attrs) is judged
    if judged:
        assert constraint_of(check) == check.user_attrs[SECOND_SEED_CHECK]["constraint"]
    else:
        assert constraint_of(check) == pytest.approx(offset)


def test_a_trial_answered_by_a_check_judged_on_two_seeds_keeps_its_verdict(tmp_path):
    """A later proposal of the checked point is answered by the check's result without training: its
    constraint is the two seeds' verdict too, from the stored runs."""
    job = _job()
    final = evaluate(job, CANDIDATE, [job.seed])["final_metric"]
    space = load_space(SPACE_DIR / "static_k.yaml", job.cluster.n_workers)
    objective = Objective(job, space, ObjectiveSettings(tolerance=0.01), final + 0.015,
                          edge=SecondSeedJudge(job, final + 0.015, 0.01, 2.0, [job.seed]))
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'c.db'}")
    study.enqueue_trial({"backup.k": 2, "backup.lr_rule": "fixed"}, user_attrs={FULL_BUDGET_OF: 0})
    study.enqueue_trial({"backup.k": 2, "backup.lr_rule": "fixed"})
    study.optimize(objective, n_trials=2)
    check, copy = study.trials
    assert copy.user_attrs["same_as_trial"] == check.number and copy.user_attrs["virtual_seconds"] == 0.0
    assert constraint_of(copy) == constraint_of(check) == check.user_attrs[SECOND_SEED_CHECK]["constraint"]


def test_a_search_on_several_seeds_or_holding_the_rule_at_bsps_target_keeps_its_verdict():
    job = _job()
    study = optuna.create_study()
    assert SecondSeedJudge(job, 0.9, 0.01, 2.0, [job.seed, job.seed + 1])(study, CANDIDATE, 0.885, 0.005) \
        == (0.005, None)
    assert SecondSeedJudge(job, 0.9, 0.01, 2.0, [job.seed], horizon=20.0)(study, CANDIDATE, 0.885, 0.005) \
        == (0.005, None)
    assert SecondSeedJudge(job, 0.9, 0.01, 2.0, [job.seed])(study, CANDIDATE, 0.8, 0.09) == (0.09, None)  # far


def _store_runs(url: str, name: str, tag: str, count: int) -> None:
    """One process's runs, stored one by one as the checks store them (a spawned process's target)."""
    runs = RunStore(optuna.load_study(study_name=name, storage=url), [])
    for i in range(count):
        runs.put(f"{tag}-{i}", {"final_metric": float(i)})


@pytest.mark.processes
def test_two_processes_storing_runs_in_one_study_at_once_keep_every_run(tmp_path):
    """Each put reads the study's runs and writes them back: without the storage lock around the two, one
    process's write drops the runs the other stored in between."""
    import multiprocessing

    url = f"sqlite:///{tmp_path / 'runs.db'}"
    optuna.create_study(study_name="s", storage=url)
    spawn = multiprocessing.get_context("spawn")
    workers = [spawn.Process(target=_store_runs, args=(url, "s", tag, 25)) for tag in ("a", "b")]
    for w in workers:
        w.start()
    for w in workers:
        w.join(120)
        assert w.exitcode == 0
    stored = optuna.load_study(study_name="s", storage=url).user_attrs[SECOND_SEED_RUNS]
    assert sorted(stored) == sorted(f"{tag}-{i}" for tag in ("a", "b") for i in range(25))


@pytest.mark.parametrize("on", [True, False])
def test_the_setting_switches_the_judge_off(tmp_path, on):
    """`ObjectiveSettings.second_seed` off (the hook bench_ablation measures the judge with): the search's
    objective judges no check again, and the search's seed alone decides."""
    from autosync.search.request import TuneRequest
    from autosync.search.study.storage import open_storage
    from autosync.search.tune import load_study, run_trials

    job = _job()
    request = TuneRequest(job, load_space(SPACE_DIR / "static_k.yaml", job.cluster.n_workers),
                          storage=f"sqlite:///{tmp_path / 's.db'}", sampler="tpe",
                          settings=ObjectiveSettings(second_seed=on))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)  # the TPE sampler's arguments
        study = load_study(request, open_storage(request.storage))
    objective = run_trials(study, request, {"final_metric": 0.9}, budget=0, deadline=None)
    assert isinstance(objective.edge, SecondSeedJudge) is on
