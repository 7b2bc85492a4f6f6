"""A packed table file: its cells' records split into their shapes and their floats, compressed with xz.

Floats are most of a cell (the metric and the virtual time at each evaluation) and compress poorly as
decimal text. Packed as float64 bytes beside the records' JSON, each float written there as the constant
`NaN` (every float, NaN too, is in the floats), the committed table takes about a third of the bytes of
gzipped JSON lines (`benchmarks/bench_table.py`), so that a table of every committed family's jobs fits in
the repository; and it is read faster, the JSON parser filling each `NaN` from the floats as it meets it.
The same records give the same bytes: the JSON with sorted keys, the floats little-endian in the order the
JSON holds them, xz at a fixed preset (xz stores no timestamp).

Layout before compression: `MAGIC`, the shapes' length in bytes (8, little-endian), the shapes (one JSON line
per record), then the floats.
"""

from __future__ import annotations

import json
import lzma
from typing import Any

import numpy as np

MAGIC = b"autosync-table 3\n"
_FLOATS = np.dtype("<f8")
_PRESET = 9 | lzma.PRESET_EXTREME  # packing is rare (the end of a build), reading is not: the smallest file
_MARK = float("nan")  # written as the JSON constant NaN, which the parser hands to `parse_constant`


def pack(records: list[dict[str, Any]]) -> bytes:
    """The packed bytes of `records` (JSON-like: dicts, lists, strings, numbers, booleans, None), in order."""
    floats: list[float] = []
    shapes = "".join(json.dumps(_shape(r, floats), sort_keys=True, separators=(",", ":")) + "\n"
                     for r in records).encode()
    body = MAGIC + len(shapes).to_bytes(8, "little") + shapes + np.asarray(floats, dtype=_FLOATS).tobytes()
    return lzma.compress(body, format=lzma.FORMAT_XZ, check=lzma.CHECK_CRC64, preset=_PRESET)


def unpack(data: bytes) -> list[dict[str, Any]]:
    """The records `pack` packed. Raises ValueError (or `lzma.LZMAError`) on bytes it did not write."""
    body = lzma.decompress(data, format=lzma.FORMAT_XZ)
    if not body.startswith(MAGIC):
        raise ValueError(f"not a packed table file (no {MAGIC.decode().strip()!r} header)")
    start = len(MAGIC) + 8
    end = start + int.from_bytes(body[len(MAGIC):start], "little")
    if end > len(body) or (len(body) - end) % _FLOATS.itemsize:
        raise ValueError("a packed table file cut short")
    values = iter(np.frombuffer(body[end:], dtype=_FLOATS).tolist())

    def fill(_constant: str) -> float:
        try:
            return next(values)
        except StopIteration:
            raise ValueError("a packed table file with fewer floats than its records hold") from None

    decoder = json.JSONDecoder(parse_constant=fill)
    records = [decoder.decode(line) for line in body[start:end].decode().splitlines()]
    if next(values, None) is not None:
        raise ValueError("a packed table file with more floats than its records hold")
    return records


def _shape(value: Any, floats: list[float]) -> Any:
    """`value` with each float replaced by `_MARK` and appended to `floats`, in the order `json.dumps(...,
    sort_keys=True)` writes them."""
    if isinstance(value, float):
        floats.append(value)
        return _MARK
    if isinstance(value, dict):
        return {k: _shape(value[k], floats) for k in sorted(value)}
    if isinstance(value, list):
        return [_shape(v, floats) for v in value]
    return value
