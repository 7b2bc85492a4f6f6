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

__all__ = ["appending", "budgeted_fingerprint", "cell_key", "read_records"]


def cell_key(fingerprint: str, policy: dict[str, Any], seed: int) -> str:
    """A run's key: the job's fingerprint, the policy (its keys sorted) and the seed."""
    return f"{fingerprint}|{json.dumps(policy, sort_keys=True)}|{seed}"


def budgeted_fingerprint(job: Any) -> str:
    """The fingerprint of a run's job with its budget: the job's fingerprint leaves the budget out (a tune's
    cache answers a recurring job whatever its budget), but a run trained to 20 s is not one of 3 s."""
    budget = json.dumps(job.budget.model_dump(mode="json"), sort_keys=True)
    return f"{job.fingerprint()}+{hashlib.sha256(budget.encode()).hexdigest()[:8]}"


def read_records(path: Path) -> dict[str, dict[str, Any]]:
    """The records in `path` by key (none where it does not exist); a line cut short by an interruption is
    skipped (its run runs again). A record whose time to the target is not a number >= 0 (or null: missed),
    which every score reads, is refused in one line naming the file, line and value (it was a traceback, or a
    negative time ranked first)."""
    records = {}
    if path.is_file():
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(record, dict) and isinstance(record.get("key"), str):
                _check_time(path, number, record.get("time_to_target"))
                records[record["key"]] = record
    return records


def _check_time(path: Path, line: int, value: Any) -> None:
    if value is None or (isinstance(value, (int, float)) and not isinstance(value, bool)
                         and math.isfinite(value) and value >= 0):
        return
    raise UserError(f"{path}: line {line}: time_to_target must be a number >= 0 or null (missed), but got "
                    f"{value!r}; delete the line and the same command runs that run again")


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
