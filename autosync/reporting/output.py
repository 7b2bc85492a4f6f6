"""Where reports go: the output directory, created and proven writable before any training (and removed
again, while still empty, when the command fails), the command line the results record, and how a table
cell is formatted."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

from autosync.core.errors import UserError

_CREATED: list[Path] = []  # the folders `ready_output_dir` created in this command, outermost first


def ready_output_dir(directory: Path, option: str = "--out", files: Sequence[str] = ()) -> Path:
    """Create `directory` (with its parents) and prove a file can be written in it, before any training:
    a bad output location is a one-line UserError naming `option` now, not an OSError after the run (nor a
    folder in the place of one of the `files` the command writes there: `run` lost its training to it). The
    folders it creates are remembered, so that a command that fails leaves none of them behind empty
    (`remove_empty_outputs`)."""
    import tempfile

    directory = Path(directory)
    try:  # a name too long for the file system fails already here (ENAMETOOLONG)
        if directory.exists() and not directory.is_dir():
            raise UserError(f"{option}: {directory} is a file, but an output directory is needed")
        missing = [p for p in (directory, *directory.parents) if not p.exists()]
        directory.mkdir(parents=True, exist_ok=True)
        _CREATED.extend(reversed(missing))
        with tempfile.TemporaryFile(dir=directory):
            pass
    except OSError as exc:
        raise UserError(f"{option}: cannot write in {directory}: {exc.strerror or exc}") from None
    taken = next((directory / name for name in files if (directory / name).is_dir()), None)
    if taken is not None:
        raise UserError(f"{option}: {taken} is a directory, but the command writes a file there")
    return directory


def ready_output_file(path: Path, option: str = "--out") -> Path:
    """`path`, a file to write later: not a directory, and its folder made ready (`ready_output_dir`), so
    that a bad location is a one-line UserError naming `option` before anything is computed or written."""
    path = Path(path)
    if path.is_dir():
        raise UserError(f"{option}: {path} is a directory, but a file to write is needed")
    ready_output_dir(path.parent, option)
    return path


def remove_empty_outputs(failed: bool = True) -> None:
    """With `failed`, remove the folders `ready_output_dir` created in this command that are still empty,
    innermost first (a failed command leaves no empty output folder behind; one holding anything is kept);
    either way, forget them."""
    for folder in reversed(_CREATED if failed else []):
        try:
            folder.rmdir()  # only an empty folder goes
        except OSError:
            pass
    _CREATED.clear()


def command_line(command: str) -> str:
    """The command line that is running, for results files ('autosync <command>' when not run from a shell),
    quoted as a shell reads it (a path with a space is one argument)."""
    return shlex.join(["autosync", *sys.argv[1:]]) if sys.argv[1:2] == [command] else f"autosync {command}"


def format_cell(value: Any, fmt: str | Callable[[Any], str]) -> str:
    """A table cell: "-" for none, "not reached" for an infinite time, else `fmt` (a format string, or a
    function of the value)."""
    if value is None:
        return "-"
    if isinstance(value, float) and value == float("inf"):
        return "not reached"
    return fmt(value) if callable(fmt) else fmt.format(value)


def times_faster(speedup: float, than: str = "") -> str:
    """A speedup (the other's time over this one's) in words that say which way it points: "3.20x faster",
    "1.25x slower" (for 0.8), "as fast" where the two decimals shown cannot tell them apart; `than` names
    the other ("BSP": "3.20x faster than BSP")."""
    other = f" than {than}" if than else ""
    if f"{speedup:.2f}" == "1.00":
        return f"as fast as {than}" if than else "as fast"
    if speedup > 1.0:
        return f"{speedup:.2f}x faster{other}"
    if speedup <= 0:  # the other took no time (a target met at the first evaluation): no ratio to print
        return f"slower{other}"
    return f"{1.0 / speedup:.2f}x slower{other}"
