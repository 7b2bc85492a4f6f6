"""The table's files: cells by job, appended as they are computed, packed into bytes that builds agree on.

A table is a directory with one file per job fingerprint. Cells computed since the last pack are appended
to `<fingerprint>.jsonl` one line each, flushed as they come, so a build or a replay that is stopped keeps
every cell it finished and the next one goes on from there. `pack` merges them into
`<fingerprint>.cells.xz` (`autosync.table.packing`), sorted by key: two builds of the same cells give the
same bytes, whatever the order their cells finished in. A table packed before that format, into gzipped
JSON lines (`<fingerprint>.jsonl.gz`), is read as it is and packed again in the new one.
"""

from __future__ import annotations

import fcntl
import gzip
import json
import lzma
import os
from pathlib import Path
from typing import Any, BinaryIO

from autosync.core.errors import UserError
from autosync.table import packing
from autosync.table.cells import Cell

__all__ = ["GZIPPED", "OPEN", "PACKED", "Table"]

PACKED = ".cells.xz"
GZIPPED = ".jsonl.gz"  # the packed files of tables built before `PACKED`: read, and replaced by the next pack
OPEN = ".jsonl"
# the status of the proxy records that tables held for the search's proxy equivalence check, since removed
# (cells also carried a "proxy" key then, which reading ignores)
REMOVED_STATUS = "proxy"
_CHUNK = 1 << 16  # bytes read back at a time to find where a cut line starts (`_drop_cut_line`)
_HEAD = 1 << 12  # bytes of a packed file whose decompression yields its header (xz's first block: dozens)


class Table:
    """The cells under `directory`, read per job on first use and kept in memory."""

    def __init__(self, directory: str | os.PathLike[str], read_only: bool = False):
        """`read_only`: a cell it lacks is refused where it would be trained and stored (`fit --check`)."""
        self.directory = Path(directory)
        self.read_only = read_only
        if self.directory.exists() and not self.directory.is_dir():
            raise UserError(f"--table must be a directory, but {str(self.directory)!r} is a file")
        self._cells: dict[str, dict[str, Cell]] = {}  # fingerprint -> key -> cell

    def get(self, fingerprint: str, key: str) -> Cell | None:
        return self._job(fingerprint).get(key)

    def put(self, key: str, cell: Cell) -> None:
        """Keep `cell` under `key`, appended to its job's open file at once, under a lock on the file: several
        processes may fill one table (a cell two of them computed is kept once when read)."""
        cells = self._job(cell.fingerprint)
        if key in cells:
            return
        cells[key] = cell
        self.directory.mkdir(parents=True, exist_ok=True)
        line = (cell.to_json(key) + "\n").encode()
        with open(self.directory / f"{cell.fingerprint}{OPEN}", "a+b") as f:
            fcntl.flock(f, fcntl.LOCK_EX)  # the tune's --n-jobs processes append to one file: a line at a time
            try:
                _drop_cut_line(f)
                f.write(line)
                f.flush()
                os.fsync(f.fileno())
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    def cells(self, fingerprint: str) -> dict[str, Cell]:
        """The job's cells by key (a copy: the table keeps its own)."""
        return dict(self._job(fingerprint))

    def __len__(self) -> int:
        return sum(len(self._job(fp)) for fp in self.fingerprints())

    def fingerprints(self) -> list[str]:
        """The jobs the table holds cells of."""
        if not self.directory.is_dir():
            return []
        names = {p.name[: -len(suffix)] for suffix in (PACKED, GZIPPED, OPEN)
                 for p in self.directory.glob(f"*{suffix}")}
        return sorted(names | set(self._cells))

    def pack(self) -> list[Path]:
        """Merge every job's cells into its packed file (`autosync.table.packing`, sorted by key) and remove
        the open files; returns the packed files."""
        return [path for fingerprint in self.fingerprints() for path in self.pack_job(fingerprint)]

    def pack_job(self, fingerprint: str) -> list[Path]:
        """`pack` for one job: its packed file (none where the table holds no cell of it). A job whose cells
        are all in its packed file already, in the format `packing.pack` writes, is left as it is (packing
        takes seconds a job); one in an older format is packed again."""
        path = self.directory / f"{fingerprint}{PACKED}"
        if path.exists() and not any((self.directory / f"{fingerprint}{s}").exists() for s in (GZIPPED, OPEN)) \
                and packing.is_current(_head(path)):
            return [path]
        cells = self._job(fingerprint)
        if not cells:
            return []
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(packing.pack([cells[key].to_record(key) for key in sorted(cells)]))
        os.replace(tmp, path)
        self._drop(fingerprint, GZIPPED, OPEN)
        return [path]

    def replace_job(self, fingerprint: str, packed: Path) -> Path:
        """Make the packed file `packed` (of another table) this table's whole record of the job: moved here,
        this table's other files of the job removed. Returns where it now lies."""
        path = self.directory / f"{fingerprint}{PACKED}"
        os.replace(packed, path)
        self._drop(fingerprint, GZIPPED, OPEN)
        self._cells.pop(fingerprint, None)
        return path

    def _drop(self, fingerprint: str, *suffixes: str) -> None:
        for suffix in suffixes:
            (self.directory / f"{fingerprint}{suffix}").unlink(missing_ok=True)

    def _job(self, fingerprint: str) -> dict[str, Cell]:
        if fingerprint not in self._cells:
            self._cells[fingerprint] = self._read(fingerprint)
        return self._cells[fingerprint]

    def _read(self, fingerprint: str) -> dict[str, Cell]:
        """The job's cells from its packed file, then its open one (a line cut short by a kill is dropped:
        that cell is computed again)."""
        cells: dict[str, Cell] = {}
        for path, unit, records in self._packed_records(fingerprint) + self._open_records(fingerprint):
            for number, data in enumerate(records, 1):
                try:
                    if isinstance(data, Exception):
                        raise data
                    if data.get("status") == REMOVED_STATUS:
                        continue  # a proxy record: dropped (a pack leaves it out)
                    cells[data["key"]] = Cell.from_json(data)
                except (ValueError, KeyError, TypeError, AttributeError) as exc:
                    raise UserError(f"table file {path}, {unit} {number}, is damaged ({exc!r}): delete the file "
                                    "and build the table again") from None
        return cells

    def _packed_records(self, fingerprint: str) -> list[tuple[Path, str, list[Any]]]:
        """The records of the job's packed file, in `PACKED`'s format or else an older table's `GZIPPED`."""
        for suffix in (PACKED, GZIPPED):
            path = self.directory / f"{fingerprint}{suffix}"
            if not path.exists():
                continue
            try:
                if suffix == PACKED:
                    return [(path, "record", packing.unpack(path.read_bytes()))]
                lines = gzip.decompress(path.read_bytes()).decode().splitlines()
            except packing.NewerFormat as exc:  # not damaged: deleting it would lose its cells
                raise UserError(f"table file {path} is {exc}") from None
            except (OSError, EOFError, UnicodeDecodeError, ValueError, lzma.LZMAError) as exc:
                raise UserError(f"table file {path} is damaged ({exc}): delete it and build the table again")
            return [(path, "line", [_parsed(line) for line in lines])]
        return []

    def _open_records(self, fingerprint: str) -> list[tuple[Path, str, list[Any]]]:
        """The records of the job's open file; its last line is dropped where a kill cut it short."""
        path = self.directory / f"{fingerprint}{OPEN}"
        if not path.exists():
            return []
        records = [_parsed(line) for line in path.read_bytes().splitlines()]
        if records and isinstance(records[-1], ValueError):
            records.pop()  # the last line of an open file, cut short when its writer was killed
        return [(path, "line", records)]


def _head(path: Path) -> bytes:
    """The first bytes of the packed file at `path`: enough for `packing.is_current` to decompress its header
    (every job's file is looked at by each build's pack, so not the whole file)."""
    with open(path, "rb") as f:
        return f.read(_HEAD)


def _parsed(line: str | bytes) -> Any:
    """A JSON line's record, or the error reading it (raised where the record is used; bytes that are not
    UTF-8 are one too)."""
    try:
        return json.loads(line)
    except ValueError as exc:
        return exc


def _drop_cut_line(f: BinaryIO) -> None:
    """Cut off the last line of the open file `f` (opened to append and read, under its lock) where a writer
    killed mid-line left it without its newline: the reader drops that line as long as it is the last, and a
    line appended to it would make it a damaged line inside the file."""
    end = f.seek(0, os.SEEK_END)
    if end == 0:
        return
    f.seek(end - 1)
    if f.read(1) == b"\n":
        return
    stop = end
    while stop > 0:  # back to the newline before the cut line, a chunk at a time (a cell's line is a few KB)
        start = max(0, stop - _CHUNK)
        f.seek(start)
        newline = f.read(stop - start).rfind(b"\n")
        if newline >= 0:
            os.ftruncate(f.fileno(), start + newline + 1)
            return
        stop = start
    os.ftruncate(f.fileno(), 0)
