"""Leaderboards: every policy x seeds on one job and the same straggler draws, scored as MLPerf does.

Seed s gives every policy the same round-trip draws (they are keyed by seed, worker and task) and the
same initial model, so policies are compared on identical clusters. Time-to-target is scored as in
MLPerf Training: the mean after dropping the fastest and the slowest run (a run that never reaches the
target counts as infinitely slow), with the median, standard deviation and number of runs that never
reached it alongside.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from autosync.catalog import checked_spec, label_of, policy_from_dict
from autosync.core.ctrl_c import workers_spared_ctrl_c
from autosync.core.errors import Interrupted
from autosync.core.job import JobSpec
from autosync.experiments.run_records import appending, budgeted_fingerprint, cell_key, read_records

DEFAULT_POLICIES = ("bsp", "asp", "ssp", "backup", "dbw", "bdbw")
RUNS_FILE = "runs.jsonl"  # beside a leaderboard's files: its finished runs, which the same command reads back
LEADERBOARD_JSON = "leaderboard.json"  # a leaderboard folder's records (written by reporting, read by scaling)


@dataclass
class Entry:
    """One policy configuration of a leaderboard, with its runs' summaries."""

    label: str
    policy: dict[str, Any]
    runs: list[dict[str, Any]] = field(default_factory=list)  # RunResult.summary() plus curves


def policy_specs(policies: Iterable[str | dict[str, Any]], n_workers: int) -> list[dict[str, Any]]:
    """Each policy spec "NAME" or "NAME:key=value,..." as a dict {"policy", "params"} for `n_workers` (a dict
    is kept as it is), each policy once (`--policies bsp --policies BSP` is one row); none given:
    `DEFAULT_POLICIES`."""
    specs = [checked_spec(p, n_workers) for p in (policies or DEFAULT_POLICIES)]
    return [p for i, p in enumerate(specs) if p not in specs[:i]]


def run_one(job: JobSpec, policy: dict[str, Any], seed: int) -> dict[str, Any]:
    """One run in a worker process (on the simulator's one torch thread: `autosync.engine.threads`); returns
    its summary and the curves the plots need."""
    from autosync.engine import simulate  # not at the top: torch, which scoring runs read back never needs

    result = simulate(job.model_copy(update={"seed": seed}), policy_from_dict(policy))
    trace = result.trace
    return {
        **result.summary(),
        "curve": {"time": trace.column("evals", "time"), "train_loss": trace.column("evals", "train_loss"),
                  "test_accuracy": trace.column("evals", "test_accuracy")},
        "k": {"time": trace.column("updates", "time"), "k": trace.column("updates", "n_aggregated")},
    }


def run_grid(job: JobSpec, policies: list[dict[str, Any]], seeds: list[int], n_jobs: int = 1,
             on_done: Callable[[dict[str, Any]], None] | None = None, runs_file: Path | None = None,
             on_resume: Callable[[int, int, Path], None] | None = None) -> list[Entry]:
    """Run every policy with every seed (in parallel with joblib when n_jobs > 1). With `runs_file`, each
    finished run is appended to it as it comes, and those it holds already (the same job, policy and seed)
    are read back rather than run (`on_resume(runs read back, runs in all, runs_file)` is called first where
    there are some, then `on_done` for each): stopped by Ctrl-C, the same call resumes, and `Interrupted`
    says how many runs are kept."""
    from joblib import Parallel, delayed

    entries = [Entry(label_of(p), p) for p in policies]
    fingerprint = budgeted_fingerprint(job)  # a run kept under another budget is not this job's
    keys = {(i, s): cell_key(fingerprint, policies[i], s) for i in range(len(policies)) for s in seeds}
    kept = read_records(runs_file, "run") if runs_file is not None else {}
    todo = [task for task, key in keys.items() if key not in kept]
    if len(todo) < len(keys) and on_resume is not None and runs_file is not None:
        on_resume(len(keys) - len(todo), len(keys), runs_file)
    for (i, _), key in keys.items():
        if key in kept:
            entries[i].runs.append(kept[key]["run"])
            if on_done is not None:
                on_done(kept[key]["run"])
    try:
        with workers_spared_ctrl_c(n_jobs), appending(runs_file) as keep:  # the command takes Ctrl-C
            outputs: Iterator[dict[str, Any]] = Parallel(n_jobs=n_jobs, return_as="generator")(
                delayed(run_one)(job, policies[i], s) for i, s in todo)
            for task, out in zip(todo, outputs):
                keep({"key": keys[task], "run": out})
                entries[task[0]].runs.append(out)
                if on_done is not None:
                    on_done(out)
    except KeyboardInterrupt:
        if runs_file is None:
            raise
        mine = read_records(runs_file, "run")  # this leaderboard's runs, from the file: the runs of others there aside
        raise Interrupted(f"interrupted: {sum(key in mine for key in keys.values())} of its {len(keys)} runs are "
                          f"kept in {runs_file}; the same command resumes from them") from None
    for entry in entries:
        entry.runs.sort(key=lambda r: r["seed"])
    return entries


def trimmed_mean(values: list[float]) -> float:
    """MLPerf's score: drop the fastest and the slowest run, average the rest (inf if any rest is inf)."""
    ordered = sorted(values)
    if len(ordered) >= 3:
        ordered = ordered[1:-1]
    return math.inf if any(math.isinf(v) for v in ordered) else sum(ordered) / len(ordered)


def score(entries: list[Entry], baseline: str = "bsp", metric: str = "test_accuracy") -> list[dict[str, Any]]:
    """One row per entry, best time-to-target first, ties (rows that never reached the target) by the final
    value of the target's `metric` (the highest test accuracy, or the lowest training loss); speedups are
    against the `baseline` policy."""
    rows = []
    for e in entries:
        ttt = [r["time_to_target"] if r["time_to_target"] is not None else math.inf for r in e.runs]
        reached = [t for t in ttt if math.isfinite(t)]
        reached_runs = [r for r in e.runs if r["time_to_target"] is not None]
        rows.append({
            "policy": e.label,
            "spec": e.policy,
            "runs": len(e.runs),
            "time_to_target": trimmed_mean(ttt),
            "median_time_to_target": statistics.median(ttt),
            # a spread over fewer than two runs that reached the target is none (it read 0.0: no spread at all)
            "std_time_to_target": statistics.stdev(reached) if len(reached) > 1 else None,
            "never_reached": len(ttt) - len(reached),
            "final_test_accuracy": finite_mean(r["final_test_accuracy"] for r in e.runs),
            "final_train_loss": finite_mean(r["final_train_loss"] for r in e.runs),
            "updates_to_target": finite_mean(r["updates_to_target"] for r in reached_runs),
            "updates_per_virtual_second": finite_mean(r["updates_per_virtual_second"] for r in e.runs),
            "samples_per_virtual_second": finite_mean(r.get("samples_per_virtual_second") for r in e.runs),
            "early_mean_k": finite_mean(r.get("early_mean_k") for r in e.runs),
            "late_mean_k": finite_mean(r.get("late_mean_k") for r in e.runs),
            "time_weighted_k": finite_mean(r.get("time_weighted_k") for r in e.runs),
            "mean_staleness": finite_mean(r.get("mean_staleness") for r in e.runs),
            "batch_spread": finite_mean(r.get("batch_spread") for r in e.runs),
        })
    base = next((r for r in rows if r["spec"]["policy"] == baseline), None)
    for r in rows:
        ok = base is not None and math.isfinite(base["time_to_target"]) and math.isfinite(r["time_to_target"])
        r["speedup_vs_" + baseline] = base["time_to_target"] / r["time_to_target"] if ok else None
    if metric == "train_loss":  # lower is better; a row without a final loss last
        rows.sort(key=lambda r: (r["time_to_target"], math.inf if r["final_train_loss"] is None
                                 else r["final_train_loss"]))
    else:
        rows.sort(key=lambda r: (r["time_to_target"], -(r["final_test_accuracy"] or 0)))
    return rows


def finite_mean(values: Iterable[Any]) -> float | None:
    """The mean of the finite values among `values` (None and inf/nan left out); None when there are none."""
    vals = [v for v in values if v is not None and math.isfinite(v)]
    return sum(vals) / len(vals) if vals else None
