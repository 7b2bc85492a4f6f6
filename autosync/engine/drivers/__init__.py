"""Gradient drivers: who computes the gradients the engine asks for."""

from autosync.engine.drivers._base import Driver, FusingDriver
from autosync.engine.drivers.inprocess import InProcessDriver
from autosync.engine.drivers.perworker import PerWorkerDriver
from autosync.engine.drivers.processes import ProcessDriver

__all__ = ["Driver", "FusingDriver", "InProcessDriver", "PerWorkerDriver", "ProcessDriver"]
