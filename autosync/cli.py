"""The `autosync` command line: the only module that prints.

Heavy libraries (torch, optuna, cvxpy) are imported inside the commands that need them, so
`autosync --help` and `autosync validate` start fast.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import sys
import typing
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import typer
from rich.console import Console
from rich.table import Table

from autosync.core.errors import Interrupted, RuntimeFailure, UserError
from autosync.options import (
    CacheOptions, CalibrateOptions, CompareOptions, FamilyOptions, LeaderboardOptions, ProfileOptions,
    RecommendOptions, ReplayOptions, RerunOptions, RobustnessOptions, RunOptions, ScalingOptions, TuneOptions,
)

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Search and benchmark synchronization policies for parameter-server training.")
console = Console()  # results: tables, the best policy, --json documents (stdout)
status = Console(stderr=True)  # progress bars, what was written where, hints and warnings (stderr)
JSON_OPT = typer.Option(False, "--json", help="Print the result as one JSON document on stdout instead of tables.")


def _version(value: bool) -> None:
    if value:
        from autosync import __version__

        console.print(f"autosync {__version__}")
        raise typer.Exit()


@app.callback()
def _main(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print the version and exit.")) -> None:
    """Search and benchmark synchronization policies for parameter-server training."""


def _print_json(value: Any) -> None:
    """A result as strict JSON on stdout (no NaN/Infinity), nothing else there."""
    from autosync.core import strict_json

    print(strict_json.dumps(value, indent=2))

JOB_ARG = typer.Argument(None, help="Job YAML file (default: the embedded digits job).", show_default=False)


@app.command()
def validate(jobs: list[Path] = typer.Argument(..., help="Job YAML files to check.")) -> None:
    """Check job files and report every problem at once (exit code 2 if any); a job naming the user's own
    model, dataset or loss also has them imported, built and checked on a batch."""
    from autosync.core.errors import JobFileError
    from autosync.core.job import load_job

    problems = 0
    for path in jobs:
        try:
            spec = load_job(path)
            if spec.uses_user_code:
                from autosync.api import check_workload

                check_workload(spec)
        except JobFileError as exc:
            _print_error(exc)
            problems += len(exc.problems)
        else:
            console.print(f"ok: {path} (job {spec.name}, fingerprint {spec.fingerprint()})")
    if problems:
        raise typer.Exit(2)


@app.command()
def policies() -> None:
    """List every policy with its parameters and defaults."""
    from autosync.catalog import POLICIES, policy_parameters

    table = Table(title="policies (either name is accepted, in any case, with hyphens or underscores)")
    table.add_column("name")
    table.add_column("papers' name")
    table.add_column("parameters (default)")
    table.add_column("what it does")
    for name, cls in POLICIES.items():
        params = ", ".join(f"{k}={'(required)' if v is inspect.Parameter.empty else v!r}"
                           for k, v in policy_parameters(cls).items()) or "-"
        table.add_row(name, cls.paper_name, params, (cls.__doc__ or "").strip().splitlines()[0])
    console.print(table)


def _command(options_type: type, group: Any = None,
             **settings: Any) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Register `body(..., options=...)` as a command whose options are `options_type`'s fields, each declared
    once there (flag, default, help, range: `ge` becomes typer's `min`, so a value out of range is a parser
    error); the body's own parameters (the job argument, --out, --json) are the command line's only.
    `group`: the typer app the command belongs to (default: the top level; `cache_app` for `cache ...`)."""
    from autosync.options import flag_of

    def register(body: Callable[..., None]) -> Callable[..., None]:
        hints, own = typing.get_type_hints(options_type), typing.get_type_hints(body)
        mine = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY, annotation=own[p.name])
                for p in inspect.signature(body).parameters.values() if p.name != "options"]
        fields = dataclasses.fields(options_type)
        generated = []
        for f in fields:
            m = f.metadata
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
            flags = [flag_of(f), *([m["short"]] if m["short"] else [])]
            if default is True:  # a switch that is on by default needs its off switch: --fit/--no-fit
                flags[0] = f"{flags[0]}/--no-{flags[0].removeprefix('--')}"
            generated.append(inspect.Parameter(
                f.name, inspect.Parameter.KEYWORD_ONLY, annotation=m["cli_type"] or hints[f.name],
                default=typer.Option(default, *flags, help=m["help"], min=m["ge"], max=m["le"])))
        arguments = [p for p in mine if isinstance(p.default, typer.models.ArgumentInfo)]
        params = arguments + generated + [p for p in mine if p not in arguments]

        def command(**values: Any) -> None:
            body(options=options_type(**{f.name: values.pop(f.name) for f in fields}), **values)

        command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        command.__annotations__ = {p.name: p.annotation for p in params}
        command.__name__, command.__doc__ = body.__name__, body.__doc__
        (group or app).command(**settings)(command)
        return body

    return register


@_command(RunOptions)
def run(
    job: Optional[Path] = JOB_ARG,
    out: Optional[Path] = typer.Option(None, help="Output directory (default: results/runs/<job>/<policy>-seed<N>)."),
    plot: bool = typer.Option(False, "--plot", help="Also write plot.png: loss against virtual time with k_t."),
    as_json: bool = JSON_OPT,
    *, options: RunOptions,
) -> None:
    """Train once under one policy (virtual clock by default) and write trace, metrics and plot."""
    from autosync import api

    with api.ranks(options) as ranks:
        if not ranks.leader:  # a torchrun rank other than 0: it served rank 0's run
            return
        spec, pol = api.run_setup(job, options)
        if options.policy == "tuned":
            status.print(f"tuned policy from the cache: {pol!r}")
        with status.status(f"loading {spec.workload.dataset.label} and building {spec.workload.model.label}"):
            workload = api.check_workload(spec, options.device)
        out_dir = api.output_dir(out or Path("results") / "runs" / spec.name / f"{pol.name}-seed{spec.seed}")
        ranks.share(spec)

        def ready() -> None:  # one line when the workers are up: scripts (and the fault tests) wait for it
            status.print(f"{options.backend} backend ready: {options.clock} clock, training {spec.name} with {pol.name}")

        if options.backend == "processes":
            status.print(f"starting {options.workers_per_device} worker processes", style="dim")
        with _progress(spec) as update:
            result = api.run(spec, pol, options=options, progress=update, workload=workload, on_ready=ready)
    for line in result.faults:
        status.print(f"warning: {line}", style="yellow")
    paths = api.write_run(result, spec, out_dir, options, plot=plot)
    if as_json:
        _print_json({**result.summary(), "files": [str(p) for p in paths]})
    else:
        _print_summary(result)
    status.print(f"wrote {', '.join(str(p) for p in paths)}")
    if options.clock == "real":
        status.print(f"replay it exactly: autosync rerun {out_dir}")


@_command(ProfileOptions)
def profile(
    job: Optional[Path] = JOB_ARG,
    out: Optional[Path] = typer.Option(None, help="Output directory (default: results/profiles/<job>)."),
    *, options: ProfileOptions,
) -> None:
    """Measure each worker's real round trips (compute and communication) and fit the job's cluster model."""
    from autosync import api

    with api.ranks(options) as ranks:
        if not ranks.leader:  # a torchrun rank other than 0: it served rank 0's rounds
            return
        spec = api.load_job(job)
        options.sizes(spec)  # a bad --batch-sizes fails before anything starts
        with status.status(f"loading {spec.workload.dataset.label} and building {spec.workload.model.label}"):
            workload = api.check_workload(spec, options.device)
        out_dir = api.output_dir(out or Path("results") / "profiles" / spec.name)
        ranks.share(spec)
        found = api.profile(spec, options, workload=workload, phase=_phase("profiling"))
    paths = found.write(out_dir)
    cluster, server = found.cluster, found.server
    table = Table(title=f"{spec.name}: measured on {options.device} with {found.workers}")
    for column in ("batch size", "compute (mean)", "round trip (mean)", "round trip (p90)"):
        table.add_column(column, justify="right")
    for b, compute, trip, trip_p90 in found.rows():
        table.add_row(str(b), *(f"{1e3 * seconds:.2f} ms" for seconds in (compute, trip, trip_p90)))
    console.print(table)
    console.print(f"fitted: {_fitted_compute(cluster)}; server: update {1e3 * server.apply_seconds:.3f} ms, "
                  f"parameters moved at {server.bandwidth / 1e6:.1f} MB/s")
    status.print(f"wrote {', '.join(str(p) for p in paths)}")
    if options.check:
        check = CalibrateOptions(device=options.device, workers_per_device=options.workers_per_device,
                                 worker_timeout=options.worker_timeout, worker_cpus=options.worker_cpus,
                                 updates=options.check_updates)
        calibration, fitted = api.calibrate(api.load_job(paths[-1]), check, workload=workload,
                                            phase=_phase("calibrating"))
        _print_calibration(calibration)
        written = api.write_calibration(calibration, fitted, paths[-1])
        status.print(f"wrote {', '.join(str(p) for p in written)}")
    status.print(f"tune on this machine's model: autosync tune {paths[-1]}")


def _fitted_compute(cluster: dict) -> str:
    """The fitted compute of a profile, in one phrase: per worker, or per compute unit that workers share."""
    units = cluster.get("compute_units")
    if units is not None:
        speeds = units["speed_factors"]
        return (f"{units['count']} compute units shared by the workers (worker w on unit w % {units['count']}), "
                f"each {units['compute']}, speed factors {min(speeds):.3f}..{max(speeds):.3f}")
    speeds = cluster["speed_factors"]
    return (f"compute {cluster['compute']}, communication {1e3 * cluster['communication_seconds']:.2f} ms, "
            f"speed factors {min(speeds):.3f}..{max(speeds):.3f}")


@_command(CalibrateOptions)
def calibrate(
    job: Optional[Path] = JOB_ARG,
    out: Optional[Path] = typer.Option(None, help="The calibrated job file to write (default: calibrated_job.yaml "
                                       "beside the job file, or in the working directory for the embedded job)."),
    *, options: CalibrateOptions,
) -> None:
    """Run the job for real twice (BSP and backup k = 1), compare with its simulation, and fit the server's
    costs per update and per gradient so that the simulation predicts the real runs."""
    from autosync import api

    spec = api.load_job(job)
    target = api.output_file(out or (job.parent if job is not None else Path(".")) / "calibrated_job.yaml")
    with status.status(f"loading {spec.workload.dataset.label} and building {spec.workload.model.label}"):
        workload = api.check_workload(spec, options.device)
    calibration, fitted = api.calibrate(spec, options, workload=workload, phase=_phase("calibrating"))
    _print_calibration(calibration)
    if options.fit:
        written = api.write_calibration(calibration, fitted, target)
        status.print(f"wrote {', '.join(str(p) for p in written)}")
        status.print(f"tune the calibrated job: autosync tune {target}")


def _print_calibration(calibration: Any) -> None:
    """Each real run beside its simulation, before and (with a fit) after, the fitted costs and the verdict."""
    table = Table(title=f"simulation against real runs of {calibration.updates} updates")
    for column in ("run", "real s", "simulated s", "real / sim", *(("fitted sim s", "real / fitted") if
                                                                    calibration.after else ())):
        table.add_column(column, justify="right")
    for i, run in enumerate(calibration.before):
        after = calibration.after[i] if calibration.after else None
        table.add_row(run.name, f"{run.real_seconds:.3f}", f"{run.simulated_seconds:.3f}", f"{run.ratio:.2f}",
                      *((f"{after.simulated_seconds:.3f}", f"{after.ratio:.2f}") if after else ()))
    console.print(table)
    if calibration.server is not None:
        console.print(f"server costs fitted from the two runs (the profile alone cannot separate them): "
                      f"{1e3 * calibration.server['apply_seconds']:.3f} ms per update, "
                      f"{1e3 * calibration.server['gradient_seconds']:.3f} ms per gradient (job seconds)"
                      + (f"; the compute units' times x {calibration.server['units_factor']:.3g}"
                         if "units_factor" in calibration.server else ""))
    if calibration.units is not None:
        units = calibration.units
        console.print(f"the workers share {units['count']} compute units (the worker processes), timed at "
                      f"{units['compute']} job seconds per task, speed factors {units['speed_factors']}")
    console.print(calibration.verdict())


def _phase(label: str, transient: bool = True) -> Callable[[str, int], Any]:
    """The API's phases as a spinner (no steps) or a counting bar (`label [bar] done/total what`; with
    `transient` False the bar stays on screen, its elapsed time with it, once the phase is done)."""

    @contextlib.contextmanager
    def phase(what: str, steps: int) -> Iterator[Callable[[], None]]:
        if not steps:
            with status.status(what):
                yield lambda: None
            return
        with _counting_bar(label, transient) as bar:
            task = bar.add_task(what, total=steps)
            yield lambda: bar.advance(task)

    return phase


@_command(RerunOptions)
def rerun(
    run_dir: Path = typer.Argument(..., help="A directory written by `autosync run` (summary.json, trace.json, "
                                             "final_params.pt)."),
    *, options: RerunOptions,
) -> None:
    """Replay a logged run exactly from its arrival log, in this process, and compare the final parameters."""
    from autosync import api

    logged = api.load_run(run_dir, options.device)
    with _progress(logged.job) as update:
        outcome = api.rerun(logged, options.device, progress=update)
    trace = outcome.result.trace
    console.print(f"replayed {len(trace.arrivals)} arrivals and {len(trace.updates)} updates: every dispatch and "
                  "decision as logged")
    if outcome.identical:
        console.print("final parameters: bit-identical to the logged run")
        return
    console.print(f"final parameters differ from the logged run: max |difference| {outcome.max_abs_difference:.3g}",
                  style="yellow")
    if not outcome.bit_reproducible:
        console.print("(expected with a GPU on either side: some CUDA kernels sum in a run-dependent order; every "
                      "decision matched)")
        return
    raise typer.Exit(1)


@_command(LeaderboardOptions)
def leaderboard(
    job: Optional[Path] = JOB_ARG,
    out: Optional[Path] = typer.Option(None, help="Output directory (default: results/<job>)."),
    as_json: bool = JSON_OPT,
    *, options: LeaderboardOptions,
) -> None:
    """Every policy x seeds on one job: an MLPerf-style scored table, written as Markdown/CSV/JSON + plots."""
    from autosync import api
    from autosync.reporting.leaderboard import LEADERBOARD_LEGEND, leaderboard_columns
    from autosync.reporting.output import format_cell

    spec = api.load_job(job)
    out_dir = api.output_dir(out or Path("results") / spec.name)
    seeds = options.seeds
    with _counting_bar("leaderboard", transient=False) as bar:
        task = bar.add_task("", total=options.runs())

        def done(run: dict) -> None:
            bar.update(task, advance=1, description=f"last: {run['policy']['policy']} seed {run['seed']}")

        board = api.leaderboard(spec, options=options, on_done=done)
    rows = board.rows
    paths = board.write(out_dir, _command_line("leaderboard"))
    status.print(f"wrote {', '.join(str(p) for p in paths)}")
    if as_json:
        _print_json({"job": spec.name, "seeds": seeds, "rows": rows, "files": [str(p) for p in paths]})
        return
    table = Table(title=f"{spec.name}: {seeds} seeds, target {spec.target.metric} {spec.target.threshold}")
    columns = leaderboard_columns()  # score() compares with BSP
    for _, header, _ in columns:
        table.add_column(header, justify="left" if header == "policy" else "right", no_wrap=header == "policy")
    for r in rows:
        table.add_row(*(format_cell(r.get(k), f) for k, _, f in columns))
    console.print(table)
    status.print(LEADERBOARD_LEGEND, style="dim")


@_command(ScalingOptions)
def scaling(
    leaderboards: list[Path] = typer.Argument(..., help="Leaderboard folders of one job at several worker counts."),
    out: Path = typer.Option(..., "--out", help="Output directory for scaling.md, .json and .png."),
    *, options: ScalingOptions,
) -> None:
    """A metric against the number of workers per policy, from existing leaderboards (DANA's Fig. 4, Table 2)."""
    from autosync import api

    api.output_dir(out)
    result = api.scaling(leaderboards, options)
    table = Table(title=f"{options.metric}: mean ± std over seeds")
    table.add_column("policy", no_wrap=True)
    for n in result.worker_counts:
        table.add_column(f"n = {n}", justify="right")
    for policy, cells in result.rows():
        table.add_row(policy, *cells)
    console.print(table)
    paths = result.write(out, _command_line("scaling"))
    status.print(f"wrote {', '.join(str(p) for p in paths)}")


FAMILY_ARG = typer.Argument(..., help="Job-family YAML file (see baselines/family_stragglers.yaml).")


@_command(FamilyOptions)
def family(
    family_file: Path = FAMILY_ARG,
    out: Optional[Path] = typer.Option(None, "--out", help="Directory for the job files "
                                                          "(default: results/robustness/<family>/jobs)."),
    as_json: bool = JSON_OPT,
    *, options: FamilyOptions,
) -> None:
    """Draw jobs from a family and write each as an ordinary job file (validated and fingerprinted)."""
    from autosync import api

    drawn = api.family(family_file, out, options, command=_command_line("family"))
    status.print(f"wrote {len(drawn.written)} job files to {drawn.directory}")
    if as_json:
        _print_json({"family": drawn.family, "jobs": [{**facts, "file": str(path)} for path, facts in drawn.written]})
        return
    _print_jobs_table(f"family {drawn.family}: {options.jobs} jobs", [facts for _, facts in drawn.written])


def _print_jobs_table(title: str, facts: list[dict[str, Any]]) -> None:
    table = Table(title=title)
    for header in ("job", "n", "round trips", "slow (spread)", "slowdowns", "workload", "momentum", "fingerprint"):
        table.add_column(header, no_wrap=header == "job")
    for f in facts:
        table.add_row(f["job"], str(f["n_workers"]), f["round_trip"], f"{f['slow_workers']} ({f['speed_spread']:.1f}x)",
                      str(f["slowdowns"]), f["workload"], f"{f['momentum']:g}", f["fingerprint"])
    console.print(table)


@_command(RobustnessOptions)
def robustness(
    family_file: Path = FAMILY_ARG,
    out: Optional[Path] = typer.Option(None, "--out", help="Output directory (default: results/robustness/<family>)."),
    as_json: bool = JSON_OPT,
    *, options: RobustnessOptions,
) -> None:
    """Online policies against each drawn job's exhaustive best static k: regret table and figure (resumable)."""
    from autosync import api
    from autosync.reporting.output import format_cell
    from autosync.reporting.robustness import SUMMARY_COLUMNS, summary_legend

    command = _command_line("robustness")
    found = api.robustness(family_file, out, options, command=command, phase=_phase("robustness", transient=False),
                           on_resume=lambda reused, total, cells: status.print(
                               f"reusing {reused} of {total} finished runs from {cells}"))
    paths = found.write(command)
    status.print(f"wrote {', '.join(str(p) for p in paths)}")
    if as_json:
        _print_json({"family": found.family, **found.result, "files": [str(p) for p in paths]})
        return
    table = Table(title=f"family {found.family}: {options.jobs} jobs x {options.seeds} seeds, regret against the "
                        "best static k")
    for _, header, _ in SUMMARY_COLUMNS:
        table.add_column(header, justify="left" if header == "policy" else "right", no_wrap=header == "policy")
    for row in found.result["summary"]:
        table.add_row(*(format_cell(row.get(k), f) for k, _, f in SUMMARY_COLUMNS))
    console.print(table)
    status.print(summary_legend(found.rules), style="dim")


@_command(CompareOptions, name="robustness-compare")
def robustness_compare(
    reports: list[Path] = typer.Argument(..., help="Robustness reports of two or more families (folders written by "
                                                   "`autosync robustness`, or their robustness.json)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Also write the table as Markdown to this file."),
    as_json: bool = JSON_OPT,
    *, options: CompareOptions,
) -> None:
    """Online policies on several job families side by side, from their robustness reports (no training)."""
    from autosync import api
    from autosync.reporting.robustness import comparison_cells, comparison_header, write_comparison

    if out is not None:
        api.output_file(out)
    comparison = api.robustness_compare(reports, options)
    grids_differ = comparison.grids_differ()
    if as_json:
        _print_json({"developed_on": comparison.developed_on,
                     "reports": [{"family": r.family, "path": str(r.path)} for r in comparison.reports],
                     "grids_differ": grids_differ, "columns": comparison_header(comparison),
                     "rows": [[label, *values] for label, values in comparison.rows()],
                     "not_compared": comparison.partial})
    else:
        held_out = [r.family for r in comparison.reports if r.family != comparison.developed_on]
        title = "regret against the best static k, per family" + (
            f" (developed on {comparison.developed_on}; held out: {', '.join(held_out)})"
            if comparison.developed_on else "")
        table = Table(title=title)
        for h in comparison_header(comparison, roles=False, between="\n"):
            table.add_column(h, justify="left" if h == "policy" else "right", no_wrap=h == "policy")
        for label, values in comparison.rows():
            table.add_row(label, *comparison_cells(values))
        console.print(table)
        if grids_differ:
            status.print(grids_differ, style="dim")
        if comparison.partial:
            status.print(f"not compared (run on some families only): {', '.join(comparison.partial)}", style="dim")
    if out is not None:
        status.print(f"wrote {write_comparison(comparison, out, _command_line('robustness-compare'))}")


@_command(TuneOptions)
def tune(
    job: Optional[Path] = JOB_ARG,
    out: Optional[Path] = typer.Option(None, help="Plot directory (default: results/tune/<job>-<space>)."),
    as_json: bool = JSON_OPT,
    *, options: TuneOptions,
) -> None:
    """Find the best policy for a job with Optuna, or return the cached one of a recurring job instantly."""
    from autosync import api
    from autosync.search.study.storage import redact_url

    with api.ranks(options) as ranks:
        if not ranks.leader:  # a torchrun rank other than 0: it served every trial of rank 0
            return
        spec = api.load_job(job)
        if out is not None:
            api.output_dir(out)
        ranks.share(spec, every_run=True)
        with _counting_bar("tuning") as bar:
            task = bar.add_task("BSP reference runs", total=options.n_trials)

            def on_trial(done: int, total: int) -> None:
                bar.update(task, completed=done, total=total, description="trials")

            def on_confirm(done: int, total: int) -> None:
                bar.update(task, completed=done, total=total, description="confirmation runs")

            outcome = _resumable(lambda: api.tune(
                spec, options=options, on_trial=on_trial, on_confirm=on_confirm,
                on_start=lambda url: status.print(f"study storage: {redact_url(url)}", soft_wrap=True),
                on_resume=lambda found, requeued: status.print(_resume_line(found, requeued), soft_wrap=True)))
    verification = outcome.verification
    if as_json:
        _print_json({"study": outcome.study_name, "cached": outcome.cached, "new_trials": outcome.new_trials,
                     "cache": outcome.cache, "top": outcome.top, "faster_elsewhere": outcome.faster_elsewhere,
                     "verification": verification.to_dict() if verification is not None else None})
    else:
        _print_tune(outcome, spec)
        if verification is not None:
            _print_verification(verification)
    files = api.write_tune(outcome, out or api.tune_dir(outcome, spec, options), _command_line("tune"))
    if files.verification is not None:
        status.print(f"wrote {', '.join(str(p) for p in files.verification)}")
    if files.plots:
        status.print(f"wrote {', '.join(str(p) for p in files.plots)}")
    for line in files.skipped:
        status.print(f"skipped {line}", style="dim")


@_command(ReplayOptions)
def replay(
    logs: Path = typer.Argument(..., help="A Sync-Switch log folder (baseline/, switch_exp/), e.g. the paper's "
                                "published logs shipped in autosync/data/sync_switch_logs/cifar10_res32."),
    out: Path = typer.Option(Path("results/replay_sync_switch"), help="Where table.md and table.json go."),
    *, options: ReplayOptions,
) -> None:
    """Sync-Switch's Table II on recorded runs: binary search, the cost-ordered ladder and TPE, cost and success."""
    from autosync import api
    from autosync.search.cost import COST_UNIT

    api.output_dir(out)
    found = api.replay(logs, options, phase=_phase("replaying"))
    table = Table(title=f"switch-point search on {logs} ({options.simulations} simulated searches each)")
    for column in ("strategy", "setting", f"cost ({COST_UNIT})", "success", "same as full info", "valid"):
        table.add_column(column, justify="left" if column in ("strategy", "setting") else "right")
    for r in found.rows:
        table.add_row(r.strategy, r.setting, f"{r.mean_cost:.2f}", f"{r.success:.1%}",
                      f"{r.same_as_full_information:.1%}", f"{r.valid:.1%}")
    console.print(table)
    paths = found.write(out, _command_line("replay"))
    status.print(f"wrote {', '.join(str(p) for p in paths)}")


def _counting_bar(label: str, transient: bool = True) -> Any:
    """A rich progress bar 'label [bar] done/total description elapsed' on the console."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn(f"[bold]{label}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.description}"),
                    TimeElapsedColumn(), console=status, transient=transient)


def _command_line(command: str) -> str:
    """The command line that is running, for results files ('autosync <command>' when not run from a shell)."""
    return "autosync " + " ".join(sys.argv[1:]) if sys.argv[1:2] == [command] else f"autosync {command}"


def _breakdown_line(b: dict[str, int]) -> str:
    """Where a search's cost went: the record's `search_breakdown` in words."""
    return (f"Of its trials, {b['stopped_at_target']} stopped at the target, {b['answered_by_equivalent']} were "
            f"answered by an equivalent policy's result without training"
            + (f" ({b['found_equivalent']} found equivalent by running on the job's proxy)"
               if b.get("found_equivalent") else "")
            + f", {b['pruned']} were pruned"
            + _pruned_how(b)
            + (f", {b['forked_trials']} continued from another switch point's run (its prefix, forked)"
               if b.get("forked_trials") else "") + "; "
            + (f"{_count(b['full_budget_checks'], 'check')} to BSP's time to target ({b['checked_at']:.1f} virtual s, "
               "--constraint-at bsp-target)" if b.get("checked_at") is not None
               else _count(b['full_budget_checks'], 'full-budget check')) + " of the candidates that could win"
            + (f", {b['forked_checks']} of them continued from the run stopped at the target (forked)"
               if b.get("forked_checks") else "") + "."
            + (f" The search stopped improving ({_count(b['patience'] or 0, 'trial')} in a row found nothing "
               f"faster), so {_count(b['given_up'], 'queued trial')} of the budget "
               f"{'was' if b['given_up'] == 1 else 'were'} not run (--patience {b['patience']}; --patience 0 "
               "runs the whole budget)." if b.get("given_up") else ""))


def _pruned_how(b: dict[str, int]) -> str:
    """' (P on their pace, Q untrained inside a plateau of their policy)': how the pruned trials were pruned."""
    how = ([f"{b['pruned_on_pace']} on their pace"] if b.get("pruned_on_pace") else []) \
        + ([f"{b['pruned_in_plateau']} untrained, between trials of their policy that tied"]
           if b.get("pruned_in_plateau") else [])
    return f" ({', '.join(how)})" if how else ""


def _neighbours_line(near: list[dict[str, Any]], cost_to_answer: float | None, prior: int = 0) -> str:
    """The tuned jobs a search started from (a transfer), their trials TPE read as a prior, and what finding
    the answer cost."""
    jobs = "; ".join(f"{nb['job']} (distance {nb['distance']:.2f}): {_policy_label(nb['policy'])}" for nb in near)
    read = f"; TPE read {prior} of their trial{'' if prior == 1 else 's'} as its prior" if prior else ""
    cost = f"; the answer was found after {cost_to_answer:.2f} BSP trainings" if cost_to_answer is not None else ""
    return f"Started from the winners of {_count(len(near), 'tuned neighbour job')}: {jobs}{read}{cost}."


def _resumable(call: Any) -> Any:
    """`call()`, with the command that resumes it added to an `Interrupted` error's message."""
    import shlex

    try:
        return call()
    except Interrupted as exc:
        raise Interrupted(f"{exc}: {shlex.join(['autosync', *sys.argv[1:]])}") from None


def _resume_line(found: int, requeued: list[int]) -> str:
    """What a tune found of an earlier, interrupted search of the same study."""
    dead = (f"; {_count(len(requeued), 'trial')} whose process died "
            f"({', '.join(f'#{n}' for n in requeued)}) re-queued") if requeued else ""
    waiting = "".join(f"; waiting {line}, which stopped sending heartbeats"
                      for line in getattr(requeued, "waiting", []))
    return f"resuming the study: {_count(found, 'finished trial')} found{dead}{waiting}"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _print_tune(outcome: Any, spec: Any) -> None:
    c = outcome.cache
    label = _policy_label(c["best_policy"])
    if outcome.cached:
        console.print(f"[bold]cache hit[/bold]: study {outcome.study_name} finished {c['finished_at']} after "
                      f"{c['trials']} trials (autosync {c['autosync_version']}, sampler {c['sampler']}); "
                      "no new trial. Use --refresh to search again.")
    else:
        console.print(f"study {outcome.study_name}: {_count(outcome.new_trials, 'trial')} run by this command, "
                      f"{c['trials']} in all")
    table = Table(title=f"{spec.name}: best policies (time to {spec.target.metric} {spec.target.threshold})")
    for col in ("trial", "policy", "time (s)", "final", "reached"):
        table.add_column(col, justify="left" if col == "policy" else "right", overflow="fold")
    for row in outcome.top:
        table.add_row(str(row["trial"]), _policy_label(row["policy"]), f"{row['time_to_target']:.2f}",
                      _fmt(row["final_metric"]), f"{row['reached']}/{row['runs']}")
    console.print(table)
    if isinstance(c.get("confirmed"), dict):
        _print_confirmation(c["confirmed"])
    amortize = c["recurrences_to_amortize"]
    speedup = f"{c['speedup_vs_bsp']:.2f}x" if c.get("speedup_vs_bsp") is not None else "BSP never reached it"
    cost = c.get("search_cost_bsp_trainings")
    console.print(
        f"best: [bold]{label}[/bold], {c['best_value']:.2f} s to target vs BSP {c['bsp_time_to_target']:.2f} s "
        f"({speedup}). Search cost: {_fmt(cost, 2)} {c.get('search_cost_unit', 'BSP trainings')}; "
        + (f"pays for itself after {amortize} recurrences." if amortize else "it does not beat BSP, so it never pays off."))
    if isinstance(c.get("search_breakdown"), dict):
        console.print(_breakdown_line(c["search_breakdown"]), style="dim")
    if c.get("neighbour_jobs"):
        console.print(_neighbours_line(c["neighbour_jobs"], c.get("cost_to_answer_bsp_trainings"),
                                       c.get("prior_trials", 0)), style="dim")
    for other in outcome.faster_elsewhere:
        console.print(f"on this job the {other['space']} space answered {_policy_label(other['policy'])} at "
                      f"{other['time']:.2f} s, {other['times_faster']:.2f}x faster than this space's answer: "
                      f"autosync tune {'JOB.yaml ' if spec.name != 'digits_default' else ''}--space {other['space']}")
    status.print(f"train with it: autosync run {'JOB.yaml ' if spec.name != 'digits_default' else ''}--policy tuned",
                  style="dim")


def _print_confirmation(confirmed: dict[str, Any]) -> None:
    """The confirmation table: each candidate's search score, its time on each seed and its mean, and how the
    search's answer held (`autosync.search.strategies.confirm`)."""
    from autosync.search.strategies.confirm import how_it_held

    table = Table(title=f"confirmed on seeds {confirmed['seeds']} (the {confirmed['top']} best, the job's other "
                        "studies' winners, BSP; each run to the target)")
    for column in ("policy", "from", "search s", "per seed s", "mean s", "reached"):
        table.add_column(column, justify="left" if column in ("policy", "from") else "right", no_wrap=column == "policy")
    for r in confirmed["rows"]:
        per_seed = ", ".join(f"{t:.1f}" for t in r.get("seed_times") or [])
        table.add_row(_policy_label(r["policy"]), r["source"], _fmt(r["search_time"], 1), per_seed or "-",
                      _fmt(r["time_to_target"], 1),
                      f"{r['reached']}/{r['runs']}" + (f" ({r['reason']})" if r.get("reason") else "")
                      + (f" (behind the leader at {r['behind_at']:.0f} s)" if r.get("behind_at") is not None else ""))
    console.print(table)
    console.print(how_it_held(confirmed, _policy_label))


def _print_verification(v: Any) -> None:
    table = Table(title=f"simulation verified on {v.execution['backend']} ({v.execution.get('clock', 'virtual')} "
                        f"clock), seeds {v.seeds}")
    for column in ("policy", "simulated s", "real s", "real / sim", "real final", "feasible"):
        table.add_column(column, justify="left" if column == "policy" else "right", no_wrap=column == "policy")
    fmt = lambda x, f: "-" if x is None else f.format(x)
    for r in v.rows:
        table.add_row(_policy_label(r["policy"]), fmt(r["simulated_time"], "{:.1f}"), fmt(r["real_time"], "{:.1f}"),
                      fmt(r["real_over_simulated"], "{:.2f}"), fmt(r["real_final_metric"], "{:.3f}"),
                      "yes" if r["real_feasible"] else "no")
    console.print(table)
    tau = "-" if v.kendall_tau is None else f"{v.kendall_tau:.2f}"
    winner = _policy_label(v.real_winner) if v.real_winner else "none feasible"
    console.print(f"Kendall's tau {tau}; real winner {winner} "
                  f"({'the simulated winner too' if v.same_winner else 'not the simulated winner'})")
    answer = v.answer()
    if answer is None:
        console.print("no candidate kept the final-metric constraint for real: the cache keeps the search's best")
        return
    speedup = lambda x: "-" if x is None else f"{x:.2f}x"  # noqa: E731
    console.print(f"the cache answers with [bold]{_policy_label(answer['policy'])}[/bold]: real "
                  f"{_fmt(answer['real_time'], 2)} s vs BSP {_fmt(answer['bsp_real_time'], 2)} s "
                  f"({speedup(answer['real_speedup'])} on the real clock); simulated "
                  f"{_fmt(answer['simulated_time'], 2)} s vs BSP {_fmt(answer['bsp_simulated_time'], 2)} s "
                  f"({speedup(answer['simulated_speedup'])})")


def _policy_label(policy: dict[str, Any]) -> str:
    from autosync.leaderboard import label_of

    return label_of(policy)


cache_app = typer.Typer(help="The cache of recurring jobs: tuned policies stored in the study storage.",
                        no_args_is_help=True)
app.add_typer(cache_app, name="cache")
@_command(CacheOptions, cache_app, name="list")
def cache_list(as_json: bool = JSON_OPT, *, options: CacheOptions) -> None:
    """Every cached study: job, space, trials, best policy and score."""
    from autosync import api
    from autosync.search.study.storage import DEFAULT_STORAGE, redact_url

    url = options.storage or DEFAULT_STORAGE
    studies = api.cached_studies(url)
    if as_json:
        _print_json(studies)
        return
    if not studies:
        console.print(f"no cached study in {redact_url(url)}")
        return
    table = Table(title=f"cache: {redact_url(url)}")
    for col in ("study", "job", "trials", "best policy", "time to target (s)", "finished"):
        table.add_column(col)
    for s in studies:
        c = s["cache"] if isinstance(s["cache"], dict) else {}
        best = _policy_label(c["best_policy"]) if isinstance(c.get("best_policy"), dict) else \
            "(damaged record)" if "damaged" in s else "(unfinished)"
        value = f"{c['best_value']:.2f}" if isinstance(c.get("best_value"), (int, float)) else "-"
        table.add_row(s["study"], str(c.get("job_name", "-")), str(s["trials"]), best, value,
                      str(c.get("finished_at", "-")))
    console.print(table)
    for s in studies:
        if "damaged" in s:
            status.print(f"warning: study {s['study']}: corrupt cache entry ({s['damaged']}); `autosync cache clear` "
                         "of its job deletes it", style="yellow", soft_wrap=True)


@_command(RecommendOptions)
def recommend(job: Optional[Path] = JOB_ARG, as_json: bool = JSON_OPT, *, options: RecommendOptions) -> None:
    """A policy for the job without training, from the nearest tuned jobs in the storage (and --grid reports)."""
    from autosync import api

    spec = api.load_job(job)
    answer = api.recommend(spec, options.storage, grids=options.grid)
    if as_json:
        _print_json(answer.to_dict())
        return
    table = Table(title=f"{spec.name}: the nearest tuned jobs")
    for column in ("job", "distance", "same workload", "its winner here", "weight"):
        table.add_column(column, justify="left" if column in ("job", "its winner here") else "right")
    for nb in answer.neighbours:
        table.add_row(nb["job"], f"{nb['distance']:.2f}", "yes" if nb["same_workload"] else "no",
                      _policy_label(nb["policy"]) if nb["policy"] else "does not fit", f"{nb['weight']:.2f}")
    console.print(table)
    target = f"{spec.target.metric} {spec.target.threshold}"
    if answer.predicted_time is not None:
        prediction = (f"predicted {answer.predicted_time:.1f} s to {target} vs BSP {answer.predicted_bsp_time:.1f} s "
                      f"({answer.predicted_speedup:.2f}x)")
    elif answer.predicted_speedup is not None:
        prediction = f"predicted {answer.predicted_speedup:.2f}x BSP's time to target (from another workload)"
    else:
        prediction = ("no prediction of its time (no neighbour that voted for it has a speedup over BSP: BSP missed "
                      "the target there)")
    console.print(f"recommended: [bold]{_policy_label(answer.policy)}[/bold], {prediction}. Nothing was trained: "
                  "`autosync tune` checks it (and starts from these jobs' winners).")


@_command(CacheOptions, cache_app, name="show")
def cache_show(job: Optional[Path] = JOB_ARG, as_json: bool = JSON_OPT, *, options: CacheOptions) -> None:
    """The cached studies of one job with their provenance and amortization report."""
    from autosync import api
    from autosync.core import strict_json
    from autosync.search.study.storage import DEFAULT_STORAGE, redact_url

    spec = api.load_job(job)
    url = options.storage or DEFAULT_STORAGE
    studies = api.cached_studies(url, spec)
    for s in studies:
        if "damaged" in s:
            from autosync.search.study.cache import damaged

            raise damaged(s["study"], s["damaged"])
    if as_json:
        _print_json(studies)
        return
    if not studies:
        console.print(f"no cached study for job {spec.name} (fingerprint {spec.fingerprint()}) in {redact_url(url)}")
        return
    for s in studies:
        console.print(f"[bold]{s['study']}[/bold] ({s['trials']} trials)")
        console.print(strict_json.dumps(s["cache"], indent=2) if s["cache"] is not None else "  not finished yet")


@_command(CacheOptions, cache_app, name="clear")
def cache_clear(job: Optional[Path] = JOB_ARG, *, options: CacheOptions) -> None:
    """Delete every study (and so the cached policy) of one job."""
    from autosync import api

    spec = api.load_job(job)
    names = api.clear_cache(spec, options.storage)
    console.print(f"deleted {len(names)} studies of job {spec.name}: {', '.join(names) or '-'}")


def _print_summary(result: Any) -> None:
    m = result.metrics
    table = Table(title=f"{result.job_name} - {result.policy['policy']} {result.policy['params'] or ''} "
                        f"seed {result.seed} ({result.status})")
    table.add_column("metric")
    table.add_column("value", justify="right")
    ttt = m["time_to_target"]
    rows = [
        (f"time to {m['target_metric']} {'<=' if m['target_metric'] != 'test_accuracy' else '>='} "
         f"{m['target_threshold']}", f"{ttt:.2f} s" if ttt is not None else "not reached"),
        ("updates to target", str(m["updates_to_target"]) if m["updates_to_target"] is not None else "-"),
        ("final training loss", _fmt(m["final_train_loss"])),
        ("final test loss", _fmt(m["final_test_loss"])),
        ("final test accuracy", _fmt(m["final_test_accuracy"])),
        ("updates", str(m["updates"])),
        ("virtual time", f"{m['virtual_time']:.2f} s"),
        ("updates per virtual second", f"{m['updates_per_virtual_second']:.3f}"),
        ("gradients discarded", f"{m['gradients_discarded']} of {m['gradients_arrived']}"),
        ("wall time", f"{result.wall_seconds:.2f} s"),
    ]
    for row in rows:
        table.add_row(*row)
    console.print(table)


def _fmt(x: Any, digits: int = 4) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _quiet_optuna() -> None:
    """Optuna logs only errors (the API's setting: autosync reports trials itself)."""
    from autosync.api import quiet_optuna

    quiet_optuna()


class _progress:
    """A rich progress bar over the job's budget (virtual seconds, else updates, else epochs)."""

    def __init__(self, spec: Any):
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        b = spec.budget
        if b.max_virtual_seconds is not None:
            self.key, self.total = "time", b.max_virtual_seconds
        elif b.max_updates is not None:
            self.key, self.total = "updates", b.max_updates
        else:
            self.key, self.total = "epoch", b.max_epochs
        self.bar = Progress(TextColumn("[bold]training"), BarColumn(), TextColumn("{task.description}"),
                            TimeElapsedColumn(), console=status, transient=False)

    def __enter__(self):
        self.bar.start()
        self.task = self.bar.add_task("", total=self.total)

        def update(info: dict[str, Any]) -> None:
            acc = info.get("test_accuracy")
            desc = (f"virtual {info['time']:.1f} s | updates {info['updates']} | loss {info['train_loss']:.4f}"
                    + (f" | acc {acc:.3f}" if acc is not None else ""))
            self.bar.update(self.task, completed=min(info[self.key], self.total), description=desc)

        return update

    def __exit__(self, *exc: Any) -> None:
        self.bar.stop()


def main() -> None:
    """Console entry point: every error is one line `error: ...` on stderr, no traceback: exit code 2 for
    input and usage errors (`UserError`, and the command-line parser's own: an unknown command or option,
    a value of the wrong type or out of range, each followed by a one-line hint), 1 for runtime failures
    (`RuntimeFailure`: worker processes or ranks lost, BSP failing, no trial meeting the target), 130 when
    interrupted (Ctrl-C; `Interrupted` says what was kept).
    """
    from autosync.reporting.output import remove_empty_outputs

    code: Any = 1  # until the command returns: a failure leaves no empty output folder it created
    try:
        code = app(standalone_mode=False, prog_name="autosync") or 0
    except UserError as exc:
        _print_error(exc)
        sys.exit(2)
    except RuntimeFailure as exc:
        _print_error(exc)
        sys.exit(exc.exit_code)
    except typer.TyperException as exc:  # the parser's errors (typer's click)
        _print_usage_error(exc)
        sys.exit(2)
    except typer.Abort:
        print("error: aborted (end of input)", file=sys.stderr)
        sys.exit(1)
    finally:
        remove_empty_outputs(failed=bool(code))
    if code == 130:  # Ctrl-C outside a command that says what it kept
        print("error: interrupted", file=sys.stderr)
    if isinstance(code, int) and code:
        sys.exit(code)


def _print_usage_error(exc: Exception) -> None:
    """A parser error as 'error: <command>: <message> (got <value>)' and a hint naming the help to read;
    with no command at all nothing more (the parser has printed the help)."""
    ctx = getattr(exc, "ctx", None)
    if type(exc).__name__ == "NoArgsIsHelpError":  # the parser has printed the help already: once is enough
        return
    if hasattr(exc, "possibilities") and getattr(exc, "option_name", None):  # an unknown option
        message = exc.message + _close_options(exc.option_name, ctx)
    else:
        message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
    message = message[:1].lower() + message[1:]
    value = _given_value(getattr(exc, "param", None))
    if value is not None and repr(value) not in message:
        message = f"{message.rstrip('.')}, but got {value!r}"
    command = ctx.command_path if ctx is not None else _command_path(sys.argv[1:])
    print(f"error: {command}: {' '.join(message.split())}", file=sys.stderr)
    print(f"hint: see '{command} --help'", file=sys.stderr)


def _close_options(given: str, ctx: Any) -> str:
    """' (did you mean --seed?)': the command's own options whose names are close to `given` (a mistyped
    letter or two), or nothing; the parser's own guess offers options that share only their dashes."""
    import difflib

    params = ctx.command.params if ctx is not None else []
    names = {opt.lstrip("-"): opt for p in params for opt in [*p.opts, *p.secondary_opts] if opt.startswith("--")}
    close = difflib.get_close_matches(given.lstrip("-"), list(names), n=3, cutoff=0.75)
    return f" (did you mean {' or '.join(names[c] for c in close)}?)" if close else ""


def _command_path(args: list[str]) -> str:
    """'autosync tune', 'autosync cache show': the command the command line names (for an error the
    parser raised without its context, such as an option missing its value)."""
    import typer.main

    group, path = typer.main.get_command(app), ["autosync"]
    for arg in args:
        sub = getattr(group, "commands", {}).get(arg)
        if sub is None:
            break
        group, path = sub, [*path, arg]
    return " ".join(path)


def _given_value(param: Any) -> Optional[str]:
    """The value the command line gave an option (`--seed abc` or `--seed=abc`), for the error message."""
    args = sys.argv[1:]
    for opt in getattr(param, "opts", None) or []:
        if not opt.startswith("-"):
            continue
        for i, arg in enumerate(args):
            if arg == opt and i + 1 < len(args):
                return args[i + 1]
            if arg.startswith(opt + "="):
                return arg[len(opt) + 1:]
    return None


def _print_error(exc: Exception) -> None:
    """Each line of a user error as 'error: ...' on stderr, never wrapped (one problem, one line), with the
    password of any storage URL in it masked."""
    from autosync.search.study.storage import redact_url

    for line in str(exc).splitlines():
        print(f"error: {redact_url(line)}", file=sys.stderr)


if __name__ == "__main__":
    main()
