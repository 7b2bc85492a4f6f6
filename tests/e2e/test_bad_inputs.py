"""Bad input files on the command line: exit code 2 and one line `error: FILE: field rule, but got value`, never
a traceback. The corpus is tests/data/bad_inputs/: job_*.yaml go to `validate`, family_*.yaml to `family`,
space_*.yaml to `tune --space`; each file's first line says what its error line holds. Binary files are made
here."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import autosync, no_traceback

CORPUS = Path(__file__).resolve().parents[1] / "data" / "bad_inputs"
TINY_JOB = ("name: tiny\nworkload: {dataset: {name: digits}, model: {name: logreg}}\ncluster: {n_workers: 4}\n"
            "budget: {max_virtual_seconds: 20}\n")
BINARY = {"high_bytes.yaml": bytes(range(0x80, 0x100)),
          "image.png": b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00"}


def _expected(path: Path) -> str:
    first = path.read_text(encoding="utf-8").splitlines()[0]
    assert first.startswith("# expect: "), path
    return first.removeprefix("# expect: ")


def _one_error_line(proc, path: Path) -> str:
    """The run's only stderr line (a progress bar's closing newline aside), after checking exit code 2."""
    no_traceback(proc)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2, proc.stderr
    assert len(lines) == 1 and lines[0].startswith(f"error: {path}: "), proc.stderr
    return lines[0]


def test_the_corpus_covers_jobs_families_and_spaces():
    kinds = {p.name.split("_")[0] for p in CORPUS.glob("*.yaml")}
    assert kinds == {"job", "family", "space"}


def test_every_bad_job_file_is_one_error_line_naming_file_field_and_value(tmp_path):
    files = sorted(CORPUS.glob("job_*.yaml"))
    proc = autosync("validate", *map(str, files), cwd=tmp_path)  # one run: validate reports every file
    no_traceback(proc)
    assert proc.returncode == 2
    lines = proc.stderr.splitlines()
    assert len(lines) == len(files), proc.stderr
    for path, line in zip(files, lines):
        assert line == f"error: {path}: {_expected(path)}"


@pytest.mark.slow
@pytest.mark.parametrize("path", sorted(CORPUS.glob("family_*.yaml")), ids=lambda p: p.stem)
def test_every_bad_family_file_is_one_error_line(tmp_path, path):
    proc = autosync("family", str(path), "--jobs", "1", "--out", str(tmp_path / "jobs"), cwd=tmp_path)
    assert _expected(path) in _one_error_line(proc, path)
    assert not (tmp_path / "jobs").exists()


@pytest.mark.slow
@pytest.mark.parametrize("path", sorted(CORPUS.glob("space_*.yaml")), ids=lambda p: p.stem)
def test_every_bad_space_file_is_refused_by_tune_before_any_training(tmp_path, path):
    job = tmp_path / "tiny.yaml"
    job.write_text(TINY_JOB)
    proc = autosync("tune", str(job), "--space", str(path), "--storage", f"sqlite:///{tmp_path}/s.db", cwd=tmp_path)
    assert _expected(path) in _one_error_line(proc, path)
    assert not (tmp_path / "s.db").exists()  # refused before the study existed


@pytest.mark.parametrize("name", sorted(BINARY))
def test_a_binary_file_is_not_a_text_yaml_file_for_every_command(tmp_path, name):
    path = tmp_path / name
    path.write_bytes(BINARY[name])
    job = tmp_path / "tiny.yaml"
    job.write_text(TINY_JOB)
    for command in (["validate", str(path)], ["tune", str(path)], ["family", str(path), "--jobs", "1"],
                    ["tune", str(job), "--space", str(path), "--storage", f"sqlite:///{tmp_path}/s.db"]):
        proc = autosync(*command, cwd=tmp_path)
        line = _one_error_line(proc, path)
        assert line.startswith(f"error: {path}: not a text YAML file (byte 0x"), line


def test_a_directory_is_named_as_one_and_a_missing_file_as_missing(tmp_path):
    (tmp_path / "jobs").mkdir()
    for command in ("validate", "family"):
        proc = autosync(command, "jobs", cwd=tmp_path)
        assert _one_error_line(proc, Path("jobs")) == "error: jobs: is a directory, not a YAML file"
        proc = autosync(command, "nope.yaml", cwd=tmp_path)
        assert _one_error_line(proc, Path("nope.yaml")) == "error: nope.yaml: file not found"


def test_a_control_character_is_one_error_line(tmp_path):
    path = tmp_path / "bell.yaml"
    path.write_text("name: ring\x07\nbudget: {max_updates: 10}\n")
    line = _one_error_line(autosync("validate", str(path), cwd=tmp_path), path)
    assert line == f"error: {path}: offset 10: not valid YAML (the control character U+0007 is not allowed)"


@pytest.mark.parametrize("text", [
    "name: big\nbudget: {max_virtual_seconds: 1.0e+308}\n",  # huge, but a number: a run ends at its other limits
    "name: big\nbudget: {max_updates: 1000000000000000000000000000000}\n",
    "name: forever\ncluster: {n_workers: 2, slowdowns: [{at: 1.0, duration: .inf, factor: 2.0, workers: [0]}]}\n"
    "budget: {max_updates: 10}\n",  # inf: a slowdown for the rest of the run
])
def test_extreme_but_meaningful_values_are_accepted(tmp_path, text):
    path = tmp_path / "job.yaml"
    path.write_text(text)
    proc = autosync("validate", str(path), cwd=tmp_path)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr


@pytest.mark.parametrize("args, message", [
    (["--space", "nowhere"], "--space: file "),
    (["--space", "batch_split", "--sampler", "grid"], "--sampler grid needs a discrete space (int, categorical or "
     "stepped float), but"),
    (["--space", "static_k", "--sampler", "gp", "--objective", "time,metric"], "--sampler gp handles one objective"),
])
def test_a_space_or_sampler_refused_by_tune_leaves_no_storage_and_draws_no_bar(tmp_path, args, message):
    job = tmp_path / "tiny.yaml"
    job.write_text(TINY_JOB)
    proc = autosync("tune", str(job), *args, "--storage", f"sqlite:///{tmp_path}/s.db", cwd=tmp_path)
    no_traceback(proc)
    lines = proc.stderr.splitlines()  # no blank line either: refused before tune's progress bar was drawn
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith(f"error: {message}"), proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny.yaml"]  # refused before the storage (or its lock)
