"""The Python API: load a job, train it under a policy, tune it, score policies side by side.

What the `autosync` command line does, as functions returning the structured results it prints; the
command line parses options, calls these and prints. Heavy libraries load when a function needs them.

    import autosync.api as autosync

    job = autosync.load_job("examples/sequences/job.yaml")          # or autosync.job_from_dict({...})
    result = autosync.run(job, "dbw", seed=1)                        # one training run
    print(result.metrics["time_to_target"])
    found = autosync.tune(job, space="policy", n_trials=10)         # an Optuna study; cached for next time
    print(found.cache["best_policy"], found.cache["best_value"])
    board = autosync.leaderboard(job, ["bsp", "asp", "dbw"], seeds=3)
    for row in board.rows:
        print(row["policy"], row["time_to_target"])

Errors a user can cause (a bad job, policy or option) raise `UserError` (`autosync.api.UserError`,
defined in `autosync.core.errors`) with the message the command line prints.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ContextManager, Sequence

from autosync.core.errors import UserError
from autosync.core.job import JobSpec, job_from_dict, load_job
from autosync.options import (CalibrateOptions, CompareOptions, ExecutionOptions, FamilyOptions,
                              LeaderboardOptions, ProfileOptions, ReplayOptions, RobustnessOptions, RunOptions,
                              ScalingOptions, TuneOptions, build)

# Called with (what, steps) around each long phase of a function; the context it returns gives a function
# to call after each step (the command line draws a spinner or a counting bar).
Phase = Callable[[str, int], ContextManager[Callable[[], None]]]

if TYPE_CHECKING:
    from autosync.engine import RunResult
    from autosync.engine.backends import BackendChoice, Ranks
    from autosync.leaderboard import Entry
    from autosync.policies import Policy
    from autosync.reporting.runs import Run
    from autosync.reporting.calibration import Calibrated
    from autosync.reporting.tune import TuneFiles, Tuned
    from autosync.rerun import LoggedRun, Rerun
    from autosync.robustness_compare import Comparison
    from autosync.search.strategies.recommend import Recommendation
    from autosync.search.tune import TuneOutcome
    from autosync.workloads.workload import Workload

__all__ = [
    "JobSpec", "load_job", "job_from_dict", "validate_job", "backend", "make_policy", "tuned_policy", "check_workload", "run",
    "run_setup", "write_run", "tune", "tune_dir", "write_tune", "Tuned", "TuneFiles", "leaderboard", "Leaderboard", "profile",
    "Profile", "cached_studies", "clear_cache", "load_run", "rerun", "ranks", "output_dir", "output_file", "RunOptions",
    "TuneOptions", "LeaderboardOptions", "ProfileOptions", "ExecutionOptions", "calibrate", "write_calibration",
    "CalibrateOptions", "recommend", "family", "DrawnJobs", "FamilyOptions", "robustness", "Robustness",
    "RobustnessOptions", "robustness_compare", "CompareOptions",
    "replay", "Replay", "ReplayOptions", "scaling", "ScalingTable", "ScalingOptions", "UserError",
]


def backend(name: str = "simulator", **fields: Any) -> "BackendChoice":
    """Where runs train (the options `--backend`, `--clock`, ... of `autosync run` and `tune`: the fields of
    `ExecutionOptions`, e.g. clock="real", workers_per_device=4), checked."""
    return build(ExecutionOptions, backend=name, **fields).choice()


def _options(cls: type, options: Any, on: "BackendChoice | None", fields: dict[str, Any],
             **given: Any) -> Any:
    """The options a function runs with: `options` (or the defaults) with `fields`, the positional arguments
    `given` that are not None, and `on`'s execution fields set."""
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
    from autosync.engine.backends import torchrun_ranks

    return torchrun_ranks(options.choice())


def output_dir(directory: str | Path) -> Path:
    """`directory`, created and proven writable before any training (a one-line UserError naming --out)."""
    from autosync.reporting.output import ready_output_dir

    return ready_output_dir(Path(directory))


def output_file(path: str | Path) -> Path:
    """`path`, a file to write: not a directory, its folder created and proven writable before anything is
    computed (a one-line UserError naming --out)."""
    from autosync.reporting.output import ready_output_file

    return ready_output_file(Path(path))


def make_policy(policy: "str | Policy | dict[str, Any]", params: dict[str, Any] | None = None) -> "Policy":
    """A policy from its name (any spelling `autosync policies` accepts) or spec ('compose(barrier=ssp,
    update=dana_slim)', 'backup:k=8') and parameters, a dict {"policy": name, "params": {...}} as results
    store it, or a Policy itself."""
    from autosync.catalog import make_policy as from_name, policy_from_dict
    from autosync.policies import Policy

    if isinstance(policy, Policy):
        return policy
    if isinstance(policy, dict):
        return policy_from_dict({"policy": policy["policy"], "params": {**policy.get("params", {}), **(params or {})}})
    return from_name(policy, params or {})


def tuned_policy(job: JobSpec, storage: str | None = None, params: dict[str, Any] | None = None) -> "Policy":
    """The cached best policy of a job tuned before (UserError when it has none), with `params` changed."""
    from autosync.search.study.cache import tuned_policy as cached
    from autosync.search.study.storage import DEFAULT_STORAGE

    quiet_optuna()
    found = cached(storage or DEFAULT_STORAGE, job)
    found["params"].update(params or {})
    return make_policy(found)


def check_workload(job: JobSpec, device: str = "cpu") -> "Workload":
    """Build the job's workload once (datasets, model, loss; the user's factories imported, called and
    checked) and return it; a problem raises a one-line JobFileError naming the job file and field."""
    from autosync.workloads.workload import Workload

    return Workload(job, device=device)


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
    if isinstance(job, JobSpec):
        spec = job.model_copy(update={"seed": options.seed}) if options.seed is not None else job
    else:
        spec = load_job(job, overrides={"seed": options.seed} if options.seed is not None else None)
    params = options.parameters()
    if options.policy == "tuned":
        chosen = tuned_policy(spec, options.storage, params)
    else:
        chosen = make_policy(options.policy, params)
    try:
        chosen.bind(spec.cluster.n_workers, spec.workload.batch_size)
    except ValueError as exc:
        raise UserError(f"policy {chosen.name}: {exc}") from None
    return spec, chosen


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
    from autosync.engine import backends, simulate
    from autosync.reporting.runs import Run

    opts = _options(RunOptions, options, on, fields, policy=policy, params=params)
    job, chosen = run_setup(job, opts)
    choice = opts.choice()
    if workload is None:
        workload = check_workload(job, choice.device)
    driver, clock = backends.build(choice, job, workload)
    try:
        if on_ready is not None and driver is not None:
            on_ready()
    except BaseException:  # Ctrl-C in the callback: the worker processes stop all the same
        driver.close()
        raise
    result = simulate(job, chosen, workload=workload, progress=progress, driver=driver, clock=clock)
    return Run.of(result, job.model_dump(mode="json"), choice.describe())


def write_run(result: "RunResult", job: JobSpec, directory: str | Path, options: RunOptions | None = None,
              plot: bool = False) -> list[Path]:
    """Write a run's summary.json (job, policy, metrics, how it ran), trace tables, final parameters and,
    with `plot`, plot.png into `directory`; returns the paths: `Run.write` (what `run` returns has it), for a
    result the engine returned."""
    from autosync.reporting.runs import Run

    execution = (options or RunOptions()).choice().describe()
    return Run.of(result, job.model_dump(mode="json"), execution).write(directory, plot)


def tune(job: JobSpec, space: str | Path | None = None, *, options: TuneOptions | None = None,
         on: "BackendChoice | None" = None, on_trial: Callable[[int, int], None] | None = None,
         on_confirm: Callable[[int, int], None] | None = None, on_start: Callable[[str], None] | None = None,
         on_resume: Callable[[int, list[int]], None] | None = None, **fields: Any) -> "Tuned":
    """Search `job`'s best policy in `space` with Optuna, or return the cached one of a recurring job.

    Args:
        space: a search-space YAML file or a shipped name (policy, the default; static_k, switch_point,
            batch_split, composed).
        options: the options of `autosync tune` (`TuneOptions`: n_trials, storage, sampler, repeats,
            verify_top, confirm_top, backend, ...); `fields` change some of them (n_trials=10). With
            verify_top K > 0 the search is simulated and its K best candidates and BSP are re-run on the
            options' backend to verify it; confirm_top K > 0 re-runs the search's K best candidates, the
            winners of the job's other studies that this space holds, and BSP on confirm_seeds more seeds,
            and answers with the best mean over all the seeds (`autosync.search.strategies.confirm`).
        on: where each trial trains (`backend(...)`), instead of the options' backend fields.
        on_trial: called with (trials done, trials in all) as the search goes.
        on_confirm: called with (runs done, runs in all) as the confirmation goes.
        on_start: called with the storage URL once every option is checked, before the search starts.
        on_resume: called with (finished trials, numbers of dead trials re-queued) when the study already
            has trials (an interrupted or killed search is resumed), before any new trial.

    Returns the outcome the command prints (`Tuned`, a TuneOutcome with `.write(dir)`: the verification and
    the study's plots): the study, whether the cache answered, the cache record (best policy and value, BSP's,
    provenance) and the best trials.
    """
    from autosync.reporting.tune import Tuned
    from autosync.search.study.cache import NoFeasibleTrial
    from autosync.search.tune import TuneRequest, tune as run_tune

    opts = _options(TuneOptions, options, on, fields, space=str(space) if space is not None else None)
    choice = opts.choice()
    if choice.backend == "distributed":
        from autosync.engine.drivers.distributed import in_session

        if not in_session():
            raise UserError("--backend distributed tunes under torchrun, every rank running the same command, e.g. "
                            "torchrun --nproc-per-node 3 -m autosync.cli tune JOB.yaml --backend distributed")
    if job.uses_user_code:  # the user's code fails here, in one line, rather than as every trial failing
        check_workload(job)  # (a built-in workload cannot; a cache hit then never imports torch)
    request = TuneRequest.from_options(job, opts)
    quiet_optuna()
    if on_start is not None:
        on_start(request.storage)
    try:
        return Tuned.of(run_tune(request, on_trial=on_trial, on_confirm=on_confirm, on_resume=on_resume))
    except NoFeasibleTrial as exc:
        if request.timeout is None:
            raise
        raise NoFeasibleTrial(f"{exc} (--timeout {request.timeout:g} s ended the search: its trials start only once "
                              "the BSP reference runs are done, and none met the target before the limit)") from None


def tune_dir(outcome: "TuneOutcome", job: JobSpec, options: TuneOptions | None = None) -> Path:
    """Where `autosync tune` writes a study's plots and verification: results/tune/<job>-<space>."""
    space = outcome.cache.get("space") or Path(str((options or TuneOptions()).space)).stem
    return Path("results") / "tune" / f"{job.name}-{space}"


def write_tune(outcome: "TuneOutcome", directory: str | Path, command: str = "autosync.api.tune") -> "TuneFiles":
    """Write a search's verification (with verify_top) and, unless the cache answered, its study's plots:
    `Tuned.write` (what `tune` returns has it), for an outcome the search returned."""
    from autosync.reporting.tune import Tuned

    return Tuned.of(outcome).write(directory, command)


def __getattr__(name: str) -> Any:
    """`Tuned` and `TuneFiles` (`autosync.reporting.tune`) load with the search they extend, on first use:
    importing the API loads no optuna."""
    if name in ("Tuned", "TuneFiles"):
        from autosync.reporting import tune as written

        return getattr(written, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass
class Leaderboard:
    """Policies x seeds on one job: scored rows (best time-to-target first) and every run behind them."""

    job: JobSpec
    seeds: list[int]
    rows: list[dict[str, Any]]
    entries: list["Entry"]

    def write(self, directory: str | Path, command: str = "autosync.api.leaderboard") -> list[Path]:
        """Write leaderboard.md, .csv, .json and the plots into `directory`; returns the paths."""
        from autosync.reporting.leaderboard import write_leaderboard

        return write_leaderboard(self.rows, self.entries, self.job.model_dump(mode="json"), Path(directory), command)


def leaderboard(job: JobSpec, policies: Sequence[str | dict[str, Any]] | None = None, *,
                options: LeaderboardOptions | None = None, on_done: Callable[[dict[str, Any]], None] | None = None,
                **fields: Any) -> Leaderboard:
    """Every policy with seeds 0..seeds-1 on `job`, scored MLPerf-style (trimmed mean time-to-target).

    Args:
        policies: specs "NAME" or "NAME:key=value,..." (or dicts {"policy", "params"}); default: bsp, asp,
            ssp, backup (k = 3n/4), dbw, bdbw.
        options: the options of `autosync leaderboard` (`LeaderboardOptions`: seeds, n_jobs (joblib
            processes; -1: all cores), include_tuned (add the job's cached tuned policy, from storage));
            `fields` change some of them (seeds=3).
        on_done: called with each finished run's summary.
    """
    from autosync.catalog import parse_policy_spec
    from autosync.leaderboard import DEFAULT_POLICIES, run_grid, score

    opts = _options(LeaderboardOptions, options, None, fields,
                    policies=list(policies) if policies is not None else None)
    n = job.cluster.n_workers
    specs = [p if isinstance(p, dict) else parse_policy_spec(p, n) for p in (opts.policies or DEFAULT_POLICIES)]
    if opts.include_tuned:
        tuned = tuned_policy(job, opts.storage).to_dict()
        if tuned not in specs:
            specs.append(tuned)
    if job.uses_user_code:  # one line here rather than a failure in every worker process
        check_workload(job)
    seed_list = list(range(opts.seeds))
    entries = run_grid(job, specs, seed_list, n_jobs=opts.n_jobs, on_done=on_done)
    return Leaderboard(job, seed_list, score(entries), entries)


@dataclass
class Profile:
    """A job's workers timed on this machine, and the cluster model fitted to them."""

    job: JobSpec
    samples: list[Any]  # one autosync.profiling.Sample per (batch size, round, worker)
    server: Any  # autosync.profiling.ServerCosts: the server's update and parameter copy
    cluster: dict[str, Any]  # the fitted cluster section of a job file
    workers: str  # what computed: "2 worker processes", "3 ranks"

    def write(self, directory: str | Path) -> list[Path]:
        """Write the samples, the fit and a job file with the fitted cluster (the last path) into `directory`."""
        from autosync.reporting.profile import write_profile

        return write_profile(self.job, self.samples, self.cluster, Path(directory))

    def rows(self) -> list[tuple[int, float, float, float]]:
        """Per batch size: mean compute, mean and p90 round trip (seconds)."""
        from autosync.profiling import batch_summary

        return batch_summary(self.samples)


def _no_phase(text: str, total: int) -> ContextManager[Callable[[], None]]:
    return contextlib.nullcontext(lambda: None)


def profile(job: JobSpec, options: ProfileOptions | None = None, *, workload: Any = None,
            phase: Phase = _no_phase, **fields: Any) -> Profile:
    """Time each worker's real round trips (compute and communication) and fit the job's cluster model.

    Args:
        options: the options of `autosync profile` (`ProfileOptions`); `fields` change some of them.
        workload: a workload built for this job already (`check_workload`).
        phase: called with (what, steps) around each phase (starting the workers, the timed rounds: one
            step each, timing the server: 0 steps); the context it returns gives a function to call after
            each step.
    """
    from autosync.engine.backends import build as build_backend
    from autosync.profiling import fit_measured, measure, measure_server

    opts = _options(ProfileOptions, options, None, fields)
    sizes = opts.sizes(job)
    workload = workload if workload is not None else check_workload(job, opts.device)
    with phase(f"starting the {opts.backend} backend's workers on {opts.device}", 0):
        driver, _ = build_backend(opts.choice(), job, workload)
    try:
        n = job.cluster.n_workers
        with phase(f"rounds of {n} tasks", len(sizes) * opts.rounds) as advance:
            samples = measure(driver, n, sizes, opts.rounds, workload.init_params(), on_round=advance,
                              buffers=workload.init_buffers())
    finally:
        driver.close()
    with phase("timing the server's update and parameter copy", 0):
        server = measure_server(job, workload.init_params())
    server, cluster, workers = fit_measured(job, samples, server, opts.backend, opts.workers_per_device)
    return Profile(job, samples, server, cluster, workers)


UNIT_ROUNDS = 3  # rounds of one task per worker that time the worker processes as compute units (calibrate)


def calibrate(job: JobSpec, options: CalibrateOptions | None = None, *, workload: Any = None,
              phase: Phase = _no_phase,
              **fields: Any) -> "Calibrated":
    """Run `job` for real twice (BSP and backup k = 1, a few updates each), compare with its simulation and,
    with `fit`, fit the server's costs per update and per gradient to the real runs
    (`autosync.calibration`). Returns the Calibration and the job to tune (with the fitted server), as
    `Calibrated`: a pair with `.write(job_file)`.

    Args:
        options: the options of `autosync calibrate` (`CalibrateOptions`); `fields` change some of them.
        workload: a workload built for this job already (`check_workload`).
        phase: as for `profile` (the real runs: one step each).
    """
    from autosync.calibration import backend_runner, calibrate as check, measure_real, measure_units, simulated_runner
    from autosync.reporting.calibration import Calibrated

    opts = _options(CalibrateOptions, options, None, fields)
    workload = workload if workload is not None else check_workload(job, opts.device)
    choice = opts.choice()
    units = None
    if opts.fit and job.cluster.compute_units is None:  # the processes' queues, which the fit starts from
        with phase(f"timing the {choice.processes} worker processes as compute units", UNIT_ROUNDS) as advance:
            units = measure_units(job, choice, workload, UNIT_ROUNDS, on_round=advance)
    with phase(f"real runs of {opts.updates} updates (BSP, backup k = 1)", 2) as advance:
        real = measure_real(job, backend_runner(choice, workload), opts.updates, on_run=lambda _: advance())
    with phase("simulating them" + (" and fitting the server's costs" if opts.fit else ""), 0):
        return Calibrated(*check(job, real, opts.updates, choice.describe(), simulated_runner(workload), opts.fit,
                                 units))


def write_calibration(calibration: Any, job: JobSpec, job_file: str | Path) -> list[Path]:
    """Write `job` (the calibrated one) as `job_file`, its calibration as a comment on top, and
    calibration.json beside it; returns the two paths (the job file last): `Calibrated.write` (what
    `calibrate` returns has it)."""
    from autosync.reporting.calibration import Calibrated

    return Calibrated(calibration, job).write(job_file)


@dataclass
class DrawnJobs:
    """Jobs drawn from a family and written as job files: each file with the facts `autosync family`
    tabulates (n, round trips, slow workers, workload, momentum, fingerprint)."""

    family: str
    directory: Path
    written: list[tuple[Path, dict[str, Any]]]


def family(family_file: str | Path, directory: str | Path | None = None, options: FamilyOptions | None = None, *,
           command: str = "autosync.api.family", **fields: Any) -> DrawnJobs:
    """Draw jobs 0..jobs-1 from a job family (a YAML file, `autosync.family`) and write each as an ordinary
    job file (validated and fingerprinted) into `directory` (default: results/robustness/<family>/jobs).

    Args:
        options: the options of `autosync family` (`FamilyOptions`); `fields` change some of them (jobs=8).
        command: the command line recorded in each job file.
    """
    from autosync.family import load_family, write_jobs

    opts = _options(FamilyOptions, options, None, fields)
    spec = load_family(family_file)
    out = output_dir(directory or Path("results") / "robustness" / spec.name / "jobs")
    return DrawnJobs(spec.name, out, write_jobs(spec, spec.jobs(opts.jobs), out, str(family_file), command))


@dataclass
class Robustness:
    """Online policies against each drawn job's exhaustive best static k (`autosync.robustness.report`)."""

    family: str
    jobs: list[JobSpec]
    seeds: list[int]
    rules: tuple[str, ...]
    result: dict[str, Any]  # per job and summary rows, as robustness.json holds them
    directory: Path
    reused: int  # finished runs read back from cells.jsonl rather than trained

    def write(self, command: str = "autosync.api.robustness") -> list[Path]:
        """Write robustness.md, .json and the regret figure into the report's directory; returns the paths."""
        from autosync.reporting.robustness import write_robustness

        return write_robustness(self.result, self.directory, command, self.family)


def robustness(family_file: str | Path, directory: str | Path | None = None,
               options: RobustnessOptions | None = None, *, command: str = "autosync.api.robustness",
               phase: Phase = _no_phase,
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
    from autosync.core.errors import Interrupted
    from autosync.family import load_family, write_jobs
    from autosync.robustness import CELLS_FILE, Grid, online_specs, read_cells, report, run_grid

    opts = _options(RobustnessOptions, options, None, fields)
    rules = opts.rules()
    spec = load_family(family_file)
    drawn = spec.jobs(opts.jobs)
    online = online_specs(opts.policies or (), drawn)
    from autosync.search.space import load_space, resolve_space_path

    for n in sorted({j.cluster.n_workers for j in drawn}):  # a bad space fails before any job file is written
        load_space(resolve_space_path(opts.tuned_space, "policy"), n, "--tuned-space")
    out = output_dir(directory or Path("results") / "robustness" / spec.name)
    write_jobs(spec, drawn, output_dir(out / "jobs"), str(family_file), command)
    tuned = _tune_each(drawn, opts.tuned_space, opts.tuned_trials, out, phase) if opts.tuned_trials else {}
    broad = None
    if opts.reference == "broad":
        from autosync.reference_grid import reference_policies as broad
    grid = Grid(drawn, list(range(opts.seed_offset, opts.seed_offset + opts.seeds)), online, rules, tuned, broad)
    reused = grid.finished(read_cells(out))
    if reused and on_resume is not None:
        on_resume(reused, len(grid.tasks), out / CELLS_FILE)
    with phase("runs", len(grid.tasks) - reused) as advance:
        try:
            cells = run_grid(grid, out, n_jobs=opts.n_jobs, on_done=lambda _: advance())
        except KeyboardInterrupt:
            kept = len(read_cells(out))
            raise Interrupted(f"interrupted: {kept} finished runs are kept in {out / CELLS_FILE}; "
                              "the same command resumes from them") from None
    result = report(drawn, cells, online, grid.seeds, rules, tuned, broad)
    return Robustness(spec.name, drawn, grid.seeds, rules, result, out, reused)


def _tune_each(jobs: list[JobSpec], space: str, trials: int, directory: Path,
               phase: Phase) -> dict[str, dict[str, Any]]:
    """Each job's tuned policy (`trials` trials in `space`, cached in directory/studies.db: a second call
    reuses it), by the job's fingerprint."""
    storage = f"sqlite:///{directory / 'studies.db'}"
    found = {}
    with phase(f"tuning each job ({trials} trials in {space})", len(jobs)) as advance:
        for job in jobs:
            found[job.fingerprint()] = tune(job, space, n_trials=trials, storage=storage).cache["best_policy"]
            advance()
    return found


@dataclass
class Replay:
    """Sync-Switch's Table II on recorded runs: each search strategy's cost and success per setting."""

    logs: Any  # autosync.search.replay.SwitchLogs
    optimum: float  # the switch point binary search picks with full information
    rows: list[Any]  # autosync.search.replay.SimulationSummary, one per (strategy, setting)
    threshold: float

    def write(self, directory: str | Path, command: str = "autosync.api.replay") -> list[Path]:
        """Write table.md and table.json into `directory`; returns the paths."""
        from autosync.reporting.replay import write_replay_table

        return write_replay_table(self.logs, self.optimum, self.rows, output_dir(directory), command,
                                  self.threshold)


def replay(logs: str | Path, options: ReplayOptions | None = None, *,
           phase: Phase = _no_phase, **fields: Any) -> Replay:
    """Replay switch-point searches on a Sync-Switch log folder (the paper's published runs, shipped as
    `autosync.data.SYNC_SWITCH_LOGS`, autosync/data/sync_switch_logs/cifar10_res32): binary search, the cost-ordered ladder and TPE with
    each of `tpe_trials` trials, `simulations` searches per strategy and setting (`autosync.search.replay`).

    Args:
        options: the options of `autosync replay` (`ReplayOptions`); `fields` change some of them.
        phase: as for `profile` (one step per simulated search).
    """
    from autosync.search.replay import (TABLE_II_SETTINGS, binary_strategy, ladder_strategy, load_switch_logs,
                                        replay_table, tpe_strategy)
    from autosync.search.space import resolve_space_path

    opts = _options(ReplayOptions, options, None, fields)
    switch_logs = load_switch_logs(logs)
    quiet_optuna()
    space_path = resolve_space_path(opts.space, "switch_point")
    strategies = {"binary": binary_strategy(opts.max_settings, opts.threshold),
                  "ladder": ladder_strategy(space_path, threshold=opts.threshold)}
    for n in opts.tpe_trials:
        strategies[f"tpe ({n} trials)"] = tpe_strategy(space_path, n, opts.threshold)
    total = opts.simulations * len(strategies) * len(TABLE_II_SETTINGS)
    with phase("searches", total) as advance:
        optimum, rows = replay_table(switch_logs, strategies, opts.simulations, opts.seed, threshold=opts.threshold,
                                     max_settings=opts.max_settings, progress=advance)
    return Replay(switch_logs, optimum, rows, opts.threshold)


@dataclass
class ScalingTable:
    """A metric against the number of workers per policy (`autosync.scaling.Scaling`: points per policy,
    the leaderboards it came from)."""

    scaling: Any

    @property
    def worker_counts(self) -> list[int]:
        return self.scaling.worker_counts

    def rows(self) -> list[tuple[str, list[str]]]:
        """(policy, 'mean ± std' per worker count, '-' where it was not run), as `autosync scaling` prints."""
        from autosync.reporting.scaling import table_rows

        return table_rows(self.scaling)

    def write(self, directory: str | Path, command: str = "autosync.api.scaling") -> list[Path]:
        """Write scaling.md, scaling.json and scaling.png into `directory`; returns the paths."""
        from autosync.reporting.scaling import write

        return write(self.scaling, output_dir(directory), command)


def scaling(leaderboards: Sequence[str | Path], options: ScalingOptions | None = None,
            **fields: Any) -> ScalingTable:
    """A per-run metric against the number of workers per policy, from leaderboard folders of one job at
    several worker counts, each written by `autosync leaderboard` (DANA's Fig. 4, Table 2).

    Args:
        options: the options of `autosync scaling` (`ScalingOptions`: metric); `fields` change them.
    """
    from autosync.scaling import collect

    opts = _options(ScalingOptions, options, None, fields)
    return ScalingTable(collect([Path(p) for p in leaderboards], opts.metric))


def robustness_compare(reports: Sequence[str | Path], options: CompareOptions | None = None,
                       **fields: Any) -> "Comparison":
    """Robustness reports of several families side by side (`autosync.robustness_compare.Comparison`: a row
    per policy run on every family), each report a folder or robustness.json written by `robustness`.

    Args:
        options: the options of `autosync robustness-compare` (`CompareOptions`: developed_on, the family
            the policies' changes were developed on); `fields` change them.
    """
    from autosync.robustness_compare import compare

    opts = _options(CompareOptions, options, None, fields)
    return compare([Path(p) for p in reports], opts.developed_on)


def cached_studies(job: JobSpec | None = None, storage: str | None = None, *,
                   check: bool = False) -> list[dict[str, Any]]:
    """The studies of `job` (None: every study) in the storage (default: sqlite:///results/autosync-studies.db),
    with their cache records (None while unfinished); reading never creates the storage. The job comes first,
    as in `clear_cache` and the API's other functions. With `check`, a damaged cache record raises its one-line
    error (without: the study carries it under "damaged")."""
    from autosync.search.study.cache import cached_studies as studies, damaged
    from autosync.search.study.storage import DEFAULT_STORAGE

    quiet_optuna()
    found = studies(storage or DEFAULT_STORAGE, job.fingerprint() if job is not None else None)
    for s in found if check else []:
        if "damaged" in s:
            raise damaged(s["study"], s["damaged"])
    return found


def recommend(job: JobSpec, storage: str | None = None, grids: Sequence[str | Path] = ()) -> "Recommendation":
    """A policy for `job` without training, from the nearest tuned jobs in the storage (default:
    sqlite:///results/autosync-studies.db) and the drawn jobs of the robustness reports `grids` (folders
    written by `autosync robustness`): `autosync.search.strategies.recommend.Recommendation` (the policy, its
    predicted time and speedup over BSP, the neighbours that voted and how far they are). No tuned job in
    either is a one-line UserError; reading never creates the storage."""
    from autosync.search.strategies.recommend import recommend as answer
    from autosync.search.study.storage import DEFAULT_STORAGE, open_existing_storage, redact_url

    quiet_optuna()
    url = storage or DEFAULT_STORAGE
    opened = open_existing_storage(url)  # reading creates and changes nothing
    if opened is None and not grids:
        raise UserError(f"{job.source}: no tuned job in {redact_url(url)} to recommend from (the storage does not "
                        "exist): tune this job (autosync tune) or point --storage at a storage of tuned jobs "
                        "(or --grid at a robustness report)")
    return answer(opened, job, redact_url(url), [Path(g) for g in grids])


def clear_cache(job: JobSpec, storage: str | None = None) -> list[str]:
    """Delete every study (and so the cached policy) of `job`; returns their names."""
    from autosync.search.study.cache import clear_cache as clear
    from autosync.search.study.storage import DEFAULT_STORAGE

    quiet_optuna()
    return clear(storage or DEFAULT_STORAGE, job)


def load_run(run_dir: str | Path, device: str = "cpu") -> "LoggedRun":
    """A run written by `autosync run` (summary.json, trace.json, final_params.pt), to `rerun` on `device`
    (checked first)."""
    from autosync.engine.backends import check_device
    from autosync.rerun import LoggedRun

    check_device(device)
    return LoggedRun.load(Path(run_dir))


def rerun(logged: "LoggedRun", device: str = "cpu", progress: Callable[[dict[str, Any]], None] | None = None,
          ) -> "Rerun":
    """Replay a logged run (`load_run`) exactly from its arrival log, in this process on `device`; the
    outcome says whether the final parameters are bit-identical to the logged run's."""
    from autosync.rerun import rerun as replay

    return replay(logged, device, progress=progress)


def quiet_optuna() -> None:
    """Optuna logs only errors and no experimental-feature warnings: autosync reports trials itself (the
    command line uses this too)."""
    import warnings

    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
