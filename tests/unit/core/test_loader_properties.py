"""Property: whatever a job, family or search-space file holds, its loader accepts it (and the result works)
or refuses it with a UserError of one line per problem, each naming the file; never any other exception.

Documents are drawn by mutating a valid file: a random node is replaced by a generated value (wrong
types, NaN and infinity, empty lists and mappings, huge numbers, odd unicode, nested garbage), deleted, or
given an unknown sibling. Derandomized, so CI sees the same examples every run.
"""

from __future__ import annotations

import copy
import math
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autosync.core.errors import FileProblems, UserError
from autosync.core.family import load_family, write_jobs
from autosync.core.job import JobSpec, job_from_dict, load_job
from autosync.search.space import load_space

JOB = {
    "name": "prop",
    "workload": {
        "dataset": {"name": "synthetic_classification", "n_samples": 600, "n_features": 10, "n_classes": 3},
        "model": {"name": "mlp", "hidden": [16, 8]},
        "batch_size": 16,
        "optimizer": {"lr": 0.1, "momentum": 0.5, "nesterov": True},
        "lr_schedule": {"kind": "step", "step_epochs": 2.0, "gamma": 0.5},
        "evaluation": {"every_seconds": 5.0},
    },
    "cluster": {
        "n_workers": 4,
        "round_trip": {"kind": "uniform", "low": 0.5, "high": 1.5},
        "compute": {"model": "gpu", "launch_overhead": 0.2, "saturation_batch": 32, "seconds_per_sample": 0.02},
        "speed_factors": [1.0, 1.0, 0.5, 0.25],
        "slowdowns": [{"at": 1.0, "duration": 5.0, "factor": 3.0, "workers": [0, 2]}],
        "server": {"shards": 2, "bandwidth": 1.0e6, "apply_seconds": 0.001},
    },
    "target": {"metric": "test_accuracy", "threshold": 0.8},
    "budget": {"max_updates": 40, "max_virtual_seconds": 100.0},
    "seed": 3,
}

FAMILY = {
    "name": "prop",
    "seed": 0,
    "n_workers": [4, 8],
    "momentum": {"low": 0.0, "high": 0.9},
    "round_trips": [
        {"kind": "shifted_exponential", "alpha": {"low": 0.0, "high": 1.0}},
        {"kind": "uniform", "low": [0.2, 0.5], "high": {"low": 1.0, "high": 2.0}},
        {"kind": "deterministic",
         "slowdowns": {"episodes": [1, 2], "share": {"low": 0.1, "high": 0.5}, "factor": 2.0, "duration": 20.0}},
    ],
    "speed_factors": {"slow_share": {"low": 0.0, "high": 0.5}, "slowdown": {"low": 1.0, "high": 4.0, "log": True}},
    "workloads": [{
        "name": "w",
        "workload": {"dataset": {"name": "digits"}, "model": {"name": "logreg"}, "optimizer": {"lr": 0.2}},
        "target": {"metric": "train_loss", "threshold": 0.5},
        "budget": {"max_virtual_seconds": 50},
    }],
}

SPACE = {
    "name": "prop",
    "description": "a space to mutate",
    "policies": {
        "backup": {
            "k": {"type": "int", "low": 1, "high": "n_workers", "step": 1},
            "lr_rule": {"type": "categorical", "choices": ["fixed", "proportional"]},
        },
        "ssp": {"staleness": {"type": "int", "low": 0, "high": 4}},
        "bsp": {},
        "sync_switch": {"switch_at": {"type": "float", "low": 0.0, "high": 1.0, "step": 0.25},
                        "config": "sync_switch"},
        "split": {"fractions": {"type": "simplex", "size": "n_workers"}},
    },
}

_SCALARS = st.one_of(
    st.none(), st.booleans(),
    st.integers(-3, 5000), st.sampled_from([0, -1, 2 ** 31, 2 ** 63, 10 ** 30, -(10 ** 30)]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([math.nan, math.inf, -math.inf, 1e308, -1e308, 5e-324, 0.0, -0.0]),
    st.text(max_size=12),  # any unicode: control characters, surrogates excluded by YAML, line separators
    st.sampled_from(["", " ", "n_workers", "n_workers - 9", "\u2028", "é\u0301", "🙂", "a\nb", "\x85", "x" * 300]),
)
_NUMBERS = st.one_of(st.integers(-2, 5000), st.floats(-1.0, 1.0e4), st.floats(0.0, 1.0),
                     st.sampled_from([0, 1, 2, 0.5, 0.999, 1.0e-9, 1.0e9, 1.0e308, 10 ** 30, 2 ** 32]))
_GARBAGE = st.recursive(_SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)), max_leaves=6)


def _paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    """Every place in a document, the top level excluded: mapping keys and list indices."""
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    out = []
    for key, child in items:
        out.append(prefix + (key,))
        out += _paths(child, prefix + (key,))
    return out


@st.composite
def _mutated(draw: Any, base: dict) -> dict:
    doc = copy.deepcopy(base)
    for _ in range(draw(st.sampled_from([1, 1, 1, 2, 3]))):  # mostly one change: more documents load
        paths = _paths(doc)
        if not paths:
            break
        *parents, key = draw(st.sampled_from(paths))
        node = doc
        for part in parents:
            node = node[part]
        action = draw(st.sampled_from(["replace", "replace", "nudge", "nudge", "delete", "sibling"]))
        if action == "replace":
            node[key] = draw(_GARBAGE)
        elif action == "nudge":  # a value of the type written there, often a valid one: reaches what runs after
            old = node[key]
            node[key] = draw(_NUMBERS if isinstance(old, (int, float)) and not isinstance(old, bool)
                             else st.sampled_from([[], {}, old * 2]) if isinstance(old, (list, str)) else _SCALARS)
        elif action == "delete":
            del node[key]
        elif isinstance(node, dict):
            node[draw(st.text(min_size=1, max_size=8))] = draw(_SCALARS)
        else:
            node.append(draw(_GARBAGE))
    return doc


def _write(path: Path, doc: Any) -> None:
    path.write_text(yaml.safe_dump(doc, allow_unicode=True, sort_keys=False))


def _non_finite(value: Any, path: tuple = ()) -> list[tuple]:
    """Where NaN or infinity sits in a dumped value (a slowdown's duration may be infinite: the rest of the run)."""
    if isinstance(value, float) and not math.isfinite(value):
        return [] if path[-1:] == ("duration",) and value == math.inf else [path]
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, (list, tuple)) else ()
    return [p for key, child in items for p in _non_finite(child, path + (key,))]


def _refused_cleanly(exc: UserError, path: Path) -> None:
    lines = str(exc).splitlines()
    assert lines and all(line.startswith(f"{path}: ") for line in lines), str(exc)
    if isinstance(exc, FileProblems):
        assert len(lines) == len(exc.problems), str(exc)


PROPERTY = settings(max_examples=120, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.fixture(scope="module")
def folder():
    with tempfile.TemporaryDirectory() as name:
        yield Path(name)


@pytest.mark.slow
@PROPERTY
@given(doc=_mutated(JOB))
def test_a_job_file_is_accepted_and_round_trips_or_refused_in_one_line_per_problem(folder, doc):
    path = folder / "job.yaml"
    _write(path, doc)
    try:
        spec = load_job(path)
    except UserError as exc:
        _refused_cleanly(exc, path)
        return
    assert not _non_finite(spec.model_dump(mode="json"))
    again = job_from_dict(spec.model_dump(mode="json"), str(path))
    assert again == spec and again.fingerprint() == spec.fingerprint()
    written = JobSpec.model_validate(yaml.safe_load(yaml.safe_dump(spec.model_dump(mode="json"))))
    assert written.model_dump() == spec.model_dump() and written.fingerprint() == spec.fingerprint()


@PROPERTY
@given(doc=_mutated(FAMILY))
def test_a_family_file_draws_valid_jobs_or_is_refused_in_one_line_per_problem(folder, doc):
    path = folder / "family.yaml"
    _write(path, doc)
    try:
        family = load_family(path)
    except UserError as exc:
        _refused_cleanly(exc, path)
        return
    assert not _non_finite(family.model_dump(mode="json"))
    jobs = family.jobs(3)  # every drawn job valid: a problem is the family file's, found when it loads
    write_jobs(family, jobs, folder / "jobs", str(path), "test")


@PROPERTY
@given(doc=_mutated(SPACE), n_workers=st.sampled_from([2, 8]))
def test_a_space_file_is_accepted_or_refused_in_one_line_per_problem(folder, doc, n_workers):
    path = folder / "space.yaml"
    _write(path, doc)
    try:
        space = load_space(path, n_workers)
    except UserError as exc:
        _refused_cleanly(exc, path)
        return
    assert space.policies and not _non_finite([space.constants, [
        [vars(d) for d in dims.values()] for dims in space.dimensions.values()]])
