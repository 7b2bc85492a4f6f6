"""The table's files: cells by job, appended as they are computed, packed into bytes that builds agree on.

A table is a directory with one file per job fingerprint. Cells computed since the last pack are appended
to `<fingerprint>.jsonl` one line each, flushed as they come, so a build or a replay that is stopped keeps
every cell it finished and the next one goes on from there. `pack` merges them into
`<fingerprint>.jsonl.gz`, sorted by key and gzipped without a timestamp: two builds of the same cells give
the same bytes, whatever the order their cells finished in.
"""

from __future__ import annotations

import fcntl
import gzip
import json
import os
from pathlib import Path

from autosync.core.errors import UserError
from autosync.table.cells import Cell

PACKED = ".jsonl.gz"
OPEN = ".jsonl"
# the status of the proxy records that tables held for the search's proxy equivalence check, since removed
# (cells also carried a "proxy" key then, which reading ignores)
REMOVED_STATUS = "proxy"


class Table:
    """The cells under `directory`, read per job on first use and kept in memory."""

    def __init__(self, directory: str | os.PathLike[str]):
        self.directory = Path(directory)
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
        with open(self.directory / f"{cell.fingerprint}{OPEN}", "ab") as f:
            fcntl.flock(f, fcntl.LOCK_EX)  # the tune's --n-jobs processes append to one file: a line at a time
            try:
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
        names = {p.name[: -len(PACKED)] for p in self.directory.glob(f"*{PACKED}")}
        names |= {p.name[: -len(OPEN)] for p in self.directory.glob(f"*{OPEN}")}
        return sorted(names | set(self._cells))

    def pack(self) -> list[Path]:
        """Merge every job's cells into its packed file (sorted by key, gzip without a timestamp) and remove
        the open files; returns the packed files."""
        return [path for fingerprint in self.fingerprints() for path in self.pack_job(fingerprint)]

    def pack_job(self, fingerprint: str) -> list[Path]:
        """`pack` for one job: its packed file (none where the table holds no cell of it)."""
        cells = self._job(fingerprint)
        if not cells:
            return []
        body = "".join(cells[key].to_json(key) + "\n" for key in sorted(cells)).encode()
        path = self.directory / f"{fingerprint}{PACKED}"
        tmp = path.with_suffix(".tmp")
        with open(tmp, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as f:
            f.write(body)
        os.replace(tmp, path)
        (self.directory / f"{fingerprint}{OPEN}").unlink(missing_ok=True)
        return [path]

    def replace_job(self, fingerprint: str, packed: Path) -> Path:
        """Make the packed file `packed` (of another table) this table's whole record of the job: moved here,
        this table's open file of the job removed. Returns where it now lies."""
        path = self.directory / f"{fingerprint}{PACKED}"
        os.replace(packed, path)
        (self.directory / f"{fingerprint}{OPEN}").unlink(missing_ok=True)
        self._cells.pop(fingerprint, None)
        return path

    def _job(self, fingerprint: str) -> dict[str, Cell]:
        if fingerprint not in self._cells:
            self._cells[fingerprint] = self._read(fingerprint)
        return self._cells[fingerprint]

    def _read(self, fingerprint: str) -> dict[str, Cell]:
        """The job's cells from its packed file, then its open one (a line cut short by a kill is dropped:
        that cell is computed again)."""
        cells: dict[str, Cell] = {}
        packed, open_ = (self.directory / f"{fingerprint}{s}" for s in (PACKED, OPEN))
        sources = []
        if packed.exists():
            try:
                sources.append((packed, gzip.decompress(packed.read_bytes()).decode().splitlines()))
            except (OSError, EOFError, UnicodeDecodeError) as exc:
                raise UserError(f"table file {packed} is damaged ({exc}): delete it and build the table again")
        if open_.exists():
            sources.append((open_, open_.read_text(encoding="utf-8").splitlines()))
        for path, lines in sources:
            for number, line in enumerate(lines, 1):
                try:
                    data = json.loads(line)
                    if data.get("status") == REMOVED_STATUS:
                        continue  # a proxy record: dropped (a pack leaves it out)
                    cells[data["key"]] = Cell.from_json(data)
                except (ValueError, KeyError, TypeError) as exc:
                    if path == open_ and number == len(lines):
                        continue  # the last line of an open file, cut short when its writer was killed
                    raise UserError(f"table file {path}, line {number}, is damaged ({exc!r}): delete the file "
                                    "and build the table again") from None
        return cells
