"""The table: every candidate of a space run on a job's search and held-out seeds, recorded as a search sees
it, and a backend that replays a search's runs from it (`replayed_run`).

A search replayed on the table takes the live search's decisions at a fraction of its cost, so that a
search procedure and its constants can be fitted and judged on many jobs (docs/concepts/table.md).
"""

from __future__ import annotations

from autosync.table.cells import FULL, Cell, Prefix, Variant
from autosync.table.replay import KEPT, KeptTimes, ReplayedRun, cell_for, compute_cell, replayed_run
from autosync.table.store import Table

__all__ = ["FULL", "KEPT", "Cell", "KeptTimes", "Prefix", "ReplayedRun", "Table", "Variant", "cell_for",
           "compute_cell", "replayed_run"]
