"""The parameter-server engine: server state machine, virtual clock, gradient drivers, simulator."""

from autosync.engine.server import Decision, Server, Start, Update
from autosync.engine.simulator import RunResult, Simulator, simulate
from autosync.engine.trace import Trace

__all__ = ["Decision", "RunResult", "Server", "Simulator", "Start", "Trace", "Update", "simulate"]
