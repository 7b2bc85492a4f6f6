"""A lock shared by every process working on one study storage.

`storage_lock` serialises the few steps that must not interleave across processes: creating the schema,
topping up a study's trial budget, and claiming a trial of that budget. On SQLite it is an exclusive
`flock` on a file beside the database (every process on this machine); on PostgreSQL a session-level
advisory lock (every process on every machine); other URLs have a lock within this process only.
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
import urllib.parse
from pathlib import Path
from typing import Any, Iterator

from autosync.search.study.outage import call_waiting, lost_connection


def sqlite_path(url: str) -> Path | None:
    """The database file of an SQLite URL (None for in-memory databases and other back ends), as SQLAlchemy
    reads it: the query after '?' is no part of it, and %-escapes are decoded (sqlite:///my%20studies.db is
    the file 'my studies.db', whose lock and cache must be that file's)."""
    if not url.startswith("sqlite"):
        return None
    rest = url.split("://", 1)[1] if "://" in url else ""
    path = rest.split("@", 1)[1] if "@" in rest.split("/", 1)[0] else rest  # sqlite://user:pw@/file
    path = path[1:] if path.startswith("/") else path
    path = urllib.parse.unquote(path.split("?", 1)[0])
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

    def locked() -> Any:  # connected and holding the lock; made again whole while the server does not answer
        conn = engine.connect().execution_options(isolation_level="AUTOCOMMIT")  # never idle in a transaction
        try:
            conn.execute(sqlalchemy.text("SELECT pg_advisory_lock(:k)"), {"k": key})
        except BaseException:
            conn.close()
            raise
        return conn

    conn = call_waiting(url, locked)
    try:
        yield
    finally:
        try:
            conn.execute(sqlalchemy.text("SELECT pg_advisory_unlock(:k)"), {"k": key})
        except Exception as exc:
            if not lost_connection(exc):
                raise  # (a lost session took its lock with it)
        finally:
            conn.close()
