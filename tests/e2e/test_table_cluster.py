"""`autosync table --scheduler`: a table built on a Dask cluster's workers packs the bytes of a build on this
machine's processes; a cluster that cannot be used is one line and exit code 2 before anything runs.

The builds need the optional extra `cluster` (`pip install "autosync[cluster]"`, which `.ci/run` installs)
and skip without it."""

from __future__ import annotations

import importlib.util
import json
import sys

import pytest

from autosync.table import dask_cluster as cluster
from tests.conftest import autosync, no_traceback

POLICIES = ("--policies", "bsp", "--policies", "asp", "--policies", "backup:k=3", "--held-out", "1")
NO_DASK = "the optional extra `cluster` is not installed (pip install \"autosync[cluster]\")"
needs_dask = pytest.mark.skipif(importlib.util.find_spec("distributed") is None, reason=NO_DASK)


def _packed(tmp_path, job, directory: str, *args: str) -> bytes:
    proc = autosync("table", str(job), *POLICIES, "--json", "--out", directory, *args, cwd=tmp_path)
    no_traceback(proc)
    assert proc.returncode == 0, proc.stderr
    built = json.loads(proc.stdout)
    assert (built["computed"], built["reused"], built["failed"]) == (9, 0, [])  # 3 points x 3 seeds
    (path,) = built["files"]
    return (tmp_path / path).read_bytes()


@needs_dask
@pytest.mark.slow
@pytest.mark.processes
def test_a_table_built_on_a_dask_cluster_packs_the_bytes_of_a_build_on_this_machine(tiny_job, tmp_path):
    from dask.distributed import LocalCluster

    here = _packed(tmp_path, tiny_job, "here", "--n-jobs", "1")
    # a cluster of two worker processes started for the build
    assert _packed(tmp_path, tiny_job, "local", "--scheduler", "local", "--n-jobs", "2") == here
    with LocalCluster(n_workers=1, threads_per_worker=2, processes=True, dashboard_address=None) as running:
        # a cluster running already, reached at its scheduler's address; its worker of two threads runs one
        # cell at a time (`autosync.table.build._compute`); the cluster above had two workers
        address = running.scheduler_address
        assert _packed(tmp_path, tiny_job, "remote", "--scheduler", address, "--n-jobs", "-1") == here


def _refused(tmp_path, tiny_job, scheduler: str, message: str) -> None:
    proc = autosync("table", str(tiny_job), "--policies", "bsp", "--scheduler", scheduler, "--out", "t",
                    cwd=tmp_path)
    no_traceback(proc)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "cells" not in proc.stderr  # one line, no progress bar
    assert not (tmp_path / "t").exists()


def test_a_cluster_without_the_extra_installed_is_one_line(tiny_job, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "dask.distributed", None)  # as if not installed: its import fails
    _refused(tmp_path, tiny_job, "local", 'needs Dask, which is not installed: pip install "autosync[cluster]"')


@needs_dask
def test_a_scheduler_address_where_none_answers_is_one_line(tiny_job, tmp_path, monkeypatch):
    monkeypatch.setattr(cluster, "CONNECT_SECONDS", 1)
    for address in ("tcp://127.0.0.1:1", "nonsense"):
        _refused(tmp_path, tiny_job, address, f"--scheduler {address}: no Dask scheduler answered there")
