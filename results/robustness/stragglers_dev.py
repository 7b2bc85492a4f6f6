"""The development runs behind results/robustness/README.md: policies on the stragglers family's jobs.

Changes to the online policies are chosen here and reported on the shared family (the committed report).
This prints the two tables the README quotes, each from `autosync.api.run` on the drawn job files in
`stragglers/jobs/` (seed 0; a missed target counts as twice the job's budget):

    python results/robustness/stragglers_dev.py sync_switch   # speedup over BSP, 19 jobs (about 3 min)
    python results/robustness/stragglers_dev.py dbw           # regret against static k, 14 jobs (about 4 min)

The 32-worker jobs (1, 3, 4, 6, 23) are left out for time; `dbw` also leaves out the CNN jobs, the
32-worker ones, 8, 16, 17, 18 and 20.
"""

from __future__ import annotations

import argparse
import os
import statistics
from pathlib import Path

JOBS = Path(__file__).parent / "stragglers" / "jobs"
SYNC_SWITCH_JOBS = (0, 2, 5, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22)
SYNC_SWITCH_POLICIES = ("sync_switch", "sync_switch:lr_rule=sqrt", "sync_switch:asp_lr_rule=sqrt_staleness",
                        "sync_switch:lr_rule=sqrt,asp_lr_rule=staleness",
                        "sync_switch:lr_rule=sqrt,asp_lr_rule=sqrt_staleness",
                        "asp", "asp:lr_rule=staleness", "asp:lr_rule=sqrt_staleness")
DBW_JOBS = (0, 2, 5, 7, 9, 10, 11, 12, 13, 14, 15, 19, 21, 22)
DBW_BASE = "dbw:lr_rule=linear,step_growth=2"
DBW_POLICIES = tuple(f"{DBW_BASE}{extra}" for extra in (
    "", ",window=10", ",window=40", ",window=60", ",beta=1.1", ",beta=1.2", ",beta=1.5", ",beta=100",
    ",window=40,beta=1.2"))
STATIC_KS = (1, 2, 3, 4, 5, 6, 8, 10, 12, 14, 16)  # with lr_rule linear and sqrt, those <= n


def run_time(job_file: Path, spec: str) -> tuple[float, bool]:
    """(time to target, or twice the budget when missed; whether it missed) of one run, seed 0."""
    import torch

    from autosync import api
    from autosync.core.job import load_job

    torch.set_num_threads(1)
    job = load_job(job_file)
    result = api.run(job, spec, seed=0)
    reached = result.metrics.get("time_to_target")
    budget = job.budget.max_virtual_seconds
    return (reached if reached is not None else 2 * budget), reached is None


def job_file(index: int) -> Path:
    return JOBS / f"stragglers-{index:03d}.yaml"


def run_all(tasks: list[tuple[Path, str]], n_jobs: int) -> dict[tuple[Path, str], tuple]:
    from joblib import Parallel, delayed

    done = Parallel(n_jobs=n_jobs)(delayed(run_time)(path, spec) for path, spec in tasks)
    return dict(zip(tasks, done))


def sync_switch_table(n_jobs: int) -> str:
    policies = ("bsp",) + SYNC_SWITCH_POLICIES
    runs = run_all([(job_file(i), p) for i in SYNC_SWITCH_JOBS for p in policies], n_jobs)
    lines = ["| policy | median vs BSP | smallest vs BSP | jobs slower than BSP | jobs missed |", "|---|---|---|---|---|"]
    for policy in SYNC_SWITCH_POLICIES:
        bsp = [runs[(job_file(i), "bsp")][0] for i in SYNC_SWITCH_JOBS]
        mine = [runs[(job_file(i), policy)][0] for i in SYNC_SWITCH_JOBS]
        missed = sum(runs[(job_file(i), policy)][1] for i in SYNC_SWITCH_JOBS)
        speedups = [b / m for b, m in zip(bsp, mine)]
        lines.append(f"| {policy} | {statistics.median(speedups):.2f}x | {min(speedups):.2f}x | "
                     f"{sum(m > b for m, b in zip(mine, bsp))} | {missed} |")
    return "\n".join(lines)


def dbw_table(n_jobs: int) -> str:
    from autosync.core.job import load_job

    statics = [f"backup:k={k},lr_rule={rule}" for k in STATIC_KS for rule in ("linear", "sqrt")]
    tasks = []
    for i in DBW_JOBS:
        n = load_job(job_file(i)).cluster.n_workers
        tasks += [(job_file(i), s) for s in statics if int(s.split("=")[1].split(",")[0]) <= n]
        tasks += [(job_file(i), p) for p in DBW_POLICIES]
    runs = run_all(tasks, n_jobs)
    best = {path: min(t[0] for (p, s), t in runs.items() if p == path and s.startswith("backup"))
            for path in {p for p, _ in tasks}}
    lines = ["| dbw setting | median regret | worst |", "|---|---|---|"]
    for policy in DBW_POLICIES:
        regrets = [runs[(job_file(i), policy)][0] / best[job_file(i)] for i in DBW_JOBS]
        lines.append(f"| {policy[len(DBW_BASE):].lstrip(',') or 'beta 1.01 (default)'} | "
                     f"{statistics.median(regrets):.2f} | {max(regrets):.2f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("table", choices=["sync_switch", "dbw"])
    parser.add_argument("--n-jobs", type=int, default=2, help="worker processes (default 2)")
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    print(sync_switch_table(args.n_jobs) if args.table == "sync_switch" else dbw_table(args.n_jobs))


if __name__ == "__main__":
    main()
