"""The study storage: opening it (its schema created once however many processes start together), and
URLs printed without their password.

Storage is an SQLite file by default, or any SQLAlchemy URL (PostgreSQL) that several processes or
machines share. Opening it holds the storage lock (`autosync.search.study.locking`) while Optuna creates the
schema; where no lock reaches the other processes, a lost race is retried.
"""

from __future__ import annotations

import contextlib
import gc
import os
import time
import warnings
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from autosync.core.errors import UserError
from autosync.search.study.interrupts import guarded
from autosync.search.study.locking import sqlite_path, storage_lock
from autosync.search.study.outage import is_server, waiting
from autosync.search.study.urls import redact, redact_url  # where the commands import them from

if TYPE_CHECKING:
    import sqlite3

    import optuna

__all__ = ["DEFAULT_STORAGE", "end_without_collection", "existing_storage", "named_storage", "open_storage",
           "quiet_optuna", "read_only"]

DEFAULT_STORAGE = "sqlite:///results/autosync-studies.db"
HEARTBEAT_SECONDS = int(os.environ.get("AUTOSYNC_HEARTBEAT_SECONDS", "30"))  # a killed trial is retried after 2x
# Optuna's own stale check (inside study.optimize) waits longer than autosync's (two intervals), so a dead
# trial is always failed by autosync first, with its reason (autosync.search.study.trials.fail_dead_trials).
OPTUNA_GRACE_INTERVALS = 10
_SCHEMA_RETRIES = 5  # for storages without a cross-process lock: a lost schema-creation race is retried
_OPENED: "weakref.WeakSet[Any]" = weakref.WeakSet()  # the RDB storages this process opened (`close_storages`)


def quiet_optuna() -> None:
    """Optuna logs only errors and no experimental-feature warnings: autosync reports trials itself."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)


SQLITE_HEADER = b"SQLite format 3\x00"  # the first 16 bytes of every SQLite database file
STUDY_TABLES = ("studies", "trials", "version_info")  # what Optuna's schema holds, whatever its version


def named_storage(url: str | None, default: str) -> str:
    """The storage a reading command uses: `url` (--storage), else `default`. An SQLite file that `url` names
    and that does not exist is one line: a misspelt path read as an empty storage answered "no cached study"
    (or "run `autosync tune` first") for a job tuned in the right one."""
    path = sqlite_path(url) if url else None
    if path is not None and not path.exists():
        raise UserError(f"--storage {redact_url(url)}: no such file {path} (no study storage there)")
    return url or default


def _check_sqlite_file(url: str, path: Path) -> None:
    """Refuse, before anything is created beside it, an SQLite storage path that is a folder or a file that
    is not an SQLite database (an empty file is one that SQLite would fill)."""
    if path.is_dir():
        raise UserError(f"--storage {redact_url(url)}: {path} is a directory, not an SQLite database file")
    if path.exists() and path.stat().st_size:
        try:
            with open(path, "rb") as fh:
                head = fh.read(len(SQLITE_HEADER))
        except OSError as exc:
            raise UserError(f"--storage {redact_url(url)}: cannot read {path} ({exc.strerror})") from None
        if head != SQLITE_HEADER:
            raise UserError(f"--storage {redact_url(url)}: {path} is not an SQLite database file")


@contextlib.contextmanager
def existing_storage(url: str) -> "Iterator[optuna.storages.RDBStorage | None]":
    """The storage of a command that only reads the cache (or deletes a job's studies from it), opened without
    creating or changing anything: no schema, no lock file, no journal setting. None when it holds no study
    storage yet (an SQLite file that does not exist; a server database without Optuna's tables). A file that
    is not an autosync study storage (a folder, an empty file, another program's database) is a UserError.
    Its connections are closed on leaving the block, so an SQLite file's write-ahead log is merged into it
    and removed: `cache list` left `-wal` and `-shm` files beside the storage, its storage collected before
    the command's end closed it (`close_storages`)."""
    storage = _open_existing(url)
    try:
        yield storage
    finally:
        if storage is not None:
            _close(storage)


def _open_existing(url: str) -> "optuna.storages.RDBStorage | None":
    """`existing_storage`'s storage, opened."""
    path = sqlite_path(url)
    if path is not None:
        if not path.exists():
            return None
        _check_sqlite_file(url, path)
        if not path.stat().st_size:
            raise UserError(f"--storage {redact_url(url)}: {path} is an empty file, not an autosync study storage")
        tables = _sqlite_tables(url, path)
        if not all(t in tables for t in STUDY_TABLES):
            raise UserError(f"--storage {redact_url(url)}: {path} is an SQLite database without autosync's study "
                            f"tables ({', '.join(STUDY_TABLES)}), not an autosync study storage")
    elif not _server_has_tables(url):
        return None
    try:
        return _rdb_storage(url, {"connect_args": {"timeout": 60}} if path is not None else {})
    except Exception as exc:  # a schema of another Optuna version, a file locked or unreadable
        raise _cannot_open(url, exc) from None


def _cannot_open(url: str, exc: Exception) -> UserError:
    """The one-line error for a storage that failed to open: its (redacted) URL and the first line of why."""
    text = str(exc).strip()
    reason = text.splitlines()[0] if text else type(exc).__name__
    if isinstance(exc, (ImportError, ModuleNotFoundError)) or "DB access module" in reason:
        reason += _driver_hint(url)
    return UserError(f"--storage {redact_url(url)}: cannot open the study storage ({redact(reason, url)})")


def _sqlite_tables(url: str, path: Path) -> set[str]:
    """The tables of an SQLite file, read in read-only mode (nothing written, no journal created)."""
    import sqlite3

    try:
        conn = read_only(path)
        try:
            return {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        finally:
            conn.close()
    except sqlite3.DatabaseError as exc:
        raise UserError(f"--storage {redact_url(url)}: {path} cannot be read as an SQLite database ({exc})") from None


def read_only(path: Path, timeout: float = 5.0) -> "sqlite3.Connection":
    """A connection to the SQLite file at `path` that writes nothing (SQLite's read-only mode), waiting at
    most `timeout` seconds for a lock another process holds; in autocommit mode, so that a `BEGIN` holds
    one snapshot over several queries."""
    import sqlite3
    import urllib.parse

    return sqlite3.connect(f"file:{urllib.parse.quote(str(path.resolve()))}?mode=ro", uri=True, timeout=timeout,
                           isolation_level=None)


def _server_has_tables(url: str) -> bool:
    """Whether a server's database holds Optuna's tables (checked without creating them)."""
    try:
        import sqlalchemy

        engine = sqlalchemy.create_engine(url, poolclass=sqlalchemy.pool.NullPool)
        try:
            return sqlalchemy.inspect(engine).has_table("studies")
        finally:
            engine.dispose()
    except Exception as exc:  # sqlalchemy raises many kinds: bad scheme, unreachable server
        raise _cannot_open(url, exc) from None


def _rdb_storage(url: str, kwargs: dict[str, Any]) -> "optuna.storages.RDBStorage":
    """Optuna's RDB storage at `url` with autosync's heartbeats and its retry of killed trials."""
    import optuna

    # not at the top: the trials' modules (25-40 ms on 2 busy cores, `python -X importtime`), which --help,
    # loading this module for its defaults, never uses
    from autosync.search.study.trials import RetryKilledTrial

    cls = guarded(optuna.storages.RDBStorage)
    if is_server(url):  # a server that stops answering is waited for (`outage`); a pooled connection it
        cls = waiting(cls)  # dropped is found dead before use and replaced
        kwargs = {"pool_pre_ping": True, **kwargs}
    cls = quiet_heartbeats(cls)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # heartbeats are marked experimental; we rely on them knowingly
        storage = cls(
            url, engine_kwargs=kwargs, heartbeat_interval=HEARTBEAT_SECONDS,
            grace_period=OPTUNA_GRACE_INTERVALS * HEARTBEAT_SECONDS,
            heartbeat_stale_trial_callback=RetryKilledTrial(max_retry=3))
    _OPENED.add(storage)
    return storage


class QuietHeartbeats:
    """A storage whose heartbeat, refused, is skipped rather than raised (`quiet_heartbeats`)."""

    def record_heartbeat(self, trial_id: int) -> None:
        """Optuna's heartbeat of trial `trial_id`, beaten from a thread of its own that no one reports for: a
        beat the storage refuses (its folder turned read-only, the disk full, the server gone for good) is
        skipped and the next interval beats again, where Optuna's thread printed its traceback and stopped
        beating. The command's own next write meets the same failure and says it in its one line."""
        try:
            super().record_heartbeat(trial_id)  # type: ignore[misc]
        except Exception:  # sqlalchemy's and Optuna's many kinds, and `outage.StorageLost`
            pass


def quiet_heartbeats(cls: type) -> type:
    """A subclass of storage class `cls` with `QuietHeartbeats` (made once, a name of this module, as
    `interrupts.guarded` makes its classes)."""
    name = f"Quiet{cls.__name__}"
    if name not in globals():
        globals()[name] = type(name, (QuietHeartbeats, cls), {"__module__": __name__, "__qualname__": name})
    return globals()[name]


def end_without_collection() -> None:
    """Ready this process to end (the command line's, a helper's) without the last garbage collection over
    torch's objects, 0.5-0.9 s of the exit once torch is loaded (`gc.freeze`): the storages it opened are
    closed first, since that collection is what closed them (`close_storages`). Only for a process about to
    end: frozen objects are never collected."""
    close_storages()
    gc.freeze()


def close_storages() -> None:
    """Close the pooled connections of every storage this process opened. An SQLite file's write-ahead log is
    then merged into it and removed, so the file alone holds every commit."""
    for storage in list(_OPENED):
        _close(storage)


def _close(storage: Any) -> None:
    """Close `storage`'s pooled connections; a failure to (a server gone, say) is not the caller's error: what
    the connections held goes with the process, as it always did."""
    try:
        storage.engine.dispose()
    except Exception:  # sqlalchemy's many kinds
        pass


def open_storage(url: str) -> "optuna.storages.RDBStorage":
    """An RDB storage with heartbeats whose schema is created once; errors name the (redacted) URL."""
    path = sqlite_path(url)
    if path is not None:
        _check_sqlite_file(url, path)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UserError(f"--storage {redact_url(url)}: cannot create directory {path.parent} "
                            f"({exc.strerror})") from None
    kwargs = {"connect_args": {"timeout": 60}} if url.startswith("sqlite") else {}
    attempt = 0
    while True:
        attempt += 1
        try:
            with storage_lock(url):
                storage = _rdb_storage(url, kwargs)
                if path is not None:
                    _commit_without_waiting_for_the_disk(storage.engine)
                return storage
        except Exception as exc:  # sqlalchemy raises many kinds: bad scheme, unreachable server, read-only file
            text = str(exc).strip()
            if "already exists" in text and attempt < _SCHEMA_RETRIES:
                time.sleep(0.2 * attempt)  # another process created the schema first: open it again
                continue
            raise _cannot_open(url, exc) from None


def _commit_without_waiting_for_the_disk(engine: Any) -> None:
    """SQLite in write-ahead-log mode with synchronous=NORMAL: a commit appends to the log and returns
    without an fsync (about 0.1 ms against 5 ms on this kind of disk; a tune commits some 40 times per
    trial: the trial's state, its parameters and each user attribute). A committed trial still survives
    the process being killed, which is what an interrupted search needs; only a power cut may lose the
    last commits, never the database's consistency. The log also lets processes that share the file read
    while one writes. Set on every connection the engine opens from here on."""
    import sqlite3

    from sqlalchemy import event

    def on_connect(connection: Any, _record: Any) -> None:
        cursor = connection.cursor()
        try:
            cursor.execute("PRAGMA journal_mode=WAL")  # kept in the file: a no-op once set
            cursor.execute("PRAGMA synchronous=NORMAL")
        except sqlite3.DatabaseError:  # a read-only or busy file keeps its journal: it still reads and writes
            pass
        finally:
            cursor.close()

    event.listen(engine, "connect", on_connect)
    engine.dispose()  # the connection that created the schema is opened again, with the pragmas


def _driver_hint(url: str) -> str:
    if url.startswith("postgresql"):
        return "; install the PostgreSQL driver with: pip install 'autosync[postgres]'"
    return ""
