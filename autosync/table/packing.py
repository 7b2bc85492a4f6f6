"""A packed table file: its cells' records split into their shapes and their floats, compressed with xz.

Floats are most of a cell (the metric and the virtual time at each evaluation) and compress poorly as
decimal text. Packed as float64 bytes beside the records' JSON, each float written there as the constant
`NaN` (every float, NaN too, is in the floats), the committed table takes about a third of the bytes of
gzipped JSON lines (`benchmarks/bench_table.py`), so that a table of every committed family's jobs fits in
the repository; and it is read faster, the JSON parser filling each `NaN` from the floats as it meets it.
The floats are grouped by the field that holds them (every evaluation's time together, then every test
loss, ...), each float's field written as a small number beside them: xz finds more repeats in a column of
like values than in records' floats interleaved, and the committed table takes about 9% fewer bytes than
interleaved (format 3, which is still read; a pack writes format 4, or format 3 for records whose floats lie in
more fields than a field number counts). The same records give the same bytes:
the JSON with sorted keys, the fields numbered in the order they first appear, the floats little-endian and
in the order the JSON holds them within each field, xz at a fixed preset (xz stores no timestamp).

Layout before compression: `MAGIC`, the shapes' length in bytes (8, little-endian), the shapes (one JSON line
per record), then each float's field number (`_FIELDS`, in the order the JSON holds the floats), then the
floats grouped by field number. Format 3 (`MAGIC_3`) has the floats in the JSON's order and no field numbers.
"""

from __future__ import annotations

import json
import lzma
from typing import Any

import numpy as np

MAGIC = b"autosync-table 4\n"
MAGIC_3 = b"autosync-table 3\n"  # the floats not grouped by field: read, and written only past `_FIELDS`' count
_FAMILY = b"autosync-table "  # every format's header starts so, its number after it
_FLOATS = np.dtype("<f8")
_FIELDS = np.dtype("<u2")  # a float's field number: a record's floats lie in a few dozen fields
_PRESET = 9 | lzma.PRESET_EXTREME  # packing is rare (the end of a build), reading is not: the smallest file
_MARK = float("nan")  # written as the JSON constant NaN, which the parser hands to `parse_constant`


def pack(records: list[dict[str, Any]]) -> bytes:
    """The packed bytes of `records` (JSON-like: dicts, lists, strings, numbers, booleans, None), in order."""
    floats: list[float] = []
    fields: list[int] = []
    numbers: dict[str, int] = {}  # a float's field (its keys' path, list positions left out) -> its number
    shapes = "".join(json.dumps(_shape(r, floats, fields, numbers), sort_keys=True, separators=(",", ":")) + "\n"
                     for r in records).encode()
    head = len(shapes).to_bytes(8, "little") + shapes
    if len(numbers) > np.iinfo(_FIELDS).max + 1:  # more fields than a number counts: format 3, ungrouped
        body = MAGIC_3 + head + np.asarray(floats, dtype=_FLOATS).tobytes()
    else:
        field = np.asarray(fields, dtype=_FIELDS)
        grouped = np.asarray(floats, dtype=_FLOATS)[np.argsort(field, kind="stable")]
        body = MAGIC + head + field.tobytes() + grouped.tobytes()
    return lzma.compress(body, format=lzma.FORMAT_XZ, check=lzma.CHECK_CRC64, preset=_PRESET)


class NewerFormat(ValueError):
    """A packed file in a format this autosync does not know: written by a newer one, and not damaged."""


def is_current(data: bytes) -> bool:
    """Whether the packed bytes `data` are in the format `pack` writes (only their start is decompressed; a
    file of records in more fields than a field number counts is packed in format 3 again, which is harmless)."""
    try:
        start = lzma.LZMADecompressor(format=lzma.FORMAT_XZ).decompress(data, max_length=len(MAGIC))
    except lzma.LZMAError:
        return False
    return start == MAGIC


def unpack(data: bytes) -> list[dict[str, Any]]:
    """The records `pack` packed. Raises ValueError (or `lzma.LZMAError`) on bytes it did not write."""
    body = lzma.decompress(data, format=lzma.FORMAT_XZ)
    header = body[:body.find(b"\n") + 1] if body.startswith(_FAMILY) else b""
    if header not in (MAGIC, MAGIC_3):
        number = header[len(_FAMILY):].strip()
        if number.isdigit() and int(number) > int(MAGIC[len(_FAMILY):]):
            raise NewerFormat(f"packed in format {int(number)} by a newer autosync (this one reads formats 3 and "
                              f"{int(MAGIC[len(_FAMILY):])}): upgrade autosync to read it")
        raise ValueError(f"not a packed table file (no {MAGIC.decode().strip()!r} header)")
    grouped = header == MAGIC
    start = len(header) + 8
    end = start + int.from_bytes(body[len(header):start], "little")
    width = _FLOATS.itemsize + (_FIELDS.itemsize if grouped else 0)
    if end > len(body) or (len(body) - end) % width:
        raise ValueError("a packed table file cut short")
    count = (len(body) - end) // width
    if grouped:  # format 4: the floats grouped by field, put back in the JSON's order
        field = np.frombuffer(body[end:end + count * _FIELDS.itemsize], dtype=_FIELDS)
        floats = np.empty(count, dtype=_FLOATS)
        floats[np.argsort(field, kind="stable")] = np.frombuffer(body[end + count * _FIELDS.itemsize:], dtype=_FLOATS)
    else:
        floats = np.frombuffer(body[end:], dtype=_FLOATS)
    values = iter(floats.tolist())

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


def _shape(value: Any, floats: list[float], fields: list[int], numbers: dict[str, int], path: str = "") -> Any:
    """`value` with each float replaced by `_MARK` and appended to `floats`, in the order `json.dumps(...,
    sort_keys=True)` writes them, its field's number (`numbers`, by the keys' path to it, a new field numbered
    next) appended to `fields`."""
    if isinstance(value, float):
        floats.append(value)
        fields.append(numbers.setdefault(path, len(numbers)))
        return _MARK
    if isinstance(value, dict):
        return {k: _shape(value[k], floats, fields, numbers, f"{path}.{k}") for k in sorted(value)}
    if isinstance(value, list):
        return [_shape(v, floats, fields, numbers, f"{path}[]") for v in value]
    return value
