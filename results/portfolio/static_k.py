"""Which static k, as an expression of n, and which learning-rate rule, is fastest most often: read from the
broad reference grids of the development jobs (held-out seeds), for the static-k family's portfolio settings.

    python results/portfolio/static_k.py --sets bursty:8 jobs fleet:6

Each set is a family's first COUNT jobs (`NAME:COUNT`, baselines/family_NAME.yaml, its grid cached under
results/answer_quality/NAME/), or `jobs` (bench_tune_cost's default and quick:0-5, cached under
results/answer_quality/jobs/). Run `benchmarks/bench_answer_quality.py --grid-only` on a set first.

For each rule and each k = round(n * a / b + c), and k = the job's fast workers (`fast_workers`:
`autosync.core.arrivals.fast_workers`, read from the cluster model on the job's seed), clipped to 1..n as
the portfolio resolves them, the table gives its held-out time over the job's best static k (a miss or a diverged run counts as the grid
counts it: twice the budget): the median, on how many jobs it is within 1.3x and 1.5x, and on how many it
missed a seed. `--pair A B ...` (each `rule:k`, as the table names them) adds the settings' best one per
job: what the static-k family's portfolio settings give once all have run.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

RULES = ("fixed", "proportional", "sqrt", "linear")
SHARES = ((1, 8), (1, 4), (1, 3), (1, 2), (2, 3), (3, 4))
OFFSETS = (0, 2)


def expressions() -> list[str]:
    """The k settings the table reads, as a portfolio writes them."""
    shares = [f"n_workers*{a}/{b}" + (f"+{c}" if c else "") for a, b in SHARES for c in OFFSETS]
    return shares + ["fast_workers"]


def k_of(job, expression: str, fast: int) -> int:
    """k as the portfolio resolved `expression` (one of `expressions()`) on `job`: round(n * a / b) + c, or
    `fast`, the job's fast workers, clipped to 1..n."""
    n = job.cluster.n_workers
    if expression == "fast_workers":
        return max(1, min(n, fast))
    share, _, offset = expression.removeprefix("n_workers*").partition("+")
    a, b = share.split("/")
    return max(1, min(n, round(n * int(a) / int(b)) + int(offset or 0)))


def static_times(job, cells, seeds) -> dict[tuple[int, str], tuple[float, bool]]:
    """{(k, rule): (held-out time, missed a seed)} of the grid's static k on `job`, k = 1..n (k = n under
    `fixed` and `proportional` is BSP; under `sqrt` and `linear` BSP with the step scaled, as the grid runs)."""
    from autosync.experiments.reference_grid import grid_scores

    def static(n: int) -> list[dict]:
        scaled = [{"policy": "backup", "params": {"k": n, "lr_rule": rule}} for rule in ("sqrt", "linear")]
        return [{"policy": "backup", "params": {"k": k, "lr_rule": rule}} for k in range(1, n) for rule in RULES] \
            + scaled + [{"policy": "bsp", "params": {}}]

    n = job.cluster.n_workers
    out = {}
    for s in grid_scores(job, cells, seeds, static):
        if s.policy["policy"] == "bsp":
            out.update({(n, rule): (s.time, bool(s.missed)) for rule in ("fixed", "proportional")})
        else:
            out[(s.policy["params"]["k"], s.policy["params"]["lr_rule"])] = (s.time, bool(s.missed))
    return out


def main() -> int:
    from bench_answer_quality import selected_jobs

    from autosync.core.arrivals import fast_workers
    from autosync.experiments.reference_grid import held_out_seeds
    from autosync.experiments.robustness import read_cells

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", nargs="+", default=["bursty:8", "jobs", "fleet:6"])
    parser.add_argument("--pair", nargs="+", action="append", metavar="SETTING",
                        help="settings run together (rule:k, e.g. sqrt:n_workers*1/4+2 linear:fast_workers): their best one")
    args = parser.parse_args()
    jobs = []
    for entry in args.sets:
        if entry == "jobs":
            _, chosen, out = selected_jobs(["default"] + [f"quick:{i}" for i in range(6)], "", 0, None)
        else:
            name, _, count = entry.partition(":")
            _, chosen, out = selected_jobs(None, str(ROOT / "baselines" / f"family_{name}.yaml"), int(count), None)
        cells = read_cells(out)
        jobs += [(job, static_times(job, cells, held_out_seeds(job)),  # the fast workers once per job, as a tune
                  fast_workers(job.cluster, job.workload.batch_size, job.seed)) for job in chosen]
    print(f"{len(jobs)} jobs ({', '.join(args.sets)}); time over the job's best static k")
    print("| rule | k | median | within 1.3x | within 1.5x | missed |")
    print("|---|---|---|---|---|---|")
    ratios: dict[str, list[tuple[float, bool]]] = {}  # "rule:k" -> per job (time over the best, missed)
    for rule in RULES:
        for expression in expressions():
            ratios[f"{rule}:{expression}"] = [
                (time / min(t for t, _ in times.values()), miss)
                for job, times, fast in jobs for time, miss in [times[(k_of(job, expression, fast), rule)]]]
    rows = [(name, statistics.median(r for r, _ in per_job), sum(r <= 1.3 for r, _ in per_job),
             sum(r <= 1.5 for r, _ in per_job), sum(m for _, m in per_job)) for name, per_job in ratios.items()]
    for name, median, within13, within15, missed in sorted(rows, key=lambda r: (-r[2], r[1])):
        rule, _, k = name.partition(":")
        print(f"| {rule} | {k.replace('n_workers', 'n')} | {median:.2f} | {within13} | {within15} | {missed} |")
    for settings in args.pair or []:
        better = [min(per_job) for per_job in zip(*([r for r, _ in ratios[name]] for name in settings))]
        print(f"{' + '.join(settings)}: the best one's median {statistics.median(better):.2f}, "
              f"within 1.3x on {sum(r <= 1.3 for r in better)}, within 1.5x on {sum(r <= 1.5 for r in better)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
