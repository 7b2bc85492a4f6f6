"""Which static k, as an expression of n, and which learning-rate rule, is fastest most often: read from the
broad reference grids of the development jobs (held-out seeds), for the static-k family's portfolio settings.

    python results/portfolio/static_k.py --sets bursty:8 jobs fleet:6

Each set is a family's first COUNT jobs (`NAME:COUNT`, baselines/family_NAME.yaml, its grid cached under
results/answer_quality/NAME/), or `jobs` (bench_tune_cost's default and quick:0-5, cached under
results/answer_quality/jobs/). Run `benchmarks/bench_answer_quality.py --grid-only` on a set first.

For each rule and each k = round(n * a / b + c) (clipped to 1..n-1), the table gives its held-out time over
the job's best static k (a miss or a diverged run counts as the grid counts it: twice the budget): the
median, on how many jobs it is within 1.3x and 1.5x, and on how many it missed a seed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

RULES = ("fixed", "proportional", "sqrt", "linear")
SHARES = ((1, 4), (1, 3), (1, 2), (2, 3), (3, 4))
OFFSETS = (0, 2)


def k_of(n: int, share: tuple[int, int], offset: int) -> int:
    """k = n * a / b + c as the portfolio resolves it (`resolve_share`), below n (k = n is BSP)."""
    from autosync.search.space_file import resolve_share

    return min(n - 1, resolve_share(f"n_workers*{share[0]}/{share[1]}" + (f"+{offset}" if offset else ""), n))


def static_times(job, cells, seeds) -> dict[tuple[int, str], tuple[float, bool]]:
    """{(k, rule): (held-out time, missed a seed)} of the grid's static k on `job` (k < n)."""
    from autosync.experiments.reference_grid import grid_scores

    def static(n: int) -> list[dict]:
        return [{"policy": "backup", "params": {"k": k, "lr_rule": rule}} for k in range(1, n) for rule in RULES]

    return {(s.policy["params"]["k"], s.policy["params"]["lr_rule"]): (s.time, bool(s.missed))
            for s in grid_scores(job, cells, seeds, static)}


def main() -> int:
    from bench_answer_quality import selected_jobs

    from autosync.experiments.reference_grid import held_out_seeds
    from autosync.experiments.robustness import read_cells

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", nargs="+", default=["bursty:8", "jobs", "fleet:6"])
    args = parser.parse_args()
    jobs = []
    for entry in args.sets:
        if entry == "jobs":
            _, chosen, out = selected_jobs(["default"] + [f"quick:{i}" for i in range(6)], "", 0, None)
        else:
            name, _, count = entry.partition(":")
            _, chosen, out = selected_jobs(None, str(ROOT / "baselines" / f"family_{name}.yaml"), int(count), None)
        cells = read_cells(out)
        jobs += [(job, static_times(job, cells, held_out_seeds(job))) for job in chosen]
    print(f"{len(jobs)} jobs ({', '.join(args.sets)}); time over the job's best static k")
    print("| rule | k | median | within 1.3x | within 1.5x | missed |")
    print("|---|---|---|---|---|---|")
    rows = []
    for rule in RULES:
        for share in SHARES:
            for offset in OFFSETS:
                ratios, missed = [], 0
                for job, times in jobs:
                    best = min(t for t, _ in times.values())
                    time, miss = times[(k_of(job.cluster.n_workers, share, offset), rule)]
                    ratios.append(time / best)
                    missed += miss
                rows.append((rule, share, offset, statistics.median(ratios), sum(r <= 1.3 for r in ratios),
                             sum(r <= 1.5 for r in ratios), missed))
    for rule, share, offset, median, within13, within15, missed in sorted(rows, key=lambda r: (-r[4], r[3])):
        k = f"n*{share[0]}/{share[1]}" + (f"+{offset}" if offset else "")
        print(f"| {rule} | {k} | {median:.2f} | {within13} | {within15} | {missed} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
