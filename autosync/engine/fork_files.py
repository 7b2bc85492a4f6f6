"""Kept runs in a directory that the processes of one command share: the second level of
`autosync.engine.forks.ForkStore`, so that a run another process stopped at the target, or a prefix another
process's switch-point run kept, is continued here too (`autosync tune --n-jobs`).

One file per kept run: a JSON header line (its key, where it stood, its size) and the snapshot's bytes, named
by a hash of the key. A file is written under a temporary name and renamed into place, so a reader sees a
whole file or none; one that is missing, damaged or of another key (a hash collision) is absent. The
directory is bounded in bytes like the memory store: after each write the oldest files go until the rest fit.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from typing import Iterator

__all__ = ["ForkFiles", "Kept"]

_SUFFIX = ".fork"


@dataclass(frozen=True)
class Kept:
    snapshot: bytes  # `Simulator.snapshot()` of the stopped run
    at_seconds: float  # the virtual time it had trained: what a run forked from it does not train again
    undecided_above: float | None = None  # a prefix: the run of every switch point above this (None: a stop)
    past_target: bool = False  # a prefix kept after the target was met: only for runs that do not stop there


class ForkFiles:
    """Kept runs by key and `undecided_above` (None: a stopped run) in `directory`, the newest kept while
    they fit in `max_bytes`."""

    def __init__(self, directory: str, max_bytes: int):
        self.directory, self.max_bytes = directory, max_bytes

    def put(self, key: str, kept: Kept) -> None:
        """Write `kept` under `key` (replacing what was there), then drop the oldest files past the bound."""
        header = json.dumps({"key": key, "at_seconds": kept.at_seconds, "undecided_above": kept.undecided_above,
                             "past_target": kept.past_target, "size": len(kept.snapshot)}).encode() + b"\n"
        if len(header) + len(kept.snapshot) > self.max_bytes:
            return
        fd, temporary = tempfile.mkstemp(dir=self.directory, prefix=".tmp-")  # a dot: not an entry
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(header + kept.snapshot)
            os.replace(temporary, self._path(key, kept.undecided_above))
        except BaseException:
            _remove(temporary)
            raise
        self._evict()

    def get(self, key: str, undecided_above: float | None = None) -> Kept | None:
        """The run kept under `key` and `undecided_above`, snapshot and all (None: absent or unreadable)."""
        return self._read(self._path(key, undecided_above), key, whole=True)

    def entries(self, key: str) -> list[Kept]:
        """Every run kept under `key`, read without its snapshot (b""): what `get` would load."""
        stem = _digest(key) + "-"
        found = (self._read(os.path.join(self.directory, name), key, whole=False)
                 for name in _names(self.directory) if name.startswith(stem))
        return [kept for kept in found if kept is not None]

    def clear(self) -> None:
        for name in _names(self.directory):
            _remove(os.path.join(self.directory, name))

    def _path(self, key: str, undecided_above: float | None) -> str:
        tag = "stop" if undecided_above is None else float(undecided_above).hex()
        return os.path.join(self.directory, f"{_digest(key)}-{tag}{_SUFFIX}")

    def _read(self, path: str, key: str, whole: bool) -> Kept | None:
        try:
            with open(path, "rb") as f:
                header = json.loads(f.readline())
                snapshot = f.read() if whole else b""
            if header["key"] != key or (whole and len(snapshot) != header["size"]):
                return None
            return Kept(snapshot, float(header["at_seconds"]), header["undecided_above"], bool(header["past_target"]))
        except (OSError, ValueError, KeyError, TypeError):  # missing (evicted), damaged, or not ours
            return None

    def _evict(self) -> None:
        """Remove the oldest files until the rest fit in `max_bytes` (another process may remove them too)."""
        sizes = []
        for name in _names(self.directory):
            try:
                stat = os.stat(os.path.join(self.directory, name))
            except OSError:
                continue
            sizes.append((stat.st_mtime_ns, name, stat.st_size))
        total = sum(size for _, _, size in sizes)
        for _, name, size in sorted(sizes):
            if total <= self.max_bytes:
                return
            _remove(os.path.join(self.directory, name))
            total -= size


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()[:32]


def _names(directory: str) -> Iterator[str]:
    """The entries' file names in `directory` (not the temporary files being written)."""
    try:
        names = os.listdir(directory)
    except OSError:
        return iter(())
    return (name for name in names if name.endswith(_SUFFIX) and not name.startswith("."))


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass
