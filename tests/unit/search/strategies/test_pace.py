"""The pace rule: a trial that took the margin times as long as the bar's run to reach its best metric so far
is predicted to reach the target that much later, and stops (`pruning.RaceLimit.predicted_late`)."""

from __future__ import annotations

import optuna

from autosync.search.study.records import CONSTRAINT, SCORING
from autosync.search.strategies.pruning import RaceLimit
from tests.conftest import small_job

SCORED = {"seeds": [0], "penalty": 2.0, "budget": {}}


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


def test_the_tune_line_says_how_many_were_pruned_on_their_pace():
    from autosync.reporting.console import breakdown_line as _breakdown_line

    counts = {"stopped_at_target": 9, "answered_by_equivalent": 3, "pruned": 11, "pruned_on_pace": 7,
              "full_budget_checks": 1, "forked_checks": 1, "forked_trials": 0, "given_up": 0}
    assert "11 were pruned (7 on their pace)" in _breakdown_line(counts)
    assert "11 were pruned;" in _breakdown_line({**counts, "pruned_on_pace": 0})
