"""What ordering the race's first round per job could save: the race replayed on the table with its
portfolio in the fitted order, and in the best order any per-job rule could find.

    python benchmarks/bench_portfolio_order.py [--families fresh quarry ... mosaic] [--count 8] \
        [--table results/table] [--out benchmarks/portfolio_order.md]

(the defaults: the eight committed families, jobs 0 to 7 of each, the committed table; the report is
printed, and written where `--out` says).

The search issue asks for the first round "ordered per job by its nearest tuned jobs". The order decides
which members survive the first round only through exact ties (times to the target are read at the job's
evaluations, so two members can reach it at the same one; the portfolio's order breaks the tie): a member
stopped at its horizon took at least `margin` times the fastest finished member's time, so it is out of the
round whichever order ran it (`autosync.race`). What the order changes is the first round's cost: each run
to the target is stopped at `margin` times the fastest member finished before it, and fastest first
minimises every one of them (the first run costs the round's least time, each later one is cut at the least
horizon there is). So the race with each job's members ordered by their own time on its first search seed
(an oracle, which no rule reading other jobs can beat) bounds what ordering by nearest tuned jobs could save;
slowest first shows the spread.

Leave-one-family-out, as `bench_lofo.py`: each family's jobs are raced with the settings fitted on the other
families (`autosync.experiments.race_fit.fit`), every run read from the table (`race_fit.race`). Writes the
per-job costs and the paired differences with 90% bootstrap intervals over jobs.
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import statistics
from pathlib import Path

from autosync.experiments import portfolio_fit, race_fit
from autosync.race import RaceSettings
from autosync.table import Table

from _report import Figures
from bench_lofo import COMMITTED_FAMILIES, family_times

ORDERS = ("fitted", "fastest first (oracle)", "slowest first")
DRAWS = 1000  # bootstrap draws over jobs (seed 0), as bench_lofo's intervals


def ordered(settings: RaceSettings, job: portfolio_fit.JobTimes, order: str) -> RaceSettings:
    """`settings` with its portfolio in `order` on `job`: as fitted, or by each member's time on the job's
    first search seed (ties in the fitted order; a member not on the job's lattice keeps its place last)."""
    if order == ORDERS[0]:
        return settings
    first = {m: job.search[m][0] if m in job.search else float("inf") for m in settings.portfolio}
    members = sorted(settings.portfolio, key=lambda m: (first[m], settings.portfolio.index(m)),
                     reverse=order == ORDERS[2])
    return dataclasses.replace(settings, portfolio=tuple(members))


def interval(diffs: list[float]) -> tuple[float, float]:
    """The 90% bootstrap interval of the mean of `diffs` over jobs."""
    rng = random.Random(0)
    means = sorted(statistics.fmean(rng.choices(diffs, k=len(diffs))) for _ in range(DRAWS))
    return means[int(0.05 * DRAWS)], means[int(0.95 * DRAWS) - 1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", nargs="+", default=list(COMMITTED_FAMILIES))
    parser.add_argument("--count", type=int, default=8)
    parser.add_argument("--table", default="results/table")
    parser.add_argument("--out", default="benchmarks/portfolio_order.md", help="write the report here too")
    parser.add_argument("--json", default=None, help="also write the figures here (benchmarks/make_table.py)")
    args = parser.parse_args()
    table = Table(args.table)
    jobs = family_times(table, args.families, args.count)
    rows = []
    for family in args.families:
        settings = race_fit.fit(table, [j for j in jobs if j.family != family])
        for job in (j for j in jobs if j.family == family):
            raced = {order: race_fit.race(table, job, ordered(settings, job, order)) for order in ORDERS}
            rows.append((job.job, {o: r["cost"] for o, r in raced.items()},
                         len({r["answer"] for r in raced.values()}) == 1))
    command = (f"python benchmarks/bench_portfolio_order.py --families {' '.join(args.families)} --count {args.count} "
               f"--table {args.table} --out {args.out}")
    lines = ["# The first round's order: what ordering each job's portfolio could save", "", f"`{command}`", "",
             "Cost of the race in BSP trainings, each family's jobs raced with the settings fitted on the other "
             "families, every run read from the table (`benchmarks/bench_portfolio_order.py` says why fastest "
             "first bounds any per-job order).", "",
             "| job | " + " | ".join(ORDERS) + " | same answer |", "|---|" + "---|" * (len(ORDERS) + 1)]
    for name, costs, same in rows:
        lines.append(f"| {name} | " + " | ".join(f"{costs[o]:.3f}" for o in ORDERS) + f" | {'yes' if same else 'no'} |")
    lines += ["", "| order | mean cost | median cost | mean change against the fitted order (90% interval) |",
              "|---|---|---|---|"]
    for order in ORDERS:
        costs = [c[order] for _, c, _ in rows]
        diffs = [c[order] - c[ORDERS[0]] for _, c, _ in rows]
        low, high = interval(diffs)
        lines.append(f"| {order} | {statistics.fmean(costs):.3f} | {statistics.median(costs):.3f} | "
                     f"{statistics.fmean(diffs):+.3f} [{low:+.3f}, {high:+.3f}] |")
    same = sum(same for *_, same in rows)
    lines += ["", f"{same} of {len(rows)} jobs give the same answer in every order."]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    figures = Figures("bench_portfolio_order")
    fitted = statistics.fmean(c[ORDERS[0]] for _, c, _ in rows)
    for order in ORDERS:
        mean = statistics.fmean(c[order] for _, c, _ in rows)
        figures.add(f"race cost, mean over {len(rows)} jobs, first round {order}", mean, "BSP trainings",
                    *((None, None) if order == ORDERS[0] else ("the fitted order", mean / fitted)))
    figures.add("jobs whose answer is the same in every order", same, "")
    figures.write(args.json)


if __name__ == "__main__":
    main()
