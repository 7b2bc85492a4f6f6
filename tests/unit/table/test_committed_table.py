"""The committed table (results/table) agrees with the engine: cells drawn from each job's file are trained
again and give the run a replay decides on: the same status and time to the target, and the target metric
at each evaluation within float32 noise (a relative 1e-3: the losses of runs trained months apart differ in
their seventh digit where the evaluation's arithmetic was reordered, and on another CPU each step's float32
rounding differs, which over 40 evaluations moved a run's metric by a relative 1.7e-4 and no decision).

A run can be chaotic (a diverging loss, a large learning rate): one ulp in its initial weights moves its
metric by more than that. Such a run's float32 arithmetic differs on another CPU (ATen's and MKL's kernels
depend on its instruction set: AVX2, AVX-512, AMX), so it cannot tell a stale table from another machine:
where a drawn cell differs, it is trained once more with each initial weight one ulp higher, and the cell is
left out where that alone moves the run as far (`_chaotic`).

The table is a cache of runs with no version of the code that trained them. A change to what the simulator
computes leaves it stale, and then a replayed tune no longer runs the live tune's trials; so does a file
built on a branch that had not merged such a change yet. This test draws a few of each job's cells stopped at
the target (the lattice's runs) and fails naming them; `autosync table JOB --retrain` then trains that
job's cells again (results/table/README.md).
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import random
from pathlib import Path

import pytest
import torch

from autosync.catalog import policy_from_dict
from autosync.core.family import load_family
from autosync.core.job import load_job
from autosync.data import BASELINE_DIR, DEFAULT_JOB_PATH
from autosync.table import packing
from autosync.table.cells import Cell
from autosync.table.replay import compute_cell, to_target
from autosync.workloads.workload import Workload
from tests.conftest import BLIND_FAMILIES, COMMITTED_FAMILIES, TABLE_JOBS

ROOT = Path(__file__).resolve().parents[3]
FILES = sorted((ROOT / "results" / "table").glob("*.cells.xz"))
MOST_BYTES = 20 * 10 ** 6  # the search issue's bound on a table committed packed: 20 MB (benchmarks/bench_table.py)
DRAWN = 2  # cells per job: a change to the simulator's results changes most runs of the policies it touches



@functools.cache
def _jobs() -> dict[str, object]:
    """The committed table's jobs by fingerprint: the default job, jobs 0..TABLE_JOBS-1 of each committed
    family and the blind families' jobs."""
    jobs = [load_job(DEFAULT_JOB_PATH)]
    for family, count in [*((f, TABLE_JOBS) for f in COMMITTED_FAMILIES), *BLIND_FAMILIES.items()]:
        jobs += load_family(BASELINE_DIR / f"family_{family}.yaml").jobs(count)
    return {job.fingerprint(): job for job in jobs}


def _drawn(path: Path) -> list[Cell]:
    """`DRAWN` of the file's cells stopped at the target (not at a horizon), the same ones every time."""
    cells = []
    for data in packing.unpack(path.read_bytes()):
        if data.get("variant") == [True, None] and data.get("status") in ("target_reached", "completed"):
            cells.append(Cell.from_json(data))
    cells.sort(key=lambda c: (c.seed, json.dumps(c.policy, sort_keys=True)))
    return random.Random(path.name.split(".")[0]).sample(cells, min(DRAWN, len(cells)))  # by the job, not the format


def _same_run(a: Cell, b: Cell, metric: str) -> bool:
    """The same status and time to the target, and `metric` at each evaluation within float32 noise."""
    if (a.status, a.scores.get("time_to_target"), len(a.evaluations)) != \
            (b.status, b.scores.get("time_to_target"), len(b.evaluations)):
        return False
    values = [(x.get(metric), y.get(metric)) for x, y in zip(a.evaluations, b.evaluations)]
    return all(x == y or (x is not None and y is not None and math.isclose(x, y, rel_tol=1e-3))
               for x, y in values)


def _chaotic(job, cell: Cell, again: Cell, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Whether `cell`'s run, trained `again`, moves as far as `_same_run` tells apart when each initial weight
    is one ulp higher: a run no table built on another CPU can be checked on."""
    first = Workload.init_params

    def nudged(self: Workload) -> torch.Tensor:
        theta = first(self)
        return torch.nextafter(theta, torch.full_like(theta, math.inf))

    with monkeypatch.context() as patch:
        patch.setattr(Workload, "init_params", nudged)
        moved = compute_cell(to_target(job.model_copy(update={"seed": cell.seed})), policy_from_dict(cell.policy))
    return not _same_run(moved, again, job.target.metric)


@pytest.mark.slow  # 34 runs, the default job's about 2 s each
@pytest.mark.parametrize("path", FILES, ids=[p.name.split(".")[0] for p in FILES])
def test_the_committed_table_agrees_with_the_engine(path, monkeypatch):
    job = _jobs().get(path.name.split(".")[0])
    assert job is not None, f"{path.name}: no job of the committed families has this fingerprint"
    stale = []
    for cell in _drawn(path):
        again = compute_cell(to_target(job.model_copy(update={"seed": cell.seed})), policy_from_dict(cell.policy))
        if not _same_run(again, cell, job.target.metric) and not _chaotic(job, cell, again, monkeypatch):
            stale.append(f"{cell.policy} on seed {cell.seed}: time to target {cell.scores.get('time_to_target')} in "
                         f"the table, {again.scores.get('time_to_target')} trained now")
    assert not stale, f"{path.name} is stale, build it again (results/table/README.md): " + "; ".join(stale)


def test_the_committed_checksums_are_the_packed_files_own():
    """results/table/SHA256SUMS names every packed file with its SHA-256 (`sha256sum -c SHA256SUMS`, its
    README): a file packed again without the list written again fails here."""
    listed = dict(reversed(line.split("  ", 1)) for line in
                  (ROOT / "results" / "table" / "SHA256SUMS").read_text().splitlines() if line.strip())
    assert sorted(listed) == [f.name for f in FILES]
    stale = [f.name for f in FILES if hashlib.sha256(f.read_bytes()).hexdigest() != listed[f.name]]
    assert not stale, f"results/table/SHA256SUMS is stale for {stale}: run `sha256sum *.cells.xz > SHA256SUMS` there"


def test_the_committed_table_is_within_the_search_issue_s_20_mb():
    """A table over 20 MB is rebuilt by its command rather than committed (the search issue): a file added
    past the bound fails here, before it lands."""
    size = sum(f.stat().st_size for f in FILES)
    assert size <= MOST_BYTES, f"results/table is {size:,} bytes packed, over {MOST_BYTES:,}"
