"""What the race reads of its finished runs (`race_trials.observed`): a run to the target that trained the whole
budget stands for its run to the end of the budget."""

from __future__ import annotations

import dataclasses

import optuna

from autosync.lattice import BSP_LABEL, BSP_POLICY
from autosync.race import Run
from autosync.search.race_trials import observed
from autosync.search.study.records import (FAIL_REASON, POLICY, RACE_FINAL, RACE_HORIZON, RACE_RUN, RACE_TIME,
                                           REACHED, TIME_TO_TARGET, VIRTUAL_SECONDS)

X = {"policy": "asp", "params": {}}


def _trial(run: Run, **attrs) -> optuna.trial.FrozenTrial:
    state = optuna.trial.TrialState.COMPLETE if attrs.get(RACE_TIME) is not None else optuna.trial.TrialState.PRUNED
    return optuna.trial.create_trial(state=state, value=attrs.get(RACE_TIME), user_attrs={
        RACE_RUN: dataclasses.asdict(run), POLICY: BSP_POLICY if run.label == BSP_LABEL else X, **attrs})


def test_bsp_s_run_to_the_target_that_trained_the_whole_budget_gives_its_time_and_final_metric_though_eliminated():
    """BSP raced in the portfolio missed the target at the budget's end (100 s) under a horizon of 110 s: it is
    eliminated (twice the budget, 200, is past 110), yet it was BSP's run to the end of the budget, the final-metric
    rule's reference, so its time and final metric are read as that run's (nothing asks for that run again)."""
    against = ("x", BSP_LABEL)
    trials = [_trial(Run("x", 0, "portfolio", against), **{RACE_TIME: 55.0, TIME_TO_TARGET: 55.0, REACHED: 1,
                                                              VIRTUAL_SECONDS: 55.0, RACE_HORIZON: None}),
              _trial(Run(BSP_LABEL, 0, "portfolio", against), **{RACE_TIME: None, TIME_TO_TARGET: 200.0, REACHED: 0,
                                                                 VIRTUAL_SECONDS: 100.0, RACE_HORIZON: 110.0,
                                                                 RACE_FINAL: 0.9})]
    seen = observed(None, trials=trials)
    assert seen.finals == {(BSP_LABEL, 0): 0.9} and seen.times[(BSP_LABEL, 0)] == 200.0
    assert seen.stopped == {(BSP_LABEL, 0): 110.0} and seen.full_times == {}


def test_another_s_whole_run_gives_its_final_metric_and_a_failed_run_without_one_gives_none():
    trials = [_trial(Run("x", 1, "second seed", ("x",)), **{RACE_TIME: 200.0, TIME_TO_TARGET: 200.0, REACHED: 0,
                                                            VIRTUAL_SECONDS: 100.0, RACE_HORIZON: None,
                                                            RACE_FINAL: 0.8}),
              # a backend that failed says nothing of the run: `RaceObjective` records no final metric
              _trial(Run("x", 0, "portfolio", ("x",)), **{RACE_TIME: None, RACE_HORIZON: float("inf"),
                                                          FAIL_REASON: "the processes backend failed",
                                                          VIRTUAL_SECONDS: 0.0})]
    seen = observed(None, trials=trials)
    assert seen.finals == {("x", 1): 0.8} and seen.full_times == {("x", 1): 200.0}
    assert seen.times == {("x", 1): 200.0} and ("x", 0) in seen.stopped
