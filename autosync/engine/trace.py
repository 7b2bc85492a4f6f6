"""The record of one run: every update, every gradient arrival (discarded ones too), every evaluation."""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autosync.core import strict_json

UPDATE_COLUMNS = ("update", "time", "wall", "version", "k", "n_aggregated", "workers", "staleness",
                  "batch_sizes", "loss", "lr", "epoch")
ARRIVAL_COLUMNS = ("time", "worker", "task", "version", "batch_size", "accepted")
EVAL_COLUMNS = ("update", "time", "epoch", "train_loss", "test_loss", "test_accuracy")
_COLUMNS = {"updates": UPDATE_COLUMNS, "arrivals": ARRIVAL_COLUMNS, "evals": EVAL_COLUMNS}
TRACE_FILES = ("trace.json", *(f"{name}.csv" for name in _COLUMNS))  # what `Trace.write` writes


@dataclass
class Trace:
    """Column-oriented tables; `extras` holds per-update series a policy chooses to expose."""

    updates: list[tuple] = field(default_factory=list)
    arrivals: list[tuple] = field(default_factory=list)
    evals: list[tuple] = field(default_factory=list)
    extras: dict[str, list[Any]] = field(default_factory=dict)

    def column(self, table: str, name: str) -> list[Any]:
        i = _COLUMNS[table].index(name)
        return [row[i] for row in getattr(self, table)]

    def records(self, table: str) -> list[dict[str, Any]]:
        """The rows of one table as dicts keyed by column name."""
        return [dict(zip(_COLUMNS[table], r)) for r in getattr(self, table)]

    def to_dict(self) -> dict[str, Any]:
        return {**{table: self.records(table) for table in _COLUMNS}, "extras": self.extras}

    def write(self, directory: Path) -> list[Path]:
        """Write trace.json and one CSV per table into `directory`; returns the paths."""
        directory.mkdir(parents=True, exist_ok=True)
        paths = [directory / TRACE_FILES[0]]
        paths[0].write_text(strict_json.dumps(self.to_dict(), default=_jsonable))
        for name, columns in _COLUMNS.items():
            path = directory / f"{name}.csv"
            with path.open("w", newline="") as fh:
                writer = csv.writer(fh)
                writer.writerow(columns)
                for row in getattr(self, name):
                    writer.writerow([" ".join(map(str, v)) if isinstance(v, (list, tuple)) else v for v in row])
            paths.append(path)
        return paths


def _jsonable(value: Any) -> Any:
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"cannot write {type(value).__name__} to JSON")
