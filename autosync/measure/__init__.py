"""Measurements of the real backend, held against the simulator.

- `profile`: the workers' real round trips, and the cluster model fitted to them (`autosync profile`).
- `calibration`: short real runs at two update rates against their simulations, and the server's costs
  fitted from them (`autosync calibrate`).
- `rerun`: a logged real-time run repeated exactly from its trace (`autosync rerun`).

The modules listed in `__all__` are the package's public surface; a name starting with `_` is internal.
"""

__all__ = ["calibration", "profile", "rerun"]
