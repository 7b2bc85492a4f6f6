"""The study storage: opening it (schema created once however many processes start together), a lock
shared by every process on one storage, and URLs printed without their password.

Storage is an SQLite file by default, or any SQLAlchemy URL (PostgreSQL) that several processes or
machines share. `storage_lock` serialises the few steps that must not interleave across processes:
creating the schema, topping up a study's trial budget, and claiming a trial of that budget. On SQLite it
is an exclusive `flock` on a file beside the database (every process on this machine); on PostgreSQL a
session-level advisory lock (every process on every machine); other URLs have no cross-process lock.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import threading
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from autosync.errors import UserError

if TYPE_CHECKING:
    import optuna

DEFAULT_STORAGE = "sqlite:///results/autosync-studies.db"
HEARTBEAT_SECONDS = int(os.environ.get("AUTOSYNC_HEARTBEAT_SECONDS", "30"))  # a killed trial is retried after 2x
_PASSWORD = re.compile(r"(?P<head>[a-zA-Z][a-zA-Z0-9+.\-]*://[^/@:]*:)(?P<password>[^@/]*)@")
_SCHEMA_RETRIES = 5  # for storages without a cross-process lock: a lost schema-creation race is retried


def redact_url(url: str) -> str:
    """`url` with its password replaced by *** (postgresql://user:***@host/db): safe to print or store."""
    return _PASSWORD.sub(lambda m: f"{m['head']}***@", url)


def redact(text: str, url: str) -> str:
    """`text` (an error message, say) with `url`'s password masked wherever it appears."""
    match = _PASSWORD.match(url)
    text = text.replace(url, redact_url(url))
    if match and match["password"]:
        text = text.replace(match["password"], "***")
    return text


def sqlite_path(url: str) -> Path | None:
    """The database file of an SQLite URL (None for in-memory databases and other back ends)."""
    if not url.startswith("sqlite"):
        return None
    rest = url.split("://", 1)[1] if "://" in url else ""
    path = rest.split("@", 1)[1] if "@" in rest.split("/", 1)[0] else rest  # sqlite://user:pw@/file
    path = path[1:] if path.startswith("/") else path
    path = path.split("?", 1)[0]
    return None if path in ("", ":memory:") else Path(path)


_LOCAL_LOCKS: dict[str, threading.Lock] = {}


@contextlib.contextmanager
def storage_lock(url: str, name: str = "schema") -> Iterator[None]:
    """Hold an exclusive lock named `name` on the storage at `url` across processes (see the module doc)."""
    path = sqlite_path(url)
    if path is not None:
        import fcntl

        path.parent.mkdir(parents=True, exist_ok=True)
        with open(f"{path}.lock", "a+") as handle:  # one lock file per database; names share it
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)
        return
    if url.startswith("postgresql"):
        with _postgres_advisory_lock(url, name):
            yield
        return
    with _LOCAL_LOCKS.setdefault(f"{url}#{name}", threading.Lock()):  # in-memory: this process only
        yield


_ENGINES: dict[str, Any] = {}


@contextlib.contextmanager
def _postgres_advisory_lock(url: str, name: str) -> Iterator[None]:
    import sqlalchemy

    engine = _ENGINES.get(url)
    if engine is None:
        engine = _ENGINES[url] = sqlalchemy.create_engine(url, poolclass=sqlalchemy.pool.NullPool)
    key = int.from_bytes(hashlib.sha256(f"autosync:{name}".encode()).digest()[:8], "big", signed=True)
    with engine.connect() as conn:
        conn.execute(sqlalchemy.text("SELECT pg_advisory_lock(:k)"), {"k": key})
        try:
            yield
        finally:
            conn.execute(sqlalchemy.text("SELECT pg_advisory_unlock(:k)"), {"k": key})


def open_storage(url: str) -> "optuna.storages.RDBStorage":
    """An RDB storage with heartbeats whose schema is created once; errors name the (redacted) URL."""
    import optuna

    from autosync.search.trials import RetryKilledTrial

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
                return optuna.storages.RDBStorage(
                    url, engine_kwargs=kwargs, heartbeat_interval=HEARTBEAT_SECONDS,
                    grace_period=2 * HEARTBEAT_SECONDS,
                    heartbeat_stale_trial_callback=RetryKilledTrial(max_retry=3))
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


def _driver_hint(url: str) -> str:
    if url.startswith("postgresql"):
        return "; install the PostgreSQL driver with: pip install 'autosync[postgres]'"
    return ""
