"""A benchmark's figures as records, for the one table in benchmarks/README.md (`make_table.py`).

Each benchmark prints its own lines and, with `--json FILE`, also writes what it measured as records:
the figure, its value and unit, the baseline it is compared with (measured in the same run) and the
ratio, and the goal it is held to with whether it was met.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path


@dataclass
class Figure:
    what: str
    value: float
    unit: str
    against: str | None = None  # the baseline, measured in the same run
    ratio: float | None = None
    goal: str | None = None
    met: bool | None = None


@dataclass
class Figures:
    """The records of one benchmark run."""

    benchmark: str
    figures: list[Figure] = field(default_factory=list)

    def add(self, what: str, value: float, unit: str, against: str | None = None, ratio: float | None = None,
            goal: str | None = None, met: bool | None = None) -> None:
        self.figures.append(Figure(what, float(value), unit, against,
                                   None if ratio is None else float(ratio), goal, met))

    def write(self, path: str | None) -> None:
        """Write the records as JSON to `path` (nothing when None: the benchmark was run by hand)."""
        if path is not None:
            Path(path).write_text(json.dumps({"benchmark": self.benchmark,
                                              "figures": [asdict(f) for f in self.figures]}, indent=1))
