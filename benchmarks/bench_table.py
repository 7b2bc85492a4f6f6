"""What a table costs: cells of the lattice built on a sample, and the whole table it stands for.

    python benchmarks/bench_table.py [--sample 12] [--jobs default quarry:0] [--families 8 --per-family 8]

Builds `--sample` lattice points (every m-th of the broad reference grid, so each family of policies is
drawn from) of each job in `--jobs` on the job's seed, in a new table (`autosync.api.table`, every core),
and measures the seconds of one core and the packed bytes per cell. Then counts the cells of the table
the search issue asks for (every lattice point of `--per-family` jobs of the first `--families` committed
families and the default job, on 2 search and 2 held-out seeds) and states its size and build time on
this machine at the measured rates: an estimate, printed as one. Last, the cells and packed size of the
table committed in `--committed` (results/table), which is held to the same bound.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import tempfile
import time
from pathlib import Path

from autosync.api import load_job, table
from autosync.core.family import load_family
from autosync.data import BASELINE_DIR, DEFAULT_JOB_PATH
from autosync.lattice import lattice_points
from autosync.table.build import tasks

from _report import Figures

MAX_PACKED_BYTES = 20 * 2 ** 20  # the search issue's bound on a table committed to the repository


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
    parser.add_argument("--sample", type=int, default=12, help="lattice points per job")
    parser.add_argument("--jobs", nargs="+", default=["default", "quarry:0"])
    parser.add_argument("--families", type=int, default=8)
    parser.add_argument("--per-family", type=int, default=8)
    parser.add_argument("--committed", default="results/table", help="the committed table to measure")
    parser.add_argument("--json", default=None, help="also write the figures here (benchmarks/make_table.py)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench_table-"))
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    seconds, cells, packed = 0.0, 0, 0
    for name in args.jobs:
        path = job_file(name, work)
        n = load_job(path).cluster.n_workers
        lattice = lattice_points(n)
        every = max(1, len(lattice) // args.sample)
        sample = lattice[::every][: args.sample]
        out = work / name.replace(":", "-")
        start = time.perf_counter()
        built = table([path], out, held_out=0, policies=sample, n_jobs=-1)
        wall = time.perf_counter() - start
        size = sum(p.stat().st_size for p in built.files)
        done = built.computed // 2  # two search seeds: the job's seed and the next
        print(f"{name}: {built.computed} cells ({done} of {len(lattice)} lattice points x 2 seeds) in {wall:.1f} s "
              f"on {cores} cores, {size / built.computed / 1024:.1f} KiB packed per cell")
        seconds, cells, packed = seconds + wall * cores, cells + built.computed, packed + size
    families = sorted(BASELINE_DIR.glob("family_*.yaml"))[: args.families]
    jobs = [load_job(DEFAULT_JOB_PATH)] + [j for f in families for j in load_family(f).jobs(args.per_family)]
    whole = len(tasks(jobs, lattice_points))
    per_cell, per_cell_bytes = seconds / cells, packed / cells
    hours = whole * per_cell / cores / 3600
    size = whole * per_cell_bytes
    print(f"the whole table ({len(families)} families x {args.per_family} jobs and the default job, 4 seeds): "
          f"{whole} cells; at {per_cell:.2f} core-seconds and {per_cell_bytes / 1024:.1f} KiB a cell (estimated): "
          f"{hours:.1f} h on {cores} cores, {size / 2 ** 20:.0f} MiB packed")
    figures = Figures("bench_table")
    figures.add("one cell, built (sampled lattice points)", per_cell, "core-s")
    figures.add("one cell, packed", per_cell_bytes / 1024, "KiB")
    figures.add(f"the whole table: {whole} cells, estimated build", hours, f"h on {cores} cores")
    figures.add("the whole table, estimated packed size", size / 2 ** 20, "MiB", goal="<= 20 MiB to commit",
                met=size <= MAX_PACKED_BYTES)
    files = sorted(Path(args.committed).glob("*.jsonl.gz"))
    held = sum(len(gzip.decompress(p.read_bytes()).splitlines()) for p in files)
    size = sum(p.stat().st_size for p in files)
    print(f"the committed table ({args.committed}): {held} cells of {len(files)} jobs, {size / 2 ** 20:.1f} MiB packed")
    figures.add(f"the committed table ({args.committed}): {held} cells of {len(files)} jobs, packed", size / 2 ** 20,
                "MiB", goal="<= 20 MiB to commit", met=size <= MAX_PACKED_BYTES)
    figures.write(args.json)


if __name__ == "__main__":
    main()
