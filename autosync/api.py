"""The Python API: load a job, train it under a policy, tune it, score policies side by side.

What the `autosync` command line does, as functions returning the structured results it prints; the
command line parses options, calls these and prints. Importing it loads numpy and the policies; torch,
optuna, the search's request, the table and the job family's schema load when a function needs them
(`autosync --help` and `autosync validate` do not import this module: benchmarks/bench_startup.py).

    import autosync.api as autosync

    job = autosync.load_job("examples/sequences/job.yaml")          # or autosync.job_from_dict({...})
    result = autosync.run(job, "dbw", seed=1)                        # one training run
    print(result.metrics["time_to_target"])
    found = autosync.tune(job)                                       # the race, in an Optuna study; cached
    print(found.cache["best_policy"], found.cache["best_value"])
    board = autosync.leaderboard(job, ["bsp", "asp", "dbw"], seeds=3)
    for row in board.rows:
        print(row["policy"], row["time_to_target"])

Errors a user can cause (a bad job, policy or option) raise `UserError` (`autosync.api.UserError`,
defined in `autosync.core.errors`) with the message the command line prints.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ContextManager, Iterable, Iterator, Sequence

import yaml

from autosync.catalog import checked_spec, make_sized_policy, policy_of
from autosync.core.errors import AutosyncError, Interrupted, RuntimeFailure, UserError
from autosync.core.job import JobSpec, job_from_dict, load_job
from autosync.core.limits import local_processes
from autosync.core.loader import short_repr
from autosync.core.phases import Phase, no_phase
from autosync.data import RACE_SETTINGS
from autosync.engine.backends import BackendChoice, Ranks, check_device, torchrun_ranks, train
from autosync.experiments.compare import Comparison, compare
from autosync.experiments.leaderboard import RUNS_FILE, policy_specs, run_grid, score
from autosync.policy_grid import REPORT_FILE
from autosync.experiments.scaling import collect
from autosync.lattice import lattice_points
from autosync.measure.profile import profile_workers
from autosync.options import (CalibrateOptions, CompareOptions, ExecutionOptions, FamilyOptions,
                              LeaderboardOptions, ProfileOptions, ReplayOptions, RobustnessOptions, RunOptions,
                              ScalingOptions, TableOptions, TuneOptions, FitOptions, build)
from autosync.reporting.calibration_files import CALIBRATION_FILE, Calibrated
from autosync.reporting.leaderboard_files import LEADERBOARD_FILES
from autosync.reporting.robustness_files import ROBUSTNESS_FILES
from autosync.reporting.scaling_files import SCALING_FILES
from autosync.reporting.output import ready_output_dir as output_dir, ready_output_file as output_file
from autosync.reporting.results import (DrawnJobs, Leaderboard, Profile, Replay, Robustness, ScalingTable, tune_dir,
                                        write_calibration, write_run, write_tune)
from autosync.reporting.tune_files import TuneFiles, Tuned
from autosync.search.study import cache
from autosync.search.study.storage import DEFAULT_STORAGE, named_storage, quiet_optuna  # quiet_optuna: for scripts too

if TYPE_CHECKING:
    from autosync.policies import Policy
    from autosync.search.recommend.vote import Recommendation
    from autosync.race import RaceSettings
    from autosync.reporting.runs import Run
    from autosync.measure.rerun import LoggedRun, Rerun
    from autosync.table.build import Built
    from autosync.workloads.workload import Workload

# the files each report writes in its folder, refused there as folders before any run (the command line's too)
LEADERBOARD_FOLDER_FILES = (*LEADERBOARD_FILES, RUNS_FILE)
__all__ = [
    "JobSpec", "load_job", "job_from_dict", "validate_job", "backend", "make_policy", "tuned_policy",
    "check_workload", "run", "run_setup", "write_run", "tune", "tune_dir", "write_tune", "Tuned", "TuneFiles",
    "leaderboard", "Leaderboard", "profile", "Profile", "cached_studies", "clear_cache", "load_run", "rerun", "ranks",
    "output_dir", "output_file", "LEADERBOARD_FOLDER_FILES", "SCALING_FILES", "CALIBRATION_FILE", "RunOptions",
    "TuneOptions",
    "LeaderboardOptions", "ProfileOptions",
    "ExecutionOptions", "calibrate", "write_calibration", "CalibrateOptions", "recommend", "family", "DrawnJobs",
    "FamilyOptions", "robustness", "Robustness", "RobustnessOptions", "robustness_compare", "CompareOptions",
    "replay", "Replay", "ReplayOptions", "scaling", "ScalingTable", "ScalingOptions", "UserError", "table",
    "TableOptions", "fit", "Fitted", "FitOptions", "quiet_optuna",
]


def backend(name: str = "simulator", **fields: Any) -> "BackendChoice":
    """Where runs train (the options `--backend`, `--clock`, ... of `autosync run` and `tune`: the fields of
    `ExecutionOptions`, e.g. clock="real", workers_per_device=4), checked."""
    return build(ExecutionOptions, backend=name, **fields).choice()


def _options(cls: type, options: Any, on: "BackendChoice | None", fields: dict[str, Any],
             **given: Any) -> Any:
    """The options a function runs with: `options` (or the defaults) with `fields`, the positional arguments
    `given` that are not None, and `on`'s execution fields set."""
    if on is not None and not isinstance(on, BackendChoice):
        raise UserError("on must be where to train, as backend(...) makes it (backend('processes')), but got "
                        f"{short_repr(on)}")
    if on is not None:
        fields = {**ExecutionOptions.of_choice(on), **fields}
    return build(cls, options, **{k: v for k, v in given.items() if v is not None}, **fields)


def ranks(options: "ExecutionOptions | ProfileOptions") -> "ContextManager[Ranks]":
    """--backend distributed under torchrun: the group around a command (`engine.backends.torchrun_ranks`).

        with api.ranks(options) as group:
            if not group.leader:  # a rank other than 0 served rank 0's runs already
                return
            job = api.load_job(path)
            group.share(job)  # every rank now trains it
            ...
    """
    return torchrun_ranks(options.choice())


def _callbacks_checked(function: Callable[..., Any]) -> Callable[..., Any]:
    """`function` refusing, before it runs anything, a callback argument (one its signature types as a
    Callable or a Phase) that is neither callable nor None: a one-line UserError naming it, where a number
    given as `progress` raised TypeError at the first evaluation, after the work had begun."""
    signature = inspect.signature(function)
    optional = {name: p.annotation.replace(" ", "").endswith("|None") or p.annotation.startswith("Optional[")
                for name, p in signature.parameters.items()  # the annotation's text (`from __future__`)
                if isinstance(p.annotation, str) and ("Callable" in p.annotation or p.annotation == "Phase")}

    @functools.wraps(function)
    def checked(*args: Any, **kwargs: Any) -> Any:
        try:
            bound = signature.bind_partial(*args, **kwargs).arguments
        except TypeError:  # arguments it does not take: Python's own message, which names the function
            return function(*args, **kwargs)
        for name, may_be_none in optional.items():
            value = bound.get(name, signature.parameters[name].default)
            if not callable(value) and not (value is None and may_be_none):
                raise UserError(f"{name} must be a function{' (or None)' if may_be_none else ''}, but got "
                                f"{short_repr(value)}")
        return function(*args, **kwargs)

    return checked


def _job(job: "JobSpec | str | Path | None") -> JobSpec:
    """A function's job: a JobSpec, or a job file to load (None: the embedded digits job); anything else (a dict:
    `job_from_dict` makes a job of one) is a one-line UserError."""
    if isinstance(job, JobSpec):
        return job
    if job is None or isinstance(job, (str, Path)):
        return load_job(job)
    raise UserError(f"job must be a JobSpec (load_job, job_from_dict) or a job file's path, but got "
                    f"{type(job).__name__}")


def _listed(values: Any, name: str, paths: bool = False) -> list[Any]:
    """A function's list argument as a list (with `paths`, each item a path: `_path`); a bare string or path
    (read one character at a time, it named 'b' for the policy 'bsp') is a one-line UserError."""
    if isinstance(values, (str, Path)) or not isinstance(values, Iterable):
        raise UserError(f"{name} must be a list, but got {short_repr(values)} "
                        f"(a list of one: [{short_repr(str(values))}])")
    return [_path(v, f"{name}[{i}]") for i, v in enumerate(values)] if paths else list(values)


def _path(value: Any, name: str) -> Path:
    """A function's path argument as a Path; None, a number or an empty text is a one-line UserError (pathlib
    raised TypeError, and '' was read as the current folder)."""
    if not isinstance(value, (str, os.PathLike)) or not str(value).strip():
        raise UserError(f"{name} must be a file or folder path, but got {short_repr(value)}")
    return Path(value)


def make_policy(policy: "str | Policy | dict[str, Any]", params: dict[str, Any] | None = None) -> "Policy":
    """A policy from its name (any spelling `autosync policies` accepts) or spec ('compose(barrier=ssp,
    update=dana_slim)', 'backup:k=8') and parameters, a dict {"policy": name, "params": {...}} as results
    store it, or a Policy itself."""
    return policy_of(policy, params)


def _storage(storage: Any) -> str:
    """A storage URL given to the API (None: the default), refused in one line where it is no text or empty
    (a Path raised AttributeError deep in the storage's lock; '' was read as the default)."""
    if storage is None:
        return DEFAULT_STORAGE
    if not isinstance(storage, str) or not storage.strip():
        raise UserError("storage must be a storage URL (sqlite:///FILE.db, postgresql://...), but got "
                        f"{short_repr(storage)}")
    return storage


def tuned_policy(job: JobSpec, storage: str | None = None, params: dict[str, Any] | None = None) -> "Policy":
    """The cached best policy of a job tuned before (UserError when it has none), with `params` changed."""
    quiet_optuna()
    return make_policy(cache.tuned_policy(named_storage(_storage(storage), DEFAULT_STORAGE), _job(job)), params)


def check_workload(job: JobSpec, device: str = "cpu") -> "Workload":
    """Build the job's workload once (datasets, model, loss; the user's factories imported, called and
    checked) and return it; a problem raises a one-line JobFileError naming the job file and field."""
    from autosync.workloads.build import build_workload  # not at the top: torch

    check_device(device)  # 'gpu', or cuda on a machine without one: one line, not torch's error
    return build_workload(_job(job), device=device)


def validate_job(path: str | Path) -> JobSpec:
    """The job file `path`, loaded and checked (`autosync validate`): a job naming the user's own model,
    dataset or loss also has them imported, built and checked on a batch; every problem raises at once, as
    one JobFileError."""
    spec = load_job(path)
    if spec.uses_user_code:
        check_workload(spec)
    return spec


def run_setup(job: "JobSpec | str | Path | None", options: RunOptions) -> "tuple[JobSpec, Policy]":
    """The job (a spec, or a job file to load; None: the embedded digits job) with the options' seed, and
    the options' policy ("tuned": the job's cached best) with its parameters, checked against the job."""
    spec = _job(job)
    spec = spec.model_copy(update={"seed": options.seed}) if options.seed is not None else spec
    params = options.parameters()
    if options.tuned:
        chosen = tuned_policy(spec, options.storage, params)
    elif isinstance(options.policy, str):  # a bare 'backup' waits for 3n/4 of the job's workers, as in a leaderboard
        chosen = make_sized_policy(options.policy, params, spec.cluster.n_workers)
    else:
        chosen = make_policy(options.policy, params)
    try:
        chosen.bind(spec.cluster.n_workers, spec.workload.batch_size)
    except ValueError as exc:
        raise UserError(f"policy {chosen.name}: {exc}") from None
    return spec, chosen


@_callbacks_checked
def run(job: JobSpec, policy: "str | Policy | dict[str, Any] | None" = None, params: dict[str, Any] | None = None,
        *, options: RunOptions | None = None, on: "BackendChoice | None" = None,
        progress: Callable[[dict[str, Any]], None] | None = None, workload: Any = None,
        on_ready: Callable[[], None] | None = None, **fields: Any) -> "Run":
    """Train `job` once under `policy` and return the run's result (trace, metrics, final parameters), with
    `.write(dir)` (`autosync.reporting.runs.Run`).

    Args:
        policy: a name (`autosync policies`), "tuned" for the job's cached best (from `storage`), a dict
            {"policy", "params"} or a Policy (default: the options' policy, bsp).
        params: policy parameters to set (or, with "tuned", to change).
        options: the options of `autosync run` (`RunOptions`); `fields` (seed=, storage=, backend=,
            clock=, ...) change some of them.
        on: where to train (`backend(...)`), instead of the options' backend fields.
        progress: called with each evaluation record (time, updates, epoch, losses, accuracy).
        workload: a workload built for this job already (`check_workload`), to skip building it again.
        on_ready: called once the backend's worker processes are up, before training starts.
    """
    from autosync.reporting.runs import Run  # not at the top: torch

    opts = _options(RunOptions, options, on, fields, policy=policy, params=params)
    job, chosen = run_setup(job, opts)
    choice = opts.choice()
    workload = workload if workload is not None else check_workload(job, choice.device)
    result = train(choice, job, chosen, workload, progress, on_ready)
    return Run.of(result, job, choice.describe())


@_callbacks_checked
def tune(job: JobSpec, space: str | Path | None = None, *, options: TuneOptions | None = None,
         on: "BackendChoice | None" = None, on_trial: Callable[[int, int], None] | None = None,
         on_start: Callable[[str], None] | None = None,
         on_resume: Callable[[int, list[int]], None] | None = None,
         on_wait: Callable[[str], None] | None = None, **fields: Any) -> "Tuned":
    """Search `job`'s best policy in `space` with Optuna, or return the cached one of a recurring job.

    Args:
        space: a search-space YAML file or a shipped name (policy, the default; static_k, switch_point,
            batch_split, composed).
        options: the options of `autosync tune` (`TuneOptions`: n_trials, storage, sampler, repeats,
            verify_top, which re-runs the best candidates on the options' backend, backend, ...); `fields` change some of them (sampler="tpe", n_trials=10).
        on: where each trial trains (`backend(...)`), instead of the options' backend fields.
        on_trial: called with (trials done, trials in all) as the search goes.
        on_start: called with the storage URL once every option is checked, before the search starts.
        on_resume: called with (finished trials, numbers of dead trials re-queued) when the study already
            has trials (an interrupted or killed search is resumed), before any new trial.
        on_wait: called with a line when a storage server stops answering (what is waited for, and for how
            long), and again when it answers.

    Returns the outcome the command prints (`Tuned`, a TuneOutcome with `.write(dir)`: the verification and
    the study's plots): the study (None where the cache answered from the SQLite file without opening it in
    Optuna: `autosync.search.cache_file`), whether the cache answered, the cache record (best policy and value,
    BSP's, provenance) and the best trials.
    """
    job = _job(job)
    # not at the top: the search's request and its space's schema (pydantic), 0.1 s on 2 busy cores of every
    # command but tune (`autosync run`'s time outside training: benchmarks/bench_startup.py)
    from autosync.search.cache_file import cached_outcome
    from autosync.search.request import TuneRequest

    opts = _options(TuneOptions, options, on, fields, space=str(space) if space is not None else None)
    if opts.choice().backend == "distributed":  # (the options checked first)
        from autosync.engine.drivers.distributed import require_session  # not at the top: torch

        require_session()
    if job.uses_user_code:  # the user's code fails here, in one line, rather than as every trial failing
        check_workload(job)  # (a built-in workload cannot; a cache hit then never imports torch)
    request = TuneRequest.from_options(job, opts)
    if on_start is not None:
        on_start(request.storage)
    answered = cached_outcome(request)  # a recurring job's record read from its SQLite file, without Optuna
    if answered is not None:
        return Tuned.of(answered)
    from autosync.search.tune import tune as run_tune  # not at the top: optuna, which that answer never loads

    quiet_optuna()
    try:
        return Tuned.of(run_tune(request, on_trial=on_trial, on_resume=on_resume,
                                 on_wait=on_wait))
    except cache.NoFeasibleTrial as exc:
        if request.timeout is None:
            raise
        raise cache.NoFeasibleTrial(f"{exc} (--timeout {request.timeout:g} s ended the search: its trials start only "
                                    "once the BSP reference runs are done, and none met the target before the limit)"
                                    ) from None


@_callbacks_checked
def leaderboard(job: JobSpec, policies: Sequence[str | dict[str, Any]] | None = None, *,
                options: LeaderboardOptions | None = None, on_done: Callable[[dict[str, Any]], None] | None = None,
                progress: Callable[[int], ContextManager[Callable[[dict[str, Any]], None]]] | None = None,
                keep_runs_in: Path | None = None, on_resume: Callable[[int, int, Path], None] | None = None,
                **fields: Any) -> Leaderboard:
    """Every policy with seeds 0..seeds-1 on `job`, scored MLPerf-style (trimmed mean time-to-target).

    Args:
        policies: specs "NAME" or "NAME:key=value,..." (or dicts {"policy", "params"}); default: bsp, asp,
            ssp, backup (k = 3n/4), dbw, bdbw.
        options: the options of `autosync leaderboard` (`LeaderboardOptions`: seeds, n_jobs (joblib
            processes; -1: all cores), include_tuned (add the job's cached tuned policy, from storage));
            `fields` change some of them (seeds=3).
        on_done: called with each finished run's summary.
        progress: entered with the number of runs once every check has passed (each policy spec on the
            job's workers, the storage of the tuned policy, the workload's code), around the runs; gives a
            function called with each finished run's summary (as `on_done`). A refused input so never
            shows a progress bar.
        keep_runs_in: a directory where the finished runs are kept as they come, in runs.jsonl (`autosync
            leaderboard` keeps them beside its files): the runs it holds of this job, policy and seed are
            read back, not run, so a call stopped by Ctrl-C (`Interrupted`, saying how many are kept) resumes.
        on_resume: called with (runs read back, runs in all, the file) when finished runs are reused.
    """
    job = _job(job)
    opts = _options(LeaderboardOptions, options, None, fields,
                    policies=_listed(policies, "policies") if policies is not None else None)
    specs = policy_specs(opts.policies, job.cluster.n_workers)
    if opts.include_tuned:
        tuned = tuned_policy(job, opts.storage).to_dict()
        if tuned not in specs:
            specs.append(tuned)
    if job.uses_user_code:  # one line here rather than a failure in every worker process
        check_workload(job)
    if keep_runs_in is not None:  # a file there is one line before any run
        output_dir(Path(keep_runs_in), "keep_runs_in", files=LEADERBOARD_FOLDER_FILES)
    seed_list = list(range(opts.seeds))
    with (progress or _no_progress)(len(specs) * len(seed_list)) as advance:
        def done(run: dict[str, Any]) -> None:
            advance(run)
            if on_done is not None:
                on_done(run)

        entries = run_grid(job, specs, seed_list, n_jobs=local_processes(opts.n_jobs), on_done=done,
                           runs_file=None if keep_runs_in is None else Path(keep_runs_in) / RUNS_FILE,
                           on_resume=on_resume)
    return Leaderboard(job, seed_list, score(entries, metric=job.target.metric), entries)


@contextlib.contextmanager
def _no_progress(total: int) -> Iterator[Callable[[dict[str, Any]], None]]:
    """No progress shown: `leaderboard`'s `progress` when none is given."""
    yield lambda run: None


@_callbacks_checked
def profile(job: JobSpec, options: ProfileOptions | None = None, *, workload: Any = None,
            phase: Phase = no_phase, **fields: Any) -> Profile:
    """Time each worker's real round trips (compute and communication) and fit the job's cluster model.

    Args:
        options: the options of `autosync profile` (`ProfileOptions`); `fields` change some of them.
        workload: a workload built for this job already (`check_workload`).
        phase: an `autosync.core.phases.Phase`, called around starting the workers, the timed rounds (one
            step each) and timing the server.
    """
    job = _job(job)
    opts = _options(ProfileOptions, options, None, fields)
    sizes = opts.sizes(job)
    workload = workload if workload is not None else check_workload(job, opts.device)
    return Profile(job, *profile_workers(job, opts.choice(), workload, sizes, opts.rounds, phase))


@_callbacks_checked
def calibrate(job: JobSpec, options: CalibrateOptions | None = None, *, workload: Any = None,
              phase: Phase = no_phase,
              **fields: Any) -> "Calibrated":
    """Run `job` for real twice (BSP and backup k = 1, a few updates each), compare with its simulation and,
    with `fit`, fit the server's costs per update and per gradient to the real runs
    (`autosync.measure.calibration`). Returns the Calibration and the job to tune (with the fitted server), as
    `Calibrated`: a pair with `.write(job_file)`.

    Args:
        options: the options of `autosync calibrate` (`CalibrateOptions`); `fields` change some of them.
        workload: a workload built for this job already (`check_workload`).
        phase: as for `profile` (the real runs: one step each).
    """
    job = _job(job)
    from autosync.measure.calibration import calibrate_real  # not at the top: torch

    opts = _options(CalibrateOptions, options, None, fields)
    workload = workload if workload is not None else check_workload(job, opts.device)
    return Calibrated(*calibrate_real(job, opts.choice(), workload, opts.updates, opts.fit, phase))


def family(family_file: str | Path, directory: str | Path | None = None, options: FamilyOptions | None = None, *,
           command: str = "autosync.api.family", **fields: Any) -> DrawnJobs:
    """Draw jobs 0..jobs-1 from a job family (a YAML file, `autosync.core.family`) and write each as an ordinary
    job file (validated and fingerprinted) into `directory` (default: results/robustness/<family>/jobs).

    Args:
        options: the options of `autosync family` (`FamilyOptions`); `fields` change some of them (jobs=8).
        command: the command line recorded in each job file.
    """
    # not at the top: the job family's schema (pydantic models: 85 ms on 2 busy cores), which a cache hit does
    # not load
    from autosync.core.family import load_family, write_jobs

    opts = _options(FamilyOptions, options, None, fields)
    spec = load_family(_path(family_file, "family_file"))
    out = output_dir(_path(directory, "directory") if directory is not None
                     else Path("results") / "robustness" / spec.name / "jobs")
    return DrawnJobs(spec.name, out, write_jobs(spec, spec.jobs(opts.jobs), out, str(family_file), command))


@_callbacks_checked
def robustness(family_file: str | Path, directory: str | Path | None = None,
               options: RobustnessOptions | None = None, *, command: str = "autosync.api.robustness",
               phase: Phase = no_phase,
               on_resume: Callable[[int, int, Path], None] | None = None, **fields: Any) -> Robustness:
    """Each online policy against each drawn job's best static k, over seeds (resumable: every finished run
    is appended to `directory`/cells.jsonl, default results/robustness/<family>, and read back).

    Args:
        options: the options of `autosync robustness` (`RobustnessOptions`); `fields` change some of them.
        command: the command line recorded in the job files and the report.
        phase: as for `profile` (tuning each job with tuned_trials: one step per job; the runs still to
            train: one step each).
        on_resume: called with (runs read back, runs in all, the file) when finished runs are reused.

    Raises `Interrupted` on Ctrl-C, saying how many finished runs are kept for the same call to resume from.
    """
    # not at the top: the job family's schema (pydantic models: 85 ms on 2 busy cores; the robustness
    # experiment imports it too), which a cache hit does not load
    from autosync.core.family import load_family, write_jobs
    from autosync.experiments.robustness import CELLS_FILE, Grid, online_specs, run_report, tune_each
    from autosync.search.space import load_space, resolve_space_path  # (the search space's schema, as for `tune`)
    from autosync.search.strategies.samplers import sampler_for
    from autosync.search.tune_options import AUTO, RACE

    opts = _options(RobustnessOptions, options, None, fields)
    rules = opts.rules()
    spec = load_family(_path(family_file, "family_file"))
    drawn = spec.jobs(opts.jobs)
    online = online_specs(opts.policies or (), drawn)
    raced = False
    for n in sorted({j.cluster.n_workers for j in drawn}):  # a bad space fails before any job file is written
        space = load_space(resolve_space_path(opts.tuned_space, "policy", "--tuned-space"), n, "--tuned-space")
        raced = sampler_for(AUTO, space) == RACE  # the race runs to its answer: it takes no trial budget
    out = output_dir(_path(directory, "directory") if directory is not None
                     else Path("results") / "robustness" / spec.name, files=(*ROBUSTNESS_FILES, CELLS_FILE))
    _refuse_another_family(out, spec.name)
    _refuse_another_budget(out / "jobs", drawn)
    write_jobs(spec, drawn, output_dir(out / "jobs"), str(family_file), command)
    tuned = {}
    if opts.tuned_trials:  # each job's own tuned policy, cached in studies.db beside the report
        budget = {} if raced else {"n_trials": opts.tuned_trials}
        what = f"the race in {opts.tuned_space}" if raced else f"{opts.tuned_trials} trials in {opts.tuned_space}"
        tuned = tune_each(drawn, f"sqlite:///{out / 'studies.db'}", what,
                          lambda job, url: tune(job, opts.tuned_space, storage=url, **budget), phase)
    broad = lattice_points if opts.reference == "broad" else None
    grid = Grid(drawn, list(range(opts.seed_offset, opts.seed_offset + opts.seeds)), online, rules, tuned, broad)
    result, reused = run_report(grid, out, local_processes(opts.n_jobs), phase, on_resume)
    return Robustness(spec.name, drawn, grid.seeds, rules, result, out, reused)


def _refuse_another_family(out: Path, family: str) -> None:
    """A folder holding another family's robustness report is refused before any file is written: that family's
    job files and runs were left beside the new report's."""
    try:
        theirs = json.loads((out / REPORT_FILE).read_text()).get("family")
    except (OSError, ValueError, AttributeError):
        return  # none there (or one that is not a report, which writing the new one replaces)
    if isinstance(theirs, str) and theirs != family:
        raise UserError(f"--out {out} holds the robustness report of family {theirs}, not {family}: name another "
                        "folder (its job files and runs would stay beside this report's)")


def _refuse_another_budget(jobs_dir: Path, drawn: list[JobSpec]) -> None:
    """A report folder whose job files hold another budget than the family's jobs now is refused before any file
    is written: its cells are keyed by the job's fingerprint, which leaves the budget out, so its 200 s runs
    were read back as the 150 s jobs' (the family's other fields change the fingerprint)."""
    for job in drawn:
        try:
            theirs = load_job(jobs_dir / f"{job.name}.yaml").budget
        except (AutosyncError, OSError):
            continue  # none there (or one that is not a job, which writing the new one replaces)
        if theirs != job.budget:
            raise UserError(f"--out {jobs_dir.parent}: its job {job.name} has the budget "
                            f"{theirs.model_dump(exclude_defaults=True)}, the family's now "
                            f"{job.budget.model_dump(exclude_defaults=True)}: its runs are of that budget; name "
                            "another folder")


@_callbacks_checked
def replay(logs: str | Path, options: ReplayOptions | None = None, *,
           phase: Phase = no_phase, **fields: Any) -> Replay:
    """Replay switch-point searches on a Sync-Switch log folder (the paper's published runs, shipped as
    `autosync.data.SYNC_SWITCH_LOGS`, autosync/data/sync_switch_logs/cifar10_res32): binary search, the
    cost-ordered ladder and TPE with each of `tpe_trials` trials, `simulations` searches per strategy and
    setting (`autosync.search.switch_log_replay`).

    Args:
        options: the options of `autosync replay` (`ReplayOptions`); `fields` change some of them.
        phase: as for `profile` (one step per simulated search).
    """
    from autosync.search.switch_log_replay import load_switch_logs, table_ii  # not at the top: optuna

    opts = _options(ReplayOptions, options, None, fields)
    switch_logs = load_switch_logs(_path(logs, "logs"))
    optimum, rows = table_ii(switch_logs, opts.space, opts.simulations, opts.seed, opts.threshold, opts.max_settings,
                             opts.tpe_trials, phase)
    return Replay(switch_logs, optimum, rows, opts.threshold)


def scaling(leaderboards: Sequence[str | Path], options: ScalingOptions | None = None,
            **fields: Any) -> ScalingTable:
    """A per-run metric against the number of workers per policy, from leaderboard folders of one job at
    several worker counts, each written by `autosync leaderboard` (DANA's Fig. 4, Table 2).

    Args:
        options: the options of `autosync scaling` (`ScalingOptions`: metric); `fields` change them.
    """
    opts = _options(ScalingOptions, options, None, fields)
    return ScalingTable(collect(_listed(leaderboards, "leaderboards", paths=True), opts.metric))


@_callbacks_checked
def table(files: Sequence[str | Path], directory: str | Path, options: TableOptions | None = None, *,
          on_start: Callable[[int, int], None] | None = None, on_done: Callable[[Any], None] | None = None,
          **fields: Any) -> "Built":
    """Build (or complete) the table in `directory` (`autosync.table`): each lattice point run to the target
    (with `full`, to the end of the budget) on each job's two search seeds and `held_out` held-out seeds, for
    every job file in `files` and jobs 0..jobs-1 of every family file there. The lattice is the broad reference
    grid (`autosync.lattice.lattice_points`), or `policies`, canonical on each job's
    workers; with `retrain`, every cell the table holds of the jobs trained again instead
    (`autosync.table.build.retrain_table`). Resumable: finished cells are kept. The cells run on joblib's processes, on the workers of the
    Dask cluster at `scheduler` (`autosync.table.dask_cluster`), or on whichever joblib backend the call is made in
    (`with joblib.parallel_config(backend=...)`).

    Args:
        options: the options of `autosync table` (`TableOptions`); `fields` change some of them.
        on_start: called with (cells to compute, cells already in the table) before the first runs.
        on_done: called after each computed cell.

    Returns what was built (`autosync.table.build.Built`: cells computed and reused, failed runs, the files).
    """
    # not at the top: the job family's schema (pydantic models: 85 ms on 2 busy cores), which a cache hit does
    # not load, and the table's modules (25 ms), which `autosync run` does not
    from autosync.core.family import load_family, looks_like_family
    from autosync.table import Table
    from autosync.table.build import build_table, retrain_table
    from autosync.table.dask_cluster import LOCAL, on_cluster

    opts = _options(TableOptions, options, None, fields)
    files = _listed(files, "files", paths=True)
    if not files:
        raise UserError("autosync table needs at least one job or family file (the default job: "
                        "baselines/digits_default.yaml)")
    jobs: list[JobSpec] = []
    for path in files:
        jobs += load_family(path).jobs(opts.jobs) if looks_like_family(Path(path)) else [load_job(path)]
    named = {n: [checked_spec(p, n) for p in opts.policies]
             for n in sorted({j.cluster.n_workers for j in jobs})}  # parsed once: a bad spec fails before any run

    def lattice(n: int) -> list[dict[str, Any]]:
        return named[n] if opts.policies else lattice_points(n)

    store = Table(output_dir(_path(directory, "directory")))
    # this machine's processes, or a local cluster's; a remote cluster's workers are its own
    n_jobs = local_processes(opts.n_jobs) if opts.scheduler in (None, LOCAL) else opts.n_jobs
    with contextlib.nullcontext() if opts.scheduler is None else on_cluster(opts.scheduler, n_jobs):
        if opts.retrain:
            return retrain_table(store, jobs, n_jobs, on_start, on_done)
        return build_table(store, jobs, lattice, opts.held_out, n_jobs, opts.full, on_start, on_done)


@dataclass(frozen=True)
class Fitted:
    """What `fit` found: the race's settings, their file's text and where it went (or was checked)."""

    settings: "RaceSettings"
    text: str
    path: Path
    jobs: int
    unchanged: bool  # the file already held exactly this text


def fit(files: Sequence[str | Path], options: FitOptions | None = None, **fields: Any) -> Fitted:
    """Fit the race's settings (`autosync.race`: its portfolio and margin) on jobs 0..jobs-1
    of each family file in `files`, every run read from the table (`autosync.experiments.race_fit.fit`), and
    write them to `out` (default: the settings autosync ships). With `check`, write nothing and raise
    `RuntimeFailure` unless `out` already holds those settings (its comment, the command that wrote it, aside).

    Args:
        options: the options of `autosync fit` (`FitOptions`); `fields` change some of them.
    """
    # not at the top: the job family's schema (pydantic models: 85 ms on 2 busy cores) and the fits' modules,
    # which a cache hit does not load
    from autosync.experiments.race_fit import fit_families, settings_text

    opts = _options(FitOptions, options, None, fields)
    files = _listed(files, "files", paths=True)
    if not files:
        raise UserError("autosync fit needs at least one job-family file (the committed ones: "
                        "baselines/family_*.yaml)")
    if opts.out is not None and not opts.out.strip():  # '' was read as the default: the shipped settings, rewritten
        raise UserError(f"--out must name a file (leave it out for the settings autosync ships), but got {opts.out!r}")
    if opts.out and opts.check and Path(opts.out).is_dir():  # refused before the fit, as without --check
        raise UserError(f"--out {opts.out} is a directory: name the settings file to check")
    if opts.out and not opts.check:  # a place it cannot write is refused before the fit, not after it
        output_file(Path(opts.out))
    command = " ".join(["autosync fit", *(str(f) for f in files), "--table", str(opts.table), "--jobs",
                        str(opts.jobs)] + (["--out", opts.out] if opts.out else []))
    try:
        settings, jobs = fit_families(files, opts.table, opts.jobs, read_only=opts.check)  # --check writes nothing
    except KeyboardInterrupt:  # the runs it trained into the table are there (`Table.put` appends each at once)
        raise Interrupted(f"interrupted: the runs this fit trained are kept in the table {opts.table}; the same "
                          "command goes on from them") from None
    text = settings_text(settings, command)
    out = Path(opts.out) if opts.out else RACE_SETTINGS
    unchanged = out.is_file() and _same_settings(out, settings)
    if opts.check and not unchanged:
        raise RuntimeFailure(f"{out} does not hold what `{command}` fits now: run it without --check to write it")
    if not opts.check:
        out.write_text(text)
    return Fitted(settings, text, out, jobs, unchanged)


def _same_settings(path: Path, settings: "RaceSettings") -> bool:
    try:
        return yaml.safe_load(path.read_text()) == settings.to_dict()
    except (OSError, yaml.YAMLError, UnicodeDecodeError):  # not text: it holds no fit
        return False


def robustness_compare(reports: Sequence[str | Path], options: CompareOptions | None = None,
                       **fields: Any) -> "Comparison":
    """Robustness reports of several families side by side (`autosync.experiments.compare.Comparison`: a row
    per policy run on every family), each report a folder or robustness.json written by `robustness`.

    Args:
        options: the options of `autosync robustness-compare` (`CompareOptions`: developed_on, the family
            the policies' changes were developed on); `fields` change them.
    """
    opts = _options(CompareOptions, options, None, fields)
    return compare(_listed(reports, "reports", paths=True), opts.developed_on)


def cached_studies(job: JobSpec | None = None, storage: str | None = None, *,
                   check: bool = False) -> list[dict[str, Any]]:
    """The studies of `job` (None: every study) in the storage (default: sqlite:///results/autosync-studies.db),
    with their cache records (None while unfinished); reading never creates the storage. The job comes first,
    as in `clear_cache` and the API's other functions. With `check`, a damaged cache record (not JSON, or not
    usable) raises its one-line error, as every command that reads records does (without: a record that is not
    JSON is None, and the study carries why under "damaged")."""
    quiet_optuna()
    return cache.cached_studies(_storage(storage), _job(job).fingerprint() if job is not None else None, check)


def recommend(job: JobSpec, storage: str | None = None, grids: Sequence[str | Path] = ()) -> "Recommendation":
    """A policy for `job` without training, from the nearest tuned jobs in the storage (default:
    sqlite:///results/autosync-studies.db) and the drawn jobs of the robustness reports `grids` (folders
    written by `autosync robustness`): `autosync.search.recommend.vote.Recommendation` (the policy, its
    predicted time and speedup over BSP, the neighbours that voted and how far they are). No tuned job in
    either is a one-line UserError; reading never creates the storage."""
    job = _job(job)
    # not at the top: the recommendation's modules (with the search's objective and the table: 35 ms on 2 busy
    # cores), which `autosync run` does not load
    from autosync.search.recommend.vote import recommend_from

    return recommend_from(_storage(storage), job, _listed(grids, "grids", paths=True))


def clear_cache(job: JobSpec, storage: str | None = None) -> list[str]:
    """Delete every study (and so the cached policy) of `job`; returns their names."""
    quiet_optuna()
    return cache.clear_cache(_storage(storage), _job(job))


def load_run(run_dir: str | Path, device: str = "cpu") -> "LoggedRun":
    """A run written by `autosync run` (summary.json, trace.json, final_params.pt), to `rerun` on `device`
    (checked first)."""
    from autosync.measure.rerun import load_run as load  # not at the top: torch

    return load(_path(run_dir, "run_dir"), device)


@_callbacks_checked
def rerun(logged: "LoggedRun", device: str = "cpu", progress: Callable[[dict[str, Any]], None] | None = None,
          ) -> "Rerun":
    """Replay a logged run (`load_run`) exactly from its arrival log, in this process on `device`; the
    outcome says whether the final parameters are bit-identical to the logged run's."""
    from autosync.measure.rerun import LoggedRun, rerun as replay  # not at the top: torch

    if not isinstance(logged, LoggedRun):  # a run folder's path raised AttributeError in the replay
        raise UserError(f"rerun needs the run load_run(RUN_DIR) returns, but got {short_repr(logged)}")
    return replay(logged, device, progress=progress)

