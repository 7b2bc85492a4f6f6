"""Property: whatever a job, family or search-space file holds, its loader accepts it (and the result works)
or refuses it with a UserError of one line per problem, each naming the file; never any other exception.

Documents are drawn by mutating a valid file (`tests.fuzzing.mutated`: a random node replaced by a generated
value, nudged, deleted, or given an unknown sibling) and dumped as plain YAML; what loads is held to strict
round trips here (`tests/unit/core/test_fuzz_inputs.py` adds YAML's oddities and the command line).
Derandomized, so CI sees the same examples every run.
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autosync.core.errors import UserError
from autosync.core.family import load_family, write_jobs
from autosync.core.job import JobSpec, job_from_dict, load_job
from autosync.search.space import load_space
from tests.fuzzing import FAMILY, JOB, SPACE, mutated, refused_cleanly


def _write(path: Path, doc: Any) -> None:
    path.write_text(yaml.safe_dump(doc, allow_unicode=True, sort_keys=False))


def _non_finite(value: Any, path: tuple = ()) -> list[tuple]:
    """Where NaN or infinity sits in a dumped value (a slowdown's duration may be infinite: the rest of the run)."""
    if isinstance(value, float) and not math.isfinite(value):
        return [] if path[-1:] == ("duration",) and value == math.inf else [path]
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, (list, tuple)) else ()
    return [p for key, child in items for p in _non_finite(child, path + (key,))]


PROPERTY = settings(max_examples=120, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.fixture(scope="module")
def folder():
    with tempfile.TemporaryDirectory() as name:
        yield Path(name)


@pytest.mark.slow
@PROPERTY
@given(doc=mutated([JOB]))
def test_a_job_file_is_accepted_and_round_trips_or_refused_in_one_line_per_problem(folder, doc):
    path = folder / "job.yaml"
    _write(path, doc)
    try:
        spec = load_job(path)
    except UserError as exc:
        assert refused_cleanly(exc, path) is None
        return
    assert not _non_finite(spec.model_dump(mode="json"))
    again = job_from_dict(spec.model_dump(mode="json"), str(path))
    assert again == spec and again.fingerprint() == spec.fingerprint()
    written = JobSpec.model_validate(yaml.safe_load(yaml.safe_dump(spec.model_dump(mode="json"))))
    assert written.model_dump() == spec.model_dump() and written.fingerprint() == spec.fingerprint()


@pytest.mark.slow  # 120 examples: about 2 s (a family's) and 6 s (a space's) on 2 cores
@PROPERTY
@given(doc=mutated([FAMILY]))
def test_a_family_file_draws_valid_jobs_or_is_refused_in_one_line_per_problem(folder, doc):
    path = folder / "family.yaml"
    _write(path, doc)
    try:
        family = load_family(path)
    except UserError as exc:
        assert refused_cleanly(exc, path) is None
        return
    assert not _non_finite(family.model_dump(mode="json"))
    jobs = family.jobs(3)  # every drawn job valid: a problem is the family file's, found when it loads
    write_jobs(family, jobs, folder / "jobs", str(path), "test")


@pytest.mark.slow  # 120 examples: about 2 s (a family's) and 6 s (a space's) on 2 cores
@PROPERTY
@given(doc=mutated([SPACE]), n_workers=st.sampled_from([2, 8]))
def test_a_space_file_is_accepted_or_refused_in_one_line_per_problem(folder, doc, n_workers):
    path = folder / "space.yaml"
    _write(path, doc)
    try:
        space = load_space(path, n_workers)
    except UserError as exc:
        assert refused_cleanly(exc, path) is None
        return
    assert space.policies and not _non_finite([space.constants, [
        [vars(d) for d in dims.values()] for dims in space.dimensions.values()]])
