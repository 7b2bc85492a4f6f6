"""One run's files: summary.json, the trace tables, the final parameters (and buffers) and its plot.
`Run` is the run `autosync.api.run` returns, a `RunResult` that writes itself (`.write(dir)`), declared
here since the engine below the reporting layer writes no files."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from autosync.core import strict_json
from autosync.engine import RunResult
from autosync.engine.trace import TRACE_FILES
from autosync.measure.rerun import BUFFERS_FILE, PARAMS_FILE, SUMMARY_FILE
from autosync.reporting.output import ready_output_dir
from autosync.reporting.tracking import Tracking, log_run

PLOT_FILE = "plot.png"  # --plot's figure, beside the run's files
RUN_FILES = (*TRACE_FILES, SUMMARY_FILE, PARAMS_FILE, BUFFERS_FILE, PLOT_FILE)  # what `Run.write` writes


@dataclass
class Run(RunResult):
    """One run with what its files record beside its result: the job and how it ran."""

    job_dump: dict[str, Any] = field(default_factory=dict, repr=False)  # the job's fields, for summary.json
    execution: dict[str, Any] | None = None  # how it ran (`BackendChoice.describe`; None: the simulator)
    job_file: str | None = None  # the job file beside the user's code a job names, where `rerun` imports it

    @classmethod
    def of(cls, result: RunResult, job: Any, execution: dict[str, Any] | None) -> "Run":
        """`result`, field for field, with the job (a `JobSpec`) and the execution its files record."""
        source = Path(job.source)
        job_file = str(source.resolve()) if job.uses_user_code and source.is_file() else None
        return cls(**{f.name: getattr(result, f.name) for f in fields(RunResult)},
                   job_dump=job.model_dump(mode="json"), execution=execution, job_file=job_file)

    def write(self, directory: str | Path, plot: bool = False, mlflow: Any = None) -> list[Path]:
        """Write summary.json, the trace tables, the final parameters and, with `plot`, plot.png into
        `directory`; returns the paths. With `mlflow` (a tracking URI, or an open
        `autosync.reporting.tracking.Tracking`), also log the run there with its summary and plot."""
        directory = ready_output_dir(Path(directory), "directory")  # a file there: one line, not an OSError
        paths = write_run(self, directory, self.job_dump, self.execution, self.job_file)
        if plot:
            paths.append(plot_run(self, directory / PLOT_FILE))
        else:  # an earlier run's plot left beside this run's files would be taken for this run's
            (directory / PLOT_FILE).unlink(missing_ok=True)
        if mlflow is not None:
            log_run(Tracking.of(mlflow), self, paths, backend=(self.execution or {}).get("backend", "simulator"))
        return paths


def write_run(result: "RunResult", directory: Path, job_dump: dict[str, Any],
              execution: dict[str, Any] | None = None, job_file: str | None = None) -> list[Path]:
    """Write summary.json (job, policy, metrics, how it ran), the trace tables and the final parameters.

    With these `autosync rerun` can repeat the run: the trace's arrival table is its complete log.
    """
    import torch

    paths = result.trace.write(directory)
    summary = directory / SUMMARY_FILE
    summary.write_text(strict_json.dumps({**result.summary(), "execution": execution or {"backend": "simulator"},
                                   "job_spec": job_dump, **({"job_file": job_file} if job_file else {})},
                                  indent=2, default=float))
    params = directory / PARAMS_FILE
    torch.save(result.final_params.detach().cpu(), params)
    written = [summary, *paths, params]
    buffers = directory / BUFFERS_FILE
    if result.final_buffers is not None:
        torch.save(result.final_buffers.detach().cpu(), buffers)
        written.append(buffers)
    else:  # an earlier run's in the same folder would be read back by `rerun` as this run's
        buffers.unlink(missing_ok=True)
    return written


def plot_run(result: "RunResult", path: Path) -> Path:
    """Loss (training estimate and evaluations) against virtual time, with k_t on a second axis."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    trace = result.trace
    fig, ax = plt.subplots(figsize=(8, 4.5))
    times, losses = trace.column("updates", "time"), trace.column("updates", "loss")
    ax.plot(times, losses, color="tab:blue", alpha=0.35, lw=0.8, label="mini-batch loss (server estimate)")
    ax.plot(trace.column("evals", "time"), trace.column("evals", "train_loss"), color="tab:blue", lw=2,
            label="training loss (evaluated)")
    ax.set_xlabel("virtual time (s)")
    ax.set_ylabel("loss")
    ax.set_yscale("log")
    ks = trace.column("updates", "n_aggregated")
    if ks:
        ax2 = ax.twinx()
        # each update's k over the time it took, which ends at it (the first from time 0)
        ax2.step([0.0, *times], [*ks[:1], *ks], where="pre", color="tab:orange", lw=1,
                 label="gradients per update (k_t)")
        ax2.set_ylabel("k_t")
        ax2.set_ylim(0, max(ks) + 1)
        ax2.legend(loc="upper right", fontsize=8)
    m = result.metrics
    ttt = m["time_to_target"]
    if ttt is not None:
        ax.axvline(ttt, color="tab:green", ls="--", lw=1)
    title = (f"{result.job_name}: {result.policy['policy']} {result.policy['params'] or ''} seed {result.seed}"
             f" - time to {m['target_metric']} target: {'%.1f s' % ttt if ttt is not None else 'not reached'}")
    ax.set_title(title, fontsize=9)
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
