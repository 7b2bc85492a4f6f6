"""Optuna studies for `autosync tune`: storage, naming, the search loop, and the cache of recurring jobs.

The study is named by the job's fingerprint and the search space, so the study storage *is* the cache:
a finished study carries a `cache` user attribute (best policy, score, when, how many trials, autosync
version). Running `tune` again on the same job returns it without a new trial; `refresh` searches again,
warm-started from the cached best. Storage is an SQLite file by default, or any SQLAlchemy URL
(PostgreSQL) shared by several processes or machines; the trial budget is global across them.
Heartbeats fail the trials of a killed process, and `RetryFailedTrialCallback` re-queues them.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
import multiprocessing as mp
import os
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from autosync import __version__
from autosync.errors import UserError
from autosync.job import JobSpec
from autosync.search.objective import (
    Objective, ObjectiveSettings, RunFailed, constraint_of, evaluate, trial_seeds,
)
from autosync.search.space import SearchSpace

if TYPE_CHECKING:
    import optuna

DEFAULT_STORAGE = "sqlite:///results/autosync-studies.db"
SAMPLERS = ("tpe", "gp", "random", "grid", "binary", "ladder")
SWITCH_POINT_SAMPLERS = ("binary", "ladder")  # strategies that run candidates of their own choosing
HEARTBEAT_SECONDS = int(os.environ.get("AUTOSYNC_HEARTBEAT_SECONDS", "30"))  # a killed trial is retried after 2x


@dataclass
class TuneOutcome:
    """What `tune` found or re-used."""

    study_name: str
    storage: str
    cached: bool  # True when the result came from the cache with no new trial
    new_trials: int
    cache: dict[str, Any]  # the study's cache record (best policy, provenance, amortization)
    top: list[dict[str, Any]] = field(default_factory=list)  # best feasible trials, best first
    study: Any = None  # the optuna.Study itself, for plots


# ---------------------------------------------------------------------------------------------- storage
def open_storage(url: str) -> "optuna.storages.RDBStorage":
    """An RDB storage with heartbeats; errors name the URL and the reason in one line."""
    import optuna

    if url.startswith("sqlite:///"):
        path = Path(url[len("sqlite:///"):])
        if str(path) not in ("", ":memory:"):
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise UserError(f"--storage {url}: cannot create directory {path.parent} ({exc.strerror})") from None
    kwargs = {"connect_args": {"timeout": 60}} if url.startswith("sqlite") else {}
    try:
        with warnings.catch_warnings():  # heartbeats are marked experimental; we rely on them knowingly
            warnings.simplefilter("ignore")
            return optuna.storages.RDBStorage(
                url, engine_kwargs=kwargs, heartbeat_interval=HEARTBEAT_SECONDS,
                grace_period=2 * HEARTBEAT_SECONDS,
                heartbeat_stale_trial_callback=optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=3))
    except Exception as exc:  # sqlalchemy raises many kinds: bad scheme, unreachable server, read-only file
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(f"--storage {url}: cannot open the study storage ({reason})") from None


def study_name(job: JobSpec, space: SearchSpace) -> str:
    """The cache key: the job's fingerprint (workload, cluster, target) and the search space's name."""
    return f"{job.fingerprint()}-{space.name}"


def make_sampler(name: str, seed: int, space: SearchSpace, multi_objective: bool,
                 n_trials: int | None = None) -> "optuna.samplers.BaseSampler":
    """The Optuna sampler `--sampler name` stands for (`n_trials`: the ladder's number of rungs)."""
    import optuna

    if name == "ladder":
        from autosync.search.ladder import DEFAULT_RUNGS, LadderSampler

        return LadderSampler(rungs=DEFAULT_RUNGS[:n_trials])
    if name in ("tpe", "binary"):  # binary enqueues every candidate itself: its sampler is never asked
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=5, multivariate=True, group=True)
    if name == "gp":
        if multi_objective:
            raise UserError("--sampler gp handles one objective only; use tpe for --objective time,metric")
        return optuna.samplers.GPSampler(seed=seed, n_startup_trials=5)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if not space.is_discrete():
        raise UserError(f"--sampler grid needs a discrete space (int, categorical or stepped float), "
                        f"but {space.path} has a continuous dimension")
    return optuna.samplers.BruteForceSampler(seed=seed)


# ---------------------------------------------------------------------------------------------- trials
def counted_trials(study: "optuna.Study") -> int:
    """Trials that used the budget: completed, pruned, or failed with a reason (not killed-and-retried)."""
    import optuna

    states = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED, optuna.trial.TrialState.FAIL)
    return sum(1 for t in study.get_trials(deepcopy=False, states=states)
               if t.state != optuna.trial.TrialState.FAIL or "fail_reason" in t.user_attrs)


def feasible_trials(study: "optuna.Study") -> list["optuna.trial.FrozenTrial"]:
    """Completed trials meeting the accuracy constraint, best (fastest) first."""
    import optuna

    done = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    ok = [t for t in done if constraint_of(t) <= 0]
    return sorted(ok, key=lambda t: (t.values[0], t.number))


def search_cost(study: "optuna.Study") -> float:
    """Virtual seconds trained by every trial of the study plus the BSP reference runs."""
    reference = study.user_attrs.get("bsp_reference", {})
    return reference.get("virtual_seconds", 0.0) + sum(
        t.user_attrs.get("virtual_seconds", 0.0) for t in study.get_trials(deepcopy=False))


def baseline_policies(job: JobSpec) -> list[dict[str, Any]]:
    """Policies enqueued first when they lie in the space: BSP and ASP, or their equivalents in a family."""
    n = job.cluster.n_workers
    return [
        {"policy": "bsp", "params": {}}, {"policy": "asp", "params": {}},
        {"policy": "backup", "params": {"k": n, "lr_rule": "fixed"}},
        {"policy": "backup", "params": {"k": max(1, 3 * n // 4), "lr_rule": "proportional"}},
        {"policy": "sync_switch", "params": {"switch_at": 1.0, "config": "none"}},
        {"policy": "sync_switch", "params": {"switch_at": 0.0, "config": "none"}},
        {"policy": "split", "params": {"fractions": [1.0 / n] * n}},
    ]


# ---------------------------------------------------------------------------------------------- tune
@dataclass
class TuneRequest:
    """Everything one `autosync tune` invocation asks for."""

    job: JobSpec
    space: SearchSpace
    n_trials: int = 20
    timeout: float | None = None
    storage: str = DEFAULT_STORAGE
    study: str | None = None
    sampler: str = "tpe"
    seed: int = 0
    n_jobs: int = 1
    refresh: bool = False
    settings: ObjectiveSettings = ObjectiveSettings()
    binary_runs_per_candidate: int = 3  # Sync-Switch binary search: R (recorded as R seeds per trial)


def load_study(request: TuneRequest, storage: Any, create: bool = True) -> "optuna.Study":
    import optuna

    directions = ["minimize", "maximize" if request.job.target.metric == "test_accuracy" else "minimize"] \
        if request.settings.multi_objective else ["minimize"]
    name = request.study or study_name(request.job, request.space)
    sampler = make_sampler(request.sampler, request.seed, request.space, request.settings.multi_objective,
                           request.n_trials)
    from autosync.search.pruning import TargetRacePruner

    pruner = TargetRacePruner(n_startup_trials=5)
    try:
        study = optuna.create_study(storage=storage, study_name=name, directions=directions, sampler=sampler,
                                    pruner=pruner, load_if_exists=True)
    except ValueError as exc:
        raise UserError(f"--study {name}: {exc}") from None
    if [d.name.lower() for d in study.directions] != directions:
        raise UserError(f"study {name} was created with objective directions "
                        f"{[d.name.lower() for d in study.directions]}, but this run asks for {directions}; "
                        "use another --study name or the same --objective")
    return study


def read_cache(study: "optuna.Study") -> dict[str, Any] | None:
    """The study's cache record, validated; a corrupt one is a clear error."""
    record = study.user_attrs.get("cache")
    return None if record is None else _validated(study.study_name, record)


def _validated(name: str, record: Any) -> dict[str, Any]:
    """A cache record whose policy, score and trial count are usable, else a one-line error naming the study."""
    from autosync.catalog import policy_from_dict

    try:
        policy_from_dict(record["best_policy"])
        float(record["best_value"])
        int(record["trials"])
    except (KeyError, TypeError, ValueError) as exc:
        raise UserError(f"study {name}: corrupt cache entry ({type(exc).__name__}: {exc}); "
                        "run `autosync cache clear` for this job or tune with --refresh") from None
    return record


def tune(request: TuneRequest, on_trial: Callable[[int, int], None] | None = None) -> TuneOutcome:
    """Search (or re-use the cache) for the best policy of `request.job` in `request.space`."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)  # failed trials are reported by us, with their reason
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    storage = open_storage(request.storage)
    study = load_study(request, storage)
    cache = read_cache(study) if not request.refresh else None
    if cache is not None:
        return TuneOutcome(study.study_name, request.storage, True, 0, cache, top_trials(study), study)
    fail_orphaned_trials(study, storage)
    reference = bsp_reference(study, request)
    before = counted_trials(study)
    if request.refresh:
        target = before + request.n_trials
        old = study.user_attrs.get("cache")
        if isinstance(old, dict) and isinstance(old.get("best_policy"), dict):
            params = request.space.trial_params(old["best_policy"])
            if params is not None:
                study.enqueue_trial(params, skip_if_exists=False)
    else:
        target = request.n_trials
        if before == 0 and not study.get_trials(deepcopy=False):
            for policy in baseline_policies(request.job):
                params = request.space.trial_params(policy)
                if params is not None and request.sampler not in SWITCH_POINT_SAMPLERS:
                    study.enqueue_trial(params, skip_if_exists=True)
    deadline = time.monotonic() + request.timeout if request.timeout else None
    if request.sampler in SWITCH_POINT_SAMPLERS:
        run_switch_point_search(study, request, reference, deadline, on_trial)
    else:
        helpers = _start_helpers(request, study.study_name, target, deadline)
        try:
            run_trials(study, request, reference, target, deadline, on_trial)
        finally:
            for p in helpers:
                p.join()
    cache = finish(study, request, reference)
    return TuneOutcome(study.study_name, request.storage, False, cache["trials"] - before, cache,
                       top_trials(study), study)


def fail_orphaned_trials(study: "optuna.Study", storage: Any) -> None:
    """Fail (and re-queue) RUNNING trials of a process killed before it wrote their first heartbeat.

    Optuna's stale-trial check only looks at trials that have a heartbeat, so a process killed between
    starting a trial and its first heartbeat leaves that trial RUNNING forever. A RUNNING trial older
    than the grace period with no heartbeat at all is such an orphan (a live one beats every interval).
    """
    import optuna
    from optuna.storages._rdb import models  # the heartbeat table has no public accessor

    grace = storage.grace_period or 2 * storage.heartbeat_interval
    cutoff = dt.datetime.now() - dt.timedelta(seconds=grace)
    running = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))
    old = [t for t in running if t.datetime_start is not None and t.datetime_start < cutoff]
    if not old:
        return
    session = storage.scoped_session()
    try:
        orphans = [t for t in old if models.TrialHeartbeatModel.where_trial_id(t._trial_id, session) is None]
    finally:
        storage.scoped_session.remove()
    retry = storage.get_heartbeat_stale_trial_callback()
    for t in orphans:
        try:
            storage.set_trial_state_values(t._trial_id, state=optuna.trial.TrialState.FAIL)
        except optuna.exceptions.UpdateFinishedTrialError:
            continue  # another process got there first
        if retry is not None:
            retry(study, storage.get_trial(t._trial_id))


def bsp_reference(study: "optuna.Study", request: TuneRequest) -> dict[str, Any]:
    """BSP's score on the job (R seeds), measured once per study: the constraint's reference."""
    ref = study.user_attrs.get("bsp_reference")
    if ref is None:
        seeds = trial_seeds(request.job, request.settings.repeats)
        try:
            ref = evaluate(request.job, {"policy": "bsp", "params": {}}, seeds, request.settings.penalty)
        except RunFailed as exc:
            raise UserError(f"BSP itself fails on this job, so there is no reference to tune against: {exc}") from None
        study.set_user_attr("bsp_reference", ref)
    return ref


def run_trials(study: "optuna.Study", request: TuneRequest, reference: dict[str, Any], target: int,
               deadline: float | None, on_trial: Callable[[int, int], None] | None = None) -> None:
    """Run trials one at a time until the global budget `target` is met (counted across processes)."""
    objective = Objective(request.job, request.space, request.settings, reference["final_metric"])
    grid_size = request.space.size() if request.sampler == "grid" else None
    while True:
        done = counted_trials(study)
        if on_trial is not None:
            on_trial(done, target)
        if done >= target or (deadline is not None and time.monotonic() >= deadline):
            return
        if grid_size is not None and done >= grid_size:  # brute force has covered the whole space
            return
        study.optimize(objective, n_trials=1, catch=(RunFailed,), gc_after_trial=False)


def _helper(request: TuneRequest, name: str, target: int, deadline_in: float | None, index: int) -> None:
    """A second process working on the same study (`--n-jobs`)."""
    import optuna
    import torch

    torch.set_num_threads(1)
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    deadline = time.monotonic() + deadline_in if deadline_in is not None else None
    sub = dataclasses.replace(request, seed=request.seed + 1000 * index, study=name)
    storage = open_storage(sub.storage)
    study = load_study(sub, storage)
    run_trials(study, sub, study.user_attrs["bsp_reference"], target, deadline)


def _start_helpers(request: TuneRequest, name: str, target: int, deadline: float | None) -> list[Any]:
    if request.n_jobs <= 1:
        return []
    if request.storage.startswith("sqlite:///:memory:") or request.storage == "sqlite://":
        raise UserError("--n-jobs > 1 needs a storage file or server that processes share, not an in-memory one")
    import torch

    torch.set_num_threads(1)
    ctx = mp.get_context("spawn")
    remaining = deadline - time.monotonic() if deadline is not None else None
    procs = [ctx.Process(target=_helper, args=(request, name, target, remaining, i + 1), daemon=True)
             for i in range(request.n_jobs - 1)]
    for p in procs:
        p.start()
    return procs


class _OutOfTime(Exception):
    """--timeout passed during a switch-point search: stop before the next candidate."""


def run_switch_point_search(study: "optuna.Study", request: TuneRequest, reference: dict[str, Any],
                            deadline: float | None = None, on_trial: Callable[[int, int], None] | None = None,
                            ) -> None:
    """Sync-Switch's Algorithm 1 (`binary`) or the cost-ordered ladder (`ladder`) as a search strategy.

    Each candidate is one trial of the same study, averaging R seeds (`binary_runs_per_candidate`).
    Binary search enqueues each candidate it chooses; the ladder is the study's sampler (`LadderSampler`)
    and runs in `study.optimize` until a rung holds.
    """
    from autosync.search.binary import binary_search
    from autosync.search.ladder import ladder_finished, next_rung

    space = request.space
    dims = space.dimensions.get("sync_switch", {})
    if space.families != ["sync_switch"] or "switch_at" not in dims:
        raise UserError(f"--sampler {request.sampler} searches the switch point: the space must have one family "
                        f"sync_switch with a switch_at dimension, but {space.path} has {space.families}")
    others: dict[str, Any] = {}
    for name, dim in dims.items():
        if name == "switch_at":
            continue
        if dim.type != "categorical":
            raise UserError(f"--sampler {request.sampler}: {space.path}: sync_switch.{name} must be a categorical "
                            "(its first choice is used), or a constant")
        others[f"sync_switch.{name}"] = dim.choices[0]
    settings = dataclasses.replace(request.settings, repeats=request.binary_runs_per_candidate, prune=False)
    objective = Objective(request.job, space, settings, reference["final_metric"])
    if request.sampler == "ladder":  # one trial at a time while a rung is free and none has held
        rungs = study.sampler.rungs  # the LadderSampler of load_study: the first --n-trials rungs
        while not ladder_finished(study, rungs) and next_rung(study, rungs) is not None:
            if deadline is not None and time.monotonic() >= deadline:
                return
            study.optimize(objective, n_trials=1, catch=(RunFailed,), gc_after_trial=False)
            if on_trial is not None:
                on_trial(counted_trials(study), len(rungs))
        return
    metric_sign = 1.0 if request.job.target.metric == "test_accuracy" else -1.0
    done = [0]

    def run(s: float) -> float:
        if deadline is not None and time.monotonic() >= deadline:
            raise _OutOfTime
        study.enqueue_trial({"sync_switch.switch_at": s, **others}, skip_if_exists=False)
        finished: list[Any] = []  # this process's trial, whatever other processes add to the study
        study.optimize(objective, n_trials=1, catch=(RunFailed,), gc_after_trial=False,
                       callbacks=[lambda _, trial: finished.append(trial)])
        done[0] += 1
        if on_trial is not None:
            on_trial(done[0], request.n_trials)
        return metric_sign * finished[0].user_attrs.get("final_metric", -math.inf * metric_sign)

    target = metric_sign * reference["final_metric"]
    try:
        binary_search(run, threshold=request.settings.tolerance, runs_per_candidate=1,
                      max_settings=request.n_trials, target_accuracy=target)
    except _OutOfTime:
        pass  # the candidates tried so far are trials of the study; finish() picks the best of them


def finish(study: "optuna.Study", request: TuneRequest, reference: dict[str, Any]) -> dict[str, Any]:
    """Write the cache record: best feasible policy, its score, provenance and the amortization report."""
    best = feasible_trials(study)
    if not best:
        raise UserError(f"study {study.study_name}: no trial met the target within tolerance "
                        f"{request.settings.tolerance} of BSP's final {request.job.target.metric}; "
                        "finished trials are kept: raise --n-trials, --tolerance or the job's budget and run again")
    top = best[0]
    bsp_time = reference["time_to_target"]
    cost = search_cost(study)
    saving = bsp_time - top.values[0]
    record = {
        "best_policy": top.user_attrs["policy"],
        "best_value": top.values[0],
        "best_final_metric": top.user_attrs.get("final_metric"),
        "best_trial": top.number,
        "trials": counted_trials(study),
        "finished_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "autosync_version": __version__,
        "job_name": request.job.name,
        "fingerprint": request.job.fingerprint(),
        "space": request.space.name,
        "sampler": request.sampler,
        "bsp_time_to_target": bsp_time,
        "bsp_final_metric": reference["final_metric"],
        "search_cost_virtual_seconds": cost,
        "search_cost_bsp_trainings": cost / bsp_time if bsp_time > 0 else math.inf,
        "speedup_vs_bsp": bsp_time / top.values[0] if top.values[0] > 0 else math.inf,
        "recurrences_to_amortize": math.ceil(cost / saving) if saving > 0 else None,
    }
    study.set_user_attr("cache", record)
    return record


def top_trials(study: "optuna.Study", count: int = 5) -> list[dict[str, Any]]:
    return [{"trial": t.number, "policy": t.user_attrs["policy"], "time_to_target": t.values[0],
             "final_metric": t.user_attrs.get("final_metric"), "reached": t.user_attrs.get("reached"),
             "runs": t.user_attrs.get("runs")} for t in feasible_trials(study)[:count]]


# ---------------------------------------------------------------------------------------------- cache
def cached_studies(storage_url: str, fingerprint: str | None = None) -> list[dict[str, Any]]:
    """Every autosync study in the storage (optionally of one job), with its cache record if finished."""
    return _summaries(open_storage(storage_url), fingerprint)


def _summaries(storage: Any, fingerprint: str | None) -> list[dict[str, Any]]:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    out = []
    for summary in optuna.get_all_study_summaries(storage, include_best_trial=False):
        name = summary.study_name
        if fingerprint is not None and not name.startswith(f"{fingerprint}-"):
            continue
        out.append({"study": name, "trials": summary.n_trials, "cache": summary.user_attrs.get("cache"),
                    "created": summary.datetime_start.isoformat(timespec="seconds") if summary.datetime_start else None})
    return out


def tuned_policy(storage_url: str, job: JobSpec) -> dict[str, Any]:
    """The most recently cached best policy of `job` (any space), or a clear error when there is none."""
    studies = [s for s in cached_studies(storage_url, job.fingerprint()) if s["cache"] is not None]
    if not studies:
        raise UserError(f"--policy tuned: no cached policy for job {job.name} (fingerprint {job.fingerprint()}) "
                        f"in {storage_url}; run `autosync tune` on this job first")
    records = [_validated(s["study"], s["cache"]) for s in studies]
    return max(records, key=lambda r: str(r.get("finished_at", "")))["best_policy"]


def clear_cache(storage_url: str, job: JobSpec) -> list[str]:
    """Delete every study of `job`; returns their names."""
    import optuna

    storage = open_storage(storage_url)
    names = [s["study"] for s in _summaries(storage, job.fingerprint())]
    for name in names:
        optuna.delete_study(study_name=name, storage=storage)
    return names
