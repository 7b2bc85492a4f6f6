"""A packed table file: its cells' records split into their shapes and their floats, compressed with xz.

Floats are most of a cell (the metric and the virtual time at each evaluation) and compress poorly as
decimal text. Packed as float64 bytes beside the records' JSON, each float replaced there by a marker, the
committed table takes about a third of the bytes of gzipped JSON lines (`benchmarks/bench_table.py`), so
that a table of every committed family's jobs fits in the repository. The same records give the same bytes:
the JSON with sorted keys, the floats little-endian, xz at a fixed preset (xz stores no timestamp).

Layout before compression: `MAGIC`, the shapes' length in bytes (8, little-endian), the shapes (one JSON line
per record), then the floats in the order the shapes hold their markers.
"""

from __future__ import annotations

import json
import lzma
from typing import Any

import numpy as np

MAGIC = b"autosync-table 2\n"
FLOAT = "\x01"  # a float's place in a shape; a string that starts with it is written with it doubled
_FLOATS = np.dtype("<f8")
_PRESET = 9 | lzma.PRESET_EXTREME  # packing is rare (the end of a build), reading is not: the smallest file


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
        raise ValueError("not a packed table file (no 'autosync-table 2' header)")
    start = len(MAGIC) + 8
    end = start + int.from_bytes(body[len(MAGIC):start], "little")
    if end > len(body) or (len(body) - end) % _FLOATS.itemsize:
        raise ValueError("a packed table file cut short")
    floats = np.frombuffer(body[end:], dtype=_FLOATS).tolist()
    values = iter(floats)
    records = [_filled(json.loads(line), values) for line in body[start:end].decode().splitlines()]
    if next(values, None) is not None:
        raise ValueError("a packed table file with more floats than its records hold")
    return records


def _shape(value: Any, floats: list[float]) -> Any:
    if isinstance(value, float):
        floats.append(value)
        return FLOAT
    if isinstance(value, str):
        return FLOAT + value if value.startswith(FLOAT) else value
    if isinstance(value, dict):  # in the order the shape is written (sorted keys): the order it is read in
        return {k: _shape(value[k], floats) for k in sorted(value)}
    if isinstance(value, list):
        return [_shape(v, floats) for v in value]
    return value


def _filled(shape: Any, values: Any) -> Any:
    if isinstance(shape, str):
        if shape == FLOAT:
            try:
                return next(values)
            except StopIteration:
                raise ValueError("a packed table file with fewer floats than its records hold") from None
        return shape[1:] if shape.startswith(FLOAT) else shape
    if isinstance(shape, dict):
        return {k: _filled(v, values) for k, v in shape.items()}
    if isinstance(shape, list):
        return [_filled(v, values) for v in shape]
    return shape
