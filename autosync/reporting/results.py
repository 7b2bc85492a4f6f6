"""What the API's experiment and measurement functions return (`autosync.api`: `leaderboard`, `profile`,
`family`, `robustness`, `replay`, `scaling`): each result holds the data the command line prints and writes
its own files (`.write`). The results of `run`, `tune` and `calibrate` extend the engine's and the search's
own records and live beside their files (`reporting.runs.Run`, `reporting.tune_files.Tuned`,
`reporting.calibration_files.Calibrated`); `write_run`, `write_tune` and `write_calibration` write a record the
engine or the search returned directly, and `tune_dir` is where `autosync tune` writes.

Importing this module loads numpy and the policies (as `autosync.api`, its one importer, does), not torch
or optuna: a result whose renderer needs them imports it when it writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autosync.core.job import JobSpec
from autosync.engine.backends import BackendChoice
from autosync.reporting.calibration_files import Calibrated
from autosync.reporting.leaderboard_files import write_leaderboard
from autosync.reporting.output import ready_output_dir
from autosync.reporting.robustness_files import write_robustness
from autosync.reporting.scaling_files import table_rows, write as write_scaling
from autosync.reporting.tracking import Tracking, log_leaderboard
from autosync.search.tune_options import DEFAULT_TUNE_SPACE
from autosync.measure.profile import batch_summary
from autosync.reporting.profile_files import write_profile
from autosync.reporting.tune_files import Tuned

if TYPE_CHECKING:
    from autosync.measure.calibration import Calibration
    from autosync.engine import RunResult
    from autosync.experiments.leaderboard import Entry
    from autosync.reporting.tune_files import TuneFiles
    from autosync.search.outcome import TuneOutcome


@dataclass
class Leaderboard:
    """Policies x seeds on one job: scored rows (best time-to-target first) and every run behind them."""

    job: JobSpec
    seeds: list[int]
    rows: list[dict[str, Any]]
    entries: list["Entry"]

    def write(self, directory: str | Path, command: str = "autosync.api.leaderboard", mlflow: Any = None) -> list[Path]:
        """Write leaderboard.md, .csv, .json and the plots into `directory`; returns the paths. With `mlflow`
        (a tracking URI, or an open `autosync.reporting.tracking.Tracking`), also log every row and run
        there, the best row tagged, the files as artifacts."""
        paths = write_leaderboard(self.rows, self.entries, self.job.model_dump(mode="json"),
                                  ready_output_dir(Path(directory), "directory"), command)
        if mlflow is not None:
            log_leaderboard(Tracking.of(mlflow), self, paths)
        return paths


@dataclass
class Profile:
    """A job's workers timed on this machine, and the cluster model fitted to them."""

    job: JobSpec
    samples: list[Any]  # one autosync.measure.profile.Sample per (batch size, round, worker)
    server: Any  # autosync.measure.profile.ServerCosts: the server's update and parameter copy
    cluster: dict[str, Any]  # the fitted cluster section of a job file
    workers: str  # what computed: "2 worker processes", "3 ranks"

    def write(self, directory: str | Path) -> list[Path]:
        """Write the samples, the fit and a job file with the fitted cluster (the last path) into `directory`."""
        return write_profile(self.job, self.samples, self.cluster, Path(directory))

    def rows(self) -> list[tuple[int, float, float, float]]:
        """Per batch size: mean compute, mean and p90 round trip (seconds)."""
        return batch_summary(self.samples)


@dataclass
class DrawnJobs:
    """Jobs drawn from a family and written as job files: each file with the facts `autosync family`
    tabulates (n, round trips, slow workers, workload, momentum, fingerprint)."""

    family: str
    directory: Path
    written: list[tuple[Path, dict[str, Any]]]


@dataclass
class Robustness:
    """Online policies against each drawn job's exhaustive best static k (`autosync.experiments.robustness.report`)."""

    family: str
    jobs: list[JobSpec]
    seeds: list[int]
    rules: tuple[str, ...]
    result: dict[str, Any]  # per job and summary rows, as robustness.json holds them
    directory: Path
    reused: int  # finished runs read back from cells.jsonl rather than trained

    def write(self, command: str = "autosync.api.robustness") -> list[Path]:
        """Write robustness.md, .json and the regret figure into the report's directory; returns the paths."""
        return write_robustness(self.result, self.directory, command, self.family)


@dataclass
class Replay:
    """Sync-Switch's Table II on recorded runs: each search strategy's cost and success per setting."""

    logs: Any  # autosync.search.switch_log_replay.SwitchLogs
    optimum: float  # the switch point binary search picks with full information
    rows: list[Any]  # autosync.search.switch_log_replay.SimulationSummary, one per (strategy, setting)
    threshold: float

    def write(self, directory: str | Path, command: str = "autosync.api.replay") -> list[Path]:
        """Write table.md and table.json into `directory`; returns the paths."""
        from autosync.reporting.switch_log_replay_files import write_replay_table  # not at the top: optuna

        return write_replay_table(self.logs, self.optimum, self.rows, ready_output_dir(Path(directory)), command,
                                  self.threshold)


@dataclass
class ScalingTable:
    """A metric against the number of workers per policy (`autosync.experiments.scaling.Scaling`: points per policy,
    the leaderboards it came from)."""

    scaling: Any

    @property
    def worker_counts(self) -> list[int]:
        return self.scaling.worker_counts

    def rows(self) -> list[tuple[str, list[str]]]:
        """(policy, 'mean ± std' per worker count, '-' where it was not run), as `autosync scaling` prints."""
        return table_rows(self.scaling)

    def write(self, directory: str | Path, command: str = "autosync.api.scaling") -> list[Path]:
        """Write scaling.md, scaling.json and scaling.png into `directory`; returns the paths."""
        return write_scaling(self.scaling, ready_output_dir(Path(directory)), command)


def write_run(result: "RunResult", job: JobSpec, directory: str | Path, options: Any = None,
              plot: bool = False, mlflow: Any = None) -> list[Path]:
    """Write a run's summary.json (job, policy, metrics, how it ran: `options`, the `RunOptions` it ran with,
    default the simulator), trace tables, final parameters and, with `plot`, plot.png into `directory`;
    returns the paths: `Run.write` (what `autosync.api.run` returns has it), for a result the engine returned.
    With `mlflow` (a tracking URI), also log the run there."""
    from autosync.reporting.runs import Run  # not at the top: torch

    execution = (options.choice() if options is not None else BackendChoice()).describe()
    return Run.of(result, job, execution).write(directory, plot, mlflow)


def tune_dir(outcome: "TuneOutcome", job: JobSpec, options: Any = None) -> Path:
    """Where `autosync tune` writes a study's plots and verification: results/tune/<job>-<space> (the space
    the cache record names, else that of `options`, the `TuneOptions`, else the default space)."""
    space = outcome.cache.get("space") or Path(str(options.space if options is not None else DEFAULT_TUNE_SPACE)).stem
    return Path("results") / "tune" / f"{job.name}-{space}"


def write_tune(outcome: "TuneOutcome", directory: str | Path, command: str = "autosync.api.tune",
               mlflow: Any = None, job: JobSpec | None = None) -> "TuneFiles":
    """Write a search's verification (with verify_top) and, unless the cache answered, its study's plots (a
    cached race's figure where `directory` lacks it):
    `Tuned.write` (what `autosync.api.tune` returns has it), for an outcome the search returned. With `mlflow`
    (a tracking URI) and `job`, also log the study, its trials and the answer there."""
    return Tuned.of(outcome).write(directory, command, mlflow, job)


def write_calibration(calibration: "Calibration", job: JobSpec, job_file: str | Path) -> list[Path]:
    """Write `job` (the calibrated one) as `job_file`, its calibration as a comment on top, and
    calibration.json beside it; returns the two paths (the job file last): `Calibrated.write` (what
    `autosync.api.calibrate` returns has it)."""
    return Calibrated(calibration, job).write(job_file)
