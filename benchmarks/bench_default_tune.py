"""The default tune of the default job, as a new user runs it: wall time, CPU time and search cost, as shipped
(no `--n-jobs`: a process per core for the race, up to 4) against one process.

    python benchmarks/bench_default_tune.py [--n-jobs 1 default 2 ...] [--repeats 3]

Runs `autosync tune` (the race on the `policy` space, the embedded default job) as a new process in a fresh
SQLite storage, from a temporary directory, once per `--n-jobs` value (`default`: the option not given) in
turn, `--repeats` times (medians), with bytecode written and read as on a user's machine (one unmeasured
`autosync --help` first). Prints each run's wall time, the CPU time of the command and every process it started (user + system, from
`resource.getrusage(RUSAGE_CHILDREN)`), the search cost in BSP trainings and the answer; with several
values, each one's wall time against the first's and whether the answers and costs agree (the race's runs
are stopped at horizons set from the runs queued before them, so they should: `autosync.search.race_trials`).
Goals (issue 62): the default job at most 15 s of wall time and 4 BSP trainings on 2 idle cores.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from autosync.catalog import label_of

from _report import Figures

AUTOSYNC = str(Path(sys.executable).parent / "autosync")  # the console script installed beside this interpreter
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # as a user's machine runs it
DEFAULT = "default"  # a --n-jobs value of ours: the option not given, as a new user runs the command
WALL_GOAL, COST_GOAL = 15.0, 4.0  # issue 62's goals for the default job


def flags(n_jobs: str) -> list[str]:
    """The command line's `--n-jobs` for a value of ours: none for `default`."""
    return [] if n_jobs == DEFAULT else ["--n-jobs", n_jobs]


def named(n_jobs: str) -> str:
    return "no --n-jobs, the default" if n_jobs == DEFAULT else f"--n-jobs {n_jobs}"


def one_tune(n_jobs: str) -> dict:
    """One `autosync tune [--n-jobs N] --json` in a fresh storage: its wall and CPU seconds, cost and answer."""
    with tempfile.TemporaryDirectory() as tmp:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        proc = subprocess.run([AUTOSYNC, "tune", *flags(n_jobs), "--json",
                               "--storage", f"sqlite:///{tmp}/s.db"], cwd=tmp, env=ENV, capture_output=True,
                              text=True)
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        sys.exit(f"autosync tune ({named(n_jobs)}) failed:\n{proc.stderr}")
    cache = json.loads(proc.stdout)["cache"]
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall": wall, "cpu": cpu, "cost": cache["search_cost_bsp_trainings"],
            "answer": label_of(cache["best_policy"]), "value": cache["best_value"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-jobs", nargs="+", default=["1", DEFAULT])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", default=None, help="also write the figures here (benchmarks/make_table.py)")
    args = parser.parse_args()
    subprocess.run([AUTOSYNC, "--help"], env=ENV, capture_output=True)  # bytecode written
    print(f"load average at the start: {os.getloadavg()[0]:.1f}")
    rows, runs_of = {}, {n_jobs: [] for n_jobs in args.n_jobs}
    for _ in range(args.repeats):  # in turn, so that a drift of the machine's speed meets every value alike
        for n_jobs in args.n_jobs:
            runs_of[n_jobs].append(one_tune(n_jobs))
    for n_jobs, runs in runs_of.items():
        row = {key: statistics.median(r[key] for r in runs) for key in ("wall", "cpu", "cost", "value")}
        row["answers"] = {r["answer"] for r in runs}
        rows[n_jobs] = row
        print(f"{named(n_jobs)}: wall {row['wall']:.1f} s, CPU {row['cpu']:.1f} s, cost {row['cost']:.3f} BSP "
              f"trainings, answer {sorted(row['answers'])} at {row['value']:.2f} virtual s")
    first = args.n_jobs[0]
    base = rows[first]
    agree = all(r["answers"] == base["answers"] and abs(r["cost"] - base["cost"]) < 1e-9 for r in rows.values())
    print(f"answers and costs the same for every --n-jobs: {'yes' if agree else 'NO'}")
    figures = Figures("bench_default_tune")
    for n_jobs, row in rows.items():
        ratio = None if n_jobs == first else row["wall"] / base["wall"]
        figures.add(f"autosync tune (default job, race, {named(n_jobs)}): wall time", row["wall"], "s",
                    None if ratio is None else named(first), ratio, f"<= {WALL_GOAL:g} s",
                    row["wall"] <= WALL_GOAL)
        figures.add(f"autosync tune (default job, race, {named(n_jobs)}): CPU time, all its processes", row["cpu"],
                    "s", None if n_jobs == first else named(first),
                    None if n_jobs == first else row["cpu"] / base["cpu"])
        figures.add(f"autosync tune (default job, race, {named(n_jobs)}): search cost", row["cost"],
                    "BSP trainings", goal=f"<= {COST_GOAL:g}", met=row["cost"] <= COST_GOAL)
    figures.add("answer and cost the same for every --n-jobs", float(agree), "", goal="1", met=agree)
    figures.write(args.json)


if __name__ == "__main__":
    main()
