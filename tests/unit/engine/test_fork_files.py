"""The fork store's shared level (`autosync.engine.fork_files`, `ForkStore.share`): kept runs written as files
that another process's store reads, bounded in bytes, a missing or damaged file read as absent; `sharing`
makes the directory for a command's lifetime."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from autosync.engine.fork_files import ForkFiles, Kept
from autosync.engine.forks import ForkStore, sharing


def _files(directory) -> list[str]:
    return sorted(name for name in os.listdir(directory) if name.endswith(".fork"))


def test_a_kept_run_reads_back_whole_and_its_entries_without_the_snapshot(tmp_path):
    files = ForkFiles(str(tmp_path), max_bytes=10_000)
    stop, prefix = Kept(b"\x00stop\n" * 3, 12.5), Kept(b"prefix", 3.25, undecided_above=0.40625, past_target=True)
    files.put("run", stop)
    files.put("run", prefix)
    files.put("other run", Kept(b"x", 1.0))
    assert files.get("run") == stop and files.get("run", 0.40625) == prefix
    assert files.get("run", 0.5) is None and files.get("no run") is None
    assert sorted(files.entries("run"), key=lambda k: k.at_seconds) == [Kept(b"", 3.25, 0.40625, True),
                                                                         Kept(b"", 12.5)]
    files.put("run", Kept(b"again", 13.0))  # replaced, not added
    assert files.get("run") == Kept(b"again", 13.0) and len(_files(tmp_path)) == 3
    assert not [name for name in os.listdir(tmp_path) if name.startswith(".")]  # no temporary file left


def test_the_directory_keeps_the_newest_runs_that_fit_its_bound(tmp_path):
    files = ForkFiles(str(tmp_path), max_bytes=600)  # two runs of 200 bytes and their headers
    for i in range(4):
        files.put(f"run {i}", Kept(bytes(200), float(i)))
        os.utime(files._path(f"run {i}", None), ns=(i, i))  # written in this order, whatever the clock's grain
    sizes = sum(os.path.getsize(tmp_path / name) for name in _files(tmp_path))
    assert sizes <= 600 and [files.get(f"run {i}") is not None for i in range(4)] == [False, False, True, True]
    files.put("too big", Kept(bytes(601), 1.0))  # larger than the bound: not kept, nothing evicted for it
    assert files.get("too big") is None and len(_files(tmp_path)) == 2


def test_a_missing_damaged_or_foreign_file_is_absent(tmp_path):
    files = ForkFiles(str(tmp_path), max_bytes=10_000)
    for key in ("damaged", "truncated", "foreign"):
        files.put(key, Kept(b"snapshot", 1.0))
    path = {key: Path(files._path(key, None)) for key in ("damaged", "truncated", "foreign")}
    path["damaged"].write_bytes(b"not json\nsnapshot")
    path["truncated"].write_bytes(path["truncated"].read_bytes()[:-3])
    path["foreign"].write_bytes(path["foreign"].read_bytes().replace(b'"foreign"', b'"another"'))  # a collision
    assert [files.get(key) for key in path] == [None, None, None]
    assert files.entries("damaged") == [] and files.entries("foreign") == []
    assert ForkFiles(str(tmp_path / "gone"), 10_000).get("damaged") is None  # no directory: nothing kept
    assert ForkFiles(str(tmp_path / "gone"), 10_000).entries("damaged") == []


def test_stores_sharing_a_directory_read_each_other_s_runs_and_prefixes(tmp_path):
    mine, other = ForkStore(), ForkStore()
    mine.share(str(tmp_path))
    other.share(str(tmp_path))
    mine.put("run", b"stopped", 10.0)
    mine.put("prefixes", b"short", 2.0, undecided_above=0.25)
    mine.put("prefixes", b"long", 4.0, undecided_above=0.5, past_target=True)
    assert other.get("run") == Kept(b"stopped", 10.0) and len(other) == 0  # read from the files
    assert other.prefix("prefixes", 0.75).snapshot == b"long"
    assert other.prefix("prefixes", 0.75, stops_at_target=True).snapshot == b"short"  # not past the target
    assert other.prefix("prefixes", 0.4).snapshot == b"short" and other.prefix("prefixes", 0.25) is None
    assert other.prefix("prefixes", 0.75, until=3.0).snapshot == b"short"
    other.put("prefixes", b"own", 3.0, undecided_above=0.375)  # memory's and the files' together
    assert other.prefix("prefixes", 0.45).snapshot == b"own" and mine.prefix("prefixes", 0.45).snapshot == b"own"
    alone = ForkStore()
    alone.put("run", b"mine only", 1.0)
    assert alone.shared is None and ForkStore().get("run") is None


def test_sharing_makes_a_directory_for_its_lifetime_and_nests():
    store = ForkStore()
    with sharing(False, store) as none:
        assert none is None and store.shared is None
    with sharing(True, store) as directory:
        store.put("run", b"kept", 1.0)
        assert os.path.isdir(directory) and _files(directory)
        with sharing(True, store) as inner:
            assert inner == directory  # already shared: the same directory
        assert store.shared is not None
    assert store.shared is None and not os.path.exists(directory)
    assert store.get("run") == Kept(b"kept", 1.0)  # memory keeps it


@pytest.mark.skipif(sys.platform == "win32", reason="fcntl's locks")
def test_sharing_removes_the_folders_that_killed_commands_left_and_none_in_use(tmp_path, monkeypatch):
    """A command killed (SIGKILL, out of memory) leaves its folder of kept runs: the next `sharing` removes those
    whose owner's lock nobody holds, and leaves a folder whose lock is held (a command running, in this
    container or another on the same kernel), one without a lock file and any other name alone."""
    import fcntl
    import subprocess
    import tempfile

    from autosync.engine.forks import FOLDER_PREFIX, OWNER_LOCK

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    gone, running, unlocked = (tmp_path / f"{FOLDER_PREFIX}{name}" for name in ("host-1-a", "host-2-b", "host-3-c"))
    for folder in (gone, running, unlocked, tmp_path / "elsewhere"):
        (folder / "race-progress").mkdir(parents=True)
    (gone / OWNER_LOCK).touch()
    (running / OWNER_LOCK).touch()
    # the owner: another process holding the lock, as a running command does for its folder's life
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, sys, time; f = open(sys.argv[1]); "
                               "fcntl.flock(f, fcntl.LOCK_EX); print('held', flush=True); time.sleep(60)",
                               str(running / OWNER_LOCK)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with sharing(True, ForkStore()) as directory:
            assert not gone.exists() and running.exists() and unlocked.exists()
            assert (tmp_path / "elsewhere").exists()
            with open(Path(directory) / OWNER_LOCK) as mine, pytest.raises(BlockingIOError):
                fcntl.flock(mine, fcntl.LOCK_EX | fcntl.LOCK_NB)  # this command's own is held
        assert not Path(directory).exists()
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.skipif(sys.platform == "win32", reason="fcntl's locks")
def test_a_folder_a_helper_still_shares_is_not_swept_once_its_command_is_gone(tmp_path):
    """A tune's helpers run on for a while after their command is killed: each holds the folder's lock too, so
    that another command's sweep does not remove the kept runs under it (its next write failed)."""
    from autosync.engine.forks import FOLDER_PREFIX, OWNER_LOCK, remove_folders_of_ended_commands

    folder = tmp_path / f"{FOLDER_PREFIX}host-1-a"
    folder.mkdir()
    (folder / OWNER_LOCK).touch()  # its command gone: nobody holds the lock but the helper
    helper = ForkStore()
    helper.share(str(folder))
    assert remove_folders_of_ended_commands(str(tmp_path)) == [] and folder.exists()
    helper.share(None)
    assert remove_folders_of_ended_commands(str(tmp_path)) == [folder] and not folder.exists()
