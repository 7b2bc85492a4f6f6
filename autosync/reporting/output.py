"""Where reports go: the output directory, created and proven writable before any training, and how a
table cell is formatted."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from autosync.core.errors import UserError


def ready_output_dir(directory: Path, option: str = "--out") -> Path:
    """Create `directory` (with its parents) and prove a file can be written in it, before any training:
    a bad output location is a one-line UserError naming `option` now, not an OSError after the run."""
    import tempfile

    directory = Path(directory)
    try:  # a name too long for the file system fails already here (ENAMETOOLONG)
        if directory.exists() and not directory.is_dir():
            raise UserError(f"{option}: {directory} is a file, but an output directory is needed")
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=directory):
            pass
    except OSError as exc:
        raise UserError(f"{option}: cannot write in {directory}: {exc.strerror or exc}") from None
    return directory


def format_cell(value: Any, fmt: str) -> str:
    if value is None:
        return "-"
    if isinstance(value, float) and value == float("inf"):
        return "not reached"
    return fmt.format(value)
