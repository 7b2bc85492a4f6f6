"""Ctrl-C never lands inside a write to the study storage.

A KeyboardInterrupt raised in the middle of one of Optuna's storage calls leaves its SQLAlchemy session
holding an open write transaction (Optuna rolls back only on SQLAlchemy's own errors): on SQLite the
next write, the trial marked failed on the way out, then waits on that lock for the whole busy timeout
and the command hangs. While `storage_calls_finish_first` is active, Ctrl-C during a storage call (see
`guarded`) is held until the call returns and raised there; anywhere else it is raised at once, as usual,
and one that lands where Python swallows exceptions (a finalizer) is sent again (`ctrl_c_never_swallowed`).
Nor inside an import: one cut short can abort the interpreter (torch's, in its C++ part), so a Ctrl-C there is
sent again until the import is done.
"""

from __future__ import annotations

import _thread
import contextlib
import functools
import inspect
import os
import signal
import sys
import threading
import time
from typing import Any, Callable, Iterator

# how long a swallowed Ctrl-C waits before it is sent again: far longer than a finalizer's callback runs, far
# shorter than anyone notices (`ctrl_c_never_swallowed`)
RESEND_AFTER_SECONDS = 0.05
_state = {"depth": 0, "pending": False, "active": False, "raised": False}  # main thread only: signals go there


def _on_sigint(signum: int, frame: Any) -> None:
    if _state["depth"] > 0:
        _state["pending"] = True  # raised when the storage call returns
        return
    if _importing(frame):  # a module's import cut short can abort the interpreter (torch's C++ does)
        _thread.start_new_thread(_sigint_again, ())  # sent again until the import is done
        return
    _state["raised"] = True
    raise KeyboardInterrupt


def _importing(frame: Any) -> bool:
    """Whether `frame` runs inside a module's import (Python's import machinery is below it)."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


def interrupted() -> bool:
    """Whether Ctrl-C was raised while `storage_calls_finish_first` was active: Optuna's trial bookkeeping
    can turn the KeyboardInterrupt raised after its storage call into another exception (an unbound local
    in `_run_trial`), which the caller then reports as the interruption it is."""
    return bool(_state["raised"])


@contextlib.contextmanager
def storage_calls_finish_first() -> Iterator[None]:
    """Within: Ctrl-C waits for the storage call in progress (if any) to return, and for the import in
    progress (if any) to finish. Does nothing outside the main thread or where the program has its own SIGINT
    handler (an outer `storage_calls_finish_first` is one: the command line's, a helper's)."""
    if threading.current_thread() is not threading.main_thread() \
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield
        return
    signal.signal(signal.SIGINT, _on_sigint)
    # a fresh start: no storage call is in progress here (a command's outermost scope), whatever an earlier
    # search in this process left (a long-lived process, a notebook, calls api.tune again and again)
    _state.update(active=True, pending=False, raised=False, depth=0)
    try:
        with ctrl_c_never_swallowed():
            yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        _state.update(active=False)


@contextlib.contextmanager
def ctrl_c_never_swallowed() -> Iterator[None]:
    """Within: a Ctrl-C that lands in a finalizer or a weakref callback, where Python swallows every exception
    (it printed 'Exception ignored in ...' with a traceback, and the command went on as if never interrupted,
    to its answer), is sent again: the hook Python reports it through (`sys.unraisablehook`) has another thread
    send this process SIGINT once the callback has returned, whose handler raises it where it can propagate.
    Every other unraisable exception goes to the hook that was there before."""
    before = sys.unraisablehook

    def hook(unraisable: Any) -> None:
        if not issubclass(unraisable.exc_type, KeyboardInterrupt):
            before(unraisable)
            return
        # from another thread, which the hook does not wait for (a handler run in the hook is swallowed too)
        _thread.start_new_thread(_sigint_again, ())

    sys.unraisablehook = hook
    try:
        yield
    finally:
        sys.unraisablehook = before


def _sigint_again() -> None:
    """Ctrl-C sent to this process again, once the finalizer that swallowed it has returned (or a little into
    the import it waits for)."""
    time.sleep(RESEND_AFTER_SECONDS)
    os.kill(os.getpid(), signal.SIGINT)


@contextlib.contextmanager
def storage_call() -> Iterator[None]:
    """A storage call: Ctrl-C inside waits until it ends (while `storage_calls_finish_first` is active; the
    storage's own methods are such calls through `guarded`, and autosync's direct queries say so with this)."""
    if not _state["active"] or threading.current_thread() is not threading.main_thread():
        yield
        return
    _state["depth"] += 1
    try:
        yield
    finally:
        _state["depth"] -= 1
        if _state["depth"] == 0 and _state["pending"]:
            _state.update(pending=False, raised=True)
            raise KeyboardInterrupt


def _guard(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def call(*args: Any, **kwargs: Any) -> Any:
        with storage_call():
            return method(*args, **kwargs)
    return call


def guarded(cls: type) -> type:
    """A subclass of storage class `cls` whose methods are storage calls Ctrl-C waits for (made once, and a
    name of this module, so its instances pickle). Private methods are guarded too: Optuna's cached storage
    reads and writes through them (`_get_trials`, `_create_new_trial`, ...), and a Ctrl-C inside one of those
    reads once left SQLAlchemy printing a traceback as it closed the cursor on a closed database."""
    return wrapping_methods(cls, "Guarded", lambda method, _: _guard(method), globals())


def wrapping_methods(cls: type, prefix: str, wrap: Callable[[Any, str], Any], namespace: dict[str, Any]) -> type:
    """The subclass `prefix` + `cls.__name__` of `cls` whose every method but the dunder ones, inherited and
    private ones included, is `wrap(method, its name)`: made once, and kept as a name of the module whose
    globals are `namespace`, so its instances pickle."""
    name = f"{prefix}{cls.__name__}"
    if name not in namespace:
        methods = {attr: wrap(getattr(cls, attr), attr) for attr in dir(cls)
                   if not (attr.startswith("__") and attr.endswith("__"))
                   and inspect.isfunction(inspect.getattr_static(cls, attr))}
        namespace[name] = type(name, (cls,), {**methods, "__module__": namespace["__name__"], "__qualname__": name})
    return namespace[name]
