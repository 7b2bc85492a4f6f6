"""Finished runs kept one JSON line each, keyed by job, policy and seed, so that an interrupted or extended
report (a robustness grid's `cells.jsonl`, a leaderboard's `runs.jsonl`) runs again only what it lacks."""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
from pathlib import Path
from typing import Any, Callable, Iterator

from autosync.core import strict_json
from autosync.core.errors import UserError
from autosync.core.loader import short_repr
from autosync.core.record_checks import is_number, is_whole

__all__ = ["appending", "budgeted_fingerprint", "cell_key", "read_records"]


def cell_key(fingerprint: str, policy: dict[str, Any], seed: int) -> str:
    """A run's key: the job's fingerprint, the policy (its keys sorted) and the seed."""
    return f"{fingerprint}|{json.dumps(policy, sort_keys=True)}|{seed}"


def budgeted_fingerprint(job: Any) -> str:
    """The fingerprint of a run's job with its budget: the job's fingerprint leaves the budget out (a tune's
    cache answers a recurring job whatever its budget), but a run trained to 20 s is not one of 3 s."""
    budget = json.dumps(job.budget.model_dump(mode="json"), sort_keys=True)
    return f"{job.fingerprint()}+{hashlib.sha256(budget.encode()).hexdigest()[:8]}"


# a run's fields that are text ("error": why a robustness or reference-grid cell's run failed, kept as a miss)
TEXT_FIELDS = ("key", "job", "fingerprint", "status", "target_metric", "error")
SERIES_FIELDS = ("curve", "k")  # {name: [number, ...]}: a leaderboard run's curves, for its plots


def read_records(path: Path, run_in: str | None = None) -> dict[str, dict[str, Any]]:
    """The records in `path` by key (none where it does not exist); a line cut short by an interruption is
    skipped (its run runs again). Each record's run (the record, or its field `run_in`: a leaderboard keeps
    the run under "run") is checked as every score and plot reads it (`_run_problem`): a damaged one is
    refused in one line naming the file, line and field (it was a traceback, or a negative time ranked first)."""
    records = {}
    if path.is_file():
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(record, dict) and isinstance(record.get("key"), str):
                problem = _run_problem(record.get(run_in) if run_in else record, run_in)
                if problem:
                    raise UserError(f"{path}: line {number}: {problem}; delete the line and the same command runs "
                                    "that run again")
                records[record["key"]] = record
    return records


def _run_problem(run: Any, name: str | None) -> str | None:
    """What is wrong with a kept run, as its readers take it, or None: an object with its seed (a whole
    number >= 0) and time to the target (a number >= 0, or null: missed), text where a run has text, and
    every other plain field a number or null."""
    where = f"{name}." if name else ""
    if not isinstance(run, dict):
        return f"{name or 'a record'} must be an object, but got {short_repr(run)}"
    for field in ("seed", "time_to_target"):
        if field not in run and not (field == "time_to_target" and "error" in run):  # a failed reference-grid
            return f"{where}{field} is missing"  # run kept no time before 2026-12-06: read as a miss
    seed, time = run["seed"], run.get("time_to_target")
    if not is_whole(seed) or seed < 0:
        return f"{where}seed must be a whole number >= 0, but got {short_repr(seed)}"
    if time is not None and not (is_number(time) and math.isfinite(time) and time >= 0):
        return f"{where}time_to_target must be a number >= 0 or null (missed), but got {short_repr(time)}"
    for field, value in run.items():
        if field in TEXT_FIELDS:
            if not isinstance(value, str):
                return f"{where}{field} must be text, but got {short_repr(value)}"
        elif field in SERIES_FIELDS:
            if not (isinstance(value, dict) and all(isinstance(v, list) and all(x is None or is_number(x) for x in v)
                                                    for v in value.values())):
                return f"{where}{field} must map names to lists of numbers, but got {short_repr(value)}"
        elif value is not None and not isinstance(value, (dict, bool)) and not is_number(value):
            return f"{where}{field} must be a number or null, but got {short_repr(value)}"
    return None


@contextlib.contextmanager
def appending(path: Path | None) -> Iterator[Callable[[dict[str, Any]], None]]:
    """Within: a function that appends a record to `path` as one line, flushed at once (strict JSON: a
    number that is not finite is null); with no `path`, one that keeps nothing. A last line cut short by an
    interruption is ended first, so the records after it stand on lines of their own."""
    if path is None:
        yield lambda record: None
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a+b") as fh:  # every write goes to the end, whatever was read before it
        size = fh.seek(0, 2)
        if size:
            fh.seek(size - 1)
            if fh.read(1) != b"\n":
                fh.write(b"\n")

        def keep(record: dict[str, Any]) -> None:
            fh.write((strict_json.dumps(record) + "\n").encode())
            fh.flush()

        yield keep
