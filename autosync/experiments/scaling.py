"""How each policy's score changes with the number of workers, read from several leaderboards.

DANA's Fig. 4 and Table 2 plot final test accuracy against the worker count n for every asynchronous
algorithm; `autosync scaling` draws the same from leaderboards of one job at several n (each made with
`autosync leaderboard`), without training again.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autosync.catalog import POLICIES, checked_spec, policy_name
from autosync.core.errors import UserError
from autosync.core.loader import short_repr
from autosync.core.record_checks import is_whole
from autosync.experiments.leaderboard import LEADERBOARD_JSON


@dataclass
class ScalingPoint:
    """One policy's runs on one leaderboard: the metric of every seed."""

    n_workers: int
    values: list[float]

    @property
    def mean(self) -> float:
        return statistics.fmean(self.values)

    @property
    def std(self) -> float:
        return statistics.stdev(self.values) if len(self.values) > 1 else 0.0


@dataclass
class Scaling:
    """metric -> policy -> points ordered by n, and where each leaderboard came from."""

    metric: str
    points: dict[str, list[ScalingPoint]]
    sources: list[tuple[int, str, str]]  # (n, folder, the command that made it)

    @property
    def worker_counts(self) -> list[int]:
        return sorted({n for n, _, _ in self.sources})


def load_leaderboard(folder: Path) -> dict[str, Any]:
    """A leaderboard folder's JSON; a missing or damaged file is a UserError naming it."""
    path = folder / LEADERBOARD_JSON if folder.is_dir() else folder
    if not path.is_file():
        raise UserError(f"{path}: no leaderboard here (make one with `autosync leaderboard JOB.yaml`)")
    try:
        data = json.loads(path.read_text())
        n = data["job"]["cluster"]["n_workers"]
        if not is_whole(n) or n < 1:
            raise ValueError(f"job.cluster.n_workers must be a whole number >= 1, but got {short_repr(n)}")
        runs = data["runs"]
        command = str(data.get("command", ""))
        if not isinstance(runs, dict):
            raise TypeError("runs is not a mapping")
        for policy, kept in runs.items():  # each policy's runs, one object per seed, as the leaderboard wrote them
            if not isinstance(kept, list) or not kept or not all(isinstance(run, dict) for run in kept):
                raise TypeError(f"runs.{policy} must be a list of runs, but got {short_repr(kept)}")
        workload = {"dataset": data["job"]["workload"]["dataset"]["name"], "model": data["job"]["workload"]["model"],
                    "target metric": data["job"]["target"]["metric"]}  # (not where its files are read from)
        specs = {row["policy"]: row.get("spec") for row in data.get("rows", []) if isinstance(row, dict)}
    except (ValueError, KeyError, TypeError) as exc:
        raise UserError(f"{path}: not a leaderboard written by autosync ({type(exc).__name__}: {exc})") from None
    return {"n_workers": n, "runs": runs, "command": command, "path": str(path), "workload": workload,
            "specs": specs}


def series_name(label: str, spec: Any, n_workers: int) -> str:
    """The series a leaderboard row belongs to: its label, or, for a policy named bare whose parameters are
    sized to the job (`--policies backup`: k = 3n/4), one name for every n ("backup (k sized to n)"): it was
    backup(k=3) at n = 4 and backup(k=6) at n = 8, two series of one point each."""
    if not isinstance(spec, dict) or not isinstance(spec.get("policy"), str):
        return label
    try:
        sized = POLICIES[policy_name(spec["policy"])].sized_defaults(n_workers)
        bare = checked_spec(spec["policy"], n_workers)
    except UserError:  # a policy of another version's catalog: its label stands
        return label
    return f"{spec['policy']} ({', '.join(sized)} sized to n)" if sized and spec == bare else label


def collect(folders: list[Path], metric: str = "final_test_accuracy") -> Scaling:
    """Gather `metric` of every run, per policy and worker count, from leaderboard folders."""
    if not folders:
        raise UserError("scaling needs at least one leaderboard folder")
    points: dict[str, list[ScalingPoint]] = {}
    sources = []
    first = None
    for folder in folders:
        board = load_leaderboard(folder)
        first = first or board
        for what, value in board["workload"].items():  # one job at several n: its dataset, model and target's metric
            if value != first["workload"][what]:
                raise UserError(f"scaling: {board['path']} is of another job than {first['path']} (its {what} is "
                                f"{value!r}, not {first['workload'][what]!r}); give leaderboards of one job at "
                                "several worker counts")
        sources.append((board["n_workers"], str(folder), board["command"]))
        for policy, runs in board["runs"].items():
            values = [_finite(run.get(metric)) for run in runs]
            if any(v is None for v in values):
                raise UserError(f"{board['path']}: metric {metric!r} is missing or not a number for policy "
                                f"{policy!r} (try final_test_accuracy, final_train_loss or updates_per_virtual_second)")
            series = series_name(policy, board["specs"].get(policy), board["n_workers"])
            points.setdefault(series, []).append(ScalingPoint(board["n_workers"], values))
    counts = [n for n, _, _ in sources]
    if len(set(counts)) != len(counts):
        raise UserError(f"scaling: two leaderboards have the same worker count ({sorted(counts)}); give one per n")
    for series in points.values():
        series.sort(key=lambda p: p.n_workers)
    return Scaling(metric, points, sources)


def _finite(value: Any) -> float | None:
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None
