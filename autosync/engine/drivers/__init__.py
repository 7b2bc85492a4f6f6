"""Gradient drivers: who computes the gradients the engine asks for."""

from autosync.engine.drivers.inprocess import InProcessDriver

__all__ = ["InProcessDriver"]
