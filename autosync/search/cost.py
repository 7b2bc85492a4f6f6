"""The one unit of search cost, shared by `autosync tune`, its cache record and the replayed Table II.

Sync-Switch's Table II charges a search the training time of every run it makes, in units of one BSP
training of the job; so does autosync: the virtual seconds every trial (and the BSP reference) trained,
divided by the virtual seconds of one full BSP training run.
"""

from __future__ import annotations

COST_UNIT = "BSP trainings"  # one = the time of one full BSP training run of the job


def in_bsp_trainings(seconds_trained: float, bsp_training_seconds: float) -> float | None:
    """`seconds_trained` in BSP trainings (None when BSP's training time is unknown or zero)."""
    return seconds_trained / bsp_training_seconds if bsp_training_seconds > 0 else None
