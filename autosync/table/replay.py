"""Replay: a search's runs read from the table instead of trained, taking the decisions the live runs take.

`replayed_run` stands in for the simulator where a search trains (`autosync.search.objective`, through
`BackendChoice.table`): it answers the run the search asks for (a full budget, stopped at the target, at a
horizon) from its cell, computing and storing the cell first where the table has none; its progress
callback hears the same evaluations in the same order, so a pruner that stops the live run stops the
replayed one at the same evaluation, and the virtual seconds it reports are the same.

What a live search does not train again is replayed too: `autosync.engine.forks` keeps a run stopped at the
target for its full-budget check, and the prefixes of switch-point runs for the other switch points. The
replay keeps the times those snapshots stood at (`KeptTimes`, no snapshot) by the same keys and the same
rules, so the runs it answers as forked, and the seconds forked, are the live search's in one process.
The live store drops its oldest snapshots beyond `autosync.engine.forks.MAX_BYTES`; the replay keeps them
all, so the two differ only for a search whose kept snapshots outgrow that (none of the shipped jobs).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from autosync.catalog import label_of
from autosync.core.errors import UserError
from autosync.core.job import JobSpec
from autosync.engine.forks import ForkStore, fork_key, prefix_key, run_sharing_prefixes, switch_param_of
from autosync.table.cells import FULL, TO_TARGET, Cell, Prefix, Variant, as_forked, cell_key, scores_of
from autosync.table.store import Table

if TYPE_CHECKING:
    from autosync.policies import Policy
    from autosync.workloads.workload import Workload


@dataclass(frozen=True)
class ReplayedRun:
    """What a search reads of a run (`RunResult.status` and `.metrics`), answered from a cell."""

    status: str
    metrics: dict[str, Any]


@dataclass(frozen=True)
class _Kept:
    at_seconds: float
    undecided_above: float | None = None
    past_target: bool = False


class KeptTimes:
    """`autosync.engine.forks.ForkStore`'s keys and choices without its snapshots: where each kept run and
    prefix stood."""

    def __init__(self) -> None:
        self._kept: dict[tuple[str, float | None], _Kept] = {}

    def put(self, key: str, at_seconds: float, undecided_above: float | None = None, past_target: bool = False) -> None:
        self._kept.pop((key, undecided_above), None)  # a replaced entry is the newest, as in the live store
        self._kept[(key, undecided_above)] = _Kept(at_seconds, undecided_above, past_target)

    def get(self, key: str) -> _Kept | None:
        return self._kept.get((key, None))

    def prefix(self, key: str, switch_point: float, stops_at_target: bool, until: float | None) -> _Kept | None:
        """`ForkStore.prefix`'s choice: the longest prefix that is the run of `switch_point`."""
        fitting = [kept for (k, above), kept in self._kept.items()
                   if k == key and above is not None and switch_point > above
                   and not (stops_at_target and kept.past_target) and (until is None or kept.at_seconds <= until)]
        return max(fitting, key=lambda kept: kept.at_seconds, default=None)

    def clear(self) -> None:
        self._kept.clear()


KEPT = KeptTimes()  # this process's, as `autosync.engine.forks.FORKS` is the live search's


def compute_cell(job: JobSpec, policy: "Policy", workload: "Workload | None" = None) -> Cell:
    """Train `policy` on `job` as a search trains it, from the start, and record it as a cell (the prefixes
    it keeps read from a store of its own). `workload`: the job's, built already (None: built here)."""
    heard: list[dict[str, Any]] = []
    store = ForkStore()
    _, result, _ = run_sharing_prefixes(job, policy, heard.append, store=store, workload=workload)
    switch_param = switch_param_of(job, policy)
    prefixes = [] if switch_param is None else [
        Prefix(k.at_seconds, k.undecided_above, k.past_target)
        for k in store.prefixes(prefix_key(job, policy.to_dict(), switch_param))]
    return Cell(job.fingerprint(), job.seed, policy.to_dict(), Variant.of(job), result.status, heard,
                scores_of(result.metrics), prefixes)


def cell_for(table: Table, job: JobSpec, policy: "Policy", fingerprint: str | None = None) -> Cell:
    """The run of `policy` on `job` (its seed and budget, stopping where the budget says): its own cell, or
    derived from the full-budget cell or the cell stopped at the target where the table holds one that
    answers for it (`Cell.as_run`); else trained as asked and stored. `fingerprint`: `job.fingerprint()`
    where the caller has it (a fit reads thousands of cells of a job: computing it was most of a read)."""
    variant = Variant.of(job)
    fingerprint = fingerprint or job.fingerprint()
    key = fork_key(job, policy.to_dict(), fingerprint)
    for held in (variant, FULL, TO_TARGET):
        cell = table.get(fingerprint, cell_key(key, held))
        run = None if cell is None else cell.as_run(variant, job.target)
        if run is not None:
            return run
    return _stored(table, job, policy, cell_key(key, variant))


def to_target(job: JobSpec) -> JobSpec:
    """`job` stopped at the target (else at the end of its budget): the run a table holds for a lattice point."""
    return job.model_copy(update={"budget": job.budget.model_copy(update={"stop_at_target": True,
                                                                         "stop_at_seconds": None})})


def full_budget(job: JobSpec) -> JobSpec:
    """`job` trained to the end of its budget, whatever its budget says of stopping earlier."""
    return job.model_copy(update={"budget": job.budget.model_copy(update={"stop_at_target": False,
                                                                         "stop_at_seconds": None})})


def replayed_run(table: Table, job: JobSpec, policy: "Policy",
                 progress: Callable[[dict[str, Any]], None] | None, kept: KeptTimes = KEPT,
                 ) -> tuple[ReplayedRun, float]:
    """`autosync.search.objective`'s simulator run answered from `table`: the run and the virtual seconds
    taken from a kept run instead of trained (`run_sharing_prefixes`' choice of where to start)."""
    spec = policy.to_dict()
    key = fork_key(job, spec)
    stops_at_target, until = job.budget.stop_at_target, job.budget.stop_at_seconds
    switch_param = switch_param_of(job, policy)
    pkey = prefix_key(job, spec, switch_param) if switch_param is not None else None
    prefix = kept.prefix(pkey, spec["params"][switch_param], stops_at_target, until) if pkey is not None else None
    own = None if stops_at_target else kept.get(key)
    if own is not None and until is not None and own.at_seconds > until:
        own = None  # kept past where this run stops
    start = prefix if prefix is not None and (own is None or prefix.at_seconds > own.at_seconds) else own
    forked = 0.0 if start is None else start.at_seconds
    run = cell_for(table, job, policy)
    waiting = [p for p in run.prefixes if start is None or p.at_seconds > start.at_seconds]
    for evaluation in run.evaluations:
        if progress is not None:
            progress(as_forked(evaluation) if start is not None and evaluation["time"] <= forked else evaluation)
        while waiting and waiting[0].at_seconds <= evaluation["time"]:  # kept after the step that evaluated
            p = waiting.pop(0)
            kept.put(pkey, p.at_seconds, p.undecided_above, p.past_target)
    if run.status == "target_reached":
        kept.put(key, run.scores["virtual_time"])
    return ReplayedRun(run.status, {**run.scores, "target_metric": job.target.metric}), forked


def _stored(table: Table, job: JobSpec, policy: "Policy", key: str) -> Cell:
    cell = table.get(job.fingerprint(), key)
    if cell is None and table.read_only:
        raise UserError(f"--table {table.directory} lacks the run of {label_of(policy.to_dict())} on job {job.name} "
                        f"(seed {job.seed}), and is only read here: compute it first (the same command without "
                        "--check, or `autosync table`)")
    if cell is None:
        cell = compute_cell(job, policy)
        table.put(key, cell)
    return cell


