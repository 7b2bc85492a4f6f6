"""How a long computation reports its progress, without knowing who draws it.

A `Phase` is called with (what, steps) around each long phase of a computation; the context it returns
gives a function to call after each step. The command line draws a spinner or a counting bar
(`autosync.reporting.progress.phases`); `no_phase`, the default, draws nothing.
"""

from __future__ import annotations

import contextlib
from typing import Callable, ContextManager

Phase = Callable[[str, int], ContextManager[Callable[[], None]]]


def no_phase(what: str, steps: int) -> ContextManager[Callable[[], None]]:
    """A phase that draws nothing."""
    return contextlib.nullcontext(lambda: None)
