"""The input fuzzer in CI (`tests.fuzzing`): generated job, family and search-space files, YAML's oddities
included, are loaded and used or refused in one line per problem naming the file, by the loaders and by
the command line; never a traceback. Derandomized and bounded (about a thousand files, about 25 s on 2
cores); `benchmarks/bench_fuzz_inputs.py` is the long run."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import autosync, no_traceback
from tests.e2e.test_bad_inputs import TINY_JOB
from tests.fuzzing import KINDS, check, files

FUZZ = settings(max_examples=300, deadline=None, derandomize=True, database=None,
                suppress_health_check=list(HealthCheck))
COMMAND_LINE = settings(FUZZ, max_examples=20)


@pytest.fixture(scope="module")
def folder():
    with tempfile.TemporaryDirectory() as name:
        yield Path(name)


@pytest.mark.slow  # 300 files of each kind: about 8 s on 2 cores, the three of them
@pytest.mark.parametrize("kind", KINDS)
def test_a_generated_file_is_loaded_or_refused_in_one_line_per_problem(folder, kind):
    path = folder / f"{kind}.yaml"

    @FUZZ
    @given(data=files(kind), n_workers=st.sampled_from([1, 2, 4, 16]))
    def loaded_or_refused(data: bytes, n_workers: int) -> None:
        path.write_bytes(data)
        outcome = check(kind, path, n_workers)
        assert outcome.defect is None, outcome.defect

    loaded_or_refused()


def _command(kind: str, path: Path, folder: Path) -> list[str]:
    """The command a user runs on a `kind` file: a space goes to `tune` (only where its loader refuses it:
    an accepted one would train)."""
    if kind == "job":
        return ["validate", str(path)]
    if kind == "family":
        return ["family", str(path), "--jobs", "1", "--out", str(folder / "jobs")]
    return ["tune", str(folder / "tiny.yaml"), "--space", str(path), "--storage", f"sqlite:///{folder}/s.db"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_generated_file_on_the_command_line_is_exit_0_or_one_error_line_per_problem(folder, kind):
    path = folder / f"cli_{kind}.yaml"
    (folder / "tiny.yaml").write_text(TINY_JOB)

    @COMMAND_LINE
    @given(data=files(kind))
    def exit_0_or_2(data: bytes) -> None:
        path.write_bytes(data)
        if kind == "space" and check(kind, path).kind != "refused":
            return
        proc = autosync(*_command(kind, path, folder), cwd=folder)
        no_traceback(proc)
        lines = [line for line in proc.stderr.splitlines() if line.strip() and not line.startswith("wrote ")]
        assert proc.returncode in (0, 2), proc.stderr
        if proc.returncode == 2:
            assert lines and all(line.startswith(f"error: {path}: ") for line in lines), proc.stderr
            assert not (folder / "s.db").exists()  # a refused space leaves no storage behind

    exit_0_or_2()
