"""What the command line says when the machine runs out of something: disk, a writable folder, memory.

Such a failure reaches the command line from deep inside a library (SQLite's "disk I/O error" under
Optuna's commit, torch's allocator, the loader mapping torch's shared library), often wrapped in the
errors the library raises on the way up (an Optuna storage error, and Optuna's own assertion after it). It
is found by walking the chain of causes, and told in one line: what ran out, where, and that what had
finished is kept. Everything a command writes is written as it finishes (a study's trials and runs, a
table's cells, a report's cells.jsonl), and SQLite rolls back a commit that could not be written, so the
same command resumes once the disk, the folder or the memory is there again.
"""

from __future__ import annotations

import errno
from typing import Iterator

NO_SPACE = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)  # the disk is full, a file-size limit, a quota
READ_ONLY = (errno.EROFS, errno.EACCES, errno.EPERM)
# SQLite's own words (sqlite3.OperationalError, also inside SQLAlchemy's and Optuna's errors); it does not
# say which failure its "disk I/O error" was (a full disk, a file-size limit, a folder made read-only)
SQLITE_NO_SPACE = "database or disk is full"
SQLITE_IO = "disk i/o error"
SQLITE_READ_ONLY = ("attempt to write a readonly database", "unable to open database file")
ALLOCATOR = ("can't allocate memory", "defaultcpuallocator", "out of memory")  # torch's CPU and CUDA allocators
MAPPING = "failed to map segment from shared object"  # a library loaded under an address-space limit

KEPT = ("what had finished is kept (trials and runs in the study storage, cells on disk): the same command "
        "resumes from there")


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """`exc` and every error it was raised from or while handling, each once."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]


def resource_failure(exc: BaseException) -> str | None:
    """One line naming what ran out and that finished work is kept, where `exc` (or an error it came from)
    is the machine running out of disk, of a writable folder or of memory; None for any other error."""
    for e in _chain(exc):
        text = str(e).lower()
        where = f" {e.filename}" if isinstance(e, OSError) and e.filename else ""
        if isinstance(e, MemoryError) or any(a in text for a in ALLOCATOR) or MAPPING in text:
            return f"out of memory (a memory limit, ulimit -v or the machine's): {_first_line(e)}; {KEPT} " \
                   "with more memory"
        if isinstance(e, OSError) and e.errno in NO_SPACE or SQLITE_NO_SPACE in text:
            return f"no space left to write{where or ' the study storage'} (the disk is full or a file-size limit " \
                   f"was reached: {_first_line(e)}); {KEPT} once there is space"
        if isinstance(e, OSError) and e.errno in READ_ONLY or any(s in text for s in SQLITE_READ_ONLY):
            return f"cannot write{where or ' the study storage'}: a read-only file system, or no permission " \
                   f"({_first_line(e)}); {KEPT} once it is writable, or with --storage and --out elsewhere"
        if SQLITE_IO in text:
            return "could not write the study storage (SQLite's disk I/O error: the disk is full, a file-size " \
                   f"limit was reached or its folder turned read-only); {KEPT} once it can be written"
    return None


# SQLite's words for a database file whose pages are damaged (a disk fault, a copy cut short, bytes overwritten)
SQLITE_DAMAGED = ("database disk image is malformed", "file is not a database")


def unusable_input(exc: BaseException) -> str | None:
    """One line saying the study storage is damaged where `exc` (or an error it came from) is SQLite finding
    its file's pages damaged past its first (which opening the storage checks: `study.storage`), or that an
    output file cannot be written where a folder has its name; None for any other error. Both are bad input,
    as a corrupt cache record is."""
    for e in _chain(exc):
        if isinstance(e, IsADirectoryError) and e.filename:  # an output file's name taken by a folder in --out
            return f"cannot write {e.filename}: a folder of that name is in the way; move it, or pass another --out"
        if any(s in str(e).lower() for s in SQLITE_DAMAGED):
            return f"the study storage is damaged ({_first_line(e)}): its studies cannot be read; restore a copy, " \
                   "or delete it (or name another with --storage) and tune again"
    return None


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__
