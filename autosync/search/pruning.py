"""Pruning on the objective itself: stop a trial once it can no longer beat the median finished trial.

A trial reports, at every evaluation, a lower bound on its time-to-target
(`autosync.search.objective.TimeToTargetBound`): the virtual time trained so far while the target is not
met, the time it was met afterwards. `TargetRacePruner` stops it when that bound exceeds the median time-to-target of the completed feasible trials: slower
than half of them, it cannot be the best. Optuna's percentile pruners do not fit this signal: they
compare the best value a trial reported at any step, and a bound that only grows is best at step one,
so they never prune on it; pruning on the training loss instead stopped trials that had met the target
early but whose loss later lagged the median.
"""

from __future__ import annotations

import statistics

import optuna

from autosync.search.objective import may_be_feasible


class TargetRacePruner(optuna.pruners.BasePruner):
    """Prune when the reported time-to-target bound exceeds the median of finished, possibly feasible trials."""

    def __init__(self, n_startup_trials: int = 5):
        self.n_startup_trials = n_startup_trials  # finished feasible trials needed before any pruning

    def prune(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> bool:
        step = trial.last_step
        if step is None:
            return False
        finished = [t.values[0] for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
                    if may_be_feasible(t)]  # a trial stopped at the target is in the race until checked
        if len(finished) < self.n_startup_trials:
            return False
        return trial.intermediate_values[step] > statistics.median(finished)
