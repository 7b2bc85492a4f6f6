"""The options of each command, declared once: typer builds the command line from them, the API takes them.

One frozen dataclass per command (`RunOptions`, `TuneOptions`, `LeaderboardOptions`, `ProfileOptions`,
`CalibrateOptions`, `FamilyOptions`, `RobustnessOptions`, `CompareOptions`, `ReplayOptions`, `ScalingOptions`,
`CacheOptions`, `RecommendOptions`, `RerunOptions`);
`ExecutionOptions` (where runs train) is the part `run` and `tune` share. Each field is declared once, with
its default, its help (the `--help` text, which also says why the option exists) and its rule (`ge`, `le`,
or a check in `__post_init__`). The command line gets the same rules from typer (`ge` becomes the option's
`min`), so a value out of range is a parser error there and a one-line `UserError` from the API, naming the
option, the rule and the value: "--n-trials must be >= 1, but got 0".

Why dataclasses and not pydantic models: `autosync --help` builds every command's options from these
classes, and importing pydantic would double its start-up time (about 0.2 s of 0.25 s) for a handful of
range rules that are simpler written out; typer's own parser already converts the command line's types.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

from autosync.core.errors import UserError
from autosync.core.job import MAX_SEED

if TYPE_CHECKING:
    from autosync.engine.backends import BackendChoice

__all__ = ["ExecutionOptions", "RunOptions", "TuneOptions", "LeaderboardOptions", "ProfileOptions",
           "CalibrateOptions", "FamilyOptions", "RobustnessOptions", "CompareOptions", "ReplayOptions",
           "ScalingOptions", "CacheOptions", "RecommendOptions", "RerunOptions", "flag_of", "build"]


def option(default: Any, help: str, *, flag: str | None = None, short: str | None = None, ge: float | None = None,
           le: float | None = None, cli_type: Any = None) -> Any:
    """A field of an options class: its default, its `--help` text and its range (`ge`/`le`, inclusive).

    Args:
        flag: the command-line name (default: `--` and the field's name with hyphens).
        short: a one-letter alias ("-p").
        cli_type: the type typer parses when the field's own type also admits Python values it cannot
            (a Policy instance, a dict of parameters).
    """
    metadata = {"help": help, "flag": flag, "short": short, "ge": ge, "le": le, "cli_type": cli_type}
    if isinstance(default, list):
        return dataclasses.field(default_factory=lambda: list(default), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def flag_of(field: dataclasses.Field) -> str:
    """`--n-trials` for the field n_trials (or the flag the field names)."""
    return field.metadata.get("flag") or "--" + field.name.replace("_", "-")


def _check_ranges(options: Any) -> None:
    """Every field's `ge`/`le` rule, as a one-line UserError naming the option, the rule and the value."""
    for f in dataclasses.fields(options):
        value, ge, le = getattr(options, f.name), f.metadata.get("ge"), f.metadata.get("le")
        if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if ge is not None and not value >= ge:
            raise UserError(f"{flag_of(f)} must be >= {ge}, but got {value}")
        if le is not None and not value <= le:
            raise UserError(f"{flag_of(f)} must be <= {le}, but got {value}")


def build(cls: type, options: Any = None, **fields: Any) -> Any:
    """`cls(**fields)`, or `options` (an instance of `cls`) with `fields` changed; a field `cls` does not
    have is a one-line UserError rather than a TypeError."""
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(fields) - names)
    if unknown:
        raise UserError(f"{cls.__name__} has no option {unknown[0]!r} (it has {', '.join(sorted(names))})")
    if options is None:
        return cls(**fields)
    if not isinstance(options, cls):
        raise UserError(f"options must be a {cls.__name__}, but got {type(options).__name__}")
    return dataclasses.replace(options, **fields) if fields else options


@dataclass(frozen=True, kw_only=True)
class ExecutionOptions:
    """Where runs train: the options `autosync run` and `autosync tune` share (one BackendChoice either way)."""

    backend: str = option("simulator", "simulator (gradients in this process) | processes (worker processes "
                          "compute them; same arrival order and results) | distributed (the ranks of a torchrun "
                          "launch, rank 0 serving and running every trial of `tune`).")
    device: str = option("cpu", "cpu | cuda (cuda:N): where the model, data, slots and worker processes compute.")
    workers_per_device: int = option(2, "--backend processes: worker processes on the device.", ge=1)
    worker_timeout: float = option(60.0, "--backend processes or distributed: seconds without a gradient before a "
                                   "worker process or rank counts as dead or hung.", ge=0.1)
    clock: str = option("virtual", "--backend processes or distributed: virtual (the cluster model orders "
                        "arrivals: same results as the simulator) | real (the order the workers answer in; logged "
                        "for `autosync rerun`).")
    stragglers: str = option("machine", "--clock real: machine (only this machine's own) | model (also the job's "
                             "cluster model, as real delays).")
    time_scale: float = option(0.01, "--clock real --stragglers model: real seconds per virtual second of the "
                               "cluster model.")
    worker_cpus: Optional[str] = option(None, "--backend processes: comma-separated cores, worker process p on "
                                        "the p-th (cycling); a core shared with other work makes its workers real "
                                        "stragglers.")

    def __post_init__(self) -> None:
        _check_ranges(self)
        self.choice()  # the engine's own rules: names, combinations, the device

    def choice(self) -> "BackendChoice":
        """The engine's execution record of these options, checked."""
        from autosync.engine.backends import BackendChoice

        choice = BackendChoice(self.backend, self.clock, self.stragglers, self.time_scale, self.device,
                               self.workers_per_device, self.worker_timeout, parse_cpus(self.worker_cpus))
        choice.check()
        return choice

    @classmethod
    def of_choice(cls, choice: "BackendChoice") -> dict[str, Any]:
        """The fields of an execution record (`api.backend(...)`), to build options that train there."""
        return dict(backend=choice.backend, clock=choice.clock, stragglers=choice.stragglers,
                    time_scale=choice.time_scale, device=choice.device, workers_per_device=choice.processes,
                    worker_timeout=choice.worker_timeout,
                    worker_cpus=None if choice.worker_cpus is None else ",".join(map(str, choice.worker_cpus)))


def parse_cpus(text: str | None) -> tuple[int, ...] | None:
    """`--worker-cpus 0,1` as (0, 1); a one-line UserError for anything but non-negative integers."""
    if text is None:
        return None
    try:
        cpus = tuple(int(v) for v in text.split(","))
    except ValueError:
        raise UserError(f"--worker-cpus must be comma-separated core numbers, but got {text!r}") from None
    if not cpus or min(cpus) < 0:
        raise UserError(f"--worker-cpus must be comma-separated core numbers >= 0, but got {text!r}")
    return cpus


@dataclass(frozen=True, kw_only=True)
class RunOptions(ExecutionOptions):
    """`autosync run`: one training run under one policy."""

    policy: Any = option("bsp", "Policy name (see `autosync policies`), a spec with its parameters "
                         "('compose(barrier=ssp, update=dana_slim)' or 'backup:k=8'), or `tuned` for the job's "
                         "cached best.", short="-p", cli_type=str)  # the API also takes a Policy or a dict
    params: Any = option([], "Policy parameter key=value (repeatable).", flag="--param",
                         cli_type=list[str])  # the API also takes a dict {name: value}
    seed: Optional[int] = option(None, "Override the job's seed.", ge=0, le=MAX_SEED)
    storage: Optional[str] = option(None, "Study storage URL for --policy tuned "
                                    "(default: sqlite:///results/autosync-studies.db).")

    def parameters(self) -> dict[str, Any]:
        """The policy parameters: `params` as a dict, each `key=value` string parsed."""
        if isinstance(self.params, dict):
            return dict(self.params)
        from autosync.catalog import parse_param

        return dict(parse_param(p) for p in self.params)


# `autosync tune` answers "which policy" unless told otherwise: the policy space's race ran the default job in
# about 15 s on 2 idle cores, inside the 20 s the issue set for a default (benchmarks/README.md).
DEFAULT_TUNE_SPACE = "policy"


@dataclass(frozen=True, kw_only=True)
class TuneOptions(ExecutionOptions):
    """`autosync tune`: an Optuna search of a job's policy, or the cached answer of a recurring job."""

    space: str = option(DEFAULT_TUNE_SPACE, "Search space: a YAML file or a shipped name (policy: which policy, "
                        "raced family by family; static_k; switch_point, batch_split, composed).")
    n_trials: int = option(20, "Trial budget, global across processes.", ge=1)
    timeout: Optional[float] = option(None, "Stop the search after S seconds: no trial starts after it, and a "
                                      "trial still training stops at its next evaluation (not counted; the same "
                                      "command resumes it).", ge=0.0)
    storage: Optional[str] = option(None, "SQLAlchemy URL of the study storage "
                                    "(default: sqlite:///results/autosync-studies.db).")
    study: Optional[str] = option(None, "Study name (default: <fingerprint>-<space>).")
    adopt_study: bool = option(False, "Let --study name a study made for another job (another fingerprint): its "
                               "trials and cached answer then stand for this job.")
    sampler: str = option("auto", "auto (portfolio where the space lists one, else tpe) | portfolio (race each "
                          "family's portfolio settings, then TPE inside the families that can still win) | tpe | gp "
                          "| random | grid | binary (Sync-Switch) | ladder (cheapest switch point first).")
    n_jobs: int = option(1, "Processes running trials on this machine.", ge=1)
    seed: int = option(0, "Sampler seed.", ge=0, le=MAX_SEED)
    repeats: int = option(1, "Seeds per trial (the objective is noisy).", ge=1)
    tolerance: float = option(0.01, "Allowed final-metric shortfall against BSP (the constraint).", ge=0.0)
    objective: str = option("time", "time | time,metric (Pareto front).")
    refresh: bool = option(False, "Search again, warm-started from the cached best.")
    verify_top: int = option(0, "After a simulated search, re-run the K best feasible candidates and BSP "
                             "--repeats times on --backend and compare (0: off).", ge=0)
    confirm_top: Optional[int] = option(None, "After the search, run its K best candidates (and the job's other "
                                        "studies' winners) and BSP to the target on --confirm-seeds seeds it did not "
                                        "search on; a candidate that misses there loses, and the answer is the best "
                                        "mean over all the seeds (default: 2, 0 with --sampler binary or ladder or "
                                        "--objective time,metric; 0: off).", ge=0)
    confirm_seeds: int = option(1, "Seeds added by --confirm-top (more, up to 3, where the leaders are closer than "
                                "the spread between seeds).", ge=1)
    transfer: bool = option(True, "A new study starts from the winners of the nearest tuned jobs in the storage "
                            "with this job's workload and target (--no-transfer: from nothing).")
    neighbour_prior: bool = option(False, "With the transfer, TPE also reads the tuned neighbours' trials as its prior, "
                                   "each on this job's scale (off by default: on the stragglers family it saved "
                                   "little over their winners alone and answered up to 1.08x slower).")
    patience: Optional[int] = option(None, "Stop the search once N trials in a row found nothing faster; the rest of "
                                     "the budget is not run (0: run the whole budget; default: the space's "
                                     "`patience`, 5 for static_k, else 0; 0 with --sampler grid).", ge=0)

    constraint_at: str = option("budget", "Where a candidate's final metric must stay within --tolerance of BSP's: "
                                "budget (at the end of the budget, Sync-Switch's rule) | bsp-target (at the time "
                                "BSP reaches the target: neither BSP nor the winner's check trains past it; for "
                                "jobs trained to the target).")

    def __post_init__(self) -> None:
        super().__post_init__()
        from autosync.search.strategies.samplers import AUTO, SAMPLERS, SWITCH_POINT_SAMPLERS

        if self.constraint_at not in ("budget", "bsp-target"):
            raise UserError(f"--constraint-at must be budget or bsp-target, but got {self.constraint_at!r}")
        if self.constraint_at != "budget" and self.objective != "time":
            raise UserError(f"--constraint-at {self.constraint_at} needs --objective time (a Pareto front compares "
                            f"final metrics at the budget's end), but got --objective {self.objective}")
        if self.constraint_at != "budget" and self.sampler in SWITCH_POINT_SAMPLERS:
            raise UserError(f"--constraint-at {self.constraint_at} needs a sampler whose trials stop at the target, "
                            f"but --sampler {self.sampler} trains each candidate whole to compare final metrics")

        if self.sampler not in (AUTO, *SAMPLERS):
            raise UserError(f"--sampler must be one of {[AUTO, *SAMPLERS]}, but got {self.sampler!r}")
        if self.objective not in ("time", "time,metric"):
            raise UserError(f"--objective must be time or time,metric, but got {self.objective!r}")
        if self.backend == "distributed" and self.n_jobs > 1:
            raise UserError(f"--n-jobs must be 1 with --backend distributed (the group's ranks serve one trial at "
                            f"a time), but got {self.n_jobs}")
        if self.verify_top and self.backend == "simulator":
            raise UserError("--verify-top re-runs the simulated search's best candidates on a real backend: "
                            "it needs --backend processes (with --clock virtual or real)")
        if self.verify_top and self.objective != "time":
            raise UserError("--verify-top compares one objective's rankings: it needs --objective time")
        if self.confirm_top and self.objective != "time":
            raise UserError("--confirm-top ranks candidates by one objective: it needs --objective time")
        if self.confirm_top and self.sampler in SWITCH_POINT_SAMPLERS:
            raise UserError(f"--confirm-top re-runs a search's candidates on more seeds, but --sampler {self.sampler} "
                            "already trains each candidate on 3 seeds (Sync-Switch's R)")


@dataclass(frozen=True, kw_only=True)
class LeaderboardOptions:
    """`autosync leaderboard`: every policy x seeds on one job, scored MLPerf-style."""

    policies: list[str] = option([], "Policy specs NAME or NAME:key=value,... (repeatable; default: bsp, asp, ssp, "
                                 "backup (k = 3n/4), dbw, bdbw).")  # the API also takes dicts {"policy", "params"}
    seeds: int = option(5, "Seeds 0..N-1 per policy (same straggler draws).", ge=1)
    n_jobs: int = option(1, "Runs in parallel (joblib processes; -1: all cores).")
    include_tuned: bool = option(False, "Add the job's cached tuned policy.")
    storage: Optional[str] = option(None, "Study storage URL for --include-tuned.")

    def __post_init__(self) -> None:
        _check_ranges(self)
        _check_n_jobs(self.n_jobs)

    def runs(self) -> int:
        """How many runs the leaderboard trains (policies x seeds)."""
        from autosync.leaderboard import DEFAULT_POLICIES

        return (len(self.policies or DEFAULT_POLICIES) + self.include_tuned) * self.seeds


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
                                   ge=0.1)
    worker_cpus: Optional[str] = option(None, "Comma-separated cores, worker process p on the p-th (cycling).")
    check: bool = option(False, "Then run the fitted job for real twice (BSP and backup k = 1, --check-updates "
                         "updates each), fit the server's cost per update and per gradient from the two, and print "
                         "how close the simulation comes (`autosync calibrate`).")
    check_updates: int = option(100, "--check: updates per real run.", ge=2)

    def __post_init__(self) -> None:
        _check_ranges(self)
        if self.backend not in ("processes", "distributed"):
            raise UserError(f"--backend must be processes or distributed for profile, but got {self.backend!r}")
        if self.check and self.backend != "processes":
            raise UserError("--check runs the fitted job on worker processes: it needs --backend processes, "
                            f"but got {self.backend!r}")
        self.choice()

    def sizes(self, job: Any) -> list[int]:
        """The batch sizes to time on `job` (default: half, once and twice the job's)."""
        from autosync.profiling import parse_batch_sizes

        return parse_batch_sizes(self.batch_sizes, job)

    def choice(self) -> "BackendChoice":
        """The engine's execution record of these options, checked."""
        return ExecutionOptions(backend=self.backend, device=self.device, workers_per_device=self.workers_per_device,
                                worker_timeout=self.worker_timeout, worker_cpus=self.worker_cpus).choice()


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


def _check_n_jobs(n_jobs: int) -> None:
    if n_jobs == 0 or n_jobs < -1:
        raise UserError(f"--n-jobs must be >= 1 or -1 (all cores), but got {n_jobs}")


@dataclass(frozen=True, kw_only=True)
class FamilyOptions:
    """`autosync family`: jobs drawn from a job family, written as ordinary job files."""

    jobs: int = option(24, "Jobs 0..N-1 of the family (job i depends only on the family's seed and i).", ge=1)

    def __post_init__(self) -> None:
        _check_ranges(self)


@dataclass(frozen=True, kw_only=True)
class RobustnessOptions(FamilyOptions):
    """`autosync robustness`: online policies against each drawn job's exhaustive best static k."""

    seeds: int = option(3, "Seeds 0..S-1 per (job, policy), from --seed-offset.", ge=1)
    seed_offset: int = option(0, "The first seed (100: seeds no tune searched or confirmed on, so --tuned-trials' "
                              "answers are scored on held-out runs).", ge=0)
    policies: list[str] = option([], "Online policies NAME or NAME:key=value,... (repeatable; default: dbw, bdbw, "
                                 "lbbsp, ssp, sync_switch, dana_slim).")  # the API also takes dicts
    n_jobs: int = option(1, "Runs in parallel (joblib processes; -1: all cores).")
    lr_rules: str = option("fixed,proportional", "The static-k grid's learning-rate rules, comma-separated (of "
                           "fixed, proportional, sqrt, linear).")
    tuned_trials: int = option(0, "Also tune each job (this many trials in the --tuned-space space, in studies.db "
                               "beside the report) and score its answer as 'tuned'.", ge=0)
    tuned_space: str = option("policy", "The space --tuned-trials searches.")
    reference: str = option("static", "What 'vs best overall' divides by: static (the static-k grid and the policies "
                            "run) or broad (also every policy family's grid, autosync.reference_grid: more runs).")

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_n_jobs(self.n_jobs)
        self.rules()
        if self.reference not in ("static", "broad"):
            raise UserError(f"--reference must be one of ['static', 'broad'], but got {self.reference!r}")

    def rules(self) -> tuple[str, ...]:
        """The static-k grid's learning-rate rules, checked."""
        from autosync.robustness import check_rules

        return check_rules(r.strip() for r in self.lr_rules.split(","))


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
        _check_ranges(self)
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

    storage: Optional[str] = option(None, "Study storage URL (default: sqlite:///results/autosync-studies.db).")


@dataclass(frozen=True, kw_only=True)
class RecommendOptions(CacheOptions):
    """`autosync recommend`: the storage of tuned jobs and the robustness reports it also reads."""

    grid: list[str] = option([], "A robustness report (its folder, written by `autosync robustness`) whose drawn "
                                 "jobs count as tuned neighbours too (repeatable).")


@dataclass(frozen=True, kw_only=True)
class RerunOptions:
    """`autosync rerun`: where a logged run is replayed."""

    device: str = option("cpu", "cpu | cuda: where to replay.")
