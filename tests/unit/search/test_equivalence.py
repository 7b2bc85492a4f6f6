"""Equivalences found by a check (`autosync.search.equivalence`): policies whose runs on the job's proxy agree
bit for bit are one class; the check's answers are held against real runs of the job, and a search trains
such a class once."""

from __future__ import annotations

import optuna
import torch

from autosync.catalog import make_policy
from autosync.engine import simulate
from autosync.engine.simulator import Simulator
from autosync.engine.proxy import ProxyRun, proxy_of
from autosync.search.equivalence import FIRST_CHUNK, EquivalenceCheck
from autosync.policy_score import evaluate
from autosync.search.objective import Objective, ObjectiveSettings, canonical_on, trial_scoring, trial_seeds
from autosync.search.study.records import FOUND_EQUIVALENT
from autosync.search.space import load_space
from autosync.search.strategies.pruning import RaceLimit
from tests.conftest import small_job

ASP = {"policy": "asp", "params": {"lr_rule": "fixed"}}
BSP = {"policy": "bsp", "params": {}}


def _job(momentum: float):
    return small_job(workload__optimizer={"lr": 0.1, "momentum": momentum}, budget={"max_virtual_seconds": 30})


def _same_run(job, a: dict, b: dict) -> bool:
    ra, rb = simulate(job, make_policy(a["policy"], a["params"])), simulate(job, make_policy(b["policy"], b["params"]))
    return torch.equal(ra.final_params, rb.final_params) and ra.trace.arrivals == rb.trace.arrivals \
        and ra.metrics == rb.metrics


def test_the_check_finds_dana_slim_without_momentum_runs_as_asp_and_the_job_agrees():
    job = _job(0.0)
    slim = make_policy("dana_slim").to_dict()
    assert EquivalenceCheck(job).find(slim, [BSP, ASP]) == ASP
    assert _same_run(job, slim, ASP)


def test_with_momentum_the_check_keeps_dana_slim_and_asp_apart():
    job = _job(0.9)
    check = EquivalenceCheck(job)
    assert check.find(make_policy("dana_slim").to_dict(), [ASP, BSP]) is None
    assert not _same_run(job, make_policy("dana_slim").to_dict(), ASP)


def test_the_check_finds_what_no_canonical_form_lists_and_the_job_agrees():
    """With momentum, Multi-ASGD is DC-ASGD at lambda = 0 and LWP at horizon 0 is heavy-ball ASP: found by
    running, confirmed on the job's own runs."""
    job = _job(0.9)
    check = EquivalenceCheck(job)
    dc0 = make_policy("dc_asgd", {"dc_lambda": 0.0}).to_dict()
    for policy, twin in ((make_policy("multi_asgd").to_dict(), dc0),
                         (make_policy("lwp", {"horizon": 0.0}).to_dict(), ASP)):
        assert canonical_on(policy, job) == policy  # not listed
        assert check.find(policy, [BSP, ASP, dc0]) == twin
        assert _same_run(job, policy, twin)


def test_runs_that_agree_for_a_while_then_part_are_told_apart():
    """A switch to ASP half-way runs as BSP until then: the check follows the pair past its first updates and
    keeps them apart."""
    job = _job(0.9)
    check = EquivalenceCheck(job)
    halfway = make_policy("sync_switch", {"switch_at": 0.5, "config": "none"}).to_dict()
    assert check.find(halfway, [BSP]) is None
    assert check.proxy_updates > 4 * FIRST_CHUNK


def test_a_search_trains_a_found_class_once(tmp_path):
    job = _job(0.9)
    space_file = tmp_path / "async.yaml"
    space_file.write_text("name: async\npolicies:\n  dc_asgd:\n    dc_lambda: {type: float, low: 0.0, high: 1.0}\n"
                          "  multi_asgd: {}\n")
    space = load_space(space_file, job.cluster.n_workers)
    seeds = trial_seeds(job, 1)
    reference = {**evaluate(job, BSP, seeds), **trial_scoring(job, seeds, 2.0)}
    for find in (True, False):
        objective = Objective(job, space, ObjectiveSettings(find_equivalents=find), reference["final_metric"],
                              reference, race=RaceLimit)
        study = optuna.create_study(storage=f"sqlite:///{tmp_path / f'{find}.db'}")
        study.enqueue_trial({"policy": "dc_asgd", "dc_asgd.dc_lambda": 0.0})
        study.enqueue_trial({"policy": "multi_asgd"})
        study.optimize(objective, n_trials=2)
        dc0, multi = study.trials
        assert multi.values == dc0.values
        if find:
            assert multi.user_attrs["same_as_trial"] == dc0.number and multi.user_attrs["virtual_seconds"] == 0.0
            assert multi.user_attrs[FOUND_EQUIVALENT] == dc0.user_attrs["canonical_policy"]
        else:
            assert "same_as_trial" not in multi.user_attrs and multi.user_attrs["virtual_seconds"] > 0


def test_a_proxy_run_advanced_in_pauses_is_the_run_without_them():
    """The check pauses proxy runs between events and resumes them: every digest and the end must be those
    of a run that never paused (else both sides of a pair would be wrong alike, and agree)."""
    job = _job(0.9)
    proxy, workload = proxy_of(job)
    policy = make_policy("dana_slim")
    paused, whole = (ProxyRun(policy.to_dict(), Simulator(proxy, policy, workload=workload)) for _ in range(2))
    for upto in (1, 2, 5, 13, 40, 10 ** 9):
        paused.advance(upto)
    whole.advance(10 ** 9)
    assert paused.end == whole.end is not None and paused.digests == whole.digests and len(whole.digests) > 40


def test_a_search_space_can_turn_the_check_off(tmp_path):
    space_file = tmp_path / "unchecked.yaml"
    space_file.write_text("name: unchecked\nequivalence_check: false\npolicies:\n  multi_asgd: {}\n")
    assert load_space(space_file, 4).equivalence_check is False
    job = _job(0.9)
    space = load_space(space_file, job.cluster.n_workers)
    seeds = trial_seeds(job, 1)
    reference = {**evaluate(job, BSP, seeds), **trial_scoring(job, seeds, 2.0)}
    objective = Objective(job, space, ObjectiveSettings(), reference["final_metric"], reference, race=RaceLimit)
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'u.db'}")
    study.enqueue_trial({"policy": "multi_asgd"})
    study.optimize(objective, n_trials=1)
    assert objective.equivalents is None  # never built: no proxy ran
