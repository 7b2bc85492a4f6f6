"""A portfolio search that cannot lose a whole policy family.

A TPE search over a space of several policies judges a family by the trials it drew from it: where the first
setting of a family is poor (ASP with a fixed step misses the target on a straggling cluster, while ASP
with a staleness-scaled step is the fastest policy there), TPE treats the whole branch as bad and never
comes back. The portfolio search is built the way auto-sklearn 2.0 builds its answer (Feurer et al., 2022:
a portfolio of configurations that do well on earlier datasets, raced with successive halving) and keeps
TPE only inside the families:

1. **Portfolio.** One or two settings of every family of the space (the space file's `portfolio`, chosen on
   the committed families by `results/portfolio/choose.py`) are queued first and raced: a trial stops once
   it cannot be among the kept candidates, by its bound or by its pace (the predicted time to target,
   `autosync.search.strategies.pruning`), never by its metric early in the run.
2. **Families that can still win.** Each free trial then picks its family here (`next_family`), and TPE
   samples the family's own parameters from that family's trials only (the parameters of a family are
   `family.param` in Optuna, a group of their own). A family stays in while its best trial, the time it
   reached the target or the bound it was stopped at, is within `FAMILY_MARGIN` of the best family's (a
   family is judged by its best child, not its worst); a stopped trial counts at the time its pace predicts,
   where the pace can tell (`RaceLimit.predicted`), else at its bound. The leading family gets every other trial, the others take turns, fewest trials first; a family
   whose every point is tried (BSP, DANA-Slim) drops out.

Trials that propose an already answered point are answered without training and take no trial slot
(`autosync.search.study.trials.budget_used`).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import optuna

from autosync.search.study.records import PREDICTED, TrialRecord, has_own_failure
from autosync.search.space import POLICY_PARAM, SearchSpace
from autosync.search.space_file import resolve_share

if TYPE_CHECKING:
    from autosync.core.job import JobSpec

FAMILY_MARGIN = 1.5  # a family stays in the search while its best is within this factor of the best family's


def portfolio_policies(space: SearchSpace, job: "JobSpec") -> list[dict[str, Any]]:
    """The space's portfolio as policies on `job` (shares of n resolved), in the file's order, each once."""
    from autosync.catalog import split_policy_spec

    out: list[dict[str, Any]] = []
    for spec in space.portfolio:
        name, params = split_policy_spec(spec, option=f"{space.path}: portfolio")
        policy = {"policy": name, "params": {k: resolve_share(v, job.cluster.n_workers) for k, v in params.items()}}
        if policy not in out:
            out.append(policy)
    return out


def family_standing(trials: "list[optuna.trial.FrozenTrial]", families: list[str]) -> dict[str, float]:
    """Each family's best time so far: a completed trial's time to target, a pruned trial's predicted time (the
    pace's, where it could tell) or else its bound; infinity for a family whose trials all failed; families not tried are left
    out."""
    standing: dict[str, float] = {}
    for t in trials:
        family = _family(t, families)
        if family is None:
            continue
        value = _value(t)
        if value is not None:
            standing[family] = min(standing.get(family, math.inf), value)
        elif has_own_failure(t):
            standing.setdefault(family, math.inf)
    return standing


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


def contenders(standing: dict[str, float], margin: float = FAMILY_MARGIN) -> list[str]:
    """The families that can still win, best first: within `margin` of the best family's time."""
    finite = [v for v in standing.values() if math.isfinite(v)]
    if not finite:
        return []
    best = min(finite)
    return sorted((f for f, v in standing.items() if v <= best * margin), key=lambda f: (standing[f], f))


def next_family(study: "optuna.Study", space: SearchSpace, number: int) -> str | None:
    """The family trial `number` searches in: a family of the space not tried yet first, else the leading
    family on every other trial and the other contenders in turn (fewest trials first); families whose
    points are all tried are passed over. None when no family is left (the caller's sampler decides)."""
    families = space.policies
    states = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED, optuna.trial.TrialState.FAIL)
    done = [t for t in study.get_trials(deepcopy=False, states=states) if t.number != number]
    open_ = [f for f in families if not _exhausted(space, f, done)]
    tried = family_standing(done, families)
    untried = [f for f in open_ if f not in tried]
    if untried:
        return untried[0]
    alive = [f for f in contenders(tried) if f in open_]
    if not alive:
        return None
    counts = {f: sum(1 for t in done if _family(t, families) == f) for f in alive}
    free = sum(1 for t in done if _family(t, families) in alive)
    if len(alive) == 1 or free % 2 == 0:
        return alive[0]
    others = alive[1:]
    return min(others, key=lambda f: (counts[f], others.index(f)))


def _exhausted(space: SearchSpace, family: str, trials: "list[optuna.trial.FrozenTrial]") -> bool:
    """Whether every point of `family`'s sub-space has been tried (a discrete family only)."""
    size = space.policy_size(family)
    if size is None:
        return False
    tried = {tuple(sorted((k, v) for k, v in t.params.items() if k.startswith(f"{family}.")))
             for t in trials if _family(t, [family]) == family}
    return len(tried) >= size


class PortfolioSampler(optuna.samplers.BaseSampler):
    """An Optuna sampler: the family (`policy`) of a free trial from `next_family`, every other parameter from
    the wrapped sampler (TPE, which models each family's parameters on that family's trials)."""

    def __init__(self, inner: "optuna.samplers.BaseSampler", space: SearchSpace):
        self.inner = inner
        self.space = space

    @property
    def prior(self) -> "list[optuna.trial.FrozenTrial]":  # the neighbours' trials TPE reads (`strategies.prior`)
        return self.inner.prior

    @prior.setter
    def prior(self, trials: "list[optuna.trial.FrozenTrial]") -> None:
        self.inner.prior = trials

    def infer_relative_search_space(self, study: "optuna.Study", trial: "optuna.trial.FrozenTrial",
                                    ) -> "dict[str, optuna.distributions.BaseDistribution]":
        return self.inner.infer_relative_search_space(study, trial)

    def sample_relative(self, study: "optuna.Study", trial: "optuna.trial.FrozenTrial",
                        search_space: "dict[str, optuna.distributions.BaseDistribution]") -> dict[str, Any]:
        params = dict(self.inner.sample_relative(study, trial, search_space))
        params.pop(POLICY_PARAM, None)  # the family is chosen here, never by TPE's model of the branches
        return params

    def sample_independent(self, study: "optuna.Study", trial: "optuna.trial.FrozenTrial", param_name: str,
                           param_distribution: "optuna.distributions.BaseDistribution") -> Any:
        if param_name == POLICY_PARAM:
            family = next_family(study, self.space, trial.number)
            if family is not None and family in getattr(param_distribution, "choices", ()):
                return family
        return self.inner.sample_independent(study, trial, param_name, param_distribution)

    def reseed_rng(self) -> None:
        self.inner.reseed_rng()

    def before_trial(self, study: "optuna.Study", trial: "optuna.trial.FrozenTrial") -> None:
        self.inner.before_trial(study, trial)

    def after_trial(self, study: "optuna.Study", trial: "optuna.trial.FrozenTrial",
                    state: "optuna.trial.TrialState", values: "list[float] | None") -> None:
        self.inner.after_trial(study, trial, state, values)


def portfolio_sampler(seed: int, space: SearchSpace) -> PortfolioSampler:
    """The portfolio search's sampler over `space`, TPE inside the families."""
    from autosync.search.strategies.prior import tpe_with_prior

    return PortfolioSampler(tpe_with_prior(seed=seed, n_startup_trials=5, multivariate=True, group=True), space)
