"""Gradient drivers: who computes the gradients the engine asks for."""

from autosync.engine.drivers.inprocess import InProcessDriver
from autosync.engine.drivers.perworker import PerWorkerDriver
from autosync.engine.drivers.processes import ProcessDriver

__all__ = ["InProcessDriver", "PerWorkerDriver", "ProcessDriver"]
