"""A proposal between tied trials of its policy is predicted to tie, and pruned untrained (`pruning.plateau`)."""

from __future__ import annotations

import optuna

from autosync.policy_score import evaluate
from autosync.search.objective import Objective, ObjectiveSettings, trial_scoring, trial_seeds
from autosync.search.study.records import CONSTRAINT, PLATEAU, SCORING
from autosync.search.space import load_space
from autosync.search.strategies.full_budget import next_to_check
from autosync.search.strategies.pruning import RaceLimit, plateau
from autosync.search.study.cache import search_breakdown
from tests.conftest import small_job

SCORED = {"seeds": [0], "penalty": 2.0, "budget": {}}


def _done(number: int, value: float, policy: str = "dana_dc", scoring: dict | None = None,
          **params: object) -> optuna.trial.FrozenTrial:
    trial = optuna.trial.create_trial(value=value, user_attrs={
        "policy": {"policy": policy, "params": params}, SCORING: scoring or SCORED})
    trial.number = number
    return trial


def test_a_point_between_tied_trials_is_in_their_plateau():
    trials = [_done(0, 18.0, dc_lambda=0.5), _done(1, 18.0, dc_lambda=3.0), _done(2, 25.0, dc_lambda=3.9)]
    assert plateau(trials, {"policy": "dana_dc", "params": {"dc_lambda": 1.7}}, SCORED) == (18.0, [0, 1])
    assert plateau(trials, {"policy": "dana_dc", "params": {"dc_lambda": 3.5}}, SCORED) is None  # outside the box
    assert plateau(trials, {"policy": "dana_dc", "params": {"dc_lambda": 1.7}}, {**SCORED, "seeds": [1]}) is None


def test_no_plateau_from_one_point_other_categories_or_a_policy_without_numbers():
    one = [_done(0, 18.0, dc_lambda=0.5), _done(1, 18.0, dc_lambda=0.5)]  # the same point twice is one point
    assert plateau(one, {"policy": "dana_dc", "params": {"dc_lambda": 0.5}}, SCORED) is None
    rules = [_done(0, 30.0, "backup", k=2, lr_rule="fixed"), _done(1, 30.0, "backup", k=6, lr_rule="sqrt")]
    assert plateau(rules, {"policy": "backup", "params": {"k": 4, "lr_rule": "fixed"}}, SCORED) is None
    alike = [_done(0, 30.0, "backup", k=2, lr_rule="fixed"), _done(1, 30.0, "backup", k=6, lr_rule="fixed")]
    assert plateau(alike, {"policy": "backup", "params": {"k": 4, "lr_rule": "fixed"}}, SCORED) == (30.0, [0, 1])
    assert plateau(alike, {"policy": "dana_slim", "params": {}}, SCORED) is None


def test_a_point_in_two_plateaus_of_different_times_gets_no_prediction():
    trials = [_done(0, 18.0, dc_lambda=0.5), _done(1, 18.0, dc_lambda=3.0),
              _done(2, 25.0, dc_lambda=1.0), _done(3, 25.0, dc_lambda=2.0)]
    assert plateau(trials, {"policy": "dana_dc", "params": {"dc_lambda": 1.5}}, SCORED) is None


def test_a_proposal_between_tied_runs_is_pruned_untrained_at_their_time_and_checked_if_they_fail(tmp_path):
    """DANA-DC's lambda on a small job: two far-apart values reach the target at the same evaluation, so a
    value between them is pruned untrained at that time; a value outside them trains."""
    job = small_job(budget={"max_virtual_seconds": 60})
    space_file = tmp_path / "dana_dc.yaml"
    space_file.write_text("name: dana_dc\npolicies:\n  dana_dc:\n"
                          "    dc_lambda: {type: float, low: 0.1, high: 4.0, log: true}\n")
    space = load_space(space_file, job.cluster.n_workers)
    seeds = trial_seeds(job, 1)
    reference = {**evaluate(job, {"policy": "bsp", "params": {}}, seeds), **trial_scoring(job, seeds, 2.0)}
    objective = Objective(job, space, ObjectiveSettings(), reference["final_metric"], reference, race=RaceLimit)
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'p.db'}")
    for dc_lambda in (0.2, 3.5, 1.0, 3.9):
        study.enqueue_trial({"dana_dc.dc_lambda": dc_lambda})
    study.optimize(objective, n_trials=4)
    low, high, between, outside = study.trials
    assert low.state.name == high.state.name == "COMPLETE" and low.values == high.values  # tied: a plateau
    assert between.state.name == "PRUNED" and between.user_attrs[PLATEAU] == [0, 1]
    assert between.user_attrs["virtual_seconds"] == 0.0
    assert between.intermediate_values[between.last_step] == low.values[0]
    assert outside.state.name != "PRUNED" and outside.user_attrs["virtual_seconds"] > 0
    assert search_breakdown(study)["pruned_in_plateau"] == 1
    # the answer's check comes first; the plateau's pruned trial counts at its time, behind the tied trials
    assert next_to_check(study).number == low.number


def _bar_study(value: float, reached: int, curve: list[list[float]]) -> optuna.Study:
    study = optuna.create_study()
    study.add_trial(optuna.trial.create_trial(value=value, user_attrs={
        "policy": {"policy": "bsp", "params": {}}, "reached": reached, "curve": curve, SCORING: SCORED},
        constraints={CONSTRAINT: 0.0}))  # BSP: the constraint's reference
    return study


def test_a_bar_that_missed_the_target_is_raced_on_its_whole_run():
    """BSP missed the target in its 200 s (its value is the miss penalty, 400): a trial that took twice as long
    to reach the metric it stands at is predicted to miss too, from 30% of BSP's run (not of 400 s)."""
    curve = [[float(t), 0.3 + 0.002 * t] for t in range(10, 201, 10)]  # 0.32 at 10 s ... 0.70 at 200 s
    race = RaceLimit(_bar_study(400.0, 0, curve))
    assert race.predicted_late(50.0, 0.32, lower_is_better=False) is None  # under 30% of the run
    assert race.predicted_late(60.0, 0.32, lower_is_better=False) == 6 * 400.0  # 0.32 took BSP 10 s
    assert race.predicted_late(60.0, 0.40, lower_is_better=False) is None  # on BSP's pace (0.40 at 50 s)
    reached = RaceLimit(_bar_study(200.0, 1, curve))  # a bar that reached it counts from its time to target
    assert reached.predicted_late(60.0, 0.32, lower_is_better=False) == 6 * 200.0


def test_the_pace_reads_the_best_metric_so_far_so_a_dip_does_not_stop_the_fastest_run():
    """heldout-004's runs (seed 0, test accuracy every 2 s, target 0.92): ASP with a fixed step reaches it at
    38 s (the bar); ASP with a staleness-scaled step dips from 0.87 to 0.63 at 12 s and reaches it at 20 s.
    Read at its last evaluation it took 3x the bar's time to 0.63 (a predicted 114 s: stopped); read at its
    best so far, 0.87, it is ahead of the bar all along."""
    from autosync.search.objective import TimeToTargetBound

    bar = [[0.0, 0.061], [2.0, 0.493], [4.0, 0.666], [6.0, 0.635], [8.0, 0.638], [10.0, 0.671], [12.0, 0.501],
           [14.0, 0.652], [16.0, 0.721], [18.0, 0.557], [20.0, 0.602], [22.0, 0.643], [24.0, 0.543], [26.0, 0.694],
           [28.0, 0.68], [30.0, 0.78], [32.0, 0.844], [34.0, 0.908], [36.0, 0.908], [38.0, 0.947]]
    run = [(0.0, 0.061), (2.0, 0.471), (4.0, 0.741), (6.0, 0.866), (8.0, 0.813), (10.0, 0.674), (12.0, 0.627),
           (14.0, 0.805), (16.0, 0.864), (18.0, 0.914), (20.0, 0.933)]
    race = RaceLimit(_bar_study(38.0, 1, bar))
    job = small_job(target={"metric": "test_accuracy", "threshold": 0.92})
    bound = TimeToTargetBound(job)
    for t, accuracy in run:
        bound.update({"time": t, "test_accuracy": accuracy})
        assert race.predicted_late(t, bound.best, lower_is_better=False) is None
    assert race.predicted_late(12.0, 0.627, lower_is_better=False) > 2 * 38.0  # the last evaluation's reading
    assert bound.reached_at == 20.0


def test_the_tune_line_says_how_many_were_pruned_untrained_in_a_plateau():
    from autosync.reporting.console import breakdown_line as _breakdown_line

    counts = {"stopped_at_target": 9, "answered_by_equivalent": 3, "pruned": 11, "pruned_on_pace": 7,
              "pruned_in_plateau": 3, "full_budget_checks": 1, "forked_checks": 1, "forked_trials": 0, "given_up": 0}
    line = _breakdown_line(counts)
    assert "11 were pruned (7 on their pace, 3 untrained, between trials of their policy that tied)" in line
    assert "11 were pruned;" in _breakdown_line({**counts, "pruned_on_pace": 0, "pruned_in_plateau": 0})
