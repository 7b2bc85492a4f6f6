"""The options of each command, declared once: typer builds the command line from them, the API takes them.

One frozen dataclass per command (`RunOptions`, `TuneOptions`, `LeaderboardOptions`, `ProfileOptions`,
`CalibrateOptions`, `FamilyOptions`, `RobustnessOptions`, `CompareOptions`, `ReplayOptions`, `ScalingOptions`,
`CacheOptions`, `RecommendOptions`, `RerunOptions`);
`ExecutionOptions` (where runs train) is the part `run` and `tune` share. The two are declared where the
layers below read their defaults (`autosync.engine.backends.ExecutionOptions`, whose record is the engine's
`BackendChoice`; `autosync.search.tune_options.TuneOptions`, whose defaults are the search's `TuneRequest`'s)
and listed here with the others; the field helpers are `autosync.core.declare`'s. Each field is declared once, with
its default, its help (the `--help` text, which also says why the option exists) and its rule (`ge`, `le`,
or a check in `__post_init__`). The command line gets the same rules from typer (`ge` becomes the option's
`min`), so a value out of range is a parser error there and a one-line `UserError` from the API, naming the
option, the rule and the value: "--n-trials must be >= 1, but got 0".

Why dataclasses and not pydantic models: `autosync --help` builds every command's options from these
classes, and importing pydantic would double its start-up time (about 0.2 s of 0.25 s) for a handful of
range rules that are simpler written out; typer's own parser already converts the command line's types.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Optional

from autosync.core.declare import Url, build, check_ranges, flag_of, option
from autosync.core.errors import UserError
from autosync.core.limits import MAX_SEED, MAX_SIZE, MAX_WAIT_SECONDS
from autosync.engine.backends import ExecutionOptions
from autosync.policy_grid import check_rules
from autosync.search.tune_options import TuneOptions

if TYPE_CHECKING:
    from autosync.engine.backends import BackendChoice

__all__ = ["ExecutionOptions", "RunOptions", "TuneOptions", "LeaderboardOptions", "ProfileOptions",
           "CalibrateOptions", "FamilyOptions", "RobustnessOptions", "CompareOptions", "ReplayOptions",
           "ScalingOptions", "CacheOptions", "RecommendOptions", "RerunOptions", "TableOptions", "FitOptions", "flag_of",
           "build", "command_of"]


@dataclass(frozen=True, kw_only=True)
class RunOptions(ExecutionOptions):
    """`autosync run`: one training run under one policy."""

    policy: Any = option("bsp", "Policy name (see `autosync policies`), a spec with its parameters "
                         "('compose(barrier=ssp, update=dana_slim)' or 'backup:k=8'; a bare backup waits for "
                         "k = 3n/4), or `tuned` for the job's cached best.",
                         short="-p", cli_type=str)  # the API also takes a Policy or a dict
    params: Any = option([], "Policy parameter key=value (repeatable).", flag="--param",
                         cli_type=list[str])  # the API also takes a dict {name: value}
    seed: Optional[int] = option(None, "Override the job's seed.", ge=0, le=MAX_SEED)
    storage: Optional[Url] = option(None, "Study storage URL for --policy tuned "
                                    "(default: sqlite:///results/autosync-studies.db).")

    @property
    def tuned(self) -> bool:
        """Whether the policy is the job's cached best (`tuned`, spelt in any case, as policy names are)."""
        return isinstance(self.policy, str) and self.policy.strip().lower() == "tuned"

    def parameters(self) -> dict[str, Any]:
        """The policy parameters: `params` as a dict, each `key=value` string parsed."""
        if isinstance(self.params, dict):
            return dict(self.params)
        from autosync.catalog import parse_param  # not at the top: numpy, which --help does not load

        parsed = [parse_param(p) for p in self.params]
        twice = sorted({key for key, _ in parsed if [k for k, _ in parsed].count(key) > 1})
        if twice:  # the last one was taken without a word, where a spec naming a parameter twice is refused
            raise UserError(f"--param must name each parameter once, but got {twice[0]} "
                            f"{[str(v) for k, v in parsed if k == twice[0]]}")
        return dict(parsed)


@dataclass(frozen=True, kw_only=True)
class LeaderboardOptions:
    """`autosync leaderboard`: every policy x seeds on one job, scored MLPerf-style."""

    policies: list[str] = option([], "Policy specs NAME or NAME:key=value,... (repeatable; default: bsp, asp, ssp, "
                                 "backup (k = 3n/4), dbw, bdbw).")  # the API also takes dicts {"policy", "params"}
    seeds: int = option(5, "Seeds 0..N-1 per policy (same straggler draws).", ge=1, le=MAX_SEED)
    n_jobs: int = option(1, "Runs in parallel (joblib processes, at most one per usable core; -1: every core).")
    include_tuned: bool = option(False, "Add the job's cached tuned policy.")
    storage: Optional[Url] = option(None, "Study storage URL for --include-tuned.")

    def __post_init__(self) -> None:
        check_ranges(self)
        _check_n_jobs(self.n_jobs)


@dataclass(frozen=True, kw_only=True)
class ProfileOptions:
    """`autosync profile`: time each worker's real round trips and fit the job's cluster model."""

    backend: str = option("processes", "processes (worker processes on this machine) | distributed (the ranks "
                          "of a torchrun launch; rank 0 times them).")
    device: str = option("cpu", "cpu | cuda (cuda:N): where the workers compute.")
    workers_per_device: int = option(2, "Worker processes on the device.", ge=1)
    batch_sizes: Optional[str] = option(None, "Comma-separated batch sizes to time (default: half, once and twice "
                                        "the job's).")
    rounds: int = option(10, "Rounds per batch size (each: one task per worker).", ge=1)
    worker_timeout: float = option(120.0, "Seconds without a gradient before a worker process counts as hung.",
                                   ge=0.1, le=MAX_WAIT_SECONDS)
    worker_cpus: Optional[str] = option(None, "Comma-separated cores, worker process p on the p-th (cycling).")
    check: bool = option(False, "Then run the fitted job for real twice (BSP and backup k = 1, --check-updates "
                         "updates each), fit the server's cost per update and per gradient from the two, and print "
                         "how close the simulation comes (`autosync calibrate`).")
    check_updates: int = option(100, "--check: updates per real run.", ge=2)

    def __post_init__(self) -> None:
        check_ranges(self)
        if self.backend not in ("processes", "distributed"):
            raise UserError(f"--backend must be processes or distributed for profile, but got {self.backend!r}")
        if self.check and self.backend != "processes":
            raise UserError("--check runs the fitted job on worker processes: it needs --backend processes, "
                            f"but got {self.backend!r}")
        self.choice()

    def sizes(self, job: Any) -> list[int]:
        """The batch sizes to time on `job` (default: half, once and twice the job's)."""
        from autosync.measure.profile import parse_batch_sizes  # not at the top: numpy, which --help does not load

        return parse_batch_sizes(self.batch_sizes, job)

    def choice(self) -> "BackendChoice":
        """The engine's execution record of these options, checked."""
        return ExecutionOptions(backend=self.backend, device=self.device, workers_per_device=self.workers_per_device,
                                worker_timeout=self.worker_timeout, worker_cpus=self.worker_cpus).choice()

    def check_options(self) -> "CalibrateOptions":
        """--check's calibration of the fitted job: on these workers, --check-updates updates per real run."""
        return CalibrateOptions(device=self.device, workers_per_device=self.workers_per_device,
                                worker_timeout=self.worker_timeout, worker_cpus=self.worker_cpus,
                                updates=self.check_updates)


@dataclass(frozen=True, kw_only=True)
class CalibrateOptions(ExecutionOptions):
    """`autosync calibrate`: a job's simulation against two short real runs, and the server's costs fitted."""

    backend: str = option("processes", "processes (worker processes on this machine): where the real runs train.")
    clock: str = option("real", "real: the order the workers answer in (the real runs are the point).")
    updates: int = option(100, "Updates per real run (BSP, then backup k = 1).", ge=2)
    fit: bool = option(True, "Fit the server's cost per update and per gradient to the real runs (--no-fit: only "
                       "check the job as it is).")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.backend != "processes" or self.clock != "real":
            raise UserError(f"calibrate runs on --backend processes --clock real, but got --backend {self.backend} "
                            f"--clock {self.clock}")


def help_text(text: str) -> str:
    """`text` as the help renders it literally: a bracket escaped, since the help reads rich markup, where
    "autosync[cluster]" would lose "[cluster]" as a tag (docs/scripts/make_reference.py reads it back)."""
    return text.replace("[", "\\[")


def _check_n_jobs(n_jobs: int) -> None:
    if n_jobs == 0 or n_jobs < -1:
        raise UserError(f"--n-jobs must be >= 1 or -1 (all cores), but got {n_jobs}")


@dataclass(frozen=True, kw_only=True)
class FamilyOptions:
    """`autosync family`: jobs drawn from a job family, written as ordinary job files."""

    jobs: int = option(24, "Jobs 0..N-1 of the family (job i depends only on the family's seed and i).", ge=1,
                       le=MAX_SIZE)

    def __post_init__(self) -> None:
        check_ranges(self)


@dataclass(frozen=True, kw_only=True)
class RobustnessOptions(FamilyOptions):
    """`autosync robustness`: online policies against each drawn job's exhaustive best static k."""

    seeds: int = option(3, "Seeds 0..S-1 per (job, policy), from --seed-offset.", ge=1, le=MAX_SEED)
    seed_offset: int = option(0, "The first seed (100: seeds no tune searched on, so --tuned-trials' "
                              "answers are scored on held-out runs).", ge=0, le=MAX_SEED)
    policies: list[str] = option([], "Online policies NAME or NAME:key=value,... (repeatable; default: dbw, bdbw, "
                                 "lbbsp, ssp, sync_switch, dana_slim).")  # the API also takes dicts
    n_jobs: int = option(1, "Runs in parallel (joblib processes, at most one per usable core; -1: every core).")
    lr_rules: str = option("fixed,proportional", "The static-k grid's learning-rate rules, comma-separated (of "
                           "fixed, proportional, sqrt, linear).")
    tuned_trials: int = option(0, "Also tune each job (this many trials in the --tuned-space space, in studies.db "
                               "beside the report; any number > 0 runs the race, on the policy space, to its "
                               "answer) and score its answer as 'tuned'.", ge=0)
    tuned_space: str = option("policy", "The space --tuned-trials searches.")
    reference: str = option("static", "What 'vs best overall' divides by: static (the static-k grid and the policies "
                            "run) or broad (also every policy family's grid, autosync.experiments.reference_grid: more runs).")

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_n_jobs(self.n_jobs)
        if self.seed_offset + self.seeds - 1 > MAX_SEED:  # each run's seed is 32 bits (`autosync.core.rng`)
            raise UserError(f"--seed-offset + --seeds - 1 must be <= {MAX_SEED} (seeds are 32 bits), but got "
                            f"{self.seed_offset} + {self.seeds} - 1")
        self.rules()
        if self.reference not in ("static", "broad"):
            raise UserError(f"--reference must be one of ['static', 'broad'], but got {self.reference!r}")

    def rules(self) -> tuple[str, ...]:
        """The static-k grid's learning-rate rules, checked."""
        return check_rules(r.strip() for r in self.lr_rules.split(","))


@dataclass(frozen=True, kw_only=True)
class TableOptions:
    """`autosync table`: every lattice point of every job run on its search and held-out seeds, recorded for
    replayed searches (`autosync.table`)."""

    jobs: int = option(8, "Jobs 0..N-1 of each family file.", ge=1, le=MAX_SIZE)
    held_out: int = option(2, "Held-out seeds per job, after its two search seeds (job.seed + 100, ...).", ge=0)
    policies: list[str] = option([], "Only these lattice points, NAME or NAME:key=value,... (repeatable; default: "
                                 "the broad reference grid).")  # the API also takes dicts
    n_jobs: int = option(-1, "Cells in parallel (joblib processes, at most one per usable core, or with "
                             "--scheduler the cluster's workers; -1: every core, or every worker).")
    full: bool = option(False, "Train every cell to the end of the budget (default: each stops at the target, "
                               "and the final metric is trained where a search first asks for it).")
    scheduler: Optional[str] = option(None, "Run the cells on a Dask cluster: its scheduler's address "
                                      "(tcp://HOST:8786), or `local` for one started on this machine with "
                                      "--n-jobs workers (needs pip install \"autosync[cluster]\").")
    retrain: bool = option(False, "Train again every cell the table holds of these jobs, replacing each with its "
                                  "new run (after a change to the simulator left them stale); adds no lattice point.")

    def __post_init__(self) -> None:
        check_ranges(self)
        _check_n_jobs(self.n_jobs)
        if self.retrain and (self.policies or self.full):
            raise UserError(f"--retrain trains again the cells the table holds, so it takes no "
                            f"{'--policies' if self.policies else '--full'}")


@dataclass(frozen=True, kw_only=True)
class FitOptions:
    """`autosync fit`: the race's settings (`autosync.race`) fitted on a table of job families."""

    table: str = option("results/table", "The table directory the jobs' runs are read from (a run it lacks is "
                        "trained and stored there: build it first with `autosync table`).")
    jobs: int = option(2, "Jobs 0..N-1 of each family file.", ge=1, le=MAX_SIZE)
    out: Optional[str] = option(None, "Where the fitted settings go (default: the settings autosync ships, "
                                "autosync/data/race.yaml, which `autosync tune --sampler race` reads unless "
                                "--race-settings names another file).")
    check: bool = option(False, "Write nothing: exit 1 unless --out already holds the settings the fit gives.")


@dataclass(frozen=True, kw_only=True)
class ReplayOptions:
    """`autosync replay`: Sync-Switch's Table II (search cost and success) on recorded runs."""

    simulations: int = option(1000, "Simulated searches per strategy and setting.", ge=1)
    seed: int = option(0, "Seed of the run draws and of the TPE samplers.", ge=0, le=MAX_SEED)
    threshold: float = option(0.01, "Accuracy margin beta.", ge=0.0)
    max_settings: int = option(4, "Binary search: candidates M.", ge=1)
    tpe_trials: list[int] = option([4, 8], "TPE: trials per search (repeatable).", ge=1)
    space: str = option("switch_point", "Search space of the Optuna strategies (ladder, TPE).")

    def __post_init__(self) -> None:
        check_ranges(self)
        bad = [n for n in self.tpe_trials if n < 1]
        if bad:
            raise UserError(f"--tpe-trials must be >= 1, but got {bad[0]}")


@dataclass(frozen=True, kw_only=True)
class ScalingOptions:
    """`autosync scaling`: a metric against the number of workers, from existing leaderboards."""

    metric: str = option("final_test_accuracy", "Per-run metric to compare.")


@dataclass(frozen=True, kw_only=True)
class CompareOptions:
    """`autosync robustness-compare`: robustness reports of several families side by side."""

    developed_on: Optional[str] = option(None, "The family the online policies' changes were developed on "
                                               "(marked dev; the others held out).")


@dataclass(frozen=True, kw_only=True)
class CacheOptions:
    """`autosync cache list / show / clear` and `autosync recommend`: the study storage they read."""

    storage: Optional[Url] = option(None, "Study storage URL (default: sqlite:///results/autosync-studies.db).")


@dataclass(frozen=True, kw_only=True)
class RecommendOptions(CacheOptions):
    """`autosync recommend`: the storage of tuned jobs and the robustness reports it also reads."""

    grid: list[str] = option([], "A robustness report (its folder, written by `autosync robustness`) whose drawn "
                                 "jobs count as tuned neighbours too (repeatable).")


@dataclass(frozen=True, kw_only=True)
class RerunOptions:
    """`autosync rerun`: where a logged run is replayed."""

    device: str = option("cpu", "cpu | cuda: where to replay.")


def command_of(options_type: type, body: Callable[..., None]) -> Callable[..., None]:
    """`body(..., options=...)` as a typer command function whose options are `options_type`'s fields, each
    declared once there (flag, default, help, range: `ge` becomes typer's `min`, so a value out of range is a
    parser error); the body's own parameters (the job argument, --out, --json) are the command line's only.
    The command line registers it (`autosync.cli`); typer is imported only then."""
    import dataclasses
    import inspect
    import typing

    import typer

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
            default=typer.Option(default, *flags, help=help_text(m["help"]), min=m["ge"], max=m["le"])))
    arguments = [p for p in mine if isinstance(p.default, typer.models.ArgumentInfo)]
    params = arguments + generated + [p for p in mine if p not in arguments]

    def command(**values: Any) -> None:
        body(options=options_type(**{f.name: values.pop(f.name) for f in fields}), **values)

    command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    command.__annotations__ = {p.name: p.annotation for p in params}
    command.__name__, command.__doc__ = body.__name__, body.__doc__
    return command
