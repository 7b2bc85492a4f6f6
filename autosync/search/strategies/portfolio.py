"""A portfolio search that cannot lose a whole policy family.

A TPE search over a space of several policies judges a family by the trials it drew from it: where the first
setting of a family is poor (ASP with a fixed step misses the target on a straggling cluster, while ASP
with a staleness-scaled step is the fastest policy there), TPE treats the whole branch as bad and never
comes back. The portfolio search is built the way auto-sklearn 2.0 builds its answer (Feurer et al., 2022:
a portfolio of configurations that do well on earlier datasets, raced with successive halving) and keeps
TPE only inside the families:

1. **Portfolio, first round.** Each family's first setting in the space file's `portfolio` (chosen on the
   committed families by `results/portfolio/choose.py`) is queued first, in the file's order, and raced: a
   trial stops once it cannot be among the kept candidates, by its bound or by its pace (the predicted time
   to target, `autosync.search.strategies.pruning`), never by its metric early in the run. The round takes
   at most the budget less `FAMILY_TRIALS` trials (`fit_to_budget`), so that a search of 20 trials always
   searches inside the families; on a smaller budget the families listed last (those that win least
   often) wait for the second round.
2. **Families that can still win, the second round.** Each free trial then picks its family here
   (`next_family`). A family stays in while its best trial, the time it reached the target or the bound it
   was stopped at, is within `FAMILY_MARGIN` of the best family's (a family is judged by its best child, not
   its worst; successive halving's rule with one rung per round); a stopped trial counts at the time its
   pace predicts, where the pace can tell (`RaceLimit.predicted`), else at its bound. The leader's time is
   first held on a second seed (`autosync.search.strategies.leader`): a leader lucky on one seed would end
   the race of families that win on most, so the bar is the held leader's mean (`contenders`). The leading
   family gets
   every other trial, the others take turns, fewest trials first; a family whose every point is tried (BSP,
   DANA-Slim) drops out. A family's turn runs its next portfolio setting while it has one left
   (`next_preset`: the second round runs only for the families still in), then TPE samples the family's own
   parameters from that family's trials only (the parameters of a family are `family.param` in Optuna, a
   group of their own). A family the first round left out is tried while the budget still leaves
   `FAMILY_TRIALS` trials after it; a family whose every trial failed (its first setting diverged) runs
   its next setting before the contenders' turns.

A family's turn never goes to a point already run: where TPE proposes one in a discrete family (it does,
often: its model of a family with few trials peaks on the family's best point), the turn takes the untried
point of the family nearest the proposal (`untried_point`). Trials that propose an already answered point
by other ways (other samplers, other processes) are answered without training and take no trial slot
(`autosync.search.study.trials.budget_used`).
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np
import optuna

from autosync.search.strategies.check_families import ruled_out
from autosync.search.strategies.leader import held_runs, held_value
from autosync.search.study.records import ANSWERED, PREDICTED, TrialRecord, has_own_failure, outside_budget
from autosync.search.space import POLICY_PARAM, SearchSpace
from autosync.search.space_file import resolve_share

FAMILY_MARGIN = 1.5  # a family stays in the search while its best is within this factor of the best family's
FAMILY_TRIALS = 4  # trials of the budget the portfolio's first round always leaves to the search inside families


def portfolio_policies(space: SearchSpace, n_workers: int, fast_workers: int | None = None) -> list[dict[str, Any]]:
    """The space's portfolio as policies on `n_workers` workers (shares of n resolved, and `fast_workers`
    to the job's: `autosync.core.arrivals.fast_workers`), in the file's order, each once."""
    from autosync.catalog import split_policy_spec

    out: list[dict[str, Any]] = []
    for spec in space.portfolio:
        name, params = split_policy_spec(spec, option=f"{space.path}: portfolio")
        policy = {"policy": name, "params": {k: resolve_share(v, n_workers, fast_workers) for k, v in params.items()}}
        if policy not in out:
            out.append(policy)
    return out


def portfolio_rounds(policies: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(first round, second round) of a portfolio: each family's first setting, in the list's order, then
    the other settings in theirs."""
    first: dict[str, dict[str, Any]] = {}
    for policy in policies:
        first.setdefault(policy["policy"], policy)
    return list(first.values()), [p for p in policies if p not in first.values()]


def fit_to_budget(first_round: list[Any], budget: int,
                  trains: Callable[[Any], bool] = lambda _: True) -> list[Any]:
    """The first round's settings a search of `budget` trials queues: in order, as many as leave
    `FAMILY_TRIALS` trials to the search inside the families (`trains`: whether a setting takes a trial
    slot; BSP, answered by its reference, does not)."""
    room, out = budget - FAMILY_TRIALS, []
    for setting in first_round:
        if trains(setting):
            if room <= 0:
                break
            room -= 1
        out.append(setting)
    return out


def family_standing(trials: "list[optuna.trial.FrozenTrial]", families: list[str],
                    held: dict[int, dict[str, Any]] | None = None) -> dict[str, float]:
    """Each family's best time so far: a completed trial's time to target (a leader `held` on a second seed,
    and its twins: its mean over both, `autosync.search.strategies.leader`), a pruned trial's predicted time (the pace's,
    where it could tell) or else its bound; infinity for a family whose trials all failed or were ruled out
    by a failed full-budget check (`autosync.search.strategies.check_families.ruled_out`); families not
    tried are left out."""
    standing: dict[str, float] = {}
    held_points = {_point(t): (held or {})[t.number] for t in trials if t.number in (held or {})}  # twins too
    out = ruled_out(trials)
    for t in trials:
        family = _family(t, families)
        if family is None:
            continue
        if out(t):  # a failed check's candidate: as a failed trial
            standing.setdefault(family, math.inf)
            continue
        value = _value(t)
        if value is not None and t.state == optuna.trial.TrialState.COMPLETE:
            value = held_value(value, held_points.get(_point(t)))
        if value is not None:
            standing[family] = min(standing.get(family, math.inf), value)
        elif has_own_failure(t):
            standing.setdefault(family, math.inf)
    return standing


def _point(trial: "optuna.trial.FrozenTrial") -> tuple:
    return tuple(sorted(trial.params.items()))


def _family(trial: "optuna.trial.FrozenTrial", families: list[str]) -> str | None:
    name = trial.params.get(POLICY_PARAM) or (TrialRecord(trial).policy or {}).get("policy")
    return name if name in families else None


def _value(trial: "optuna.trial.FrozenTrial") -> float | None:
    """A completed trial's value, or a pruned one's: its bound, or the pace's prediction where there is one."""
    if trial.state == optuna.trial.TrialState.COMPLETE:
        return trial.values[0]
    if trial.state == optuna.trial.TrialState.PRUNED and trial.last_step is not None:
        return max(trial.intermediate_values[trial.last_step], trial.user_attrs.get(PREDICTED, 0.0))
    return None


def contenders(standing: dict[str, float], margin: float = FAMILY_MARGIN,
               held: dict[str, float] | None = None) -> list[str]:
    """The families that can still win, best first: within `margin` of the best family's time. With `held`
    (the standing where the leaders held on a second seed count at their mean: `family_standing(...,
    held)`), the bar is the best held standing and the families are ranked by it, while a family is judged
    by the better of its two standings: holding a leader raises the bar a lucky seed set, and never puts
    the held family behind families judged on one seed."""
    held = held if held is not None else standing
    finite = [v for v in held.values() if math.isfinite(v)]
    if not finite:
        return []
    best = min(finite)
    return sorted((f for f, v in standing.items() if min(v, held.get(f, v)) <= best * margin),
                  key=lambda f: (held.get(f, standing[f]), f))


def next_family(study: "optuna.Study", space: SearchSpace, number: int, budget: int | None = None,
                presets: list[dict[str, Any]] = ()) -> str | None:
    """The family trial `number` searches in: a family of the space not tried yet first (while a `budget`
    of trials still leaves `FAMILY_TRIALS` after it), else the leading family on every other trial and the
    other contenders in turn (fewest trials first). Families whose points are all tried are passed over, and
    the contenders are judged among the others: once the best family is fully tried (ASP's three rules), the
    trials go to the next families rather than to proposals of its tried points. A family whose every trial
    failed (diverged) runs its next setting among `presets` (trial parameters) before the contenders' turns,
    while it has one: a setting that diverged (a static k under `linear` with momentum 0.95) says nothing of
    the family's speed. None when no family is left (the caller's sampler decides)."""
    families = space.policies
    done = _finished(study, number)
    open_ = [f for f in families if not _exhausted(space, f, done)]
    tried = family_standing(done, families)
    held = {f: v for f, v in family_standing(done, families, held_runs(study)).items() if f in open_}
    untried = [f for f in open_ if f not in tried]
    if untried and (budget is None or _counted(done) < budget - FAMILY_TRIALS or not tried):
        return untried[0]
    failed = [f for f in open_ if tried.get(f) == math.inf and next_preset(study, f, presets, number) is not None]
    if failed:
        return failed[0]
    alive = contenders({f: v for f, v in tried.items() if f in open_}, held=held)  # a family fully tried is none
    if not alive:
        return None
    searched = [t for t in done if not outside_budget(t)]  # a check or a repair is no turn of its family
    counts = {f: sum(1 for t in searched if _family(t, families) == f) for f in alive}
    free = sum(1 for t in searched if _family(t, families) in alive)
    if len(alive) == 1 or free % 2 == 0:
        return alive[0]
    others = alive[1:]
    return min(others, key=lambda f: (counts[f], others.index(f)))


def next_preset(study: "optuna.Study", family: str, presets: list[dict[str, Any]],
                number: int) -> dict[str, Any] | None:
    """The trial parameters of `family`'s first setting among `presets` (the portfolio's, as trial
    parameters) that no trial other than `number` has run or is running; None when none is left."""
    states = (*_DONE, optuna.trial.TrialState.RUNNING)
    ran = [t.params for t in study.get_trials(deepcopy=False, states=states) if t.number != number]
    return next((p for p in presets if p.get(POLICY_PARAM) == family
                 and not any(all(params.get(k) == v for k, v in p.items()) for params in ran)), None)


_DONE = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED, optuna.trial.TrialState.FAIL)
_TAKEN = (*_DONE, optuna.trial.TrialState.RUNNING, optuna.trial.TrialState.WAITING)  # a point run, running or queued


def untried_point(space: SearchSpace, family: str, proposal: dict[str, Any], tried: list[dict[str, Any]],
                  rng: np.random.RandomState) -> dict[str, Any] | None:
    """The point of `family`'s discrete sub-space (as trial parameters) not among `tried` (trial parameters
    of trials run, running or queued) nearest to `proposal` (the sampler's values, some of the family's
    parameters possibly missing): a number's distance is its difference over its range, a categorical's 0 or
    1, a missing parameter's 0; ties drawn by `rng`. The proposal itself where it is complete and untried;
    None for a continuous family or one whose every point is tried."""
    def key(params: dict[str, Any]) -> tuple:
        return tuple(sorted((k, v) for k, v in params.items() if k.startswith(f"{family}.")))

    taken = {key(params) for params in tried}
    free = [point for point in space.policy_points(family) if key(point) not in taken]
    if not free:
        return None
    dims = space.dimensions[family]

    def distance(point: dict[str, Any]) -> float:
        total = 0.0
        for name, value in point.items():
            dim = dims.get(name.partition(".")[2])
            if dim is None or name not in proposal:
                continue
            if dim.type == "categorical":
                total += float(value != proposal[name])
            else:
                total += abs(value - proposal[name]) / ((dim.high - dim.low) or 1)
        return total

    distances = [distance(point) for point in free]
    nearest = [point for point, d in zip(free, distances) if d == min(distances)]
    return nearest[rng.randint(len(nearest))]


def _finished(study: "optuna.Study", number: int) -> "list[optuna.trial.FrozenTrial]":
    return [t for t in study.get_trials(deepcopy=False, states=_DONE) if t.number != number]


def _counted(trials: "list[optuna.trial.FrozenTrial]") -> int:
    """How many of `trials` took a slot of the budget (full-budget checks, repairs and answered points take
    none)."""
    return sum(1 for t in trials if not outside_budget(t) and not t.user_attrs.get(ANSWERED))


def _exhausted(space: SearchSpace, family: str, trials: "list[optuna.trial.FrozenTrial]") -> bool:
    """Whether every point of `family`'s sub-space has been tried (a discrete family only)."""
    size = space.policy_size(family)
    if size is None:
        return False
    tried = {tuple(sorted((k, v) for k, v in t.params.items() if k.startswith(f"{family}.")))
             for t in trials if _family(t, [family]) == family}
    return len(tried) >= size


class PortfolioSampler(optuna.samplers.BaseSampler):
    """An Optuna sampler: a free trial's family (`policy`) from `next_family`, and its parameters from the
    family's next portfolio setting not run yet (`presets`, as trial parameters; `next_preset`) where one is
    left, else from the wrapped sampler (TPE, which models each family's parameters on that family's
    trials). `budget`: the search's trials, for `next_family`."""

    def __init__(self, inner: "optuna.samplers.BaseSampler", space: SearchSpace,
                 presets: list[dict[str, Any]] = (), budget: int | None = None, seed: int | None = None):
        self.inner = inner
        self.space = space
        self.presets = list(presets)
        self.budget = budget
        self._rng = np.random.RandomState(seed)  # ties between untried points equally near TPE's proposal
        self._plans: dict[int, dict[str, Any]] = {}  # trial number -> its family (and preset), chosen once

    @property
    def prior(self) -> "list[optuna.trial.FrozenTrial]":  # the neighbours' trials TPE reads (`strategies.prior`)
        return self.inner.prior

    @prior.setter
    def prior(self, trials: "list[optuna.trial.FrozenTrial]") -> None:
        self.inner.prior = trials

    def _plan(self, study: "optuna.Study", number: int) -> dict[str, Any]:
        """Trial `number`'s family and, where the family has a second-round setting left, that setting's
        parameters (chosen on the first call, so that every parameter of the trial agrees)."""
        if number not in self._plans:
            family = next_family(study, self.space, number, self.budget, self.presets)
            preset = next_preset(study, family, self.presets, number) if family is not None else None
            self._plans[number] = preset or ({POLICY_PARAM: family} if family is not None else {})
        return self._plans[number]

    def infer_relative_search_space(self, study: "optuna.Study", trial: "optuna.trial.FrozenTrial",
                                    ) -> "dict[str, optuna.distributions.BaseDistribution]":
        return self.inner.infer_relative_search_space(study, trial)

    def sample_relative(self, study: "optuna.Study", trial: "optuna.trial.FrozenTrial",
                        search_space: "dict[str, optuna.distributions.BaseDistribution]") -> dict[str, Any]:
        plan = self._plan(study, trial.number)
        params = dict(self.inner.sample_relative(study, trial, search_space)) if len(plan) <= 1 else {}
        params.pop(POLICY_PARAM, None)  # the family is chosen here, never by TPE's model of the branches
        if len(plan) == 1:  # the family's own turn: TPE's proposal, or the untried point nearest it
            family = plan[POLICY_PARAM]
            tried = [t.params for t in study.get_trials(deepcopy=False, states=_TAKEN) if t.number != trial.number]
            point = untried_point(self.space, family, params, tried, self._rng)
            if point is not None:
                plan.update(point)
        return {**params, **{k: v for k, v in plan.items() if k != POLICY_PARAM and k in search_space}}

    def sample_independent(self, study: "optuna.Study", trial: "optuna.trial.FrozenTrial", param_name: str,
                           param_distribution: "optuna.distributions.BaseDistribution") -> Any:
        plan = self._plan(study, trial.number)
        if param_name in plan and (param_name != POLICY_PARAM
                                   or plan[param_name] in getattr(param_distribution, "choices", ())):
            return plan[param_name]
        return self.inner.sample_independent(study, trial, param_name, param_distribution)

    def reseed_rng(self) -> None:
        self.inner.reseed_rng()
        self._rng.seed()

    def before_trial(self, study: "optuna.Study", trial: "optuna.trial.FrozenTrial") -> None:
        self.inner.before_trial(study, trial)

    def after_trial(self, study: "optuna.Study", trial: "optuna.trial.FrozenTrial",
                    state: "optuna.trial.TrialState", values: "list[float] | None") -> None:
        self._plans.pop(trial.number, None)
        self.inner.after_trial(study, trial, state, values)


def portfolio_sampler(seed: int, space: SearchSpace, n_workers: int | None = None,
                      budget: int | None = None, fast_workers: int | None = None) -> PortfolioSampler:
    """The portfolio search's sampler over `space`, TPE inside the families; on `n_workers` workers a
    family's turn runs its portfolio settings not run yet first (the second round: the tune queues the
    first, and a family it left out for the budget starts from its first setting)."""
    from autosync.search.strategies.prior import tpe_with_prior

    settings = portfolio_policies(space, n_workers, fast_workers) if n_workers is not None else []
    presets = [params for policy in settings if (params := space.trial_params(policy)) is not None]
    return PortfolioSampler(tpe_with_prior(seed=seed, n_startup_trials=5, multivariate=True, group=True), space,
                            presets, budget, seed)
