"""What a table costs: cells of the lattice built on a sample, and the whole table it stands for.

    python benchmarks/bench_table.py [--sample 12] [--families fresh quarry ...] [--per-family 8]

Builds `--sample` lattice points (every m-th of the broad reference grid, so each family of policies is
drawn from) of the default job and of job 0 of each of `--families` on the job's seed, in a new table
(`autosync.api.table`), one cell at a time in this process after a warm-up cell (a build's processes
import and set up once), and measures the CPU seconds a cell of each takes. Then counts the cells of the
table the search issue asks for (every lattice point of `--per-family` jobs of each family and the
default job, on 2 search and 2 held-out seeds) and states, as estimates: its build time on this
machine's cores, each job's cells at its family's measured rate; and its packed size, each job at the
mean size of its family's files in the committed table (`--committed`, results/table: lattice cells and
the runs the tunes asked for). Last, the cells and packed size of the committed table, which is held to
the same bound.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from autosync.api import load_job, table
from autosync.core.family import load_family
from autosync.data import BASELINE_DIR, DEFAULT_JOB_PATH
from autosync.lattice import lattice_points
from autosync.table import Table
from autosync.table.build import tasks
from autosync.table.store import PACKED

from _report import Figures
from bench_lofo import COMMITTED_FAMILIES

MB = 10 ** 6
MAX_PACKED_BYTES = 20 * MB  # the search issue's bound on a table committed to the repository: 20 MB


def job_file(name: str, directory: Path) -> Path:
    """`default`, or FAMILY:INDEX written as a job file (`autosync table` takes files)."""
    if name == "default":
        return DEFAULT_JOB_PATH
    family, index = name.split(":")
    job = load_family(BASELINE_DIR / f"family_{family}.yaml").job(int(index))
    path = directory / f"{name.replace(':', '-')}.yaml"
    path.write_text(json.dumps(job.model_dump(mode="json", exclude_none=True)))
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sample", type=int, default=12, help="lattice points per sampled job")
    parser.add_argument("--families", nargs="+", default=list(COMMITTED_FAMILIES))
    parser.add_argument("--per-family", type=int, default=8)
    parser.add_argument("--committed", default="results/table", help="the committed table to measure")
    parser.add_argument("--json", default=None, help="also write the figures here (benchmarks/make_table.py)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench_table-"))
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    rate = {}  # core-seconds per cell, by "default" or family
    warm = job_file("default", work)  # imports and the first run's set-up, which a build pays once a process
    table([warm], work / "warm-up", held_out=0, policies=[lattice_points(load_job(warm).cluster.n_workers)[0]],
          n_jobs=1)
    for kind, name in [("default", "default")] + [(f, f"{f}:0") for f in args.families]:
        path = job_file(name, work)
        lattice = lattice_points(load_job(path).cluster.n_workers)
        sample = lattice[::max(1, len(lattice) // args.sample)][: args.sample]
        start = time.process_time()  # in this process, one cell at a time: the CPU a cell takes
        built = table([path], work / name.replace(":", "-"), held_out=0, policies=sample, n_jobs=1)
        rate[kind] = (time.process_time() - start) / built.computed
        print(f"{name}: {built.computed} cells ({built.computed // 2} lattice points x 2 seeds), "
              f"{rate[kind]:.3f} core-seconds a cell")

    committed = Table(args.committed)
    sizes = {fp: (Path(args.committed) / f"{fp}{PACKED}").stat().st_size for fp in committed.fingerprints()}
    held = sum(len(committed.cells(fp)) for fp in sizes)
    by_kind = {"default": [load_job(DEFAULT_JOB_PATH)]}
    by_kind.update({f: load_family(BASELINE_DIR / f"family_{f}.yaml").jobs(args.per_family) for f in args.families})
    cells = seconds = size = 0.0
    for kind, jobs in by_kind.items():
        sized = [sizes[j.fingerprint()] for j in jobs if j.fingerprint() in sizes]
        mean_size = statistics.mean(sized) if sized else statistics.mean(sizes.values())
        count = len(tasks(jobs, lattice_points))
        cells, seconds, size = cells + count, seconds + count * rate[kind], size + len(jobs) * mean_size
    hours = seconds / cores / 3600
    jobs_in_table = sum(len(j) for j in by_kind.values())
    print(f"the whole table ({len(args.families)} families x {args.per_family} jobs and the default job, 4 seeds): "
          f"{cells:.0f} lattice cells, estimated {hours:.1f} h on {cores} cores and {size / MB:.1f} MB packed")
    committed_size = sum(sizes.values())
    print(f"the committed table ({args.committed}): {held} cells of {len(sizes)} jobs, "
          f"{committed_size / MB:.2f} MB packed")
    figures = Figures("bench_table")
    for kind, value in rate.items():
        figures.add(f"one cell, built: {kind}{'' if kind == 'default' else ' (job 0)'}", value, "core-s")
    figures.add(f"the whole table: {jobs_in_table} jobs, {cells:.0f} lattice cells, estimated build", hours,
                f"h on {cores} cores")
    figures.add("the whole table, estimated packed size (its families' committed files' mean size a job)",
                size / MB, "MB", goal="<= 20 MB to commit", met=size <= MAX_PACKED_BYTES)
    figures.add(f"the committed table ({args.committed}): {held} cells of {len(sizes)} jobs, packed",
                committed_size / MB, "MB", goal="<= 20 MB to commit", met=committed_size <= MAX_PACKED_BYTES)
    figures.write(args.json)


if __name__ == "__main__":
    main()
