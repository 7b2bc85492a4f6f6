"""What one tune writes: its verification (with --verify-top) and, unless the cache answered, its study's
plots (`autosync tune`; a cached race's figure where the folder lacks it). `Tuned` is the outcome `autosync.api.tune` returns, a `TuneOutcome` that writes
itself (`.write(dir)`), declared here since the search below the reporting layer does not write files.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from autosync.catalog import label_of
from autosync.reporting.study_plots import RACE_FIGURE, write_study_plots
from autosync.reporting.tracking import Tracking, log_tune
from autosync.reporting.verification import write_verification
from autosync.search.outcome import TuneOutcome


@dataclass
class TuneFiles:
    """What `Tuned.write` wrote: the verification's files, the study's plots, and the plots it skipped (why)."""

    verification: list[Path] | None
    plots: list[Path]
    skipped: list[str]


class Tuned(TuneOutcome):
    """A search's outcome, or the cached one of a recurring job (`TuneOutcome`), with `.write(dir)`."""

    @classmethod
    def of(cls, outcome: TuneOutcome) -> "Tuned":
        """The same outcome, field for field, as one that writes itself."""
        return cls(**{f.name: getattr(outcome, f.name) for f in fields(TuneOutcome)})

    def write(self, directory: str | Path, command: str = "autosync.api.tune", mlflow: Any = None,
              job: Any = None, draw_cached: bool = True) -> TuneFiles:
        """Write the verification (with verify_top) and, unless the cache answered, the study's plots into
        `directory` (with `draw_cached`, a cached race's figure too, where `directory` lacks it: `autosync
        tune` asks for it with --out alone, so that a cache hit in the default folder stays one that loads
        neither matplotlib nor torch); `command`: the command line the verification's report records. With `mlflow` (a
        tracking URI, or an open `autosync.reporting.tracking.Tracking`) and `job` (the tuned `JobSpec`), also
        log the study, each trial and the answer there, the files as artifacts."""
        directory = Path(directory)
        verification = None
        if self.verification is not None:
            verification = write_verification(self.verification, directory, command, label_of)
        plots: list[Path] = []
        skipped: list[str] = []
        race = self.cache if isinstance(self.cache.get("race"), dict) else None
        if not self.cached:
            plots, skipped = write_study_plots(self.study, directory, race)
        elif draw_cached and race is not None and not (directory / RACE_FIGURE).exists():
            # a cached race drawn from its record alone, where this folder lacks it: another --out, or a tune
            # stopped while drawing it (its answer cached; `autosync tune --out DIR` draws it again)
            plots, skipped = write_study_plots(None, directory, race)
        if mlflow is not None:
            if job is None:
                raise TypeError("Tuned.write(..., mlflow=...) needs job=, the JobSpec that was tuned")
            log_tune(Tracking.of(mlflow), self, job, [*(verification or []), *plots])
        return TuneFiles(verification, plots, skipped)
