"""The tuning objective: a policy's time-to-target on a job, averaged over seeds, with an accuracy constraint.

A trial trains the sampled policy with R seeds on the virtual-clock simulator, or on the backend the
settings name (worker processes, the virtual or the real clock, as `autosync run` builds it). Its value is the mean
time-to-target in virtual seconds; a seed that never reaches the target counts as `penalty` times the
virtual time it ran. Its final target metric must stay within `tolerance` of BSP's (an Optuna
constraint: feasible when <= 0). The runs and the constraint are `autosync.policy_score`'s, which the
experiments score their grids with too. A run that diverges raises `RunFailed`, which the study records as a
failed trial with the reason. Every trial stores what it cost (virtual seconds trained) so the search
cost can be stated in units of one BSP training.

Most of it is one class, `Objective`, whose steps for one trial (the pace race against the pruning bar,
the forks of a shared prefix, the resampled and retried runs, the twins that answer it untrained, the record
written) share that trial's state; split across modules, each step would take and return that state.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from autosync.core.declare import default_of
from autosync.core.job import JobSpec
from autosync.policy_score import MISS_PENALTY, STOPPED_EARLY, RunFailed, constraint, evaluate
from autosync.search.study.records import (
    ANSWERED, BSP_REFERENCE, BUDGET, CANONICAL, CONSTRAINT, CURVE, FAIL_REASON,
    FINAL_METRIC, FINAL_PENDING, FORKED, FULL_BUDGET, FULL_BUDGET_OF, HORIZON, KILLED,
    POLICY, PROCESS, PRUNED_ON_PACE, REACHED, REPAIR_OF, RESAMPLED, RETRY_OF, ROLE, RUNS, SAME_AS, SCORING,
    TIME_TO_TARGET, TIMED_OUT, VIRTUAL_SECONDS, final_pending, has_full_result, has_own_failure, outside_budget,
    role_of, scored_as,
)
from autosync.search.study.claim import process_gone, process_tag, tag
from autosync.search.study.siblings import finished_trials
from autosync.search.tune_options import TuneOptions
from autosync.catalog import policy_from_dict
from autosync.search.study import _optuna_internals as internals
from autosync.search.study.running_twins import MAX_RESAMPLES, Resampled, claim_point, wait_for

if TYPE_CHECKING:
    import optuna

    from autosync.core.job import OptimizerSpec
    from autosync.engine.backends import BackendChoice
    from autosync.search.space import SearchSpace
    from autosync.search.strategies.pruning import RaceLimit as Race  # the bar a trial races

__all__ = ["BSP", "MAX_UNCOUNTED", "Objective", "ObjectiveSettings", "TimeToTargetBound", "canonical_on",
           "canonical_policy", "trial_scoring", "trial_seeds"]


MAX_UNCOUNTED = 20  # past this many such answers in a study they count, so a search of a tried-out space ends


class TimedOut(RunFailed):
    """The tune's --timeout passed while the trial trained: it stops at its next evaluation, marked
    `TIMED_OUT`, and does not count against the budget (a resumed search runs its place again)."""


@dataclass(frozen=True)
class ObjectiveSettings:
    """How one trial is scored (the defaults of the options among these are `TuneOptions`').

    `prune` is no option (a tune always prunes): `benchmarks/bench_ablation.py` switches it off on the
    request to measure what it is worth."""

    repeats: int = default_of(TuneOptions, "repeats")  # seeds per trial (the objective is noisy)
    tolerance: float = default_of(TuneOptions, "tolerance")  # allowed final-metric shortfall against BSP
    penalty: float = MISS_PENALTY  # a seed that misses the target counts as penalty x its virtual time
    multi_objective: bool = False  # (time, final metric) with a Pareto front instead of one value
    prune: bool = True  # stop a trial once it cannot be among the kept candidates (`autosync.search.strategies.pruning`)
    # a trial's runs end once they reach the target (its time-to-target is then known exactly, the rest of
    # the budget is waste); only the candidates that can still win are re-run at full budget for the
    # final-metric constraint (`autosync.search.strategies.full_budget`); single objective only
    stop_at_target: bool = True
    backend: "BackendChoice | None" = None  # where each run trains, as `autosync run` builds it (None: simulator)
    # where the final-metric constraint is held: at the end of the budget (BUDGET, Sync-Switch's rule), or at
    # the time BSP reaches the target (BSP_TARGET: neither BSP's reference nor a candidate's check trains
    # past it; `autosync.search.strategies.full_budget`)
    constraint_at: str = default_of(TuneOptions, "constraint_at")


class TimeToTargetBound:
    """A lower bound on a run's time-to-target, updated at each of its evaluations, and the run's curve up
    to the target: (virtual time, target metric) at each evaluation until the one that met it, which the
    pace rule holds other runs against (`autosync.search.study.records.CURVE`)."""

    def __init__(self, job: JobSpec):
        self.target = job.target
        self.reached_at: float | None = None
        self.curve: list[tuple[float, float]] = []

    @property
    def best(self) -> float | None:
        """The best target metric the run has reached so far (the highest accuracy, the lowest loss): what the
        pace rule reads, since an evaluation's metric is noisy and a dip is not a slower pace (an asynchronous
        run's test accuracy falls and recovers between evaluations)."""
        metrics = [m for _, m in self.curve]
        if not metrics:
            return None
        return min(metrics) if self.target.lower_is_better else max(metrics)

    def update(self, info: dict[str, Any]) -> float:
        """Read one evaluation record (virtual `time` and the metrics); returns the bound."""
        if self.reached_at is None:
            metric = info.get(self.target.metric)
            if metric is not None:
                self.curve.append((float(info["time"]), float(metric)))
            if self.target.reached(metric):
                self.reached_at = float(info["time"])
        return self.reached_at if self.reached_at is not None else float(info["time"])


def trial_seeds(job: JobSpec, repeats: int) -> list[int]:
    """The seeds every trial (and the BSP reference) trains with: the job's seed and the next ones."""
    return [job.seed + i for i in range(repeats)]


def trial_scoring(job: JobSpec, seeds: list[int], penalty: float, constraint_at: str = BUDGET) -> dict[str, Any]:
    """What two results must share to stand for each other: the seeds, the miss penalty and the budget
    (the job's fingerprint leaves the budget out, and a run's time-to-target and final metric depend on it),
    and where the final metric is read (`ObjectiveSettings.constraint_at`, named when not the budget's end)."""
    return {"seeds": seeds, "penalty": penalty, "budget": job.budget.model_dump(mode="json"),
            **({"constraint_at": constraint_at} if constraint_at != BUDGET else {})}


class Objective:
    """Optuna objective for one job and one search space."""

    def __init__(self, job: JobSpec, space: "SearchSpace", settings: ObjectiveSettings, reference: float,
                 bsp_score: dict[str, Any] | None = None, siblings: "list[optuna.Study] | None" = None,
                 storage_url: str | None = None, race: "Callable[[optuna.Study], Race] | None" = None):
        self.job = job
        self.space = space
        self.settings = settings
        self.reference = reference  # BSP's final metric: the accuracy constraint's reference
        self.bsp_score = bsp_score  # BSP's whole score on the same seeds: answers a trial equivalent to BSP
        # where the checks stop: BSP's time to target (`ObjectiveSettings.constraint_at`), None: the budget's end
        # (only a reference made under BSP_TARGET has one, and no other study's reference answers this one's)
        self.horizon = (bsp_score or {}).get(HORIZON)
        self.siblings = siblings or []  # other studies of this job and backend (`autosync.search.study.siblings`)
        self.storage_url = storage_url  # a storage other processes may share: look for their running twins
        self.resamples_in_a_row = 0  # proposals in a row that were running elsewhere (`running_twins`)
        # the bar a trial races against, built per trial from its study (`autosync.search.strategies.pruning`);
        # None: no pruning
        self.race = race
        # time.monotonic() past which a search trial stops at its next evaluation (the tune's --timeout;
        # a full-budget check of a candidate, or a repair, is not stopped: the answer needs it)
        self.deadline: float | None = None

    def seeds(self) -> list[int]:
        return trial_seeds(self.job, self.settings.repeats)

    def scoring(self) -> dict[str, Any]:
        return trial_scoring(self.job, self.seeds(), self.settings.penalty, self.settings.constraint_at)

    def __call__(self, trial: "optuna.Trial") -> float | tuple[float, float]:
        """The trial's score (`_score`), its `ROLE` in the search written as it ends: what optuna-dashboard
        shows to tell the budget's trials from the search's own (`autosync.search.study.records.ROLES`)."""
        import optuna

        state = "FAIL"
        try:
            score = self._score(trial)
            state = "COMPLETE"
            return score
        except optuna.TrialPruned:
            state = "PRUNED"
            raise
        finally:
            try:
                trial.set_user_attr(ROLE, role_of(trial, state))
            except optuna.exceptions.UpdateFinishedTrialError:
                pass  # failed as dead by another process meanwhile: it marked the trial "killed"

    def _score(self, trial: "optuna.Trial") -> float | tuple[float, float]:
        import optuna

        tag(trial)  # already tagged when the search claimed it (`claim.optimize_one`)
        policy = self.space.suggest(trial)
        trial.set_user_attr(POLICY, policy)
        canonical = canonical_on(policy, self.job)
        scoring = self.scoring()  # what a reused result must share
        full = self._needs_full_budget(trial)
        reference = self.bsp_score or {}
        twin = self._other_process_twin(trial, canonical, scoring, full)
        if twin is None and canonical == BSP and scored_as(reference, scoring):
            return self._from_bsp_reference(trial)
        twin = twin or self._finished_twin(trial, canonical, scoring, full)
        if twin is not None:
            return self._copy(*twin, trial)
        race = self._race(trial)
        if race is not None:
            self._prune_as_twin(trial, canonical, scoring, race)
        spent = {"virtual_seconds": 0.0, "forked": 0.0}  # trained, and continued from a kept run (not trained)
        bound = TimeToTargetBound(self.job)  # of the first seed's run
        target = self.job.target

        def record_spent() -> None:  # for a run that ends without a score
            trial.set_user_attr(VIRTUAL_SECONDS, spent["virtual_seconds"])
            if spent["forked"]:
                trial.set_user_attr(FORKED, spent["forked"])

        def report(info: dict[str, Any], step: int) -> None:
            if info.get("forked"):
                spent["forked"] = info["time"]
            spent["virtual_seconds"] = info["time"] - spent["forked"]
            value = bound.update(info)
            if self.deadline is not None and not outside_budget(trial) \
                    and time.monotonic() >= self.deadline:
                record_spent()
                trial.set_user_attr(TIMED_OUT, True)
                raise TimedOut(f"stopped at {info['time']:.0f} virtual s: the tune's --timeout passed (not counted "
                               "against the budget; a resumed search runs it again)")
            if race is None:
                return
            late = race.predicted_late(value, bound.best, target.lower_is_better) if bound.reached_at is None else None
            if race.exceeded_by(value) or late is not None:
                trial.report(late or value, step)  # the bound, or the pace's prediction: TPE and the checks read it
                record_spent()
                if late is not None:
                    trial.set_user_attr(PRUNED_ON_PACE, True)
                    raise optuna.TrialPruned(f"at {value:.0f} virtual s, slower than the bar by a pace that "
                                             f"predicts the target at {late:.0f} virtual s")
                raise optuna.TrialPruned(f"time-to-target already over {value:.0f} virtual s: slower than the "
                                         f"{race.places} fastest finished candidate(s)")

        try:
            score = evaluate(self.job, policy, self.seeds(), self.settings.penalty, report=report,
                             backend=self.settings.backend, stop_at_target=not full,
                             horizon=self.horizon if full else None)
        except RunFailed as exc:
            trial.set_user_attr(FAIL_REASON, str(exc))
            if exc.spent + exc.forked > spent["virtual_seconds"] + spent["forked"]:
                # what `evaluate` counted over every seed, to where a run diverged (the reports stop at the first
                # seed's last evaluation); a backend that failed on the first seed counted nothing, and the
                # reports say how far it got
                spent.update(virtual_seconds=exc.spent, forked=exc.forked)
            record_spent()
            raise
        stopped_early = score.pop(STOPPED_EARLY, 0)
        for key, value in score.items():
            trial.set_user_attr(key, value)
        if race is not None:  # a forked run heard its kept evaluations too
            race.keep_curve(trial, bound.curve)  # a later trial racing against this one reads its pace
        pending = not full and bool(stopped_early)  # a run stopped at the target: its final metric is not known yet
        if pending:
            trial.set_user_attr(FINAL_PENDING, True)
        return self._result(trial, score, pending)

    def _result(self, trial: "optuna.Trial", score: dict[str, Any],
                pending: bool = False) -> float | tuple[float, float]:
        """The trial's constraint set from `score` (unless its final metric is `pending`), and its value(s)."""
        if not pending:
            trial.set_constraint(CONSTRAINT, constraint(self.job, score[FINAL_METRIC], self.reference,
                                                        self.settings.tolerance))
        return (score[TIME_TO_TARGET], score[FINAL_METRIC]) if self.settings.multi_objective else score[TIME_TO_TARGET]

    def _race(self, trial: "optuna.Trial") -> "Race | None":
        """The bar this trial races against (`autosync.search.strategies.pruning`); None when it runs to the end: a
        full-budget check (its candidate is in the lead), a Pareto search, or pruning off."""
        if self.race is None or not self.settings.prune or self.settings.multi_objective \
                or FULL_BUDGET_OF in trial.user_attrs:
            return None
        return self.race(trial.study)

    def _prune_as_twin(self, trial: "optuna.Trial", canonical: dict[str, Any] | None, scoring: dict[str, Any],
                       race: "Race") -> None:
        """Prune the trial untrained when a trial of this study that runs exactly like it (same parameters
        or canonical policy, scored alike) was pruned short of the target at a bound the race's bar is now
        under: the same run would be pruned again, no later. It is pruned at the twin's bound."""
        import optuna

        for t in trial.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.PRUNED,)):
            if not _runs_alike(t, trial, canonical) or t.user_attrs.get(SCORING) != scoring or t.last_step is None:
                continue
            pruned_at = t.intermediate_values[t.last_step]
            if race.exceeded_by(pruned_at):
                trial.report(pruned_at, t.last_step)
                _answered(trial, t.number)
                raise optuna.TrialPruned(f"runs like trial {t.number}, pruned at {pruned_at:.0f} virtual s")

    def _needs_full_budget(self, trial: "optuna.Trial") -> bool:
        """Whether the trial's runs train the whole budget: a full-budget check, or a search that does not
        stop at the target (a Pareto front needs every final metric)."""
        return FULL_BUDGET_OF in trial.user_attrs or not self.settings.stop_at_target \
            or self.settings.multi_objective

    def _claim(self, trial: "optuna.Trial", canonical: dict[str, Any] | None, scoring: dict[str, Any],
               check: bool = True, full: bool = False) -> "optuna.trial.FrozenTrial | None":
        """Store the trial's canonical policy and scoring, where other processes look for twins; with
        `check` and a shared storage, first (under its lock) find a trial of another process that runs like
        this one (running, or finished with a result), and then store nothing and return it
        (`autosync.search.study.running_twins`)."""
        attrs = {SCORING: scoring, FULL_BUDGET: full, **({CANONICAL: canonical} if canonical is not None else {})}
        if not check or self.storage_url is None:
            for key, value in attrs.items():
                trial.set_user_attr(key, value)
            return None

        me = process_tag()

        def same(t: "optuna.trial.FrozenTrial") -> bool:
            # a trial of a process of this machine that is gone is no other process's: the same search's own,
            # run by the command it resumes, answering as this process's own do (`_finished_twin`)
            return t.user_attrs.get(PROCESS) != me and t.user_attrs.get(SCORING) == scoring \
                and (t.state.name in ("RUNNING", "COMPLETE") or has_own_failure(t)) \
                and (not full or has_full_result(t)) \
                and _runs_alike(t, trial, canonical) and not process_gone(t.user_attrs.get(PROCESS))

        return claim_point(trial, self.storage_url, attrs, same)

    def _other_process_twin(self, trial: "optuna.Trial", canonical: dict[str, Any] | None,
                            scoring: dict[str, Any], full: bool) -> "tuple[None, optuna.trial.FrozenTrial] | None":
        """A trial proposing what another process trains or trained (processes sharing a study, seeded
        alike, draw alike): a free proposal ends as `Resampled` (proposed again in a new trial, not
        counted) up to MAX_RESAMPLES times in a row; a queued one, or one past that, is answered from the
        twin, once finished (None, and this trial trains, when the twin's process died). Twins this
        process trained itself answer as before (`_finished_twin`): a lone search is unchanged."""
        import optuna

        twin = self._claim(trial, canonical, scoring, full=full)
        if twin is None:
            self.resamples_in_a_row = 0
            return None
        if not internals.fixed_params(trial) and self.resamples_in_a_row < MAX_RESAMPLES:
            self.resamples_in_a_row += 1
            trial.set_user_attr(RESAMPLED, twin.number)
            raise Resampled(f"not a failure (not counted against the budget): trial {twin.number} of another "
                            "process has the same policy, so this one is proposed again in a new trial")
        self.resamples_in_a_row = 0
        if twin.state == optuna.trial.TrialState.RUNNING:
            twin = wait_for(trial.study, twin.number)
        self._claim(trial, canonical, scoring, check=False, full=full)
        if (twin.state == optuna.trial.TrialState.COMPLETE and not (full and twin.user_attrs.get(FINAL_PENDING))) \
                or has_own_failure(twin):
            return None, twin
        return None

    def _finished_twin(self, trial: "optuna.Trial", canonical: dict[str, Any] | None, scoring: dict[str, Any],
                       full: bool = False) -> "tuple[str | None, optuna.trial.FrozenTrial] | None":
        """An earlier completed (or failed with a reason of its own) trial that runs exactly like this one (the
        same parameters, or the same canonical policy: backup k = n and BSP) and was scored alike, if any:
        (None, trial) from this study, else (study name, trial) from a sibling study (canonical policy only:
        parameter names differ between spaces)."""
        import optuna

        def alike(t: "optuna.trial.FrozenTrial") -> bool:  # a trial stopped at the target cannot answer a check
            return t.user_attrs.get(SCORING) == scoring and not (full and t.user_attrs.get(FINAL_PENDING)) and (
                t.state == optuna.trial.TrialState.COMPLETE or has_own_failure(t))

        states = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.FAIL)
        # a twin with its full-budget result first (it also answers the constraint), then one stopped at the target
        for t in sorted(trial.study.get_trials(deepcopy=False, states=states), key=final_pending):
            if _runs_alike(t, trial, canonical) and alike(t):
                return None, t
        if canonical is not None:
            for name, t in sorted(finished_trials(self.siblings), key=lambda pair: final_pending(pair[1])):
                if t.user_attrs.get(CANONICAL) == canonical and alike(t):
                    return name, t
        return None

    def _from_bsp_reference(self, trial: "optuna.Trial") -> float | tuple[float, float]:
        """A trial equivalent to BSP is scored from the study's BSP reference runs (same seeds), untrained."""
        score = self.bsp_score or {}
        for key in (TIME_TO_TARGET, FINAL_METRIC, REACHED, RUNS):
            trial.set_user_attr(key, score[key])
        if score.get(CURVE):  # the trials racing against BSP read its pace (`records.CURVE`)
            trial.set_user_attr(CURVE, score[CURVE])
        _answered(trial, BSP_REFERENCE)
        return self._result(trial, score)

    def _copy(self, study_name: str | None, twin: "optuna.trial.FrozenTrial",
              trial: "optuna.Trial") -> float | tuple[float, float]:
        """The twin's result, without training again: same policy and seeds give the same runs (TPE often
        proposes a point of a small discrete space again; a sibling study has trained the seed policies).
        The constraint is this study's: the twin's final metric against this reference and tolerance."""
        import optuna

        failed = twin.state == optuna.trial.TrialState.FAIL
        for key, value in twin.user_attrs.items():
            if key not in (RETRY_OF, KILLED, RESAMPLED, PROCESS, FULL_BUDGET_OF, FORKED, POLICY, SAME_AS,
                           REPAIR_OF, ROLE, ANSWERED) \
                    and (failed or key != FAIL_REASON):
                trial.set_user_attr(key, value)
        _answered(trial, twin.number if study_name is None else f"{study_name}#{twin.number}")
        if failed:
            raise RunFailed(twin.user_attrs[FAIL_REASON])
        # a copy of a run stopped at the target is pending too
        return self._result(trial, twin.user_attrs, bool(twin.user_attrs.get(FINAL_PENDING)))


BSP = {"policy": "bsp", "params": {}}


def _runs_alike(t: "optuna.trial.FrozenTrial", trial: "optuna.Trial", canonical: dict[str, Any] | None) -> bool:
    """Whether `t` runs exactly like `trial`: the same parameters, or the same canonical policy `canonical`."""
    return t.params == trial.params or (canonical is not None and t.user_attrs.get(CANONICAL) == canonical)


def _answered(trial: "optuna.Trial", same_as: int | str) -> None:
    """Mark `trial` answered without training from `same_as` (a trial's number, `STUDY#N` of a sibling, or
    BSP's reference): no virtual seconds of its own, and no slot of the budget (`ANSWERED`) while the study
    has fewer than `MAX_UNCOUNTED` such trials: a sampler that proposes only tried points must still end."""
    trial.set_user_attr(VIRTUAL_SECONDS, 0.0)
    trial.set_user_attr(SAME_AS, same_as)
    uncounted = sum(1 for t in trial.study.get_trials(deepcopy=False) if t.user_attrs.get(ANSWERED))
    if uncounted < MAX_UNCOUNTED:
        trial.set_user_attr(ANSWERED, True)


def canonical_policy(policy: dict[str, Any], n_workers: int, batch_size: int,
                     optimizer: "OptimizerSpec | None" = None) -> dict[str, Any] | None:
    """The simplest policy that runs exactly like `policy` on `n_workers` with the job's `optimizer`
    (`Policy.canonical`; without it, none of the equivalences that depend on it), as a dict; None when the
    parameters are invalid for the job (the trial then fails with the reason)."""
    try:
        pol = policy_from_dict(policy)
        pol.bind(n_workers, batch_size)  # an invalid policy has no equivalent: it must fail, not copy BSP
        return pol.canonical(n_workers, optimizer).to_dict()
    except ValueError:
        return None


def canonical_on(policy: dict[str, Any], job: JobSpec) -> dict[str, Any] | None:
    """`canonical_policy` on `job`: its workers, batch and optimizer."""
    return canonical_policy(policy, job.cluster.n_workers, job.workload.batch_size, job.workload.optimizer)
