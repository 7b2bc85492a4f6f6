"""Pruning on the objective itself: stop a trial once it can no longer beat the median finished trial.

A trial reports, at every evaluation, a lower bound on its time-to-target (`TimeToTargetBound`): the
virtual time trained so far while the target is not met, the time it was met afterwards. `TargetRacePruner`
stops it when that bound exceeds the median time-to-target of the completed feasible trials: slower
than half of them, it cannot be the best. Optuna's percentile pruners do not fit this signal: they
compare the best value a trial reported at any step, and a bound that only grows is best at step one,
so they never prune on it; pruning on the training loss instead stopped trials that had met the target
early but whose loss later lagged the median.
"""

from __future__ import annotations

import statistics
from typing import Any

import optuna

from autosync.job import JobSpec
from autosync.search.objective import constraint_of


class TimeToTargetBound:
    """A lower bound on a run's time-to-target, updated at each of its evaluations."""

    def __init__(self, job: JobSpec):
        self.target = job.target
        self.reached_at: float | None = None

    def update(self, info: dict[str, Any]) -> float:
        """Read one evaluation record (virtual `time` and the metrics); returns the bound."""
        if self.reached_at is None and self.target.reached(info.get(self.target.metric)):
            self.reached_at = float(info["time"])
        return self.reached_at if self.reached_at is not None else float(info["time"])


class TargetRacePruner(optuna.pruners.BasePruner):
    """Prune when the reported time-to-target bound exceeds the median of finished feasible trials."""

    def __init__(self, n_startup_trials: int = 5):
        self.n_startup_trials = n_startup_trials  # finished feasible trials needed before any pruning

    def prune(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> bool:
        step = trial.last_step
        if step is None:
            return False
        finished = [t.values[0] for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
                    if constraint_of(t) <= 0]
        if len(finished) < self.n_startup_trials:
            return False
        return trial.intermediate_values[step] > statistics.median(finished)
