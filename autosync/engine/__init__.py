"""The parameter-server engine: server state machine, virtual clock, gradient drivers, simulator.

Its names are imported on first use (PEP 562), so a command that only needs `autosync.engine.backends`
(a tune answered from the cache) does not pay for importing torch.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_HOMES = {"Decision": "server", "Server": "server", "Start": "server", "Update": "server",
          "RunResult": "simulator", "Simulator": "simulator", "simulate": "simulator", "Trace": "trace"}

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{_HOMES[name]}"), name)
    globals()[name] = value
    return value
