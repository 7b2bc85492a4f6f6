"""The study storage: opening it (its schema created once however many processes start together), and
URLs printed without their password.

Storage is an SQLite file by default, or any SQLAlchemy URL (PostgreSQL) that several processes or
machines share. Opening it holds the storage lock (`autosync.search.study.locking`) while Optuna creates the
schema; where no lock reaches the other processes, a lost race is retried.
"""

from __future__ import annotations

import os
import re
import time
import warnings
from typing import TYPE_CHECKING, Any

from autosync.core.errors import UserError
from autosync.search.study.interrupts import guarded
from autosync.search.study.locking import sqlite_path, storage_lock

if TYPE_CHECKING:
    import optuna

DEFAULT_STORAGE = "sqlite:///results/autosync-studies.db"
HEARTBEAT_SECONDS = int(os.environ.get("AUTOSYNC_HEARTBEAT_SECONDS", "30"))  # a killed trial is retried after 2x
# Optuna's own stale check (inside study.optimize) waits longer than autosync's (two intervals), so a dead
# trial is always failed by autosync first, with its reason (autosync.search.study.trials.fail_dead_trials).
OPTUNA_GRACE_INTERVALS = 10
# user:password@ in a URL; the password may hold '/' (only '@' must be escaped), so it runs to the last '@'
_PASSWORD = re.compile(r"(?P<head>[a-zA-Z][a-zA-Z0-9+.\-]*://[^/@:\s]*:)(?P<password>[^@\s]*)@")
_QUERY_PASSWORD = re.compile(r"(?P<head>[?&]password=)(?P<password>[^&\s]*)", re.IGNORECASE)
_SCHEMA_RETRIES = 5  # for storages without a cross-process lock: a lost schema-creation race is retried


def redact_url(url: str) -> str:
    """`url` (or any text holding URLs) with passwords replaced by *** (postgresql://user:***@host/db, also
    ?password=...): safe to print or store."""
    masked = _PASSWORD.sub(lambda m: f"{m['head']}***@", url)
    return _QUERY_PASSWORD.sub(lambda m: f"{m['head']}***", masked)


def redact(text: str, url: str) -> str:
    """`text` (an error message, say) with `url`'s password masked wherever it appears."""
    text = redact_url(text.replace(url, redact_url(url)))
    for pattern in (_PASSWORD, _QUERY_PASSWORD):
        for match in pattern.finditer(url):
            if match["password"]:
                text = text.replace(match["password"], "***")
    return text


def storage_exists(url: str) -> bool:
    """False for an SQLite URL whose database file does not exist (a read-only command must not create
    it); True for every other URL (a server's database is there or fails to open with its reason)."""
    path = sqlite_path(url)
    return path is None or path.exists()


def open_storage(url: str) -> "optuna.storages.RDBStorage":
    """An RDB storage with heartbeats whose schema is created once; errors name the (redacted) URL."""
    import optuna

    from autosync.search.study.trials import RetryKilledTrial

    path = sqlite_path(url)
    if path is not None:
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
            with storage_lock(url), warnings.catch_warnings():
                warnings.simplefilter("ignore")  # heartbeats are marked experimental; we rely on them knowingly
                storage = guarded(optuna.storages.RDBStorage)(
                    url, engine_kwargs=kwargs, heartbeat_interval=HEARTBEAT_SECONDS,
                    grace_period=OPTUNA_GRACE_INTERVALS * HEARTBEAT_SECONDS,
                    heartbeat_stale_trial_callback=RetryKilledTrial(max_retry=3))
                if path is not None:
                    _commit_without_waiting_for_the_disk(storage.engine)
                return storage
        except Exception as exc:  # sqlalchemy raises many kinds: bad scheme, unreachable server, read-only file
            text = str(exc).strip()
            if "already exists" in text and attempt < _SCHEMA_RETRIES:
                time.sleep(0.2 * attempt)  # another process created the schema first: open it again
                continue
            reason = text.splitlines()[0] if text else type(exc).__name__
            if isinstance(exc, (ImportError, ModuleNotFoundError)) or "DB access module" in reason:
                reason += _driver_hint(url)
            raise UserError(f"--storage {redact_url(url)}: cannot open the study storage "
                            f"({redact(reason, url)})") from None


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
