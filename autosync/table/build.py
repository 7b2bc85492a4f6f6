"""Building a table: every lattice point of every job, on the job's search seeds and held-out seeds.

Each lattice point is run stopped at the target (a miss runs the whole budget); a search that needs a
point's final metric at the end of the budget trains that run when it first asks and the table keeps it
(`autosync.table.replay.cell_for`). `full=True` trains every point to the end instead.

The cells a build lacks run through joblib, as many at once as it is told (`n_jobs`; -1: every core), on
the backend joblib is given: its own processes by default, or a cluster's workers for a table too big for
one machine (`joblib.parallel_config(backend="dask")`, which `autosync.table.dask_cluster` sets up). Each
finished cell comes back to the building process and is appended at once (`Table.put`), so a stopped build
resumes where it stood, and the table is packed at the end (`Table.pack`): the same bytes whatever the
order the cells finished in.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from autosync.catalog import policy_from_dict
from autosync.core.job import JobSpec
from autosync.engine.forks import fork_key
from autosync.table.cells import FULL, TO_TARGET, Cell, cell_key
from autosync.table.replay import compute_cell, full_budget, to_target
from autosync.table.store import Table

SEARCH_SEEDS = 2  # the seeds a tune searches on: job.seed and job.seed + 1 (`trial_seeds`, and the race's second seed)
HELD_OUT_OFFSET = 100  # held-out seeds start this far past the job's seed (as the reference grid scores them)
HELD_OUT_SEEDS = 2


def table_seeds(job: JobSpec, held_out: int = HELD_OUT_SEEDS) -> list[int]:
    """The seeds a table holds for `job`: its search seeds, then `held_out` seeds no search trains on."""
    return [job.seed + i for i in range(SEARCH_SEEDS)] + [job.seed + HELD_OUT_OFFSET + i for i in range(held_out)]


@dataclass(frozen=True)
class Task:
    """One cell to compute: a lattice point on a job and seed."""

    job: JobSpec  # with the cell's seed, full budget
    policy: dict[str, Any]  # canonical on the job's workers
    key: str


def tasks(jobs: Iterable[JobSpec], lattice: Callable[[int], list[dict[str, Any]]],
          held_out: int = HELD_OUT_SEEDS, full: bool = False) -> list[Task]:
    """Every (job, lattice point, seed) cell, each lattice point in its canonical form on the job's workers
    (the form a search trains) and once: stopped at the target, or with `full` trained to the end of the
    budget (the final metric of every point, at the cost of every run's whole budget)."""
    variant, stop = (FULL, full_budget) if full else (TO_TARGET, to_target)
    out: dict[str, Task] = {}
    for job in jobs:
        n = job.cluster.n_workers
        canonical = {}
        for spec in lattice(n):
            policy = policy_from_dict(spec).canonical(n)
            canonical.setdefault(policy.to_json(), policy.to_dict())
        for seed in table_seeds(job, held_out):
            run = stop(job.model_copy(update={"seed": seed}))
            for policy in canonical.values():
                key = cell_key(fork_key(run, policy), variant)
                out.setdefault(key, Task(run, policy, key))
    return list(out.values())


_ONE_AT_A_TIME = threading.Lock()


def _compute(task: Task) -> tuple[str, Cell | None, str | None]:
    """One cell, or why its run failed (a policy that does not fit the job: recorded as missing). The cells
    of one process take turns: a run seeds torch's global generator, which threads share (a joblib backend of
    threads, or a Dask worker of several)."""
    with _ONE_AT_A_TIME:
        try:
            return task.key, compute_cell(task.job, policy_from_dict(task.policy)), None
        except ValueError as exc:
            return task.key, None, f"{task.policy}: {exc}"


@dataclass
class Built:
    """What a build did: cells computed now, cells the table already held, and runs that failed."""

    computed: int
    reused: int
    failed: list[str]
    files: list[Any]


def build_table(table: Table, jobs: list[JobSpec], lattice: Callable[[int], list[dict[str, Any]]],
                held_out: int = HELD_OUT_SEEDS, n_jobs: int = 1, full: bool = False,
                on_start: Callable[[int, int], None] | None = None,
                on_done: Callable[[Task | None], None] | None = None) -> Built:
    """Compute every cell of `jobs` x `lattice` x seeds that `table` lacks (`tasks`), then pack it.
    `on_start(todo, reused)` once the work is known; `on_done` after each cell."""
    from joblib import Parallel, delayed

    todo, reused = [], 0
    for task in tasks(jobs, lattice, held_out, full):
        if table.get(task.job.fingerprint(), task.key) is None:
            todo.append(task)
        else:
            reused += 1
    if on_start is not None:
        on_start(len(todo), reused)
    by_key = {t.key: t for t in todo}
    failed = []
    # the largest jobs first: fewer idle cores at the end
    todo.sort(key=lambda t: -t.job.cluster.n_workers)
    for key, cell, error in Parallel(n_jobs=n_jobs, return_as="generator_unordered")(
            delayed(_compute)(t) for t in todo):
        if cell is not None:
            table.put(key, cell)
        else:
            failed.append(error)
        if on_done is not None:
            on_done(by_key[key])
    return Built(len(todo) - len(failed), reused, sorted(failed), table.pack())
