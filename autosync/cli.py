"""The `autosync` command line: the only module that prints.

Heavy libraries (torch, optuna, cvxpy) are imported inside the commands that need them, so
`autosync --help` and `autosync validate` start fast.
"""

from __future__ import annotations

import contextlib
import shlex
import signal
import sys
import threading
from pathlib import Path
from typing import Any, Callable, Optional


INTERRUPTED = "error: interrupted"  # the line of a Ctrl-C that reached no command able to say what it kept


def _interrupted_at_start(signum: int, frame: Any) -> None:
    """Ctrl-C while the command's modules load (a fraction of a second before `main`): nothing has run, so
    the command ends as a Ctrl-C anywhere else does, one line and exit status 130, not with the traceback of
    whichever import it cut."""
    print(INTERRUPTED, file=sys.stderr)
    raise SystemExit(130)


# the handler the imports and the commands' registration below run under; the one before them again at the end
_BEFORE_IMPORTS = (signal.signal(signal.SIGINT, _interrupted_at_start)
                   if threading.current_thread() is threading.main_thread() else None)

import typer
from rich.console import Console

from autosync import __version__
from autosync.core import strict_json
from autosync.core.ctrl_c import sigterm_as_ctrl_c
from autosync.core.errors import AutosyncError, Interrupted, JobFileError, UserError
from autosync.core.main_module import declare_guarded
from autosync.options import (
    CacheOptions, CalibrateOptions, CompareOptions, FamilyOptions, FitOptions, LeaderboardOptions, ProfileOptions,
    RecommendOptions, ReplayOptions, RerunOptions, RobustnessOptions, RunOptions, ScalingOptions, TableOptions,
    TuneOptions,
    command_of,
)
from autosync.reporting.console import (
    Line, cache_report, cache_show_report, calibration_report, comparison_notes, comparison_report,
    fault_warnings, jobs_table, leaderboard_report, policies_report, profile_report, recommendation_report,
    replay_report, rerun_report, resume_line, reuse_line, robustness_report, run_summary, scaling_report,
    tune_files_report, tune_hint, tune_report, verification_report, written_job,
)
from autosync.reporting.error_lines import error_lines, resumable, usage_error_lines
from autosync.reporting.resources import resource_failure, unusable_input
from autosync.reporting.leaderboard_files import LEADERBOARD_LEGEND
from autosync.reporting.output import command_line, remove_empty_outputs
from autosync.reporting.progress import BudgetBar, counting_bar, leaderboard_progress, phases, tune_progress
from autosync.reporting.robustness_files import comparison_document, summary_legend, write_comparison
from autosync.reporting.tables import Fitted
from autosync.reporting.tracking import Tracking
from autosync.search.study.interrupts import storage_calls_finish_first
from autosync.search.study.storage import DEFAULT_STORAGE, end_without_collection, named_storage, redact_url
from autosync.search.tune_options import DEFAULT_N_TRIALS

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Search and benchmark synchronization policies for parameter-server training.")
console = Console()  # results: tables, the best policy, --json documents (stdout)
status = Console(stderr=True)  # progress bars, what was written where, hints and warnings (stderr)
JSON_OPT = typer.Option(False, "--json", help="Print the result as one JSON document on stdout instead of tables.")
WIDE_OPT = typer.Option(False, "--wide", help="Show every column of the tables at full width, however wide "
                        "(default: the columns that fit the terminal, 80 when piped; a note names the others).")


class _Api:
    """`autosync.api`, imported on a command's first use of it: the job schema (pydantic) and the modules of
    every command it loads take 0.3 s of the 0.5 s `autosync --help` took (`python -X importtime`), and
    --help uses none of it."""

    def __getattr__(self, name: str) -> Any:
        from autosync import api as module  # not at the top: the job schema, which --help never loads

        globals()["api"] = module  # later uses read the module itself
        return getattr(module, name)


api: Any = _Api()
JOB_ARG = typer.Argument(None, help="Job YAML file (default: the embedded digits job).", show_default=False)
MLFLOW_OPT = typer.Option(None, "--mlflow", metavar="URI", show_default=False,
                          help="Also log what the command found to this MLflow tracking URI (sqlite:///mlflow.db, "
                          "http://host:5000): each trial or run with its policy, time to target, final metric and "
                          "cost, the answer tagged, the plots as artifacts (needs pip install \"autosync\\[mlflow]\").")
FAMILY_ARG = typer.Argument(..., help="Job-family YAML file (see baselines/family_stragglers.yaml).")


def _version(value: bool) -> None:
    if value:
        console.print(f"autosync {__version__}")
        raise typer.Exit()


@app.callback()
def _main(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print the version and exit.")) -> None:
    """Search and benchmark synchronization policies for parameter-server training."""


def _show(lines: list[Line], on: Console = console, wide: bool = False, **how: Any) -> None:
    """Print a report (`autosync.reporting.console`) line by line, on stdout unless told (`status`: stderr);
    with `wide` (--wide), its tables with every column, uncropped however wide they get."""
    for line in lines:
        if isinstance(line.what, Fitted) and wide:
            on.print(line.what.widened(), style=line.style, crop=False, **how)
        else:
            on.print(line.what, style=line.style, **how)


def _tracking(uri: Optional[str]) -> Any:
    """The MLflow store of --mlflow, reached before the command starts any work (None without --mlflow)."""
    if uri is None:
        return None
    return Tracking.open(uri)


def _logged(tracking: Any) -> None:
    """Where --mlflow logged the command's runs."""
    if tracking is not None and tracking.logged:
        status.print(f"logged to MLflow {redact_url(tracking.uri)}: run {', '.join(tracking.logged)}", soft_wrap=True)


def _print_json(value: Any) -> None:
    """A result as strict JSON on stdout (no NaN/Infinity), nothing else there."""
    print(strict_json.dumps(value, indent=2))


@app.command()
def validate(jobs: list[Path] = typer.Argument(..., help="Job YAML files to check.")) -> None:
    """Check job files and report every problem at once (exit code 2 if any); a job naming the user's own
    model, dataset or loss also has them imported, built and checked on a batch."""
    # not at the top: the job schema (pydantic), which --help never loads. A built-in job's check needs nothing
    # more, so this does not import `autosync.api` (numpy and every policy) as `api.validate_job` would.
    from autosync.core.job import load_job

    problems = 0
    for path in jobs:
        try:
            spec = load_job(path)
            if spec.uses_user_code:  # the user's model, dataset and loss imported, built and checked on a batch
                api.check_workload(spec)
        except JobFileError as exc:
            _print_error(exc)
            problems += len(exc.problems)
        else:
            console.print(f"ok: {path} (job {spec.name}, fingerprint {spec.fingerprint()})")
    if problems:
        raise typer.Exit(2)


@app.command()
def policies(wide: bool = WIDE_OPT) -> None:
    """List every policy with its parameters and defaults."""
    _show(policies_report(), wide=wide)


def _command(options_type: type, group: Any = None,
             **settings: Any) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Register `body(..., options=...)` as a command with `options_type`'s fields as its options
    (`options.command_of`) in `group` (default: the top level; `cache_app` for `cache ...`)."""
    def register(body: Callable[..., None]) -> Callable[..., None]:
        (group or app).command(**settings)(command_of(options_type, body))
        return body

    return register


@_command(RunOptions)
def run(job: Optional[Path] = JOB_ARG,
        out: Optional[Path] = typer.Option(None, help="Output directory (default: results/runs/<job>/<policy>-seed<N>, "
                                           "the policy with the parameters it sets: backup-k=3-seed0)."),
        plot: bool = typer.Option(False, "--plot", help="Also write plot.png: loss against virtual time with k_t."),
        as_json: bool = JSON_OPT, wide: bool = WIDE_OPT, mlflow: Optional[str] = MLFLOW_OPT, *,
        options: RunOptions) -> None:
    """Train once under one policy (virtual clock by default) and write trace, metrics and plot."""
    with api.ranks(options) as ranks:
        if not ranks.leader:  # a torchrun rank other than 0: it served rank 0's run
            return
        tracking = _tracking(mlflow)
        spec, pol = api.run_setup(job, options)
        if options.tuned:
            status.print(f"tuned policy from the cache: {pol!r}")
        with status.status(f"loading {spec.workload.dataset.label} and building {spec.workload.model.label}"):
            workload = api.check_workload(spec, options.device)
        from autosync.reporting.runs import RUN_FILES  # not at the top: torch, which --help never loads

        out_dir = api.output_dir(out or Path("results") / "runs" / spec.name / f"{_run_folder(pol)}-seed{spec.seed}",
                                 files=RUN_FILES)
        ranks.share(spec)
        ready = f"{options.backend} backend ready: {options.clock} clock, training {spec.name} with {pol.name}"
        if options.backend == "processes":
            status.print(f"starting {options.workers_per_device} worker processes", style="dim")
        try:
            with BudgetBar(spec, status) as update:
                result = api.run(spec, pol, options=options, progress=update, workload=workload,
                                 on_ready=lambda: status.print(ready))  # scripts (and the fault tests) wait for it
        except KeyboardInterrupt:
            raise Interrupted(f"interrupted: the run was cut short, so nothing was written to {out_dir} (a run is "
                              "written whole once it has ended); the same command trains it again") from None
    _show(fault_warnings(result), status)
    try:
        paths = result.write(out_dir, plot=plot, mlflow=tracking)
    except KeyboardInterrupt:
        raise Interrupted(f"interrupted while writing the run's files to {out_dir}: they may be incomplete; the same "
                          "command trains the run again and writes them whole") from None
    if as_json:
        _print_json({**result.summary(), "files": [str(p) for p in paths]})
    else:
        _show(run_summary(result), wide=wide)
    status.print(f"wrote {', '.join(str(p) for p in paths)}")
    _logged(tracking)
    if options.clock == "real":
        status.print(f"replay it exactly: autosync rerun {shlex.quote(str(out_dir))}")


def _run_folder(policy: Any) -> str:
    """A run's default folder: the policy with the parameters it sets (backup-k=3-seed0), so that two settings of
    one policy keep two folders; the policy's name where a parameter has no spec form (split's fractions)."""
    from autosync.catalog import spec_of  # not at the top: the catalog (numpy), which --help does not load

    try:
        return spec_of(policy.to_dict()).replace(":", "-")
    except ValueError:
        return policy.name


@_command(ProfileOptions)
def profile(job: Optional[Path] = JOB_ARG,
            out: Optional[Path] = typer.Option(None, help="Output directory (default: results/profiles/<job>)."),
            wide: bool = WIDE_OPT, *, options: ProfileOptions) -> None:
    """Measure each worker's real round trips (compute and communication) and fit the job's cluster model."""
    with api.ranks(options) as ranks:
        if not ranks.leader:  # a torchrun rank other than 0: it served rank 0's rounds
            return
        spec = api.load_job(job)
        options.sizes(spec)  # a bad --batch-sizes fails before anything starts
        with status.status(f"loading {spec.workload.dataset.label} and building {spec.workload.model.label}"):
            workload = api.check_workload(spec, options.device)
        out_dir = api.output_dir(out or Path("results") / "profiles" / spec.name,  # --check writes a calibration
                                 files=(api.CALIBRATION_FILE,) if options.check else ())
        ranks.share(spec)
        found = api.profile(spec, options, workload=workload, phase=phases("profiling", status))
    paths = found.write(out_dir)
    _show(profile_report(found, spec.name, options.device), wide=wide)
    status.print(f"wrote {', '.join(str(p) for p in paths)}")
    if options.check:
        calibrated = api.calibrate(api.load_job(paths[-1]), options.check_options(), workload=workload,
                                   phase=phases("calibrating", status))
        _show(calibration_report(calibrated.calibration), wide=wide)
        status.print(f"wrote {', '.join(str(p) for p in calibrated.write(paths[-1]))}")
    measured = "these machines'" if options.backend == "distributed" else "this machine's"
    status.print(f"tune on {measured} model: {written_job(spec, paths[-1])}")


@_command(CalibrateOptions)
def calibrate(job: Optional[Path] = JOB_ARG,
              out: Optional[Path] = typer.Option(None, help="The calibrated job file to write (default: "
                                                 "calibrated_job.yaml beside the job file, or in the working "
                                                 "directory for the embedded job)."),
              wide: bool = WIDE_OPT, *, options: CalibrateOptions) -> None:
    """Run the job for real twice (BSP and backup k = 1), compare with its simulation, and fit the server's
    costs per update and per gradient so that the simulation predicts the real runs."""
    spec = api.load_job(job)
    target = api.output_file(out or (job.parent if job is not None else Path(".")) / "calibrated_job.yaml")
    api.output_dir(target.parent, files=(api.CALIBRATION_FILE,))  # written beside it, after the real runs
    with status.status(f"loading {spec.workload.dataset.label} and building {spec.workload.model.label}"):
        workload = api.check_workload(spec, options.device)
    calibrated = api.calibrate(spec, options, workload=workload, phase=phases("calibrating", status))
    _show(calibration_report(calibrated.calibration), wide=wide)
    if options.fit:
        status.print(f"wrote {', '.join(str(p) for p in calibrated.write(target))}")
        status.print(f"tune the calibrated job: {written_job(spec, target)}")


@_command(RerunOptions)
def rerun(run_dir: Path = typer.Argument(..., help="A directory written by `autosync run` (summary.json, trace.json, "
                                                   "final_params.pt)."),
          *, options: RerunOptions) -> None:
    """Replay a logged run exactly from its arrival log, in this process, and compare the final parameters."""
    logged = api.load_run(run_dir, options.device)
    with BudgetBar(logged.job, status) as update:
        outcome = api.rerun(logged, options.device, progress=update)
    _show(rerun_report(outcome))
    if not outcome.identical and outcome.bit_reproducible:  # both on the CPU: a difference is a bug
        raise typer.Exit(1)


@_command(LeaderboardOptions)
def leaderboard(job: Optional[Path] = JOB_ARG,
                out: Optional[Path] = typer.Option(None, help="Output directory (default: results/<job>)."),
                as_json: bool = JSON_OPT, wide: bool = WIDE_OPT, mlflow: Optional[str] = MLFLOW_OPT, *,
                options: LeaderboardOptions) -> None:
    """Every policy x seeds on one job: an MLPerf-style scored table, written as Markdown/CSV/JSON + plots."""
    tracking = _tracking(mlflow)
    spec = api.load_job(job)
    out_dir = api.output_dir(out or Path("results") / spec.name, files=api.LEADERBOARD_FOLDER_FILES)
    board = api.leaderboard(spec, options=options, progress=lambda runs: leaderboard_progress(status, runs),
                            keep_runs_in=out_dir, on_resume=lambda *reused: status.print(reuse_line(*reused)))
    paths = board.write(out_dir, command_line("leaderboard"), mlflow=tracking)
    status.print(f"wrote {', '.join(str(p) for p in paths)}")
    _logged(tracking)
    if as_json:
        return _print_json({"job": spec.name, "seeds": options.seeds, "rows": board.rows,
                            "files": [str(p) for p in paths]})
    _show(leaderboard_report(spec, options.seeds, board.rows), wide=wide)
    status.print(LEADERBOARD_LEGEND, style="dim")


@_command(ScalingOptions)
def scaling(leaderboards: list[Path] = typer.Argument(..., help="Leaderboard folders of one job at several "
                                                                "worker counts."),
            out: Path = typer.Option(..., "--out", help="Output directory for scaling.md, .json and .png."),
            wide: bool = WIDE_OPT, *, options: ScalingOptions) -> None:
    """A metric against the number of workers per policy, from existing leaderboards (DANA's Fig. 4, Table 2)."""
    api.output_dir(out, files=api.SCALING_FILES)
    result = api.scaling(leaderboards, options)
    _show(scaling_report(result, options.metric), wide=wide)
    paths = result.write(out, command_line("scaling"))
    status.print(f"wrote {', '.join(str(p) for p in paths)}")


@_command(FamilyOptions)
def family(family_file: Path = FAMILY_ARG,
           out: Optional[Path] = typer.Option(None, "--out", help="Directory for the job files "
                                                                 "(default: results/robustness/<family>/jobs)."),
           as_json: bool = JSON_OPT, wide: bool = WIDE_OPT, *, options: FamilyOptions) -> None:
    """Draw jobs from a family and write each as an ordinary job file (validated and fingerprinted)."""
    drawn = api.family(family_file, out, options, command=command_line("family"))
    status.print(f"wrote {len(drawn.written)} job files to {drawn.directory}")
    if as_json:
        return _print_json({"family": drawn.family,
                            "jobs": [{**facts, "file": str(path)} for path, facts in drawn.written]})
    _show(jobs_table(f"family {drawn.family}: {options.jobs} jobs", [facts for _, facts in drawn.written]), wide=wide)


@_command(RobustnessOptions)
def robustness(family_file: Path = FAMILY_ARG,
               out: Optional[Path] = typer.Option(None, "--out", help="Output directory (default: "
                                                  "results/robustness/<family>)."),
               as_json: bool = JSON_OPT, wide: bool = WIDE_OPT, *, options: RobustnessOptions) -> None:
    """Online policies against each drawn job's exhaustive best static k: regret table and figure (resumable)."""
    command = command_line("robustness")
    found = api.robustness(family_file, out, options, command=command,
                           phase=phases("robustness", status, transient=False),
                           on_resume=lambda *reused: status.print(reuse_line(*reused)))
    paths = found.write(command)
    status.print(f"wrote {', '.join(str(p) for p in paths)}")
    if as_json:
        return _print_json({"family": found.family, **found.result, "files": [str(p) for p in paths]})
    _show(robustness_report(found, options.jobs, options.seeds), wide=wide)
    status.print(summary_legend(found.rules), style="dim")


@_command(TableOptions)
def table(files: list[Path] = typer.Argument(..., help="Job files, and job-family files whose jobs 0..N-1 the table "
                                             "holds (the default job: baselines/digits_default.yaml)."),
          out: Path = typer.Option(Path("results/table"), "--out", help="The table's directory (resumed if it exists)."),
          as_json: bool = JSON_OPT, *, options: TableOptions) -> None:
    """Run every lattice point of every job on its search and held-out seeds, recorded for replayed searches
    (`autosync tune --table DIR`); resumable, and packed into the same bytes by every build."""
    with contextlib.ExitStack() as stack:  # the bar appears once every file and option is checked
        shown: dict[str, Any] = {}

        def start(todo: int, reused: int) -> None:
            shown["bar"] = bar = stack.enter_context(counting_bar("table", status, transient=False))
            done = "trained again before a stop" if options.retrain else "already in the table"
            shown["task"] = bar.add_task(f"cells ({reused} {done})", total=todo)

        built = api.table(files, out, options, on_start=start,
                          on_done=lambda _: shown["bar"].advance(shown["task"]))
    summary = {"directory": str(out), "computed": built.computed, "reused": built.reused,
               "failed": built.failed, "files": [str(p) for p in built.files]}
    if built.changed is not None:
        summary["changed"] = built.changed
    if as_json:
        return _print_json(summary)
    if built.changed is not None:
        console.print(f"table {out}: {built.computed + built.reused} cells trained again ({built.reused} before a "
                      f"stop), {built.changed} of them changed, {len(built.failed)} failed runs, in "
                      f"{len(built.files)} files")
    else:
        console.print(f"table {out}: {built.computed} cells computed, {built.reused} reused, "
                      f"{len(built.failed)} failed runs, in {len(built.files)} files")
    for line in built.failed:
        status.print(f"failed: {line}", style="yellow")


@_command(FitOptions)
def fit(files: list[Path] = typer.Argument(..., help="Job-family files whose jobs 0..N-1 the race is fitted on "
                                           "(the committed ones: baselines/family_*.yaml)."),
        as_json: bool = JSON_OPT, *, options: FitOptions) -> None:
    """Fit the race of `autosync tune --sampler race` (its portfolio and margin) on a table of job
    families, every run read from the table; --check says whether the file already holds the fit."""
    _new_table_line(options.table)
    with status.status(f"fitting the race on {options.table}"):
        fitted = api.fit(files, options)
    settings = fitted.settings
    summary = {"file": str(fitted.path), "jobs": fitted.jobs, "unchanged": fitted.unchanged, **settings.to_dict()}
    if as_json:
        return _print_json(summary)
    verb = "holds" if options.check else ("unchanged:" if fitted.unchanged else "wrote")
    console.print(f"{verb} {fitted.path}: fitted on {fitted.jobs} jobs, portfolio of {len(settings.portfolio)} "
                  f"({', '.join(settings.portfolio)}), margin {settings.margin:g}")


def _new_table_line(table: str) -> None:
    """A line where --table names no folder yet: the command then trains every run it needs into a new table
    there, which a misspelt path would do without a word (a tune the cache answers trains none, so the line
    says what would happen to runs, not that any will run)."""
    if not Path(table).exists():
        status.print(f"table {table}: no such folder, so the runs this command trains are kept there as a new "
                     "table", soft_wrap=True)


@_command(CompareOptions, name="robustness-compare")
def robustness_compare(reports: list[Path] = typer.Argument(..., help="Robustness reports of two or more families "
                                                            "(folders written by `autosync robustness`, or their "
                                                            "robustness.json)."),
                       out: Optional[Path] = typer.Option(None, "--out", help="Also write the table as Markdown to "
                                                          "this file."),
                       as_json: bool = JSON_OPT, wide: bool = WIDE_OPT, *, options: CompareOptions) -> None:
    """Online policies on several job families side by side, from their robustness reports (no training)."""
    if out is not None:
        api.output_file(out)
    comparison = api.robustness_compare(reports, options)
    if as_json:
        _print_json(comparison_document(comparison))
    else:
        _show(comparison_report(comparison), wide=wide)
        _show(comparison_notes(comparison), status)
    if out is not None:
        status.print(f"wrote {write_comparison(comparison, out, command_line('robustness-compare'))}")


@_command(TuneOptions)
def tune(job: Optional[Path] = JOB_ARG,
         out: Optional[Path] = typer.Option(None, help="Plot directory (default: results/tune/<job>-<space>)."),
         as_json: bool = JSON_OPT, wide: bool = WIDE_OPT, mlflow: Optional[str] = MLFLOW_OPT, *,
         options: TuneOptions) -> None:
    """Find the best policy for a job with Optuna, or return the cached one of a recurring job instantly."""
    with api.ranks(options) as ranks:
        if not ranks.leader:  # a torchrun rank other than 0: it served every trial of rank 0
            return
        tracking = _tracking(mlflow)
        spec = api.load_job(job)
        if out is not None:
            api.output_dir(out)
        if options.table is not None:
            _new_table_line(options.table)
        ranks.share(spec, every_run=True)
        with tune_progress(status, options.n_trials or DEFAULT_N_TRIALS, race=options.races()) as (on_trial, start_bar):
            def on_start(url: str) -> None:  # every check passed: the storage is named, then the bar drawn
                status.print(f"study storage: {redact_url(url)}", soft_wrap=True)
                start_bar()

            outcome = resumable(lambda: api.tune(
                spec, options=options, on_trial=on_trial, on_start=on_start,
                on_resume=lambda found, requeued: status.print(resume_line(found, requeued), soft_wrap=True),
                on_wait=lambda line: status.print(line, soft_wrap=True)))
    if as_json:
        _print_json(outcome.to_dict())
    else:
        _show(tune_report(outcome, spec), wide=wide)
        _show(tune_hint(job, outcome.storage, spec), status)
        if outcome.verification is not None:
            _show(verification_report(outcome.verification), wide=wide)
    files = outcome.write(out or api.tune_dir(outcome, spec, options), command_line("tune"), mlflow=tracking, job=spec,
                          draw_cached=out is not None)
    _show(tune_files_report(files), status)
    _logged(tracking)


@_command(ReplayOptions)
def replay(logs: Path = typer.Argument(..., help="A Sync-Switch log folder (baseline/, switch_exp/), e.g. the paper's "
                                       "published logs shipped in autosync/data/sync_switch_logs/cifar10_res32."),
           out: Path = typer.Option(Path("results/replay_sync_switch"), help="Where table.md and table.json go."),
           wide: bool = WIDE_OPT, *, options: ReplayOptions) -> None:
    """Sync-Switch's Table II on recorded runs: binary search, the cost-ordered ladder and TPE, cost and success."""
    api.output_dir(out)
    found = api.replay(logs, options, phase=phases("replaying", status))
    _show(replay_report(found, logs, options.simulations), wide=wide)
    paths = found.write(out, command_line("replay"))
    status.print(f"wrote {', '.join(str(p) for p in paths)}")


cache_app = typer.Typer(help="The cache of recurring jobs: tuned policies stored in the study storage.",
                        no_args_is_help=True)
app.add_typer(cache_app, name="cache")


def _cache_storage(options: CacheOptions) -> str:
    """The cache commands' storage URL: --storage, else the default (`named_storage`: a misspelt SQLite path
    listed no study and cleared none, as if the storage were empty)."""
    return named_storage(options.storage, DEFAULT_STORAGE)


@_command(CacheOptions, cache_app, name="list")
def cache_list(as_json: bool = JSON_OPT, wide: bool = WIDE_OPT, *, options: CacheOptions) -> None:
    """Every cached study: job, space, trials, best policy and score."""
    url = _cache_storage(options)
    studies = api.cached_studies(storage=url, check=True)  # a damaged record: refused, as by every reading command
    if as_json:
        return _print_json(studies)
    _show(cache_report(studies, redact_url(url)), wide=wide)


@_command(RecommendOptions)
def recommend(job: Optional[Path] = JOB_ARG, as_json: bool = JSON_OPT, wide: bool = WIDE_OPT, *,
              options: RecommendOptions) -> None:
    """A policy for the job without training, from the nearest tuned jobs in the storage (and --grid reports)."""
    spec = api.load_job(job)
    answer = api.recommend(spec, options.storage, grids=options.grid)
    if as_json:
        return _print_json(answer.to_dict())
    _show(recommendation_report(answer, spec), wide=wide)


@_command(CacheOptions, cache_app, name="show")
def cache_show(job: Optional[Path] = JOB_ARG, as_json: bool = JSON_OPT, *, options: CacheOptions) -> None:
    """The cached studies of one job with their provenance and amortization report."""
    spec = api.load_job(job)
    url = _cache_storage(options)
    studies = api.cached_studies(spec, url, check=True)
    if as_json:
        return _print_json(studies)
    _show(cache_show_report(studies, spec, redact_url(url)))


@_command(CacheOptions, cache_app, name="clear")
def cache_clear(job: Optional[Path] = JOB_ARG, *, options: CacheOptions) -> None:
    """Delete every study (and so the cached policy) of one job."""
    spec = api.load_job(job)
    names = api.clear_cache(spec, _cache_storage(options))
    console.print(f"deleted {len(names)} studies of job {spec.name}: {', '.join(names) or '-'}")


def main() -> None:
    """Console entry point: every error is one line `error: ...` on stderr, no traceback: exit code 2 for
    input and usage errors (`UserError`, and the command-line parser's own: an unknown command or option,
    a value of the wrong type or out of range, each followed by a one-line hint), 1 for runtime failures
    (`RuntimeFailure`: worker processes or ranks lost, BSP failing, no trial meeting the target), 130 when
    interrupted (Ctrl-C; `Interrupted` says what was kept); 1 also when the machine runs out of disk, of a
    writable folder or of memory (`reporting.resources`: one line saying what ran out, finished work kept).
    """
    code: Any = 1  # until the command returns: a failure leaves no empty output folder it created
    declare_guarded()  # its console script runs nothing when a spawned helper imports it
    try:
        _refuse_empty_arguments(sys.argv[1:])
        # a Ctrl-C waits for a storage write or an import in progress; one landing in a finalizer is not lost
        with storage_calls_finish_first():
            code = app(standalone_mode=False, prog_name="autosync") or 0
    except AutosyncError as exc:  # UserError: 2, RuntimeFailure: 1, Interrupted: 130
        _print_error(exc)
        sys.exit(exc.exit_code)
    except typer.TyperException as exc:  # the parser's errors (typer's click)
        _print_error(exc)
        sys.exit(2)
    except typer.Abort:
        print("error: aborted (end of input)", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:  # Ctrl-C before typer's own handling of it (as it builds the command line)
        code = 130
    except Exception as exc:  # a Ctrl-C that Python passed on as another exception, as the one above; or
        if _ctrl_c_beneath(exc):  # the machine ran out of disk, a writable folder or memory: one line, exit 1
            code = 130
        else:
            line, exit_code = resource_failure(exc), 1
            if line is None:
                line, exit_code = unusable_input(exc), 2
            if line is None:
                raise
            print(f"error: {line}", file=sys.stderr)
            sys.exit(exit_code)
    finally:
        remove_empty_outputs(failed=bool(code))
    if code == 130:  # Ctrl-C outside a command that says what it kept
        print(INTERRUPTED, file=sys.stderr)
    if isinstance(code, int) and code:
        sys.exit(code)


def _refuse_empty_arguments(args: list[str]) -> None:
    """A UserError for an empty argument, or one of spaces alone (`--out ""`, `--storage=`, an unset shell
    variable): the parser reads an empty path as the current folder and the commands read an empty storage
    URL or settings file as their default, so the command would write or read where the user named nothing
    (`--out " "` made a folder named " "). No option or argument of autosync takes such a value."""
    for i, arg in enumerate(args):
        option, equals, value = arg.partition("=") if arg.startswith("--") else ("", "", arg)
        if equals and not value.strip():
            where = f"{option}="
        elif not equals and not arg.strip():
            where = f"after {args[i - 1]}" if i else "as the command"
        else:
            continue
        raise UserError(f"an empty argument {where}: give a value, or leave the option out for its default "
                        "(an unset shell variable passes an empty one)")


def run() -> None:
    """The `autosync` console script: `main`, then the process's end without a last garbage collection
    (`end_without_collection`). `main` alone is what a caller that goes on running (the tests) calls. SIGTERM
    (`kill`, `timeout`, a scheduler's time limit) ends the command as Ctrl-C does (`sigterm_as_ctrl_c`)."""
    try:
        with sigterm_as_ctrl_c():
            main()
    finally:
        end_without_collection()
        _forget_caught_interrupts()
        if threading.current_thread() is threading.main_thread():
            # the command has said all it will (and kept what it did): a Ctrl-C while Python tears down (joining
            # joblib's threads, say) has nothing left to stop, and printed a traceback there
            signal.signal(signal.SIGINT, signal.SIG_IGN)


def _ctrl_c_beneath(exc: BaseException) -> bool:
    """Whether `exc` was raised by a Ctrl-C: Python turns a KeyboardInterrupt raised as a class is made
    (in `__set_name__`, where pydantic builds a model of a module being imported) into a RuntimeError
    caused by it."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, KeyboardInterrupt):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _forget_caught_interrupts() -> None:
    """Clear CPython's record of a Ctrl-C that left code run from a string (`exec`, `eval`: dataclasses and
    pydantic build their classes so) although the command caught it later: with that record `python -m
    autosync.cli` ends killed by SIGINT (exit status -2) instead of with the status the command chose (130
    after Ctrl-C). Running a string that ends normally clears it (CPython's `run_eval_code_obj`)."""
    exec("None")


def _print_error(exc: Exception) -> None:
    """An error as its 'error: ...' lines on stderr; a parser error also with its hint (`reporting.error_lines`)."""
    lines = (usage_error_lines(exc, sys.argv[1:], lambda: typer.main.get_command(app))
             if isinstance(exc, typer.TyperException) else error_lines(exc))
    for line in lines:
        print(line, file=sys.stderr)


# the module's commands are registered (a fraction of a second too): Ctrl-C goes back to its handler
if _BEFORE_IMPORTS is not None:
    signal.signal(signal.SIGINT, _BEFORE_IMPORTS)

if __name__ == "__main__":
    run()
