"""Job families: drawn jobs are valid, reproducible job files; bad family files fail in one line each."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from autosync.core.errors import UserError
from autosync.core.family import FamilyFileError, load_family
from autosync.core.job import load_job
from tests.conftest import autosync, no_traceback

REPO = Path(__file__).resolve().parents[3]
STRAGGLERS = REPO / "baselines" / "family_stragglers.yaml"


def test_the_committed_families_load():
    for path in sorted((REPO / "baselines").glob("family_*.yaml")):
        family = load_family(path)
        assert family.jobs(3)


def test_drawing_is_reproducible_and_job_i_ignores_the_count():
    family = load_family(STRAGGLERS)
    first = [j.fingerprint() for j in family.jobs(8)]
    assert [j.fingerprint() for j in load_family(STRAGGLERS).jobs(8)] == first
    assert [j.fingerprint() for j in family.jobs(12)][:8] == first  # a longer draw extends, never reshuffles
    assert len(set(first)) == 8
    other = family.model_copy(update={"seed": 1})
    assert [j.fingerprint() for j in other.jobs(8)] != first


def test_drawn_jobs_stay_in_the_family_ranges():
    family = load_family(STRAGGLERS)
    jobs = family.jobs(60)
    kinds = {j.cluster.round_trip.kind for j in jobs}
    assert kinds == {"shifted_exponential", "pareto", "gamma", "deterministic"}
    assert {j.cluster.n_workers for j in jobs} == {8, 16, 32}
    assert {j.workload.optimizer.momentum for j in jobs} == {0.0, 0.9}
    assert {j.workload.model.name for j in jobs} == {"logreg", "mlp", "cnn"}
    for j in jobs:
        rt = j.cluster.round_trip
        if rt.kind == "shifted_exponential":
            assert 0.0 <= rt.alpha <= 1.0
        if rt.kind == "pareto":  # the mean multiplier stays 1: scale * shape / (shape - 1)
            assert 1.2 <= rt.shape <= 3.0 and rt.scale * rt.shape / (rt.shape - 1) == pytest.approx(1.0, rel=1e-4)
        if rt.kind == "deterministic":
            assert 1 <= len(j.cluster.slowdowns) <= 3
            for s in j.cluster.slowdowns:
                assert 2.0 <= s.factor <= 5.0 and 10.0 <= s.duration <= 60.0 and s.at <= 100.0
        speeds = j.cluster.speed_factors or [1.0] * j.cluster.n_workers
        assert all(0.25 - 1e-4 <= s <= 1.0 for s in speeds)
        assert sum(s < 1 for s in speeds) <= j.cluster.n_workers / 2
        # the effective step eta / (1 - mu) is the workload's whatever momentum was drawn
        opt = j.workload.optimizer
        assert opt.lr / (1 - opt.momentum) == pytest.approx({"digits": 0.2, "synthetic_classification": (
            0.5 if j.workload.model.name == "mlp" else 0.2)}[j.workload.dataset.name])


def test_written_jobs_are_ordinary_job_files(tmp_path):
    proc = autosync("family", str(STRAGGLERS), "--jobs", "4", "--out", str(tmp_path / "jobs"), "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    listed = json.loads(proc.stdout)["jobs"]
    family = load_family(STRAGGLERS)
    for i, entry in enumerate(listed):
        job = load_job(entry["file"])
        assert job.fingerprint() == entry["fingerprint"] == family.job(i).fingerprint()
        assert Path(entry["file"]).read_text().startswith(f"# Job {i} of family stragglers")
    check = autosync("validate", *(e["file"] for e in listed), cwd=tmp_path)
    assert check.returncode == 0 and check.stdout.count("ok:") == 4


FAMILY = """\
name: fam
n_workers: [4, 8]
round_trips:
  - {kind: shifted_exponential, alpha: {low: 0.0, high: 1.0}}
workloads:
  - name: w
    workload: {dataset: {name: digits}, model: {name: logreg}}
    target: {metric: train_loss, threshold: 0.5}
    budget: {max_virtual_seconds: 50}
"""


@pytest.mark.parametrize("change, message", [
    (("name: fam", "name: fam\ncolour: red"), "colour is not a known field (unknown keys are errors), but got 'red'"),
    (("high: 1.0", "high: 1.5"), "round_trips.0.alpha must be <= 1.0, but got 1.5"),
    (("low: 0.0, high: 1.0", "low: 0.8, high: 0.2"), "high must be >= low=0.8, but got high=0.2"),
    (("[4, 8]", "[4, 0]"), "n_workers must be whole numbers between 1 and 4096, but got 0"),
    (("{max_virtual_seconds: 50}", "{max_updates: 50}"), "budget.max_virtual_seconds is required"),
    (("kind: shifted_exponential", "kind: lognormal"), "round_trips.0.kind must be one of 'deterministic', 'shifted_exponential'"),
    (("model: {name: logreg}", "model: {name: transformer}"), "workloads.0.workload.model.name must be one of"),
])
def test_bad_family_files_name_field_rule_and_value(tmp_path, change, message):
    path = tmp_path / "fam.yaml"
    path.write_text(FAMILY.replace(*change))
    with pytest.raises(FamilyFileError) as err:
        load_family(path)
    assert message in str(err.value), str(err.value)
    assert str(err.value).startswith(str(path))
    assert isinstance(err.value, UserError)


def test_bad_family_file_on_the_command_line_exits_2_in_one_line(tmp_path):
    path = tmp_path / "fam.yaml"
    path.write_text(FAMILY.replace("high: 1.0", "high: 1.5"))
    for command in ("family", "robustness"):
        proc = autosync(command, str(path), "--jobs", "2", cwd=tmp_path)
        assert proc.returncode == 2
        no_traceback(proc)
        assert proc.stderr.strip() == f"error: {path}: round_trips.0.alpha must be <= 1.0, but got 1.5"
    missing = autosync("family", str(tmp_path / "nope.yaml"), cwd=tmp_path)
    assert missing.returncode == 2 and "nope.yaml: file not found" in missing.stderr


def test_a_range_from_zero_to_negative_zero_draws_zero():  # found by the fuzzer: numpy's ValueError
    from autosync.core.family import Range, draw

    assert draw(Range(low=0.0, high=-0.0), np.random.default_rng(0)) == 0.0


def test_ranges_draw_uniformly_inside_their_bounds():
    from autosync.core.family import Range, draw

    rng = np.random.default_rng(0)
    values = [draw(Range(low=2.0, high=5.0), rng) for _ in range(2000)]
    assert 2.0 <= min(values) < 2.1 and 4.9 < max(values) <= 5.0
    assert abs(np.mean(values) - 3.5) < 0.1
    logs = [draw(Range(low=1.0, high=100.0, log=True), rng) for _ in range(2000)]
    assert abs(np.median(logs) - 10.0) < 1.5  # log-uniform: the median is the geometric mean
    assert {draw([1, 2, 3], rng) for _ in range(100)} == {1, 2, 3}
