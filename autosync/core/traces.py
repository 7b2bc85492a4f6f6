"""Reading a round-trip trace CSV (`cluster.round_trip: {kind: trace}`): one positive time per row.

Its own module with no heavy import, so `validate` and every command check a trace when the job is loaded,
before any training, with the same reader the cluster model uses later.
"""

from __future__ import annotations

import csv
import math
from functools import lru_cache


class TraceProblem(ValueError):
    """A trace that cannot serve as round-trip times; the message says where and why, without the path."""


@lru_cache(maxsize=16)
def read_trace(path: str, column: str | None) -> tuple[float, ...]:
    """The trace's values: the column named `column` (under a header row), else the first column (a first
    row that is not a number is a header). Every value must be a positive finite number."""
    try:
        with open(path, newline="") as fh:
            rows = list(csv.reader(fh))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise TraceProblem(f"cannot be read as a CSV file ({getattr(exc, 'strerror', None) or exc})") from None
    if not rows:
        raise TraceProblem("the round-trip trace is empty")
    start, index = 0, 0
    header = rows[0]
    if column is not None:
        if column not in header:
            raise TraceProblem(f"cluster.round_trip.column must name a header of the trace, "
                               f"but got {column!r} (headers: {header})")
        index, start = header.index(column), 1
    else:
        try:
            float(header[0] if header else "")
        except ValueError:
            start = 1
    values: list[float] = []
    for line_no, row in enumerate(rows[start:], start=start + 1):
        if len(row) <= index or not row[index].strip():
            continue
        try:
            v = float(row[index])
        except ValueError:
            raise TraceProblem(f"line {line_no} must hold a number, but got {row[index]!r}") from None
        if not math.isfinite(v) or v <= 0:
            raise TraceProblem(f"line {line_no} must be a positive time, but got {v}")
        values.append(v)
    if not values:
        raise TraceProblem("the round-trip trace holds no values")
    return tuple(values)
