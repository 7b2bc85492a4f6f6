"""The neighbours' observed values as TPE's prior: a new job's search learns from jobs already tuned.

A new job's study starts from its nearest tuned jobs' winners (`autosync.search.tune`, queued first). Their
other trials say more: which parts of the space were slow there. TPE reads them as if they were trials of
this study, each on this job's scale: a neighbour's time to target over that job's BSP time (its speedup
over BSP), times this job's BSP time; pruned trials by their last bound, scaled alike; their constraints
as they were. Where a parameter's range is the number of workers (backup workers' k from 1 to n), its
value is scaled by the ratio of the two n, as the neighbours' winners are (`autosync.search.tune`), and a
trial whose policy then lies outside this job's space (its ranges, its choices) is left out.

The prior trials are never stored in the study: everything that reads it (the best trial, `--patience`,
the search's cost and breakdown, the cache record) sees this job's trials only. TPE counts them among
its startup trials (`n_startup_trials`), so a study with a prior proposes with TPE from its first trial
instead of at random; as the study's own trials accumulate, the prior trials, numbered before them,
weigh less in TPE's "above" set (its recency weights) and are outnumbered in its "below" set.
Only the neighbour jobs' studies of the same space and execution are read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from autosync.search.study import _optuna_internals as internals
from autosync.search.study.records import (
    CONSTRAINT_AT, FULL_BUDGET_OF, POLICY, PRIOR_OF, PRIOR_TRIALS, SAME_AS, StudyRecord, TrialRecord,
)
from autosync.search.recommend.vote import adapt
from autosync.search.study._optuna_internals import storage_of

if TYPE_CHECKING:
    import optuna

    from autosync.core.job import JobSpec
    from autosync.search.space import SearchSpace

MAX_PRIOR_TRIALS = 200  # at most this many prior trials, from the nearest neighbours first


def prior_trials(storage: Any, neighbours: list[dict[str, Any]], space: "SearchSpace", execution: str | None,
                 constraint_at: str, job: "JobSpec", bsp_time: float) -> "list[optuna.trial.FrozenTrial]":
    """The finished, trained trials of each neighbour job's study of `space` (by name; the same execution and
    `constraint_at`, one study per job), nearest job first, on this job's scale (see the module docstring).
    `neighbours` as `tune` keeps them on the study ({study, n_workers, ...}); a neighbour without such a
    study gives none, and a trial whose policy (adapted to this n) lies outside this job's `space` is left out."""
    import optuna

    studies = {s.study_name: s for s in internals.all_studies(storage)}
    prior: list[optuna.trial.FrozenTrial] = []
    read: set[str] = set()
    for near in neighbours:
        found = studies.get(near["study"])
        fingerprint = StudyRecord(found.user_attrs).fingerprint if found is not None else None
        for name, s in sorted(studies.items()):
            theirs = StudyRecord(s.user_attrs)
            bsp = (theirs.bsp_reference or {}).get("time_to_target")
            if fingerprint is None or fingerprint in read or theirs.fingerprint != fingerprint \
                    or theirs.space != space.name or theirs.execution != execution or not bsp \
                    or (theirs.cache or {}).get(CONSTRAINT_AT) != constraint_at:
                continue
            read.add(fingerprint)
            states = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
            for t in optuna.load_study(study_name=name, storage=storage).get_trials(deepcopy=False, states=states):
                if SAME_AS in t.user_attrs or FULL_BUDGET_OF in t.user_attrs or POLICY not in t.user_attrs:
                    continue  # a copy or a re-run of another trial: it would count twice
                mapped = _on_this_job(t, near.get("n_workers"), job, space, bsp_time / bsp, f"{name}#{t.number}")
                if mapped is not None:
                    prior.append(mapped)
    prior = prior[:MAX_PRIOR_TRIALS]
    for i, t in enumerate(prior):  # numbered before this study's trials: the oldest in TPE's recency weights
        t.number = i - len(prior)
    return prior


def _on_this_job(trial: "optuna.trial.FrozenTrial", their_n: int | None, job: "JobSpec", space: "SearchSpace",
                 scale: float, source: str) -> "optuna.trial.FrozenTrial | None":
    """`trial` of a neighbour as a trial of this job: its policy adapted to this n as the winners are
    (`autosync.search.recommend.vote.adapt`: a backup count k scaled), as this space's parameters and
    distributions, its values times `scale`; None when the policy lies outside this job's space, or the
    trial has no value."""
    import optuna


    policy = TrialRecord(trial).policy
    if their_n and their_n != job.cluster.n_workers:
        policy = adapt(policy, their_n, job)
    params = space.trial_params(policy) if policy is not None else None
    distributions = space.distributions(params) if params else None
    if not distributions:
        return None
    made = {"params": params, "distributions": distributions, "user_attrs": {PRIOR_OF: source},
            "constraints": dict(trial.constraints)}
    if trial.state == optuna.trial.TrialState.COMPLETE:
        if trial.values is None or len(trial.values) != 1:
            return None
        return optuna.trial.create_trial(value=trial.values[0] * scale, **made)
    if not trial.intermediate_values:
        return None
    return optuna.trial.create_trial(state=optuna.trial.TrialState.PRUNED, **made,
                                     intermediate_values={s: v * scale for s, v in trial.intermediate_values.items()})


def give_prior(study: "optuna.Study", neighbours: list[dict[str, Any]], space: "SearchSpace", execution: str | None,
               constraint_at: str, job: "JobSpec", bsp_time: float | None) -> int:
    """Hand the study's sampler its neighbours' trials (`prior_trials`), where it reads a prior (TPE) and
    the study started from neighbours; how many it got (also kept on the study, `PRIOR_TRIALS`: 0 when
    it got none, a resumed study included)."""

    prior = prior_trials(storage_of(study), neighbours, space, execution, constraint_at, job, bsp_time) \
        if neighbours and bsp_time and hasattr(study.sampler, "prior") and len(study.directions) == 1 else []
    if hasattr(study.sampler, "prior"):
        study.sampler.prior = prior
    if study.user_attrs.get(PRIOR_TRIALS, 0) != len(prior):
        study.set_user_attr(PRIOR_TRIALS, len(prior))
    return len(prior)


class _StudyWithPrior:
    """A study as TPE reads it: its own trials and, before them, the prior's (read-only view; every other
    attribute is the study's own)."""

    def __init__(self, study: "optuna.Study", prior: "list[optuna.trial.FrozenTrial]"):
        self._study = study
        self._prior = prior

    def __getattr__(self, name: str) -> Any:
        return getattr(self._study, name)

    def _get_trials(self, deepcopy: bool = True, states: Any = None, use_cache: bool = False,
                    ) -> "list[optuna.trial.FrozenTrial]":
        own = self._study._get_trials(deepcopy=deepcopy, states=states, use_cache=use_cache)
        return [t for t in self._prior if states is None or t.state in states] + list(own)

    def get_trials(self, deepcopy: bool = True, states: Any = None) -> "list[optuna.trial.FrozenTrial]":
        return self._get_trials(deepcopy=deepcopy, states=states)


def tpe_with_prior(**kwargs: Any) -> "optuna.samplers.TPESampler":
    """A TPE sampler (`kwargs` as `optuna.samplers.TPESampler`'s) whose `prior` list of trials, empty until
    set, it reads along with the study's own."""
    import optuna

    class PriorTPESampler(optuna.samplers.TPESampler):
        def __init__(self, **options: Any):
            super().__init__(**options)
            self.prior: "list[optuna.trial.FrozenTrial]" = []

        def infer_relative_search_space(self, study, trial):  # type: ignore[no-untyped-def]
            return super().infer_relative_search_space(self._view(study), trial)  # groups the prior's too

        def sample_relative(self, study, trial, search_space):  # type: ignore[no-untyped-def]
            return super().sample_relative(self._view(study), trial, search_space)

        def sample_independent(self, study, trial, param_name, param_distribution):  # type: ignore[no-untyped-def]
            return super().sample_independent(self._view(study), trial, param_name, param_distribution)

        def _view(self, study: "optuna.Study") -> Any:
            return _StudyWithPrior(study, self.prior) if self.prior else study

    return PriorTPESampler(**kwargs)
