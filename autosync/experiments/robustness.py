"""Robustness: online policies scored against each drawn job's exhaustive best static k.

For every job of a family, every static k (backup workers k = 1..n-1 under each learning-rate rule of the
grid, fixed and proportional unless told otherwise, and BSP for k = n) and every online policy with its
defaults runs with every seed. A policy's time on a job is its mean time-to-target over the seeds, a
missed target counting as twice the job's time budget; its regret is that time over the best static k's
(the best over k and the rules, chosen in hindsight), and its overall regret that time over the best of
every policy run on the job (static or online), so a reader sees when the answer is an asynchronous policy.

Cells (job, policy, seed) are appended to ``cells.jsonl`` as they finish, keyed by the job's fingerprint,
so an interrupted or extended grid reruns only what is missing.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from autosync.catalog import checked_spec, label_of, policy_from_dict
from autosync.core.ctrl_c import workers_spared_ctrl_c
from autosync.core.errors import Interrupted
from autosync.core.family import describe
from autosync.core.job import JobSpec
from autosync.core.phases import Phase, no_phase
from autosync.experiments.leaderboard import finite_mean
from autosync.experiments.run_records import appending, cell_key, read_records
from autosync.policy_grid import (  # shared with search/ from below both (tests/unit/test_layers.py)
    BSP_LABEL, ONLINE_POLICIES, SPREAD_FOR_BALANCE, STATIC_K_RULES, TUNED_LABEL, WITHIN, online_policies,
    static_k_policies, static_label,
)
from autosync.policy_score import MISS_PENALTY

__all__ = ["CELLS_FILE", "Grid", "online_specs", "penalised_time", "read_cells", "report", "run_cell",
           "run_grid", "run_report", "score_job", "summarize", "tune_each"]

CELLS_FILE = "cells.jsonl"


def online_specs(policies: Sequence[str | dict[str, Any]], jobs: Sequence[JobSpec]) -> list[dict[str, Any]]:
    """The online policies a robustness report runs: `policies` ("NAME" or "NAME:key=value,..." specs, or
    dicts), each checked on the smallest drawn cluster, or by default `ONLINE_POLICIES` with their defaults."""
    if not policies:
        return online_policies(ONLINE_POLICIES)
    smallest = min(j.cluster.n_workers for j in jobs)
    return [checked_spec(p, smallest) for p in policies]


def run_cell(job: JobSpec, policy: dict[str, Any], seed: int) -> dict[str, Any]:
    """One run, stopped at the target; an exception is recorded (as a missed target) rather than raised,
    so one failing cell does not end a grid of hundreds."""
    from autosync.engine import simulate  # not at the top: torch, which scoring cells read back never needs

    run_job = job.model_copy(update={"seed": seed, "budget": job.budget.model_copy(update={"stop_at_target": True})})
    record: dict[str, Any] = {"key": cell_key(job.fingerprint(), policy, seed), "job": job.name,
                              "policy": policy, "seed": seed}
    try:
        summary = simulate(run_job, policy_from_dict(policy)).summary()
    except Exception as exc:  # noqa: BLE001 - reported in the table's errors column
        return {**record, "time_to_target": None, "error": f"{type(exc).__name__}: {exc}"}
    keep = ("time_to_target", "status", "final_train_loss", "final_test_accuracy", "updates",
            "time_weighted_k", "wall_seconds")
    return {**record, **{k: summary.get(k) for k in keep}}


def read_cells(directory: Path) -> dict[str, dict[str, Any]]:
    """Finished cells by key; a line cut short by an interruption is skipped (its cell runs again)."""
    return read_records(directory / CELLS_FILE)


@dataclass
class Grid:
    """The (job, policy, seed) cells of a robustness report, and which of them are already done."""

    jobs: list[JobSpec]
    seeds: list[int]
    online: list[dict[str, Any]]
    rules: tuple[str, ...] = STATIC_K_RULES  # the static-k grid's learning-rate rules
    tuned: dict[str, dict[str, Any]] = field(default_factory=dict)  # job fingerprint -> its tuned policy
    # the broad reference for n workers (`autosync.lattice.lattice_points`), or None: static k only
    reference: Callable[[int], list[dict[str, Any]]] | None = None
    tasks: dict[str, tuple[JobSpec, dict[str, Any], int]] = field(default_factory=dict)  # by cell key

    def __post_init__(self) -> None:
        for job in self.jobs:
            fingerprint = job.fingerprint()
            own = [self.tuned[fingerprint]] if fingerprint in self.tuned else []
            broad = self.reference(job.cluster.n_workers) if self.reference is not None else []
            for policy in static_k_policies(job.cluster.n_workers, self.rules) + self.online + own + broad:
                for seed in self.seeds:  # an online policy that is also a static k (bsp) runs once
                    self.tasks.setdefault(cell_key(fingerprint, policy, seed), (job, policy, seed))

    def finished(self, cells: dict[str, dict[str, Any]]) -> int:
        """How many of the grid's cells `cells` already holds."""
        return len(self.tasks.keys() & cells.keys())


def run_grid(grid: Any, directory: Path, n_jobs: int = 1,
             on_done: Callable[[dict[str, Any]], None] | None = None) -> dict[str, dict[str, Any]]:
    """Run the cells of `grid` (a `Grid`, or anything with its `tasks`: `autosync.experiments.reference_grid.ReferenceGrid`)
    not in `directory`'s cells.jsonl (joblib processes), appending each as it finishes."""
    from joblib import Parallel, delayed

    directory.mkdir(parents=True, exist_ok=True)
    cells = read_cells(directory)
    todo = [task for key, task in grid.tasks.items() if key not in cells]
    todo.sort(key=lambda t: -t[0].cluster.n_workers)  # the largest jobs first: fewer idle cores at the end
    if todo:
        with workers_spared_ctrl_c(n_jobs), appending(directory / CELLS_FILE) as keep:  # the command takes Ctrl-C
            outputs = Parallel(n_jobs=n_jobs, return_as="generator_unordered")(
                delayed(run_cell)(job, policy, seed) for job, policy, seed in todo)
            for record in outputs:
                keep(record)
                cells[record["key"]] = record
                if on_done is not None:
                    on_done(record)
    return cells


def tune_each(jobs: list[JobSpec], storage: str, what: str, tune: Callable[[JobSpec, str], Any],
              phase: Phase = no_phase) -> dict[str, dict[str, Any]]:
    """Each job's tuned policy by its fingerprint: `tune(job, storage)` (a tune's outcome, cached in
    `storage`: a second call reuses it) for each job; `what`: the trials, for the phase (one step per job)."""
    found = {}
    with phase(f"tuning each job ({what})", len(jobs)) as advance:
        for job in jobs:
            found[job.fingerprint()] = tune(job, storage).cache["best_policy"]
            advance()
    return found


def run_report(grid: Grid, directory: Path, n_jobs: int = 1, phase: Phase = no_phase,
               on_resume: Callable[[int, int, Path], None] | None = None) -> tuple[dict[str, Any], int]:
    """Train the cells of `grid` that `directory`'s cells.jsonl does not hold yet (each appended as it
    finishes, so an interrupted report resumes) and score the report (`report`); returns it with how many
    runs were read back rather than trained.

    `phase`: called around the runs (one step each); `on_resume`: called with (runs read back, runs in all,
    the file) when finished runs are reused. Raises `Interrupted` on Ctrl-C, saying how many finished runs
    are kept for the same call to resume from.
    """
    reused = grid.finished(read_cells(directory))
    if reused and on_resume is not None:
        on_resume(reused, len(grid.tasks), directory / CELLS_FILE)
    with phase("runs", len(grid.tasks) - reused) as advance:
        try:
            cells = run_grid(grid, directory, n_jobs=n_jobs, on_done=lambda _: advance())
        except KeyboardInterrupt:
            kept = len(read_cells(directory))
            raise Interrupted(f"interrupted: {kept} finished runs are kept in {directory / CELLS_FILE}; "
                              "the same command resumes from them") from None
    return report(grid.jobs, cells, grid.online, grid.seeds, grid.rules, grid.tuned, grid.reference), reused


# --------------------------------------------------------------------------- scoring

def penalised_time(record: dict[str, Any], job: JobSpec) -> float:
    """Time-to-target, a missed target (or a failed run) counting as twice the time budget (`MISS_PENALTY` times
    a run to the budget's end)."""
    t = record.get("time_to_target")
    return float(t) if t is not None else MISS_PENALTY * float(job.budget.max_virtual_seconds)


def score_job(job: JobSpec, cells: dict[str, dict[str, Any]], online: list[dict[str, Any]],
              seeds: list[int], rules: Iterable[str] = STATIC_K_RULES,
              tuned: dict[str, Any] | None = None, reference: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """One job's times (mean over seeds), its best static k, and each online policy's regret against it
    and against the best policy run on the job (static, online or, given `reference`, any policy of the broad
    reference grid: `autosync.experiments.reference_grid`); `tuned`: the job's own tuned policy, scored as the row
    TUNED_LABEL."""
    fp = job.fingerprint()

    def mean_time(policy: dict[str, Any]) -> tuple[float, list[dict[str, Any]]]:
        records = [cells[cell_key(fp, policy, s)] for s in seeds]
        return statistics.fmean(penalised_time(r, job) for r in records), records

    static = [(static_label(p), *mean_time(p)) for p in static_k_policies(job.cluster.n_workers, rules)]
    best_label, best_time, _ = min(static, key=lambda s: s[1])
    bsp_time, bsp_records = next((t, records) for label, t, records in static if label == BSP_LABEL)
    rows = [(label_of(p), p) for p in online] + ([(TUNED_LABEL, tuned)] if tuned is not None else [])
    policies = {}
    for label, policy in rows:
        t, records = mean_time(policy)
        policies[label] = {
            "time": t, "regret": t / best_time, "vs_bsp": bsp_time / t,
            "missed": sum(r.get("time_to_target") is None for r in records),
            "errors": [r["error"] for r in records if r.get("error")],
            "time_weighted_k": finite_mean(r.get("time_weighted_k") for r in records),
        }
    policies["bsp"] = {"time": bsp_time, "regret": bsp_time / best_time, "vs_bsp": 1.0,
                       "missed": sum(r.get("time_to_target") is None for r in bsp_records),
                       "errors": [], "time_weighted_k": float(job.cluster.n_workers)}
    best_overall = min([best_time] + [p["time"] for p in policies.values()])
    best_label_overall = best_label if best_overall == best_time else next(
        label for label, row in policies.items() if row["time"] == best_overall)
    for policy in reference or []:
        t, _ = mean_time(policy)
        if t < best_overall:
            best_overall, best_label_overall = t, label_of(policy)
    for row in policies.values():
        row["overall_regret"] = row["time"] / best_overall
    return {**describe(job), "budget": job.budget.max_virtual_seconds, "best_static": best_label,
            "tuned_policy": tuned,
            "best_static_time": best_time, "best_overall": best_label_overall, "best_overall_time": best_overall,
            "bsp_time": bsp_time, "static": {label: t for label, t, _ in static}, "policies": policies}


def summarize(per_job: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per policy: median, p90 and worst regret; share of jobs within 1.1x; jobs slower than BSP; the
    speed-up over BSP on jobs whose worker speeds spread 2x or more (where batch balancing should pay)."""
    import numpy as np

    labels = list(per_job[0]["policies"]) if per_job else []
    rows = []
    for label in labels:
        regrets = [j["policies"][label]["regret"] for j in per_job]
        vs_bsp = [j["policies"][label]["vs_bsp"] for j in per_job]
        spread = [j["policies"][label]["vs_bsp"] for j in per_job if j["speed_spread"] >= SPREAD_FOR_BALANCE]
        rows.append({
            "policy": label,
            "jobs": len(regrets),
            "median_regret": float(np.median(regrets)),
            "median_overall_regret": float(np.median([j["policies"][label]["overall_regret"] for j in per_job])),
            "p90_regret": float(np.quantile(regrets, 0.9)),
            "worst_regret": max(regrets),
            "within": sum(r <= WITHIN for r in regrets) / len(regrets),
            "slower_than_bsp": sum(v < 1.0 - 1e-9 for v in vs_bsp),
            "median_vs_bsp": float(np.median(vs_bsp)),
            "spread_jobs": len(spread),
            "min_vs_bsp_spread": min(spread) if spread else None,
            "missed_runs": sum(j["policies"][label]["missed"] for j in per_job),
            "errors": sum(len(j["policies"][label]["errors"]) for j in per_job),
        })
    rows.sort(key=lambda r: (r["median_regret"], r["worst_regret"]))
    return rows


def report(jobs: list[JobSpec], cells: dict[str, dict[str, Any]], online: list[dict[str, Any]],
           seeds: list[int], rules: Iterable[str] = STATIC_K_RULES,
           tuned: dict[str, dict[str, Any]] | None = None,
           reference: Callable[[int], list[dict[str, Any]]] | None = None) -> dict[str, Any]:
    """Every job scored (`score_job`; `tuned`: each job's tuned policy by fingerprint; `reference`: the broad
    grid for n workers, which "vs best overall" then divides by too) and the summary."""
    per_job = [score_job(job, cells, online, seeds, rules, (tuned or {}).get(job.fingerprint()),
                         reference(job.cluster.n_workers) if reference is not None else None) for job in jobs]
    return {"seeds": seeds, "lr_rules": list(rules), "online_policies": {label_of(p): p for p in online},
            "reference": "broad" if reference is not None else "static",
            "summary": summarize(per_job), "jobs": per_job}

