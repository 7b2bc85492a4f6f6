"""Building a table: every lattice point of every job, on the job's search seeds and held-out seeds.

Each lattice point is run stopped at the target (a miss runs the whole budget); a search that needs a
point's final metric at the end of the budget trains that run when it first asks and the table keeps it
(`autosync.table.replay.cell_for`). `full=True` trains every point to the end instead.

`retrain_table` trains again every cell a table holds of some jobs, after a change to what the simulator
computes has left them stale (`tests/unit/table/test_committed_table.py` finds such a file): the cells are
kept aside until every one is trained, then each job's file is replaced whole.

The cells a build lacks run through joblib, as many at once as it is told (`n_jobs`; -1: every core), on
the backend joblib is given: its own processes by default, or a cluster's workers for a table too big for
one machine (`joblib.parallel_config(backend="dask")`, which `autosync.table.dask_cluster` sets up). Each
finished cell comes back to the building process and is appended at once (`Table.put`), so a stopped build
resumes where it stood, and the table is packed at the end (`Table.pack`): the same bytes whatever the
order the cells finished in.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from autosync.catalog import policy_from_dict
from autosync.core.ctrl_c import workers_spared_ctrl_c
from autosync.core.errors import Interrupted, UserError
from autosync.core.job import JobSpec
from autosync.engine.forks import fork_key
from autosync.table.cells import FULL, TO_TARGET, Cell, cell_key
from autosync.table.replay import compute_cell, full_budget, to_target
from autosync.table.store import Table

__all__ = ["Built", "HELD_OUT_OFFSET", "HELD_OUT_SEEDS", "RETRAINED", "SEARCH_SEEDS", "build_table", "retrain_table",
           "retrain_tasks", "tasks"]

RETRAINED = ".retrained"  # the sub-directory where a retrain keeps its cells until each job's are all trained
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
_WORKLOADS: OrderedDict[str, Any] = OrderedDict()  # this process's last few jobs' workloads, by the job's JSON
_KEPT_WORKLOADS = 4


def _workload(job: JobSpec) -> Any:
    """The job's workload (`build_workload`), built once for the cells of a job and seed that follow one another
    in a process (`tasks` puts them together): a run reads its workload and changes nothing in it, and the
    dataset and model took 1-3 ms a cell, a tenth of the cheapest jobs' cells. None (each run builds its own)
    for a job that runs the user's code, which may keep state of its own."""
    from autosync.workloads.build import build_workload  # not at the top: torch, which a table's reader never needs

    if job.uses_user_code:
        return None
    key = job.model_dump_json()
    workload = _WORKLOADS.pop(key, None)
    if workload is None:
        workload = build_workload(job)
    _WORKLOADS[key] = workload
    while len(_WORKLOADS) > _KEPT_WORKLOADS:
        _WORKLOADS.popitem(last=False)
    return workload


def _compute(task: Task) -> tuple[str, Cell | None, str | None]:
    """One cell, or why its run failed (a policy that does not fit the job: recorded as missing). The cells
    of one process take turns: a run seeds torch's global generator, which threads share (a joblib backend of
    threads, or a Dask worker of several)."""
    with _ONE_AT_A_TIME:
        try:
            return task.key, compute_cell(task.job, policy_from_dict(task.policy), _workload(task.job)), None
        except ValueError as exc:
            return task.key, None, f"{task.policy}: {exc}"


@dataclass
class Built:
    """What a build did: cells computed now, cells the table already held, and runs that failed; for a
    retrain, how many cells came out different from the ones they replaced."""

    computed: int
    reused: int
    failed: list[str]
    files: list[Any]
    changed: int | None = None


def build_table(table: Table, jobs: list[JobSpec], lattice: Callable[[int], list[dict[str, Any]]],
                held_out: int = HELD_OUT_SEEDS, n_jobs: int = 1, full: bool = False,
                on_start: Callable[[int, int], None] | None = None,
                on_done: Callable[[Task | None], None] | None = None) -> Built:
    """Compute every cell of `jobs` x `lattice` x seeds that `table` lacks (`tasks`), then pack it.
    `on_start(todo, reused)` once the work is known; `on_done` after each cell."""
    every = tasks(jobs, lattice, held_out, full)
    todo = _missing(table, every)
    if on_start is not None:
        on_start(len(todo), len(every) - len(todo))
    failed = _compute_into(table, todo, n_jobs, on_done)
    return Built(len(todo) - len(failed), len(every) - len(todo), failed, table.pack())


def retrain_tasks(table: Table, jobs: list[JobSpec]) -> list[Task]:
    """Every cell `table` holds of `jobs`, as the task that trains it again: the job on the cell's seed,
    stopping where the cell's run stopped."""
    out = []
    for job in jobs:
        for key, cell in sorted(table.cells(job.fingerprint()).items()):
            stops = {"stop_at_target": cell.variant.stop_at_target, "stop_at_seconds": cell.variant.stop_at_seconds}
            run = job.model_copy(update={"seed": cell.seed, "budget": job.budget.model_copy(update=stops)})
            if cell_key(fork_key(run, cell.policy), cell.variant) != key:
                raise UserError(f"table {table.directory}: cell {key} of job {cell.fingerprint} is not a run of "
                                "this job's budget (a job file edited after the table was built?): give the "
                                "job file the table was built from")
            out.append(Task(run, cell.policy, key))
    return out


def retrain_table(table: Table, jobs: list[JobSpec], n_jobs: int = 1,
                  on_start: Callable[[int, int], None] | None = None,
                  on_done: Callable[[Task | None], None] | None = None) -> Built:
    """Train again every cell `table` holds of `jobs` (`retrain_tasks`) into `RETRAINED` under it (a stopped
    retrain resumes there), then replace each job's file with the cells trained now. `on_start(todo,
    already retrained)`. `Built.changed` counts the cells whose record differs from the one it replaced;
    a run that fails now is reported in `failed` and its cell dropped (a search trains it when it asks)."""
    aside = Table(table.directory / RETRAINED)
    every = retrain_tasks(table, jobs)
    todo = _missing(aside, every)
    if on_start is not None:
        on_start(len(todo), len(every) - len(todo))
    failed = _compute_into(aside, todo, n_jobs, on_done)
    changed, files = 0, []
    for fingerprint in sorted({job.fingerprint() for job in jobs}):
        old, new = table.cells(fingerprint), aside.cells(fingerprint)
        changed += sum(1 for key, cell in new.items() if key not in old or old[key].to_json(key) != cell.to_json(key))
        if new:
            (packed,) = aside.pack_job(fingerprint)
            files.append(table.replace_job(fingerprint, packed))
    if aside.directory.is_dir() and not any(aside.directory.iterdir()):
        aside.directory.rmdir()
    return Built(len(todo) - len(failed), len(every) - len(todo), failed, files, changed)


def _missing(table: Table, wanted: list[Task]) -> list[Task]:
    """The tasks whose cells `table` lacks; each job's fingerprint computed once (the tasks of a job and seed
    share one job, and a whole table's fingerprints took seconds when computed per task)."""
    fingerprints: dict[int, str] = {}
    missing = []
    for t in wanted:
        if id(t.job) not in fingerprints:
            fingerprints[id(t.job)] = t.job.fingerprint()
        if table.get(fingerprints[id(t.job)], t.key) is None:
            missing.append(t)
    return missing


def _compute_into(table: Table, todo: list[Task], n_jobs: int, on_done: Callable[[Task | None], None] | None
                  ) -> list[str]:
    """Compute `todo`'s cells on joblib (`n_jobs` at once), each kept in `table` as it comes; the failed runs.
    Ctrl-C raises `Interrupted` saying how many cells are kept for the same command to resume from."""
    from joblib import Parallel, delayed

    by_key = {t.key: t for t in todo}
    failed = []
    # the largest jobs first: fewer idle cores at the end
    todo = sorted(todo, key=lambda t: -t.job.cluster.n_workers)
    try:
        with workers_spared_ctrl_c(n_jobs):  # the command takes Ctrl-C and joblib ends its workers
            for key, cell, error in Parallel(n_jobs=n_jobs, return_as="generator_unordered")(
                    delayed(_compute)(t) for t in todo):
                if cell is not None:
                    table.put(key, cell)
                else:
                    failed.append(error)
                if on_done is not None:
                    on_done(by_key[key])
    except KeyboardInterrupt:  # counted from the table: a Ctrl-C between a cell kept and a count would miss it
        kept = len(todo) - len(_missing(table, todo))
        if not kept:  # (its folder, if this command made it, is gone with it)
            raise Interrupted("interrupted before any cell was computed: nothing was kept; the same command starts "
                              "the table again") from None
        raise Interrupted(f"interrupted: {kept} cells computed by this command are kept in {table.directory}; "
                          "the same command resumes from them") from None
    return sorted(failed)
