"""Pruning on the objective itself: stop a trial once it can no longer be among the candidates the search keeps.

A trial's bound on its time-to-target (`autosync.search.objective.TimeToTargetBound`) is the virtual time
trained so far while the target is not met, the time it was met afterwards: it only grows. The search
keeps the fastest `places` policies (the answer; the K that --verify-top re-runs), so a
trial whose bound passes the `places`-th fastest time-to-target among the completed trials that may be
feasible (one per policy) cannot be among them and stops there (successive halving's rule with one rung
per evaluation, the incumbent as the bar). The bar is a candidate whose final metric may not be known yet
(`autosync.search.strategies.full_budget`): should it fail its full-budget check, a trial pruned against it could
have won, so the checks also re-run, unpruned, the pruned trials whose bound lies below the answer found.

Optuna's percentile pruners do not fit this signal: they compare the best value a trial reported at any
step, and a bound that only grows is best at step one. The objective decides locally (`RaceLimit`, the
study's pruner is Optuna's `NopPruner`), so a run does not write every evaluation to the storage; it
reports its bound once, when it is pruned.
"""

from __future__ import annotations

import time

import optuna

from autosync.search.study.records import CURVE, REACHED, broke_the_rule, may_be_feasible, policy_key

__all__ = ["PACE_MARGIN", "RaceLimit", "pace_ratio", "thinned"]

REFRESH_SECONDS = 2.0  # how often (wall) a running trial re-reads the bar: other processes may lower it
CURVE_POINTS = 64  # a stored curve is thinned to about this many points
PACE_MARGIN = 2.0  # the pace rule prunes a trial this many times slower than the bar to the same metric
PACE_FROM = 0.3  # ... once it has trained this fraction of the bar's time-to-target (early metrics are noise)


def race_bar(trials: "list[optuna.trial.FrozenTrial]", places: int = 1,
             ) -> "tuple[optuna.trial.FrozenTrial, float] | None":
    """The trial that sets the bar and the bar: the `places`-th fastest policy's fastest trial (one with a
    stored curve, where its policy has one) and its time; None while fewer policies have finished. A policy
    known to break the final-metric rule (`records.broke_the_rule`) sets no bar."""
    out = broke_the_rule(trials)
    best: dict[str, optuna.trial.FrozenTrial] = {}
    for t in trials:
        if t.state != optuna.trial.TrialState.COMPLETE or not may_be_feasible(t):
            continue
        key = policy_key(t)  # one JSON dump a trial: the bar is read again every REFRESH_SECONDS of a trial
        if key in out:
            continue
        if key not in best or (t.values[0], CURVE not in t.user_attrs) < (
                best[key].values[0], CURVE not in best[key].user_attrs):
            best[key] = t
    ranked = sorted(((t, t.values[0]) for t in best.values()), key=lambda pair: pair[1])
    return ranked[places - 1] if len(ranked) >= places else None


def thinned(curve: list[tuple[float, float]], points: int = CURVE_POINTS) -> list[list[float]]:
    """`curve` with about `points` of its points, the first and the last kept (a storage attribute stays small)."""
    step = max(1, -(-len(curve) // points))
    kept = curve[::step] + ([curve[-1]] if (len(curve) - 1) % step else [])
    return [[float(t), float(m)] for t, m in kept]


def pace_ratio(bar_curve: list[list[float]], elapsed: float, metric: float, lower_is_better: bool) -> float | None:
    """How many times longer a run took to reach `metric` (it stands there after `elapsed` virtual seconds)
    than the bar's run, which first reached it at the time its curve says (at its first evaluation after the
    start, for a metric the bar started at); None when the bar's curve never reached it (the run is ahead of
    the bar's whole curve)."""
    started = [(t, m) for t, m in bar_curve if t > 0]
    for t, m in started:
        if (m <= metric) if lower_is_better else (m >= metric):
            return elapsed / t
    return None


class RaceLimit:
    """The bar one running trial must stay under, read from its study when the trial starts and again
    every REFRESH_SECONDS of wall time (processes sharing the study lower it meanwhile).

    Two rules prune against it. The bound: a trial still short of the target later than the bar reached it
    cannot beat it (exact against one seed's time). The pace, a
    learning-curve rule on the predicted time-to-target, not on the raw metric (an asynchronous policy leads early and may end lower, Sync-Switch's premise): once a trial has
    trained PACE_FROM of the bar's time, if it took PACE_MARGIN times as long as the bar's run to reach the
    best metric it has reached so far (not the last evaluation's: a noisy metric dips and recovers), it is predicted to reach the target that many times later than the bar, and stops.
    That prediction can be wrong for a policy that speeds up late; the margin is the slack for it, and a
    trial pruned on pace records its predicted time, so the full-budget checks come back to it only if
    every faster candidate fails. A bar that missed the target (BSP on a job no trial has reached it on
    yet) races on its whole run's curve, from PACE_FROM of that run: a trial that took the margin times
    as long to reach the metric it stands at is predicted to miss the target too, so it can at best tie
    the bar's miss, and stops instead of training the whole budget.
    """

    def __init__(self, study: optuna.Study, places: int = 1, refresh_seconds: float = REFRESH_SECONDS,
                 pace_margin: float | None = PACE_MARGIN):
        self.study, self.places, self.refresh_seconds, self.pace_margin = study, places, refresh_seconds, pace_margin
        self._read_at = -float("inf")
        self._limit: float | None = None
        self._curve: list[list[float]] | None = None
        self._span: float | None = None

    def _refresh(self) -> None:
        now = time.monotonic()
        if now - self._read_at >= self.refresh_seconds:
            found = race_bar(self.study.get_trials(deepcopy=False), self.places)
            bar, self._limit = found if found is not None else (None, None)
            self._curve = None if bar is None else bar.user_attrs.get(CURVE)
            # the bar's time the pace rule counts from: its time-to-target on the seed its curve is of, or
            # where it missed the target (its value is then the miss penalty times that), the whole run its
            # curve spans
            missed = bar is not None and bar.user_attrs.get(REACHED) == 0 and bool(self._curve)
            self._span = None if bar is None else self._curve[-1][0] if missed else bar.values[0]
            self._read_at = now

    def exceeded_by(self, bound: float) -> bool:
        """Whether a trial whose time-to-target is at least `bound` cannot be among the kept places."""
        self._refresh()
        return self._limit is not None and bound > self._limit

    @staticmethod
    def keep_curve(trial: optuna.Trial, curve: list[tuple[float, float]]) -> None:
        """Store a finished trial's curve (thinned; up to the target, or the whole run where it missed the
        target), for the trials that race against it."""
        if curve:
            trial.set_user_attr(CURVE, thinned(curve))

    def predicted_late(self, elapsed: float, metric: float | None, lower_is_better: bool) -> float | None:
        """The pace rule: a predicted time-to-target, PACE_MARGIN or more times the bar's, for a trial that
        stands at `metric` after `elapsed` virtual seconds (short of the target); None when it may still win."""
        if self.pace_margin is None:
            return None
        predicted = self.predicted(elapsed, metric, lower_is_better)
        return predicted if predicted is not None and predicted >= self.pace_margin * self._limit else None

    def predicted(self, elapsed: float, metric: float | None, lower_is_better: bool) -> float | None:
        """The pace's prediction of the time-to-target of a trial that stands at `metric` after `elapsed`
        virtual seconds: the bar's time, times how many times longer the trial took to
        reach that metric; None before PACE_FROM of the bar's time on its curve's seed, or where the bar's
        curve never reached the metric."""
        self._refresh()
        if self._limit is None or not self._curve or metric is None or elapsed < PACE_FROM * self._span:
            return None
        ratio = pace_ratio(self._curve, elapsed, metric, lower_is_better)
        return ratio * self._limit if ratio is not None else None
