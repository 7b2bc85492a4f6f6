"""Job files: validation messages, every problem at once, fingerprints."""

from __future__ import annotations

from pathlib import Path

import pytest

from autosync.core.errors import JobFileError
from autosync.core.job import DEFAULT_JOB_PATH, job_from_dict, load_job
from autosync.core.loader import read_yaml_file


def _problems(data, tmp_path: Path) -> list[str]:
    import yaml

    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(JobFileError) as info:
        load_job(path)
    assert all(line.startswith(f"{path}: ") for line in str(info.value).splitlines())
    return info.value.problems


def test_default_job_loads_and_lives_in_baselines():
    job = load_job()
    assert job.name == "digits_default" and job.cluster.n_workers == 16
    assert DEFAULT_JOB_PATH.resolve() == (Path(__file__).parents[3] / "baselines/digits_default.yaml").resolve()


@pytest.mark.parametrize("data, expected", [
    ({"cluster": {"n_workers": 0}}, "cluster.n_workers must be >= 1, but got 0"),
    ({"cluster": {"n_workers": 4, "speed_factors": [1, 2]}},
     "cluster: speed_factors must have n_workers=4 entries, but got 2"),
    ({"workload": {"batch_size": -3}}, "workload.batch_size must be >= 1, but got -3"),
    ({"workload": {"optimizer": {"momentum": 1.5}}}, "workload.optimizer.momentum must be < 1.0, but got 1.5"),
    ({"workload": {"optimizer": {"nesterov": True}}}, "nesterov requires momentum > 0"),
    ({"workload": {"model": {"name": "vgg"}}}, "workload.model.name must be one of"),
    ({"workload": {"dataset": {"name": "mnist"}}}, "root is required for dataset 'mnist'"),
    ({"cluster": {"round_trip": {"kind": "weibull"}}}, "cluster.round_trip must have kind/model one of"),
    ({"cluster": {"round_trip": {"kind": "shifted_exponential", "alpha": 2}}},
     "cluster.round_trip.alpha must be <= 1.0, but got 2"),
    ({"cluster": {"round_trip": {"kind": "uniform", "low": 2, "high": 1}}}, "high must be > low=2.0"),
    ({"cluster": {"n_workers": 2, "slowdowns": [{"at": 1, "factor": 5, "workers": [3]}]}},
     "slowdowns[0].workers must be < n_workers=2, but got 3"),
    ({"budget": {"max_updates": None, "max_virtual_seconds": None}}, "at least one of max_updates"),
    ({"target": {"metric": "test_accuracy"}, "workload": {"dataset": {"name": "synthetic_regression"},
                                                          "model": {"name": "mlp"}}},
     "test_accuracy needs a classification dataset"),
    ({"seed": "abc"}, "seed "),
    ({"worklaod": {}}, "worklaod is not a known field (unknown keys are errors)"),
    ({"cluster": {"round_trip": {"kind": "trace", "path": "missing.csv"}}},
     "cluster.round_trip.path must name an existing CSV file, but got 'missing.csv'"),
])
def test_bad_job_files_name_field_rule_and_value(data, expected, tmp_path):
    problems = _problems(data, tmp_path)
    assert any(expected in p for p in problems), problems


def test_every_problem_is_reported_at_once(tmp_path):
    problems = _problems({"cluster": {"n_workers": 0}, "workload": {"batch_size": 0}, "bogus": 1}, tmp_path)
    assert len(problems) == 3


def test_invalid_yaml_and_non_mapping(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("cluster: [unclosed\n")
    with pytest.raises(JobFileError, match="not valid YAML"):
        load_job(bad)
    bad.write_text("- 1\n- 2\n")
    with pytest.raises(JobFileError, match="top level must be a mapping"):
        load_job(bad)
    with pytest.raises(JobFileError, match="file not found"):
        load_job(tmp_path / "nope.yaml")


def test_a_key_written_twice_is_refused_but_a_merge_key_may_be_overridden(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text("name: a\nseed: 1\nname: b\n")
    with pytest.raises(JobFileError, match=r"line 3: not valid YAML \(key 'name' appears twice in one mapping, "
                                           r"first on line 1\)"):
        load_job(path)
    path.write_text("shared: &opt {lr: 0.1, momentum: 0.5}\nworkload: {optimizer: {<<: *opt, lr: 0.2}}\n")
    data = read_yaml_file(path, JobFileError)
    assert data["workload"]["optimizer"] == {"lr": 0.2, "momentum": 0.5}


@pytest.mark.parametrize("value, problem", [  # found by the fuzzer (tests/fuzzing.py): tracebacks before
    ("!!timestamp nope", "'nope' cannot be read as !!timestamp"),  # AttributeError inside PyYAML
    ("!!bool maybe", "'maybe' cannot be read as !!bool"),  # KeyError
    ("!!set [1]", "expected a mapping node, but found sequence"),  # TypeError in the duplicate-key check
    ("!!map [1]", "expected a mapping node, but found sequence"),
    ("!!int x", "'x' cannot be read as !!int: invalid literal for int() with base 10"),  # had no line
    ("1" + "0" * 5000, "cannot be read as !!int: Exceeds the limit (4300 digits) for integer string conversion"),
])
def test_a_value_its_yaml_tag_cannot_hold_is_one_line_with_its_line_number(tmp_path, value, problem):
    path = tmp_path / "job.yaml"
    path.write_text(f"name: a\nseed: {value}\n")
    with pytest.raises(JobFileError) as caught:
        load_job(path)
    assert str(caught.value).startswith(f"{path}: line 2: not valid YAML (") and problem in str(caught.value)
    assert "\n" not in str(caught.value)


def test_fingerprint_is_stable_and_ignores_seed_budget_and_name():
    a = job_from_dict({"seed": 1, "name": "a", "budget": {"max_updates": 5}})
    b = job_from_dict({"seed": 2, "name": "b", "budget": {"max_updates": 50}})
    c = job_from_dict({"cluster": {"n_workers": 8}})
    assert a.fingerprint() == b.fingerprint() != c.fingerprint()
    assert len(a.fingerprint()) == 16 and a.fingerprint() == job_from_dict({}).fingerprint()


def test_job_loading_does_not_import_torch():
    import subprocess
    import sys

    code = ("import sys; from autosync.core.job import load_job; load_job(); import autosync.catalog; "
            "bad = [m for m in ('torch', 'optuna', 'cvxpy') if m in sys.modules]; print(bad); sys.exit(bool(bad))")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).returncode == 0


@pytest.mark.parametrize("text", ["", "\n\n", "# just a comment\n# and another\n"])
def test_an_empty_job_file_is_an_error_naming_it(tmp_path, text):
    from tests.conftest import autosync, no_traceback

    empty = tmp_path / "empty.yaml"
    empty.write_text(text)
    with pytest.raises(JobFileError, match="the file is empty"):
        load_job(empty)
    proc = autosync("validate", str(empty), cwd=tmp_path)
    no_traceback(proc)
    assert proc.returncode == 2 and f"{empty}: the file is empty" in proc.stderr


def test_a_job_that_only_names_itself_is_the_default_workload(tmp_path):
    named = tmp_path / "named.yaml"
    named.write_text("name: mine\n")
    spec = load_job(named)
    assert spec.name == "mine" and spec.cluster.n_workers == job_from_dict({}, "x").cluster.n_workers
