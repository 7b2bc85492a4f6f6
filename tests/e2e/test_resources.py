"""A tune that runs out of disk, of a writable folder or of memory ends in one line saying what ran out and
that what had finished is kept (exit 1, no traceback), and its storage opens and resumes afterwards.

The file-size and memory limits are the process's own (RLIMIT_FSIZE, RLIMIT_AS); a disk that fills is a
small tmpfs and a folder that turns read-only an immutable one (chattr), where this machine lets the tests
make them."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Callable

import optuna
import pytest

from autosync.reporting.resources import resource_failure
from tests.conftest import wait_for

pytestmark = [pytest.mark.processes, pytest.mark.slow]

TUNE = ("tune", "tiny.yaml", "--space", "static_k", "--n-trials", "4", "--confirm-top", "0")


def _run(cwd: Path, *args: str, limit: Callable[[], None] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autosync.cli", *args], cwd=cwd, capture_output=True, text=True,
                          preexec_fn=limit, timeout=600)


def _one_line(proc: subprocess.CompletedProcess, what: str) -> None:
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert len(errors) == 1 and what in errors[0] and "what had finished is kept" in errors[0], proc.stderr


def _finished(url: str) -> int:
    (summary,) = optuna.get_all_study_summaries(url)
    study = optuna.load_study(study_name=summary.study_name, storage=url)
    return sum(t.state.is_finished() for t in study.get_trials())


@pytest.fixture
def work(tiny_job: Path) -> Path:
    return tiny_job.parent


def _limit(kind: int, value: int) -> Callable[[], None]:
    return lambda: resource.setrlimit(kind, (value, value))


def test_a_file_size_limit_ends_the_tune_in_one_line_and_the_same_command_resumes(work):
    url = "sqlite:///studies.db"
    limited = _run(work, *TUNE, "--storage", url, limit=_limit(resource.RLIMIT_FSIZE, 150 * 1024))
    _one_line(limited, "could not write the study storage")
    resumed = _run(work, *TUNE, "--storage", url)
    assert resumed.returncode == 0, resumed.stderr
    assert _finished(f"sqlite:///{work / 'studies.db'}") >= 4


def test_a_memory_limit_below_what_the_job_needs_ends_in_one_line(work):
    # 1 GiB of address space: less than torch's libraries map when they load
    limited = _run(work, *TUNE, "--storage", "sqlite:///m.db", limit=_limit(resource.RLIMIT_AS, 2 ** 30))
    _one_line(limited, "out of memory")


@pytest.fixture
def small_disk(work: Path):
    """A 2 MiB tmpfs at `work`/disk, or a skip where this machine does not let the tests mount one."""
    disk = work / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", f"autosync-{uuid.uuid4().hex[:8]}",
                              str(disk)], capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def test_a_disk_that_fills_during_a_tune_ends_it_in_one_line_and_the_storage_resumes(work, small_disk):
    (small_disk / "filler").write_bytes(b"\0" * (2 * 2 ** 20 - 200 * 1024))  # 200 KiB left
    url = f"sqlite:///{small_disk / 'studies.db'}"
    _one_line(_run(work, *TUNE, "--storage", url), "the study storage")
    (small_disk / "filler").unlink()
    resumed = _run(work, *TUNE, "--storage", url)
    assert resumed.returncode == 0, resumed.stderr
    assert _finished(url) >= 4


def _immutable(folder: Path, on: bool) -> subprocess.CompletedProcess:
    """The folder and every file in it made immutable (`on`) or writable again."""
    return subprocess.run(["chattr", "+i" if on else "-i", str(folder), *map(str, folder.iterdir())],
                          capture_output=True, text=True)


def test_a_storage_folder_that_turns_read_only_during_a_tune_ends_it_in_one_line_and_resumes(work):
    folder = work / "storage"
    folder.mkdir()
    if _immutable(folder, True).returncode != 0:  # chattr: an immutable folder is read-only even for root
        pytest.skip("cannot make a folder immutable here (chattr)")
    _immutable(folder, False)
    url = f"sqlite:///{folder / 'studies.db'}"
    args = (*TUNE[:-4], "--n-trials", "12", "--confirm-top", "0", "--patience", "0", "--storage", url)
    proc = subprocess.Popen([sys.executable, "-m", "autosync.cli", *args], cwd=work, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)

    def one_finished() -> bool:
        try:
            return proc.poll() is not None or _finished(url) >= 1
        except Exception:  # noqa: BLE001 - the study is not there yet
            return False

    try:
        wait_for(one_finished, 300, "a finished trial")
        _immutable(folder, True)
        out, err = proc.communicate(timeout=300)
    finally:
        _immutable(folder, False)
    _one_line(subprocess.CompletedProcess(proc.args, proc.returncode, out, err), "write the study storage")
    assert _finished(url) >= 1
    resumed = _run(work, *args)
    assert resumed.returncode == 0, resumed.stderr
    assert _finished(url) >= 12


@pytest.mark.parametrize("error,what", [
    (OSError(28, "No space left on device", "results/x.png"), "no space left to write results/x.png"),
    (OSError(30, "Read-only file system", "studies.db"), "cannot write studies.db: a read-only file system"),
    (MemoryError(), "out of memory"),
    (RuntimeError("[enforce fail at alloc_cpu.cpp:118] DefaultCPUAllocator: can't allocate memory"), "out of memory"),
])
def test_each_resource_failure_is_named_through_the_errors_that_wrap_it(error, what):
    try:
        try:
            raise error
        except Exception as inner:
            raise AssertionError("Should not reach.") from inner  # as Optuna's trial loop wraps a storage error
    except AssertionError as wrapped:
        assert what in resource_failure(wrapped)
    assert resource_failure(ValueError("k must be between 1 and 4")) is None
