"""Pruning on the objective itself: stop a trial once it can no longer be among the candidates the search keeps.

A trial's bound on its time-to-target (`autosync.search.objective.TimeToTargetBound`) is the virtual time
trained so far while the target is not met, the time it was met afterwards: it only grows. The search
keeps the fastest `places` policies (the answer; the K that --verify-top and --confirm-top re-run), so a
trial whose bound passes the `places`-th fastest time-to-target among the completed trials that may be
feasible (one per policy) cannot be among them and stops there (successive halving's rule with one rung
per evaluation, the incumbent as the bar). The bar is a candidate whose final metric may not be known yet
(`autosync.search.full_budget`): should it fail its full-budget check, a trial pruned against it could
have won, so the checks also re-run, unpruned, the pruned trials whose bound lies below the answer found.

Optuna's percentile pruners do not fit this signal: they compare the best value a trial reported at any
step, and a bound that only grows is best at step one. The objective decides locally (`RaceLimit`), so
a run does not write every evaluation to the storage; it reports its bound once, when it is pruned.
"""

from __future__ import annotations

import json
import time

import optuna

from autosync.search.objective import CANONICAL, may_be_feasible

REFRESH_SECONDS = 2.0  # how often (wall) a running trial re-reads the bar: other processes may lower it


def race_limit(trials: "list[optuna.trial.FrozenTrial]", places: int = 1) -> float | None:
    """The `places`-th fastest time-to-target among the completed trials that may be feasible, one per
    policy (equivalent trials count once); None while fewer policies have finished."""
    best: dict[str, float] = {}
    for t in trials:
        if t.state == optuna.trial.TrialState.COMPLETE and may_be_feasible(t):
            key = json.dumps(t.user_attrs.get(CANONICAL) or t.user_attrs.get("policy") or t.params or t.number,
                             sort_keys=True)
            best[key] = min(best.get(key, float("inf")), t.values[0])
    times = sorted(best.values())
    return times[places - 1] if len(times) >= places else None


class RaceLimit:
    """The bar one running trial must stay under, read from its study when the trial starts and again
    every REFRESH_SECONDS of wall time (processes sharing the study lower it meanwhile)."""

    def __init__(self, study: optuna.Study, places: int = 1, refresh_seconds: float = REFRESH_SECONDS):
        self.study, self.places, self.refresh_seconds = study, places, refresh_seconds
        self._read_at = -float("inf")
        self._limit: float | None = None

    def exceeded_by(self, bound: float) -> bool:
        """Whether a trial whose time-to-target is at least `bound` cannot be among the kept places."""
        now = time.monotonic()
        if now - self._read_at >= self.refresh_seconds:
            self._limit = race_limit(self.study.get_trials(deepcopy=False), self.places)
            self._read_at = now
        return self._limit is not None and bound > self._limit


class TargetRacePruner(optuna.pruners.BasePruner):
    """The same rule for `trial.should_prune()` (studies run by hand): prune when the reported bound exceeds
    the `places`-th fastest finished policy that may be feasible."""

    def __init__(self, places: int = 1):
        self.places = places

    def prune(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> bool:
        step = trial.last_step
        if step is None:
            return False
        limit = race_limit(study.get_trials(deepcopy=False), self.places)
        return limit is not None and trial.intermediate_values[step] > limit
