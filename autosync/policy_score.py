"""A policy's score on a job: its time-to-target over seeds (`evaluate`), and the final-metric constraint
against BSP's (`constraint`).

The search scores each trial with them (`autosync.search.objective`) and the experiments score the
reference grid with them (`autosync.experiments.reference_grid`); kept below both so that neither imports
the other (tests/unit/test_layers.py).

A score's keys are the names a trial stores it under (`time_to_target`, `final_metric`, `reached`, `runs`,
`virtual_seconds`, `forked_seconds`: `autosync.search.study.records`, which owns them): spelled here
because this module sits below the search, and held equal to those names by tests/unit/test_policy_score.py.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Callable

from autosync import engine
from autosync.catalog import policy_from_dict
from autosync.core.errors import RuntimeFailure, UserError
from autosync.core.job import JobSpec
from autosync.engine import backends
from autosync.engine.forks import FORKS, fork_key, run_sharing_prefixes
from autosync.table import Table, replayed_run

if TYPE_CHECKING:
    from autosync.engine.backends import BackendChoice
    from autosync.engine.simulator import StopAt

__all__ = ["DETAILS", "MISS_PENALTY", "STOPPED_EARLY", "RunFailed", "constraint", "evaluate", "refuse_a_target_met_at_start",
           "table_at"]

# a run that misses the target scores this many times the virtual seconds it ran (its whole budget, where it ran
# to the end): behind every run that reached the target, which took at most one budget, so a miss never ranks
# ahead of a hit, and finite, so a mean over seeds exists
MISS_PENALTY = 2.0
STOPPED_EARLY = "stopped_early"  # `evaluate`'s count of runs stopped at the target before the horizon
DETAILS = ("seed_times", "updates", "epochs")  # what `evaluate(details=True)` adds


class RunFailed(Exception):
    """A policy's run diverged or its policy cannot run on this job; the message says why (a search records
    it as the trial's failure, a grid as the cell's error). `spent`: the virtual seconds trained before it
    failed (its cost), `forked`: those continued from a kept run instead; `diverged`: the run itself diverged
    (not its backend, nor a policy the job refuses), so the same run to the end of the budget diverges too."""

    def __init__(self, message: str, spent: float = 0.0, forked: float = 0.0, diverged: bool = False):
        super().__init__(message)
        self.spent, self.forked, self.diverged = spent, forked, diverged


def evaluate(job: JobSpec, policy: dict[str, Any], seeds: list[int], penalty: float = MISS_PENALTY,
             report: Callable[[dict[str, Any], int], None] | None = None,
             backend: "BackendChoice | None" = None, stop_at_target: bool = False,
             horizon: float | None = None, details: bool = False, stop_at: "StopAt | None" = None) -> dict[str, Any]:
    """Train `policy` once per seed; returns the mean score, final metric and the virtual seconds spent.

    `report(info, step)` is called with the simulator's evaluation record at every evaluation step of the
    first seed (for pruning); it may raise. `backend` says where each run trains (default: the simulator);
    a backend that fails (worker processes lost or hung) fails the run with its reason. With
    `stop_at_target` a run ends once it reaches the target: the time-to-target is the same as a full run's
    (the same seed gives the same run up to there), the "final" metric is the one at the target;
    `stopped_early` counts the runs that ended there before `horizon` (all that reached it, without one):
    their metric at the horizon is not known. With `horizon` (virtual seconds) a run ends there, its final
    metric the one at that time. With `details`, also `DETAILS`: the runs' scores in seed order
    (`seed_times`) and their mean `updates` and `epochs` where they ended (not kept on trials or stored runs).
    `stop_at`: a horizon the run learns while it trains (`autosync.engine.simulator.Simulator.stop_at`; the
    simulator only): `stopped_early` then counts every run that reached the target, the caller knowing the
    horizon.
    """
    if stop_at_target or horizon is not None:
        job = job.model_copy(update={"budget": job.budget.model_copy(
            update={"stop_at_target": stop_at_target or job.budget.stop_at_target, "stop_at_seconds": horizon})})
    try:
        pol = policy_from_dict(policy)
        pol.bind(job.cluster.n_workers, job.workload.batch_size)
    except ValueError as exc:  # includes UserError: the sampled parameters do not fit this job
        raise RunFailed(f"invalid policy {policy}: {exc}") from None
    scores, finals, spent, forked, reached, early, updates, epochs = [], [], 0.0, 0.0, 0, 0, 0, 0.0
    first_seed_progress = _step_reporter(report, job.workload.evaluation.every_seconds) if report else None
    for i, seed in enumerate(seeds):
        progress = first_seed_progress if i == 0 else None
        try:
            result, forked_at = _train(job.model_copy(update={"seed": seed}), pol, progress, backend, stop_at)
        except RunFailed as exc:  # a backend that failed: the seeds before it count
            raise RunFailed(str(exc), spent + exc.spent, forked + exc.forked, exc.diverged) from None
        m = result.metrics
        spent += m["virtual_time"] - forked_at
        forked += forked_at
        if result.status == "diverged":
            raise RunFailed(f"diverged at update {m['updates']} (seed {seed}, virtual time {m['virtual_time']:.1f} s)",
                            spent, forked, diverged=True)
        final = m[f"final_{job.target.metric}"]
        if final is None or not math.isfinite(final):
            raise RunFailed(f"diverged: final {job.target.metric} is {final} (seed {seed})", spent, forked,
                            diverged=True)
        finals.append(final)
        updates, epochs = updates + m["updates"], epochs + m["epochs"]
        if result.status == "target_reached" and (horizon is None or m["virtual_time"] < horizon):
            early += 1
        if m["time_to_target"] is not None:
            reached += 1
            scores.append(m["time_to_target"])
        else:
            scores.append(m["virtual_time"] * penalty)
    return {"time_to_target": sum(scores) / len(scores), "final_metric": sum(finals) / len(finals),
            "reached": reached, "runs": len(seeds), "virtual_seconds": spent,
            **(dict(zip(DETAILS, (scores, updates / len(seeds), epochs / len(seeds)))) if details else {}),
            **({STOPPED_EARLY: early} if job.budget.stop_at_target else {}),
            **({"forked_seconds": forked} if forked else {})}


def refuse_a_target_met_at_start(job: JobSpec, seeds: list[int]) -> None:
    """Refuse, in one line, a job whose initial model meets its target on one of `seeds`: every run evaluates
    the initial parameters first (the same for every policy on a seed), so every policy would reach the target
    at time 0 and a search would have nothing to rank (the race's margin times 0 would stop every rival)."""
    # not at the top: the workload's build imports torch, which a tune answered from the cache does not load
    from autosync.workloads.build import build_workload

    target = job.target
    for seed in seeds:
        workload = build_workload(job.model_copy(update={"seed": seed}))
        value = workload.evaluate(workload.init_params(), workload.init_buffers(),
                                  train_loss=target.metric == "train_loss").get(target.metric)
        if target.reached(value):
            raise UserError(f"job {job.name}: target.threshold {target.threshold:g} is met before training: the "
                            f"initial model's {target.metric} is {value:.4g} on seed {seed}, so every policy reaches it "
                            f"at time 0 and there is nothing to tune; set a threshold training has to reach")


def constraint(job: JobSpec, final_metric: float, reference: float, tolerance: float) -> float:
    """<= 0 when `final_metric` is within `tolerance` of BSP's `reference` (accuracy up, losses down)."""
    if job.target.metric == "test_accuracy":
        return reference - tolerance - final_metric
    return final_metric - reference - tolerance


_TABLES: dict[str, Table] = {}  # this process's open tables by directory (`BackendChoice.table`): read once


def table_at(directory: str) -> Table:
    """The table at `directory` (`BackendChoice.table`), opened once per process: every run a search replays
    from it answers from the same open table."""
    return _TABLES.setdefault(directory, Table(directory))


def _train(job: JobSpec, policy: Any, progress: Callable[[dict[str, Any]], None] | None,
           backend: "BackendChoice | None", stop_at: "StopAt | None" = None) -> tuple[Any, float]:
    """One run on the chosen backend, and the virtual seconds of it that were not trained again (forked from
    a run stopped at the target); its worker processes start with it and end with it, also on errors.
    `stop_at`: the simulator's only (`evaluate`)."""
    if stop_at is not None and not backends.simulates_here(backend):
        raise ValueError("a horizon learnt while the run trains (stop_at) needs the simulator")
    if backends.replays_table(backend):
        return replayed_run(table_at(backend.table), job, policy, progress)
    if backend is None or backend.backend == "simulator":
        return _simulate_forking(job, policy, progress, stop_at)
    # not at the top: the workload's build imports torch (1.4 s), which a tune answered from the cache
    # does not load (benchmarks/bench_startup.py)
    from autosync.workloads.build import build_workload

    try:
        workload = build_workload(job, device=backend.device)
        driver, clock = backends.build(backend, job, workload)
        return engine.simulate(job, policy, workload=workload, progress=progress, driver=driver, clock=clock), 0.0
    except RuntimeFailure as exc:  # workers died or hung: this run fails, a study goes on
        raise RunFailed(f"the {backend.backend} backend failed (seed {job.seed}): {exc}") from None


def _simulate_forking(job: JobSpec, policy: Any, progress: Callable[[dict[str, Any]], None] | None,
                      stop_at: "StopAt | None" = None) -> tuple[Any, float]:
    """A simulator run that keeps its state when it stops at the target, and a full-budget run of the same
    policy that continues from such a state instead of training its prefix again; a switch-point run
    (Sync-Switch) also continues from the longest prefix another switch point's run kept
    (`autosync.engine.forks`; both bit-identical to a run from the start). Its evaluations skip what the
    score does not read (the training loss, unless that is the target). Returns the run and the virtual
    seconds forked."""
    key = fork_key(job, policy.to_dict())
    own = None if job.budget.stop_at_target else FORKS.get(key)
    sim, result, forked = run_sharing_prefixes(job, policy, progress, own=own, stop_at=stop_at)
    if result.status == "target_reached":
        FORKS.put(key, sim.snapshot(), result.metrics["virtual_time"])
    return result, forked


def _step_reporter(report: Callable[[dict[str, Any], int], None],
                   every: float) -> Callable[[dict[str, Any]], None]:
    """A simulator progress callback calling report(info, step) once per evaluation step."""
    last_step = -1

    def progress(info: dict[str, Any]) -> None:
        nonlocal last_step
        step = int(info["time"] / every + 1e-9)  # evaluations fall on multiples of every_seconds
        if step > last_step:
            last_step = step
            report(info, step)

    return progress
