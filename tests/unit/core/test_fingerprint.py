"""The job's fingerprint (`autosync.core.fingerprint`): every committed cache key holds, and a new field
with a default changes none."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from pydantic import BaseModel

from autosync.core.errors import UserError
from autosync.core.job import ClusterSpec, JobSpec, ServerSpec, job_from_dict, load_job

ROOT = Path(__file__).resolve().parents[3]


def _version_1(job: JobSpec) -> str:
    """The fingerprint as version 1 computed it, field by field (the code it replaced, kept as the reference)."""
    workload = job.workload.model_dump(mode="json")
    for part in ("dataset", "model"):
        spec = getattr(job.workload, part)
        if spec.factory is not None:
            workload[part] = {**spec.user_code_identity(),
                              **{k: v for k, v in workload[part].items()
                                 if k not in spec.builtin_fields and k not in ("factory", "kwargs", "version")}}
        else:
            for key in ("factory", "kwargs", "version"):
                del workload[part][key]
    if job.workload.dataset.factory is None and workload["dataset"]["name"] != "synthetic_images":
        del workload["dataset"]["image_shape"]
    if job.workload.loss is None:
        del workload["loss"]
    cluster = job.cluster.model_dump(mode="json")
    if job.cluster.server == ServerSpec():
        del cluster["server"]
    elif job.cluster.server.gradient_seconds == 0.0:
        del cluster["server"]["gradient_seconds"]
    if job.cluster.compute_units is None:
        del cluster["compute_units"]
    canonical = {"v": 1, "workload": workload, "cluster": cluster, "target": job.target.model_dump(mode="json")}
    return hashlib.sha256(json.dumps(canonical, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]


def _committed_jobs() -> list[JobSpec]:
    """Every job file in the repository (baselines, examples, tests' data, the shipped default)."""
    jobs = []
    for path in sorted(ROOT.rglob("*.yaml")):
        if any(part.startswith(".") for part in path.relative_to(ROOT).parts):
            continue
        try:
            jobs.append(load_job(path))
        except (UserError, ValueError, OSError):
            continue  # a search space, a family, a job that names a dataset not here: not a job to key
    return jobs


VARIANTS = [
    {},
    {"cluster": {"server": {"apply_seconds": 0.001}}},
    {"cluster": {"server": {"apply_seconds": 0.001, "gradient_seconds": 0.0005}}},
    {"cluster": {"compute_units": {"count": 2}}},
    {"workload": {"loss": "mse", "dataset": {"name": "synthetic_regression"}, "model": {"name": "mlp"}},
     "target": {"metric": "test_loss", "threshold": 0.5}},
    {"workload": {"dataset": {"name": "synthetic_images", "image_shape": [1, 8, 8]}, "model": {"name": "cnn"}}},
]


def test_every_committed_job_keeps_its_cache_key():
    jobs = _committed_jobs()
    assert len(jobs) >= 10  # the baselines and examples were found
    for job in jobs:
        assert job.fingerprint() == _version_1(job), job.source


@pytest.mark.parametrize("fields", VARIANTS)
def test_a_job_with_each_optional_section_keeps_its_cache_key(fields):
    try:
        job = job_from_dict(fields)
    except (UserError, ValueError) as exc:
        pytest.skip(f"not a valid job here: {exc}")
    assert job.fingerprint() == _version_1(job)


def _committed_results(pattern: str) -> list[Path]:
    """The files under results/ that git tracks (caches such as results/answer_quality/ are left out: they
    are written by benchmarks, not committed); every matching file where this is not a git checkout."""
    import subprocess

    found = sorted((ROOT / "results").rglob(pattern))
    try:
        listed = subprocess.run(["git", "ls-files", "results"], cwd=ROOT, capture_output=True, text=True,
                                check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        return found
    tracked = {ROOT / name for name in listed}
    return [p for p in found if p in tracked] if tracked else found


def test_every_fingerprint_committed_in_results_is_a_committed_jobs():
    """The leaderboards and robustness reports in results/ name their jobs by fingerprint: each is still
    the fingerprint of a job file in the repository."""
    import re

    committed = set(re.findall(r'"fingerprint": "([0-9a-f]{16})"',
                               "".join(p.read_text() for p in _committed_results("*.json"))))
    assert committed  # the results were found
    assert committed <= {job.fingerprint() for job in _committed_jobs()}


class _ClusterWithANewField(ClusterSpec):
    """A cluster spec as a later version might declare it: one more field, with a default."""

    link_jitter: float = 0.0


class _ServerWithANewField(ServerSpec):
    later_cost: float = 0.0


@pytest.mark.parametrize("job", [job_from_dict({}),
                                 job_from_dict({"cluster": {"server": {"apply_seconds": 0.002}}})],
                         ids=["default", "server"])
def test_adding_a_field_with_a_default_keeps_every_cache_key(job):
    before = job.fingerprint()
    dumped = job.cluster.model_dump()
    server = _ServerWithANewField(**dumped.pop("server"))
    newer = job.model_copy(update={"cluster": _ClusterWithANewField(**dumped, server=server)})
    assert isinstance(newer.cluster, BaseModel) and newer.cluster.link_jitter == 0.0
    assert newer.fingerprint() == before
    changed = job.model_copy(update={"cluster": _ClusterWithANewField(**dumped, server=server, link_jitter=0.1)})
    assert changed.fingerprint() != before  # set, the new field makes another job
    later = job.model_copy(update={"cluster": _ClusterWithANewField(
        **dumped, server=_ServerWithANewField(**server.model_dump(exclude={"later_cost"}), later_cost=1.0))})
    assert later.fingerprint() != before
