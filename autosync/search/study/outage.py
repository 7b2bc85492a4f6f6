"""A study storage's server that stops answering (restarted, failed over, the network down) is waited for.

A call to a server storage (PostgreSQL, or any URL that is not an SQLite file) that fails because the
connection was lost or refused, once the server has answered this process (a server never reached, or
a wrong password, fails at once), is made again every `RETRY_SECONDS` until the server answers, for up to
`WAIT_SECONDS` (`AUTOSYNC_STORAGE_WAIT_SECONDS`). The first failure of an outage is reported once, with what
is waited for, and so is the server's return (`report_to`). Past the wait, `StorageLost` says that every
finished trial is kept (a commit the server acknowledged is on its disk) and the command line adds the
command that resumes. A call is made again whole, from the outermost storage method: a session the lost
connection broke is never reused. A heartbeat is never waited for: a missed one is sent again an interval later.
"""

from __future__ import annotations

import functools
import os
import threading
import time
from typing import Any, Callable, TypeVar

from autosync.core.errors import StorageLost
from autosync.search.study.interrupts import wrapping_methods
from autosync.search.study.urls import redact, redact_url

T = TypeVar("T")

WAIT_SECONDS = float(os.environ.get("AUTOSYNC_STORAGE_WAIT_SECONDS", "300"))  # then the tune stops, resumable
RETRY_SECONDS = 1.0  # between two tries while the server does not answer

_reporters: dict[str, Callable[[str], None]] = {}  # url -> where the waiting and return lines go
_outages: dict[str, dict[str, Any]] = {}  # url -> {since, reason} while its server does not answer
_answered: set[str] = set()  # urls whose server answered a call of this process: only those are waited for
_given_up: dict[str, str] = {}  # url -> the message of the wait that ran out: later calls fail at once
_lock = threading.Lock()
_depth = threading.local()  # storage calls in progress on this thread: only the outermost is made again


def report_to(url: str, on_wait: Callable[[str], None] | None) -> None:
    """Send the lines of an outage of the storage at `url` (its server waited for, then back) to `on_wait`."""
    if on_wait is None:
        _reporters.pop(url, None)
    else:
        _reporters[url] = on_wait
    _given_up.pop(url, None)  # a new command on the storage waits afresh


def is_server(url: str | None) -> bool:
    """Whether `url` names a database server (whose connection can be lost), not an SQLite file or memory."""
    return bool(url) and not str(url).startswith("sqlite")


def lost_connection(exc: BaseException) -> bool:
    """Whether `exc` (or an error it was raised from) says the database connection was lost or refused:
    SQLAlchemy's OperationalError or InterfaceError, or an error that invalidated the connection (Optuna
    wraps them in its StorageInternalError)."""
    import sqlalchemy.exc

    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, (sqlalchemy.exc.OperationalError, sqlalchemy.exc.InterfaceError)) \
                or getattr(exc, "connection_invalidated", False):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def _reason(exc: BaseException, url: str) -> str:
    """The first line of the deepest error's message (the driver's own words), without a password."""
    seen: set[int] = set()
    while id(exc) not in seen:  # down to the driver's error (SQLAlchemy's `orig`, or what it was raised from)
        seen.add(id(exc))
        deeper = getattr(exc, "orig", None) or exc.__cause__ or exc.__context__
        if not isinstance(deeper, BaseException):
            break
        exc = deeper
    text = str(exc).strip().splitlines()
    return redact(text[0] if text else type(exc).__name__, url)


def _lost(url: str, exc: BaseException, since: float) -> None:
    with _lock:
        if url in _outages:
            return
        _outages[url] = {"since": since}
    report = _reporters.get(url)
    if report is not None:
        report(f"waiting for the study storage {redact_url(url)}, whose server does not answer "
               f"({_reason(exc, url)}): trying again every {RETRY_SECONDS:g} s for up to {WAIT_SECONDS:g} s "
               "(AUTOSYNC_STORAGE_WAIT_SECONDS)")


def _back(url: str) -> None:
    with _lock:
        outage = _outages.pop(url, None)
    report = _reporters.get(url)
    if outage is not None and report is not None:
        report(f"the study storage {redact_url(url)} answers again after {time.monotonic() - outage['since']:.0f} s: "
               "going on")


def call_waiting(url: str | None, call: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """`call(*args, **kwargs)` on the storage at `url`, made again while its server does not answer (see the
    module doc); at once where `url` is not a server's, or inside another storage call of this thread."""
    if url is None or not is_server(url) or getattr(_depth, "n", 0):
        return call(*args, **kwargs)
    if url not in _answered:  # a server that never answered (a wrong password, host or port) is not waited for
        result = call(*args, **kwargs)
        _answered.add(url)
        return result
    _depth.n = 1
    started: float | None = None
    try:
        while True:
            if url in _given_up:
                raise StorageLost(_given_up[url])
            try:
                result = call(*args, **kwargs)
            except Exception as exc:
                if not lost_connection(exc):
                    raise
                now = time.monotonic()
                started = now if started is None else started
                since = _outages.get(url, {}).get("since", started)
                _lost(url, exc, started)
                if now - since >= WAIT_SECONDS:
                    message = (f"the study storage {redact_url(url)} did not answer for {WAIT_SECONDS:g} s "
                               f"({_reason(exc, url)}); every finished trial is kept there, and the same "
                               "command resumes once the server is back")
                    _given_up[url] = message
                    raise StorageLost(message) from None
                time.sleep(RETRY_SECONDS)
                continue
            if url in _outages:
                _back(url)
            return result
    finally:
        _depth.n = 0


def _waits(method: Callable[..., Any], name: str) -> Callable[..., Any]:
    @functools.wraps(method)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        if name == "record_heartbeat":  # never waited for: the next beat comes an interval later, and a
            return method(self, *args, **kwargs)  # refused beat is skipped (`storage.QuietHeartbeats`)
        return call_waiting(self.url, method, self, *args, **kwargs)
    return call


def waiting(cls: type) -> type:
    """A subclass of storage class `cls` whose methods wait for a server that does not answer (made once,
    and a name of this module, so its instances pickle); its heartbeat is not waited for, and a refused one
    is skipped by `storage.QuietHeartbeats`, which comes first in the storage's classes."""
    return wrapping_methods(cls, "Waiting", _waits, globals())
