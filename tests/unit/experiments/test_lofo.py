"""Leave-one-family-out scoring on the table (`autosync.experiments.lofo`): the grid's choice is made on
the tune's search seeds by the tune's rule, answers are judged on held-out seeds only, and the pooled
figures are deterministic."""

from __future__ import annotations

import statistics

import pytest

from autosync.experiments import lofo
from autosync.experiments.reference_grid import keeps_constraint
from autosync.table import Table
from tests.conftest import small_job

BSP = {"policy": "bsp", "params": {}}


def job():
    return small_job(target__threshold=0.6, budget__max_updates=40, workload__evaluation__every_seconds=1.0,
                     cluster__round_trip={"kind": "gamma", "v_task": 0.5, "heterogeneous": True})


def lattice(n):
    return [BSP, {"policy": "asp", "params": {}}, {"policy": "backup", "params": {"k": 1}}]


def test_the_grid_s_choice_is_the_fastest_point_on_the_search_seeds_that_keeps_bsp_s_final_metric(tmp_path):
    table, job_ = Table(tmp_path), job()
    seeds = lofo.search_seeds(job_)
    assert seeds == [job_.seed, job_.seed + 1]
    finals = lofo.table_finals(table, job_, seeds)
    feasible = [p for p in lattice(4) if keeps_constraint(job_, finals(p), finals(BSP))
                and not lofo.table_score(table, job_, p, seeds).missed]
    expected = min(feasible, key=lambda p: lofo.table_score(table, job_, p, seeds).time)
    assert lofo.choice(table, job_, lattice, seeds).policy == expected


def test_the_grid_s_second_choice_is_the_fastest_point_slower_than_its_choice_that_keeps_bsp_s_final_metric(
        tmp_path):
    table, job_ = Table(tmp_path), job()
    seeds = lofo.search_seeds(job_)
    finals = lofo.table_finals(table, job_, seeds)
    first = lofo.choice(table, job_, lattice, seeds)
    slower = sorted((s for s in (lofo.table_score(table, job_, p, seeds) for p in lattice(4)) if s.time > first.time),
                    key=lambda s: s.time)
    feasible = [s for s in slower if not s.missed and keeps_constraint(job_, finals(s.policy), finals(BSP))]
    second = lofo.runner_up(table, job_, lattice, seeds)
    assert second.policy != first.policy and second.time > first.time
    assert second.policy == (feasible[0] if feasible else slower[0]).policy


def test_the_best_fixed_policy_has_the_lowest_median_held_out_ratio_over_the_family_s_jobs(tmp_path):
    table, jobs = Table(tmp_path), [job(), job().model_copy(update={"seed": 7})]
    labelled = {"bsp": BSP, "asp": {"policy": "asp", "params": {}}, "k=1": {"policy": "backup", "params": {"k": 1}}}
    grids = [lofo.table_score(table, j, BSP, [j.seed + 100, j.seed + 101]).time for j in jobs]
    label, ratios = lofo.best_fixed(table, jobs, grids, lambda n: labelled)
    every = {name: [lofo.table_score(table, j, p, [j.seed + 100, j.seed + 101]).time / g for j, g in zip(jobs, grids)]
             for name, p in labelled.items()}
    assert ratios == every[label]
    assert (statistics.median(ratios), max(ratios)) == min((statistics.median(r), max(r)) for r in every.values())


def test_answers_are_judged_on_the_held_out_seeds_against_both_references(tmp_path):
    table, job_ = Table(tmp_path), job()
    answers = [lofo.Answered(BSP, 1.0), lofo.Answered({"policy": "backup", "params": {"k": 1}}, 2.0)]
    result = lofo.score_job(table, "small", job_, lattice, answers)
    held_out = [job_.seed + 100, job_.seed + 101]
    bsp = lofo.table_score(table, job_, BSP, held_out)
    assert result.answers[0]["time"] == bsp.time and result.answers[0]["cost"] == 1.0
    assert result.grid_choice_time == lofo.table_score(table, job_, result.grid_choice, held_out).time
    assert result.ratios()[0] == pytest.approx(bsp.time / result.grid_choice_time)
    assert result.ratios("held_out_best")[0] == pytest.approx(bsp.time / result.held_out_best_time)
    assert result.misses == 0 and result.spread >= 1.0



def test_a_recorded_result_is_scored_again_by_today_s_rules_from_its_answers_alone(tmp_path):
    """A result recorded under another rule (here a grid's choice, times and verdicts made up) keeps only its
    answers' policies and costs: everything else is scored again on the table, as `score_job` scores it."""
    table, job_ = Table(tmp_path), job()
    answers = [lofo.Answered(BSP, 1.0), lofo.Answered({"policy": "backup", "params": {"k": 1}}, 2.0)]
    fresh = lofo.score_job(table, "small", job_, lattice, answers)
    stale = lofo.JobResult("small", job_.name, {"policy": "asp", "params": {}}, 0.5, BSP, 0.25, [7],
                           [{"policy": a.policy, "cost": a.cost, "time": 0.1, "missed": [], "keeps": False}
                            for a in answers])
    assert lofo.score_again(table, stale, job_, lattice) == fresh


def test_a_miss_counts_only_where_bsp_reaches_the_target():
    answered = {"policy": BSP, "cost": 1.0, "time": 10.0, "missed": [100]}
    common = dict(family="f", job="j", grid_choice=BSP, grid_choice_time=5.0, held_out_best=BSP,
                  held_out_best_time=5.0)
    assert lofo.JobResult(**common, bsp_missed=[], answers=[answered]).misses == 1
    assert lofo.JobResult(**common, bsp_missed=[100], answers=[answered]).misses == 0


def test_the_pooled_figures_and_their_intervals_are_the_same_on_every_run():
    results = [lofo.JobResult("f", f"j{i}", BSP, 10.0, BSP, 8.0, [],
                              [{"policy": BSP, "cost": c, "time": 10.0 + i, "missed": []} for c in (1.0, 3.0)])
               for i in range(5)]
    s = lofo.summary(results)
    assert s == lofo.summary(results)
    assert s["median"] == pytest.approx(1.2) and s["worst"] == pytest.approx(1.4) and s["median_cost"] == 2.0
    low, high = s["median_interval"]
    assert 1.0 <= low <= s["median"] <= high <= 1.4
    assert lofo.percentile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.5 and lofo.percentile([7.0], 0.9) == 7.0
