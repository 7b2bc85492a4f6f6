"""The files autosync ships: search spaces, the default job and the reference jobs (baselines).

They live in this package so that a wheel carries them and `importlib.resources` finds them wherever the
package is installed (from a wheel, or editable from a checkout). The repository's top-level
`search_spaces/` and `baselines/` are links to the folders here: one copy of each file.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

__all__ = ["DATA_DIR", "SPACE_DIR", "BASELINE_DIR", "DEFAULT_JOB_PATH", "RACE_SETTINGS", "SYNC_SWITCH_LOGS"]


def _root() -> Path:
    root = files(__name__)
    # Callers read these as plain files (Path.glob, job files that name files next to them). A regular
    # install, editable or from a wheel, is a directory on disk; only a zip import would not be.
    if not isinstance(root, Path):
        raise RuntimeError(f"autosync's data must be installed as files on disk, but it is in {root!r}")
    return root


DATA_DIR = _root()
SPACE_DIR = DATA_DIR / "search_spaces"  # the shipped search spaces: `--space NAME` is SPACE_DIR/NAME.yaml
BASELINE_DIR = DATA_DIR / "baselines"  # reference jobs and job families
DEFAULT_JOB_PATH = BASELINE_DIR / "digits_default.yaml"  # the job `autosync run` uses without a job file
# The race's settings (`autosync.race`), fitted on the committed table by `autosync fit`
RACE_SETTINGS = DATA_DIR / "race.yaml"
# The Sync-Switch paper's published ResNet-32 training logs (Apache-2.0; sync_switch_logs/README.md), which
# `autosync replay` reads: `autosync replay SYNC_SWITCH_LOGS` replays the paper's Table II.
SYNC_SWITCH_LOGS = DATA_DIR / "sync_switch_logs" / "cifar10_res32"
