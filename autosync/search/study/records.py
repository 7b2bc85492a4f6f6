"""What a trial, a study and the cache answer store: the one module that names their keys.

A trial's result lives in Optuna's user attributes of its `FrozenTrial`; a study's identity, its BSP
reference and its cache answer in the study's user attributes. Every key of those attributes is declared
here, once, with why it exists; everything else reads and writes them through these names and the typed
views below (`TrialRecord`, `StudyRecord`, `CacheRecord`), never through a string of its own
(`tests/unit/search/study/test_records.py` checks that on the source). A new attribute is then one line in one place.

This module imports nothing of autosync but the errors and the catalog (lazily, to validate a cached
policy), so `autosync.search.study` reads records without importing the search above it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypedDict

from autosync.core.errors import UserError
from autosync.core.loader import short_repr
from autosync.core.record_checks import expect, is_number, is_whole

if TYPE_CHECKING:
    import optuna

__all__ = ["ANSWERED", "BSP_REFERENCE", "BSP_TRAINING_SECONDS", "CACHE", "CANONICAL", "CONSTRAINT", "CONSTRAINT_AT",
           "CURVE", "CacheRecord", "EXECUTION", "FAIL_REASON", "FEATURES", "FINAL_METRIC", "FINAL_PENDING",
           "FINGERPRINT", "FORKED", "FULL_BUDGET", "FULL_BUDGET_OF", "GIVEN_UP", "GIVEN_UP_PLACES",
           "HORIZON", "KILLED", "NEIGHBOUR_JOBS", "POLICY", "PROCESS", "PRUNED_ON_PACE", "RACE_FINAL",
           "RACE_HORIZON", "RACE_RUN", "RACE_TIME", "REACHED", "REFERENCE_FROM", "REPAIR_OF", "RESAMPLED",
           "RETRY_OF", "ROLE", "ROLES", "RUNS", "SAME_AS", "SCORING", "STORED_RUNS", "SWITCH_AT",
           "StudyRecord", "TIMED_OUT", "TIMED_OUT_OF", "TIME_TO_TARGET", "TrialRecord", "UNCHECKED",
           "VIRTUAL_SECONDS", "WORKLOAD_KEY", "broke_the_rule", "constraint_of", "damaged",
           "describe_study", "failed_check", "final_pending", "has_full_result", "has_own_failure",
           "has_run", "may_be_feasible", "outside_budget", "policy_key", "role_of", "scored_as",
           "validated", "write_cache_record"]

# --- a trial's user attributes -------------------------------------------------------------------------
POLICY = "policy"  # the policy the trial proposed, as a dict (`SearchSpace.suggest`)
PROCESS = "process"  # host:pid of the process that ran the trial
CANONICAL = "canonical_policy"  # the simplest policy that runs exactly like the trial's
SCORING = "scoring"  # the seeds, miss penalty and budget the trial was scored with (`trial_scoring`)
FULL_BUDGET = "full_budget"  # the trial's runs train the whole budget (none stops at the target)
TIMED_OUT = "stopped_by_timeout"  # stopped by the tune's --timeout (`autosync.search.objective.TimedOut`)
RESAMPLED = "resampled_from"  # the running trial whose point this trial proposed again
# the trial's runs stopped at the target, so its final metric (and its constraint) is not known yet;
# `autosync.search.strategies.full_budget` checks it at full budget if the trial can still win
FINAL_PENDING = "final_metric_pending"
FULL_BUDGET_OF = "full_budget_check_of"  # the trial re-runs trial N at full budget (its check)
# the trial runs a setting one step closer to BSP of trial N, whose check failed (`strategies.repair`)
REPAIR_OF = "repair_of"
UNCHECKED = "unchecked_candidates"  # study: the faster candidates the bounded full-budget checks left unchecked
PRUNED_ON_PACE = "pruned_on_pace"  # pruned by the pace rule, its value a prediction (`pruning`)
# the trial proposed a point already answered (a twin's result, BSP's reference) and was answered without
# training: it takes no slot of the budget (`autosync.search.study.trials.budget_used`)
ANSWERED = "answered_untrained"
FORKED = "forked_seconds"  # virtual seconds a run continued from a stopped run's state (also a score key)
CURVE = "curve"  # [virtual time, target metric] at the first seed's evaluations, up to the target
# (the whole run's where it missed the target)
KILLED = "process_lost"  # failed because its process died: no result of its own
RETRY_OF = "retry_of"  # of a re-queued trial: the number of the killed trial it re-runs
SAME_AS = "same_as_trial"  # answered untrained by this trial (a number, "study#number" or BSP_REFERENCE)
VIRTUAL_SECONDS = "virtual_seconds"  # virtual seconds the trial trained (the search's cost)
FAIL_REASON = "fail_reason"  # why a failed trial failed, one line
TIME_TO_TARGET = "time_to_target"  # the score: mean time to target over the seeds (misses penalized)
FINAL_METRIC = "final_metric"  # mean final target metric over the seeds (the constraint reads it)
REACHED = "reached"  # how many of the seeds' runs reached the target
RUNS = "runs"  # how many runs (seeds) the trial trained
GIVEN_UP = "given_up"  # a queued trial not run, the search having stopped improving (its patience)
SWITCH_AT = "switch_at"  # Sync-Switch Table II replay: the switch point the trial stands for
# what the trial is to the search (one of `ROLES`), written as it ends: only "budget" trials (and "given_up"
# places) count against --n-trials; optuna-dashboard shows it among the user attributes, to filter on
ROLE = "role"
# the race (`autosync.search.race_trials`): the run a trial stands for (`Run`'s fields), its time to the
# target (None: stopped at its horizon), its final metric at the end of the budget, the horizon it was given
RACE_RUN = "race_run"
RACE_TIME = "race_time"
RACE_FINAL = "race_final"
RACE_HORIZON = "race_horizon"

CONSTRAINT = "final_metric_vs_bsp"  # name of the trial's Optuna constraint (<= 0: feasible)

# --- a study's user attributes --------------------------------------------------------------------------
JOB_NAME = "job_name"  # the job the study tunes (what a reader of the storage sees)
FINGERPRINT = "fingerprint"  # the job's fingerprint: whose study it is (`check_owner`, siblings)
SPACE = "space"  # the search space's name
TARGET = "target"  # "metric threshold" of the job, for a reader of the storage
N_WORKERS = "n_workers"  # the job's workers, for a reader of the storage and the ownership error
EXECUTION = "execution"  # where its trials trained (the study name's backend tag)
WORKLOAD_KEY = "workload_key"  # what the job trains (neighbours share it)
FEATURES = "cluster_features"  # the job's cluster features (neighbours are near in them)
NEIGHBOUR_JOBS = "neighbour_jobs"  # also a cache field: the tuned jobs a search started from
GIVEN_UP_PLACES = "given_up_places"  # the budget whose places not queued yet were given up, and how many
# {run identity: result}: full runs trained beside the trials, held by studies in users' storage whose tune ran
# a confirmation step or judged checks on a second seed; nothing writes it, and the search cost counts its runs
STORED_RUNS = "confirmation_runs"
BSP_REFERENCE = "bsp_reference"  # BSP's runs on the trials' seeds (`BspReference`); also SAME_AS's value
CACHE = "cache"  # the cached answer (`CacheRecord`), written once a search finished
# in a cache record: the budget a search had when its --timeout ended it short of it (the same command resumes)
TIMED_OUT_OF = "timed_out_of"

# --- inside a BSP reference ------------------------------------------------------------------------------
HORIZON = "horizon"  # BSP's time to target, where the checks stop under BSP_TARGET
REFERENCE_FROM = "reference_from"  # in a reference taken from a sibling: the study that trained it
BSP_TRAINING_SECONDS = "bsp_training_seconds"  # one full BSP run's virtual seconds, where it did not train one
CONSTRAINT_AT = "constraint_at"  # where the final metrics were read (also in a scoring and the cache record)

BUDGET, BSP_TARGET = "budget", "bsp-target"  # where the constraint is held (`ObjectiveSettings.constraint_at`)


class BspReference(TypedDict, total=False):
    """A study's BSP reference (`BSP_REFERENCE`): BSP's score on the trials' seeds and how it was scored."""

    time_to_target: float  # the mean time to target (a candidate's speedup is against it)
    final_metric: float  # the constraint's reference
    reached: int  # runs that reached the target
    runs: int  # runs trained
    virtual_seconds: float  # trained for it (0 when a sibling trained it, or the race's trials did)
    forked_seconds: float  # of its runs' time, continued from runs stopped at the target (`evaluate`)
    seeds: list[int]  # its scoring (`trial_scoring`): what a trial must share to be answered by it
    penalty: float
    budget: dict[str, Any]
    constraint_at: str
    horizon: float  # HORIZON
    reference_from: str  # REFERENCE_FROM
    bsp_training_seconds: float  # BSP_TRAINING_SECONDS
    curve: list[list[float]]  # CURVE of its first run, which the trials racing against BSP read


class CacheRecord(TypedDict, total=False):
    """The cached answer of a finished search (`CACHE`), as `autosync tune` and `autosync cache` show it."""

    best_policy: dict[str, Any]  # the answer
    best_value: float  # its time to target (virtual s)
    best_final_metric: float | None
    best_trial: int
    trials: int  # the budget's trials the search ran
    finished_at: str  # ISO time, UTC: the newest answer of a job wins (`tuned_policy`)
    autosync_version: str
    job_name: str
    fingerprint: str
    execution: dict[str, Any]  # which backend, clock and device produced it
    space: str
    sampler: str
    bsp_time_to_target: float  # a mean over its seeds, a miss scored at MISS_PENALTY times what it ran
    bsp_final_metric: float
    # on how many of its seeds (of `best_runs`, `bsp_runs`) a run of the answer, of BSP, reached the target:
    # where one missed, `best_value` or `bsp_time_to_target` is a score, not a time, and no speedup is given
    best_reached: int | None
    best_runs: int | None
    bsp_reached: int | None
    bsp_runs: int | None
    constraint_at: str  # where the final metrics were read
    search_cost_virtual_seconds: float
    search_cost_bsp_trainings: float | None
    search_cost_unit: str
    recurrences_to_amortize: int | None  # None: no saving over BSP (or one of them missed the target)
    speedup_vs_bsp: float | None  # None: one of them missed the target on a seed
    search_breakdown: dict[str, Any]  # where the search's cost went (`search_breakdown`): counts, and the unchecked candidates
    cost_to_answer_bsp_trainings: float | None
    neighbour_jobs: list[dict[str, Any]]
    timed_out_of: int  # TIMED_OUT_OF: the budget a --timeout ended the search short of
    # written by the race (`autosync.search.race_trials.race_answer`): its rounds, ranking, checks and budget
    race: dict[str, Any]
    # written by a verification on the real backend (`autosync.search.strategies.verify.with_verification`)
    simulated_best_policy: dict[str, Any]  # the simulator's answer, where the real backend's winner replaced it
    verified: dict[str, Any]  # the verification's summary, its rows left out


@dataclass(frozen=True)
class TrialRecord:
    """A trial's result as typed fields, read from its user attributes (a view: nothing is copied)."""

    trial: "optuna.trial.FrozenTrial"

    @property
    def attrs(self) -> dict[str, Any]:
        return self.trial.user_attrs

    @property
    def policy(self) -> dict[str, Any] | None:
        return self.attrs.get(POLICY)

    @property
    def same_as(self) -> int | str | None:
        """The trial that answered this one untrained (None: it trained, or failed, itself)."""
        return self.attrs.get(SAME_AS)

    @property
    def virtual_seconds(self) -> float:
        return float(self.attrs.get(VIRTUAL_SECONDS, 0.0))

    @property
    def final_metric(self) -> float | None:
        return self.attrs.get(FINAL_METRIC)

    def summary(self) -> dict[str, Any]:
        """The row `best_policies` lists: trial, policy and score."""
        return {"trial": self.trial.number, "policy": self.attrs[POLICY], "time_to_target": self.trial.values[0],
                "final_metric": self.final_metric, "reached": self.attrs.get(REACHED), "runs": self.attrs.get(RUNS)}


@dataclass(frozen=True)
class StudyRecord:
    """A study's attributes as typed fields (a view over `study.user_attrs`, read once)."""

    attrs: dict[str, Any]

    @property
    def fingerprint(self) -> str | None:
        return self.attrs.get(FINGERPRINT)

    @property
    def execution(self) -> str | None:
        return self.attrs.get(EXECUTION)

    @property
    def space(self) -> str | None:
        return self.attrs.get(SPACE)

    @property
    def job_name(self) -> str:
        return self.attrs.get(JOB_NAME, "?")

    @property
    def n_workers(self) -> int | str:
        return self.attrs.get(N_WORKERS, "?")

    @property
    def bsp_reference(self) -> BspReference | None:
        ref = self.attrs.get(BSP_REFERENCE)
        return ref if isinstance(ref, dict) else None

    @property
    def cache(self) -> Any:
        """The cache record as stored (not validated: `validated` checks it)."""
        return self.attrs.get(CACHE)

    @property
    def features(self) -> list[float] | None:
        return self.attrs.get(FEATURES)

    @property
    def workload_key(self) -> str | None:
        return self.attrs.get(WORKLOAD_KEY)


def describe_study(study: "optuna.Study", job_name: str, fingerprint: str, space: str, target: str,
                   n_workers: int, execution: str) -> None:
    """Store what the study is about (for optuna-dashboard, anyone reading the storage, and the siblings
    and ownership checks), writing only the attributes that changed."""
    about = {JOB_NAME: job_name, FINGERPRINT: fingerprint, SPACE: space, TARGET: target, N_WORKERS: n_workers,
             EXECUTION: execution}
    for key, value in about.items():
        if study.user_attrs.get(key) != value:
            study.set_user_attr(key, value)


def outside_budget(trial: "optuna.trial.FrozenTrial | optuna.Trial") -> bool:
    """Whether `trial` is the search's own work after its candidates, not a slot of the budget: a full-budget
    check (`FULL_BUDGET_OF`) or a repair of a candidate whose check failed (`REPAIR_OF`)."""
    return FULL_BUDGET_OF in trial.user_attrs or REPAIR_OF in trial.user_attrs


#: A trial's `ROLE`s, and what each is. The "budget" trials are the ones `--n-trials` counts, with the
#: "given_up" places (`autosync.search.study.trials.budget_used`); every other trial is the search's own.
ROLES = {
    "budget": "a trial of the budget: it ran to a result (completed, pruned, or failed for a reason of its own)",
    "answered": "answered without training from a trial (or BSP's reference) that runs exactly like it",
    "check": "a full-budget check of a candidate that stopped at the target",
    "repair": "a setting one step closer to BSP of a candidate whose check failed",
    "resampled": "proposed a point another process was training, and was proposed again in a new trial",
    "killed": "its process died (killed or hung): a new trial runs it again",
    "timed_out": "stopped by the tune's --timeout: a resumed search runs it again (a queued point) or its place",
    "given_up": "a queued trial not run, the search having stopped improving (--patience): it takes its place",
    "interrupted": "cut short by Ctrl-C or an error: a resumed search runs it again (a queued point) or its place",
}


def role_of(trial: "optuna.trial.FrozenTrial | optuna.Trial", state: str | None = None) -> str:
    """The trial's `ROLE` (a key of `ROLES`), from its attributes and its `state` (its own by default;
    a running trial's caller passes the state it is about to end in)."""
    attrs = trial.user_attrs
    state = state or trial.state.name
    if attrs.get(KILLED):
        return "killed"
    if FULL_BUDGET_OF in attrs:
        return "check"
    if REPAIR_OF in attrs:
        return "repair"
    if GIVEN_UP in attrs:
        return "given_up"
    if RESAMPLED in attrs:
        return "resampled"
    if attrs.get(TIMED_OUT):
        return "timed_out"
    if attrs.get(ANSWERED):
        return "answered"
    if state in ("COMPLETE", "PRUNED") or (state == "FAIL" and FAIL_REASON in attrs):
        return "budget"
    return "interrupted"


def has_own_failure(trial: "optuna.trial.FrozenTrial") -> bool:
    """Whether `trial` failed for a reason of its own (its policy diverged or cannot run): such a failure
    counts against the budget and answers a twin; a trial whose process died (KILLED) or that proposed
    a point another process was training (RESAMPLED) has no result and does not count."""
    return trial.state.name == "FAIL" and FAIL_REASON in trial.user_attrs \
        and not trial.user_attrs.get(KILLED) and RESAMPLED not in trial.user_attrs \
        and not trial.user_attrs.get(TIMED_OUT)


def has_run(trial: "optuna.trial.FrozenTrial") -> bool:
    """Whether `trial` ran to a result: it completed, was pruned, or failed for a reason of its own (not one
    killed, given up or proposed again elsewhere): what counts against a budget."""
    return trial.state.name in ("COMPLETE", "PRUNED") or has_own_failure(trial)


def failed_check(trial: "optuna.trial.FrozenTrial") -> bool:
    """Whether `trial` is a full-budget check that broke the final-metric rule, or diverged before the
    budget's end (its run failed on its own: its candidate breaks the rule, as a check too inaccurate does)."""
    return FULL_BUDGET_OF in trial.user_attrs and (
        (has_own_failure(trial) and GIVEN_UP not in trial.user_attrs)
        or (trial.state.name == "COMPLETE" and constraint_of(trial) > 0))


def broke_the_rule(trials: "list[optuna.trial.FrozenTrial]") -> set[str]:
    """The candidates (`policy_key`) among `trials` known to break the final-metric rule: a full-budget check
    that failed (`failed_check`), or a trial trained to the end of the budget whose final metric broke it.
    They set no bar for pruning and are never answered with; nothing is inferred for the other policies."""
    return {policy_key(t) for t in trials
            if failed_check(t) or (t.state.name == "COMPLETE" and not final_pending(t)
                                   and CONSTRAINT in t.constraints and constraint_of(t) > 0)}


def policy_key(trial: "optuna.trial.FrozenTrial") -> str:
    """What makes two trials the same candidate: the canonical policy it ran (`canonical_policy`), else
    the policy it proposed, else its parameters; trials with one key run alike and rank as one."""
    policy = trial.user_attrs.get(CANONICAL) or trial.user_attrs.get(POLICY) or trial.params or trial.number
    return json.dumps(policy, sort_keys=True)


def constraint_of(trial: "optuna.trial.FrozenTrial") -> float:
    """The trial's accuracy constraint (<= 0: feasible); a trial without one is infeasible."""
    return float(trial.constraints.get(CONSTRAINT, 1.0))


def final_pending(trial: "optuna.trial.FrozenTrial") -> bool:
    """Whether `trial` stopped at the target, its final metric and constraint not known yet."""
    return bool(trial.user_attrs.get(FINAL_PENDING))


def may_be_feasible(trial: "optuna.trial.FrozenTrial") -> bool:
    """A completed trial that meets the constraint, or may (it stopped at the target, unchecked)."""
    return constraint_of(trial) <= 0 or final_pending(trial)


def has_full_result(trial: "optuna.trial.FrozenTrial") -> bool:
    """Whether `trial` has (or, running, will have) its final metric at full budget."""
    if trial.state.name == "RUNNING":
        return bool(trial.user_attrs.get(FULL_BUDGET))
    return not final_pending(trial)


def scored_as(result: dict[str, Any], scoring: dict[str, Any]) -> bool:
    """Whether a result holding its scoring among its keys (a BSP reference) was scored as `scoring`
    (`autosync.search.objective.trial_scoring`) says, its constraint read at the same place too."""
    return all(result.get(key) == value for key, value in scoring.items()) \
        and result.get(CONSTRAINT_AT) == scoring.get(CONSTRAINT_AT)


def damaged(name: str, problem: str, refresh: bool = False) -> UserError:
    """The error for a study whose stored record cannot be used, and the way out (`refresh`: a new search
    can also replace it, which a record that is not JSON at all does not allow)."""
    return UserError(f"study {name}: corrupt cache entry ({problem}); run `autosync cache clear` for this job "
                     f"(it deletes the study){' or tune with --refresh' if refresh else ''}")


# a cache record's fields that its readers compute with and format as numbers (the tune's report, `recommend`,
# `cache show`): times, costs and speedups, never below 0 (null where none); counts; and final metrics, any number
RECORD_AMOUNTS = ("best_value", "bsp_time_to_target", "search_cost_virtual_seconds", "search_cost_bsp_trainings",
                  "cost_to_answer_bsp_trainings", "speedup_vs_bsp", "recurrences_to_amortize")
RECORD_COUNTS = ("trials", "best_trial", "best_reached", "best_runs", "bsp_reached", "bsp_runs")
RECORD_METRICS = ("best_final_metric", "bsp_final_metric")


def validated(name: str, record: Any) -> CacheRecord:
    """A cache record whose policy, numbers, neighbours and race are usable as its readers take them, else a
    one-line error naming the study and the field (a number stored as text, or a race's rounds edited, was a
    traceback where the tune or `recommend` printed it; a negative time or speedup was printed)."""
    from autosync.catalog import policy_from_dict  # not at the top: numpy and the policies, unused by --help

    field = "best_policy"
    try:
        if not isinstance(record, dict):
            raise TypeError(f"the record must be a mapping, but got {type(record).__name__}")
        policy_from_dict(record[field])
        for field in ("best_value", "trials"):
            if field not in record:
                raise KeyError(field)
        for field in (*RECORD_AMOUNTS, *RECORD_COUNTS, *RECORD_METRICS):
            _check_number(record.get(field), whole=field in RECORD_COUNTS, signed=field in RECORD_METRICS,
                          required=field in ("best_value", "trials"))
        field = "neighbour_jobs"
        if not all(isinstance(n, dict) for n in expect(record.get(field, []), list)):
            raise TypeError("each neighbour must be a mapping")
        field = "race"
        if record.get(field) is not None:
            _check_race(record[field])
    except KeyError:
        problem = f"field {field} is missing"
    except UserError as exc:  # the policy's own check speaks of the option it usually guards: name the field
        problem = f"{field}: {str(exc).removeprefix('--policy ')}"
    except (TypeError, ValueError) as exc:
        problem = f"{field}: {exc}"
    else:
        return record
    raise damaged(name, problem, refresh=True)


def _check_number(value: Any, whole: bool = False, signed: bool = False, required: bool = False) -> None:
    """ValueError/TypeError unless `value` is a number (>= 0 unless `signed`; whole with `whole`), or None where
    not `required`. An infinite one stands: records of before 2026-12 kept an infinite speedup or cost."""
    if value is None and not required:
        return
    if not is_number(value) or math.isnan(value):
        raise TypeError(f"must be a number, but got {short_repr(value)}")
    if (whole and not is_whole(value)) or (not signed and value < 0):
        raise ValueError(f"must be a {'whole ' if whole else ''}number >= 0, but got {short_repr(value)}")


def _check_race(race: Any) -> None:
    """A race's record as `race_top` and the race's figure read it: rounds, each with a seed and its runs, each
    run a label, a policy and its time and final metric (numbers or null)."""
    for entry in expect(expect(race, dict).get("rounds", []), list):
        _check_number(expect(entry, dict).get("seed"), whole=True)
        for run in expect(entry.get("runs", []), list):
            expect(expect(run, dict).get("label"), str)
            expect(run.get("policy"), dict)
            _check_number(run.get("time"))
            _check_number(run.get("final"), signed=True)


def write_cache_record(study: "optuna.Study", record: CacheRecord) -> None:
    """Store `record` as the study's cached answer."""
    study.set_user_attr(CACHE, record)
