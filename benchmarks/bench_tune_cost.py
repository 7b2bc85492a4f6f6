"""What a tune costs, and what its answer is worth: trials stopped at the target against full-budget trials.

    python benchmarks/bench_tune_cost.py [--jobs default quick:0 quick:1 ...] [--spaces static_k policy]
                                         [--trials 20] [--seeds 2] [--seed-offset 100] [--grid-dir DIR]
                                         [--json FILE] [--forks-off]
                                         [--patience P] [--bsp-target]

For each job (`default`: the embedded default job; `quick:I`: job I of baselines/family_quick.yaml) and
each search space, `autosync tune` runs twice in fresh SQLite studies with the same sampler seed:
- full: every trial trains the job's whole budget unless it is pruned (`stop_at_target=False`, and no
  `--patience`: how tune searched before);
- stop: trials end at the target and only the candidates that can still win are re-run at full budget
  for the final-metric constraint, continuing from their stopped runs (`autosync.search.strategies.full_budget`,
  `autosync.engine.forks`: the shipped default);
- no forks (`--forks-off`): as stop, with no snapshot kept, so no check continues a stopped run and no
  switch point continues another's prefix;
- patience (`--patience P`): as stop, the search stopping once P trials in a row found nothing faster in
  place of the space's own patience (`autosync.search.strategies.patience`; `static_k` says 5, so its
  stop and patience tunes are the same at P = 5);
- bsp-target (`--bsp-target`): as stop, the constraint held at BSP's time to target
  (`tune --constraint-at bsp-target`: BSP's reference and the checks train no further than that).
The committed figures (`benchmarks/README.md`, `tune_cost_runs.md`) also hold a mode since deleted with
its mechanism, no check (`--equivalence-off`: no equivalent found by running each trial on the job's proxy
first): with the check no equivalent was found on 7 jobs x 3 spaces, at the same median cost (1x) for
0.976x / 1.08x / 1.76x the wall time (static_k / policy / switch_point), so the search has none.
Printed per run: the search cost in BSP trainings (virtual seconds trained, BSP's reference included,
over one full BSP training), wall seconds, the recurrences that amortize it, and the winner's mean
time-to-target on held-out seeds (job.seed + 100, + 101: `--seed-offset`, `--seeds`; no tune searches
on them) over the best of the broad reference grid on the same seeds (the regret; a miss
counts twice the budget, and the missed seeds are printed), the grid judged by the tune's own rule: its
best is the fastest grid policy whose final metric at full budget keeps BSP's within the tolerance. The grid is every policy family, not the
searched space alone (`autosync.lattice.lattice_points`: static k = 1..n under four lr
rules, ASP, SSP, the DANA family, DBW, B-DBW, LB-BSP, Sync-Switch, compositions): a reference search
with the tune's own sampler shares its blind spots. Its runs (and a winner's that runs like no grid
policy) are cached in `--grid-dir`/cells.jsonl, shared with benchmarks/bench_answer_quality.py, so a
re-run trains only the tunes. Every ratio's baseline (the full search, the grid) is measured in the same
run or read from that cache.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from autosync.api import quiet_optuna
from autosync.engine.forks import FORKS, MAX_BYTES
from autosync.core.family import load_family
from autosync.catalog import label_of
from autosync.core.job import JobSpec, load_job
from autosync.experiments.reference_grid import (Judged, ReferenceGrid, answer_cells, cached_full_budget_finals,
                                                 held_out_seeds, judge)
from autosync.experiments.robustness import read_cells, run_grid
from autosync.data import SPACE_DIR
from autosync.search.space import load_space
from autosync.search.request import TuneRequest
from autosync.search.tune import tune
from autosync.search.tune_options import TuneOptions

from _report import Figures

HERE = Path(__file__).resolve().parent


def job_named(name: str) -> JobSpec:
    """`default` or `quick:I` (job I of the quick family)."""
    if name == "default":
        return load_job(None)
    family, index = name.split(":")
    drawn = load_family(HERE.parent / "baselines" / f"family_{family}.yaml").jobs(int(index) + 1)
    return drawn[int(index)]


def run_tune(job: JobSpec, space_name: str, trials: int, stop_at_target: bool, seed: int = 0,
             forks: bool = True, patience: int | None = None, constraint_at: str = "budget") -> dict:
    """One tune in a fresh study (and a fresh fork store: nothing kept from an earlier tune; none at all
    without `forks`); its cache record and wall time."""
    space = load_space(SPACE_DIR / f"{space_name}.yaml", job.cluster.n_workers)
    FORKS.clear()
    FORKS.max_bytes = MAX_BYTES if forks else 0
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        # TPE on every space, the policy space's too (its race, the default there, is bench_race's): the search
        # whose trials stop at the target and fork, as this benchmark compares (its
        # committed policy rows were measured with the family-by-family search, at commit 507b582)
        request = TuneRequest.from_options(job, TuneOptions(
            n_trials=trials, seed=seed, patience=patience, constraint_at=constraint_at,
            sampler="tpe",
            storage=f"sqlite:///{Path(tmp) / 'bench.db'}"), space=space)
        # stop_at_target is no option (the command always stops at the target): this benchmark measures what
        # it saves, so it turns it off on the request
        request = replace(request, settings=replace(request.settings, stop_at_target=stop_at_target))
        outcome = tune(request)
        wall = time.perf_counter() - start
    return {**outcome.cache, "wall_seconds": wall}


def command_wall(trials: int) -> float:
    """Wall seconds of `autosync tune --space static_k` on the default job in a new process with a new storage, as
    a user runs it (the figure beside it is static_k's tune() in this process; the default space's race takes no
    --n-trials)."""
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "autosync.cli", "tune", "--space", "static_k", "--n-trials", str(trials), "--storage",
                        f"sqlite:///{Path(tmp) / 'cli.db'}"], cwd=tmp, check=True, capture_output=True)
        return time.perf_counter() - start


def held_out(job: JobSpec, policy: dict, seeds: list[int], grid_dir: Path) -> Judged:
    """`policy` against the broad grid's best on `seeds`, judged by the tune's rule: the grid's best is its
    fastest policy whose final metric at full budget keeps BSP's within the tune's tolerance (the fastest
    policies trained to the end on demand, cached). The grid is read from `grid_dir` (trained where missing),
    the policy from its grid twin's runs or its own (trained once, cached beside them)."""
    extra = {} if answer_cells(job, policy) is not policy else {job.fingerprint(): [policy]}
    run_grid(ReferenceGrid([job], seeds, extra=extra), grid_dir)
    cells = read_cells(grid_dir)
    return judge(job, policy, cells, seeds, finals=cached_full_budget_finals(job, seeds, cells, grid_dir))


def write_runs(rows: list[dict], path: Path, argv: list[str]) -> None:
    """Every tune of the run, one row each (job, space, mode: cost, wall, recurrences, winner, regret), as
    Markdown headed by the command: the per-job figures behind the medians of the benchmarks table."""
    shown = [a for i, a in enumerate(argv) if a != "--json" and (i == 0 or argv[i - 1] != "--json")]
    command = " ".join(["python benchmarks/bench_tune_cost.py", *shown])
    lines = ["# bench_tune_cost: every tune", "", f"Written by `{command}` (the medians are in README.md).",
             "Cost: virtual seconds trained over one full BSP training, BSP's reference included; regret: the "
             "winner's mean time-to-target on held-out seeds (job.seed + 100, ...) over the best of the broad "
             "reference grid (every policy family) on the same seeds; missed: held-out seeds where the winner "
             "missed the target.", "",
             "| job | space | mode | cost (BSP trainings) | wall (s) | recurrences to amortize | regret | missed | "
             "grid best | winner |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['job']} | {r['space']} | {r['mode']} | {r['cost']:.2f} | {r['wall']:.0f} | "
                     f"{r['amortize']} | {r['regret']:.3f} | {r['missed']} | `{r['grid_best']}` | "
                     f"`{json.dumps(r['winner'], sort_keys=True)}` |")
    path.write_text("\n".join(lines) + "\n")


def paired(rows: list[dict], space: str, first: str, second: str) -> list[tuple[dict, dict]]:
    """(row of mode `first`, row of mode `second`) of each job tuned over `space` in both modes."""
    return [(a, b) for a in rows for b in rows if a["space"] == b["space"] == space and a["job"] == b["job"]
            and a["mode"] == first and b["mode"] == second]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", nargs="+", default=["default"] + [f"quick:{i}" for i in range(6)])
    parser.add_argument("--spaces", nargs="+", default=["static_k", "policy", "switch_point"])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--seeds", type=int, default=2, help="held-out seeds the winner and the grid are scored on")
    parser.add_argument("--seed-offset", type=int, default=100, help="held-out seeds start at job.seed + this")
    parser.add_argument("--grid-dir", default=str(HERE.parent / "results" / "answer_quality" / "jobs"),
                        help="where the broad reference grid's runs are cached (cells.jsonl)")
    parser.add_argument("--json", default=None, help="also write the figures here (benchmarks/make_table.py)")
    parser.add_argument("--runs", default=str(HERE / "tune_cost_runs.md"),
                        help="write every tune's figures here, a row each (default: benchmarks/tune_cost_runs.md)")
    parser.add_argument("--forks-off", action="store_true",
                        help="also run the stopping tune with no run forked (no snapshot kept): what forking saves")
    parser.add_argument("--patience", type=int, default=None,
                        help="also run the stopping tune with --patience P: what stopping a search that stops "
                             "improving saves, and what it costs the answer")
    parser.add_argument("--bsp-target", action="store_true",
                        help="also run the stopping tune with --constraint-at bsp-target")
    args = parser.parse_args()
    quiet_optuna()
    grid_dir = Path(args.grid_dir)
    rows = []
    for name in args.jobs:
        job = job_named(name)
        seeds = held_out_seeds(job, args.seeds, args.seed_offset)
        start = time.perf_counter()
        grid = ReferenceGrid([job], seeds)
        cached = grid.finished(read_cells(grid_dir))
        best = held_out(job, {"policy": "bsp", "params": {}}, seeds, grid_dir).best
        print(f"{name}: broad reference grid ({len(grid.tasks)} runs on seeds {seeds}, {cached} cached in "
              f"{grid_dir}): best {label_of(best.policy)} at {best.time:.1f} s "
              f"({time.perf_counter() - start:.0f} s wall)", flush=True)
        for space in args.spaces:
            for mode, stop, forks in (("full", False, True), ("stop", True, True), ("no forks", True, False),
                                      ("patience", True, True), ("bsp-target", True, True)):
                if (mode == "no forks" and not args.forks_off) or (mode == "patience" and args.patience is None) \
                        or (mode == "bsp-target" and not args.bsp_target):
                    continue
                found = run_tune(job, space, args.trials, stop, forks=forks,  # full: as tune searched before
                                 patience={"full": 0, "patience": args.patience}.get(mode),
                                 constraint_at="bsp-target" if mode == "bsp-target" else "budget")
                judged = held_out(job, found["best_policy"], seeds, grid_dir)
                regret = judged.ratio
                rows.append({"job": name, "space": space, "mode": mode, "cost": found["search_cost_bsp_trainings"],
                             "wall": found["wall_seconds"], "amortize": found["recurrences_to_amortize"],
                             "regret": regret, "missed": len(judged.answer.missed),
                             "grid_best": label_of(judged.best.policy), "winner": found["best_policy"]})
                print(f"{name} {space} {mode}: cost {found['search_cost_bsp_trainings']:.2f} BSP trainings, "
                      f"{found['wall_seconds']:.0f} s wall, amortized after {found['recurrences_to_amortize']} "
                      f"recurrences, winner {found['best_policy']} at {regret:.3f}x the broad grid's best "
                      f"({label_of(judged.best.policy)}; held-out seeds {seeds}"
                      f"{', missed ' + str(judged.answer.missed) if judged.answer.missed else ''})", flush=True)
    write_runs(rows, Path(args.runs), sys.argv[1:])
    figures = Figures("bench_tune_cost")
    for space in args.spaces:
        pairs = paired(rows, space, "full", "stop")
        if not pairs:
            continue
        cost = statistics.median(s["cost"] for _, s in pairs)
        cost_full = statistics.median(f["cost"] for f, _ in pairs)
        regret = statistics.median(s["regret"] for _, s in pairs)
        wall = statistics.median(s["wall"] / f["wall"] for f, s in pairs)
        print(f"{space} over {len(pairs)} jobs (medians): cost {cost:.2f} BSP trainings stopping at the target "
              f"against {cost_full:.2f} training every trial's budget ({cost / cost_full:.2f}x); wall "
              f"{wall:.2f}x; winner regret {regret:.3f}")
        figures.add(f"tune {space} ({args.trials} trials, {len(pairs)} jobs): search cost, median", cost,
                    "BSP trainings", "every trial training its whole budget", cost / cost_full,
                    "<= 3" if space == "policy" else None, cost <= 3 if space == "policy" else None)
        unforked = paired(rows, space, "stop", "no forks")
        if unforked:
            off = statistics.median(o["cost"] for _, o in unforked)
            print(f"{space}: forking runs from kept snapshots (checks at full budget, switch points' prefixes): "
                  f"{cost:.2f} BSP trainings against {off:.2f} with none forked")
            figures.add(f"tune {space} ({args.trials} trials, {len(unforked)} jobs): search cost with forking, "
                        "median", cost, "BSP trainings", "no run forked", cost / off)
        grid_best = "the broad reference grid's best (held-out seeds)"
        figures.add(f"tune {space} ({args.trials} trials, {len(pairs)} jobs): winner's time-to-target, median",
                    regret, "x the broad grid's best", grid_best, regret, "<= 1.05", regret <= 1.05)
        worst = max(s["regret"] for _, s in pairs)
        missed = sum(s["missed"] for _, s in pairs)
        print(f"{space}: winner regret worst {worst:.3f}; {missed} missed held-out seeds")
        figures.add(f"tune {space} ({args.trials} trials, {len(pairs)} jobs): winner's time-to-target, worst",
                    worst, "x the broad grid's best", grid_best, worst, "<= 1.3", worst <= 1.3)
        figures.add(f"tune {space} ({args.trials} trials, {len(pairs)} jobs): winner's missed held-out seeds",
                    missed, "runs", None, None, "0", missed == 0)
        patient = paired(rows, space, "stop", "patience")
        if patient:
            kept = statistics.median(p["cost"] for _, p in patient)
            kept_regret = statistics.median(p["regret"] for _, p in patient)
            print(f"{space} with --patience {args.patience}: {kept:.2f} BSP trainings against {cost:.2f} with the space's "
                  f"own patience; winner regret {kept_regret:.3f}")
            label = f"tune {space} ({args.trials} trials, --patience {args.patience}, {len(patient)} jobs)"
            figures.add(f"{label}: search cost, median", kept, "BSP trainings",
                        "the shipped default (the space's patience: 5 in static_k, none elsewhere)",
                        kept / cost, "<= 3" if space == "policy" else None, kept <= 3 if space == "policy" else None)
            figures.add(f"{label}: winner's time-to-target, median", kept_regret, "x the broad grid's best",
                        grid_best, kept_regret, "<= 1.05", kept_regret <= 1.05)
        held = paired(rows, space, "stop", "bsp-target")
        if held:
            at_cost = statistics.median(b["cost"] for _, b in held)
            at_regret = statistics.median(b["regret"] for _, b in held)
            same = sum(b["winner"] == s["winner"] for s, b in held)
            print(f"{space} with --constraint-at bsp-target: {at_cost:.2f} BSP trainings against {cost:.2f} at the "
                  f"budget's end; winner regret {at_regret:.3f}; the same winner on {same} of {len(held)} jobs")
            label = f"tune {space} ({args.trials} trials, --constraint-at bsp-target, {len(held)} jobs)"
            figures.add(f"{label}: search cost, median", at_cost, "BSP trainings",
                        "the constraint at the budget's end (the default)", at_cost / cost,
                        "<= 3" if space == "policy" else None, at_cost <= 3 if space == "policy" else None)
            figures.add(f"{label}: winner's time-to-target, median", at_regret, "x the broad grid's best",
                        grid_best, at_regret, "<= 1.05", at_regret <= 1.05)
    for row in rows:  # the default job's own goals: at most 2 BSP trainings, under 20 s of wall time
        if row["job"] == "default" and row["space"] == "static_k" and row["mode"] == "stop":
            full = next(f for f in rows if f["job"] == "default" and f["space"] == "static_k" and f["mode"] == "full")
            figures.add(f"tune static_k, default job ({args.trials} trials): search cost", row["cost"],
                        "BSP trainings", "every trial training its whole budget", row["cost"] / full["cost"], "<= 2",
                        row["cost"] <= 2)
            at_bsp = next((b for b in rows if b["job"] == "default" and b["space"] == "static_k"
                           and b["mode"] == "bsp-target"), None)
            if at_bsp is not None:
                figures.add(f"tune static_k, default job ({args.trials} trials, --constraint-at bsp-target): search "
                            "cost", at_bsp["cost"], "BSP trainings", "the constraint at the budget's end (the default)",
                            at_bsp["cost"] / row["cost"], "<= 2", at_bsp["cost"] <= 2)
            figures.add(f"tune static_k, default job ({args.trials} trials): wall time of tune() in this process",
                        row["wall"], "s", "every trial training its whole budget", row["wall"] / full["wall"])
            command = command_wall(args.trials)
            figures.add(f"`autosync tune` (default job, {args.trials} trials, a new storage): wall time, a new "
                        "process (import torch, the plots)", command, "s", "tune() in this process",
                        command / row["wall"], "< 20 s", command < 20)
    figures.write(args.json)


if __name__ == "__main__":
    main()
