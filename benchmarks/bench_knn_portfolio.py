"""A first round fitted per job on its nearest tuned jobs: the race replayed on the table, leave-one-family-out.

    python benchmarks/bench_knn_portfolio.py [--table DIR] [--neighbours 16 32] [--own-lattice] \
        [--families fresh quarry ... mosaic] [--count 8] [--out benchmarks/knn_portfolio.md]

The search issue asks for the first round to be "ordered per job by its nearest tuned jobs". The shipped race
runs one portfolio on every job: auto-sklearn 2.0's greedy portfolio over every training job
(`autosync.experiments.portfolio_fit.greedy_portfolio`), in its fitted order (`bench_portfolio_order.py`
bounds what ordering alone could save). Here each job's portfolio is the greedy portfolio over its K nearest
training jobs instead, as auto-sklearn 1.0 warm-starts a search from the datasets nearest by meta-features:
the distance is the Euclidean distance between the jobs' cluster features
(`autosync.search.recommend.neighbours.cluster_features`, what `recommend` measures), each feature
standardised over the training jobs. The portfolio's size and the margin are fitted as `autosync fit` fits
them (`race_fit.fit`: cross-validation over the training families, the cost goal, then the one-standard-error
rule), the inner folds' portfolios built per job the same way. Variants: each K of `--neighbours`, every
training job (the shipped race), and K chosen by that same cross-validation among them (its K a fitted
constant, as a shipped version's would be). A job's candidates are the labels its K nearest jobs all have, so a
static k by its k that the job's own lattice lacks (`backup:k=12` on 9 workers) may be chosen and is left out
when the race runs; with `--own-lattice` they are the labels of the job's own lattice too
(benchmarks/knn_portfolio_own_lattice.md), so every member runs.

Each family's jobs are raced with the settings fitted on the other families (`race_fit.race`); every run is
read from the table, and a run it lacks (a finalist's run to the end of the budget that no shipped race
checked: about 2.7 MB of cells, a few minutes) is trained into it. The table is a temporary copy of
results/table unless `--table` names one (which keeps what it trained for the next run): the committed
table, at most 20 MB, is never grown. Writes each variant's figures, and its paired differences against the shipped
race (log ratio of held-out time to the grid's choice, cost in BSP trainings) with 90% bootstrap intervals
over jobs, as `bench_portfolio_order.py`.
"""

from __future__ import annotations

import argparse
import math
import shutil
import statistics
import tempfile
from pathlib import Path

import numpy as np

from autosync.experiments import portfolio_fit, race_fit
from autosync.race import RaceSettings
from autosync.search.recommend import neighbours
from autosync.table import Table

from _report import Figures
from bench_lofo import COMMITTED_FAMILIES, family_times
from bench_portfolio_order import interval
from bench_race_rounds import family_interval

EVERY = 0  # K meaning every training job: the shipped race's portfolio
CHOSEN = -1  # K chosen by cross-validation among the others


def nearest(job: portfolio_fit.JobTimes, pool: list[portfolio_fit.JobTimes], k: int,
            features: dict[str, np.ndarray]) -> list[portfolio_fit.JobTimes]:
    """The `k` jobs of `pool` nearest `job` by standardised cluster features (all of them for `EVERY`); ties
    in the pool's order."""
    if k == EVERY or k >= len(pool):
        return pool
    x = np.array([features[p.job] for p in pool])
    spread = x.std(axis=0)
    spread[spread == 0] = 1.0
    distance = np.linalg.norm((x - features[job.job]) / spread, axis=1)
    return [pool[i] for i in np.argsort(distance, kind="stable")[:k]]


def job_portfolio(job: portfolio_fit.JobTimes, pool: list[portfolio_fit.JobTimes], k: int,
                  features: dict[str, np.ndarray], size: int, own_lattice: bool) -> list[str]:
    """`job`'s portfolio of `size`: the greedy one over its `k` nearest jobs of `pool` (among its own lattice's
    labels too, with `own_lattice`)."""
    return portfolio_fit.greedy_portfolio(nearest(job, pool, k, features), size,
                                          allowed=job.policies if own_lattice else None)


def scored_settings(table: Table, train: list[portfolio_fit.JobTimes], ks: list[int],
                    features: dict[str, np.ndarray], own_lattice: bool) -> dict[int, list[race_fit.SettingScore]]:
    """Per K, every (size, margin) setting's cross-validated figures on `train` (`race_fit.fit`'s folds), each
    job's portfolio fitted on its K nearest jobs of the other folds."""
    return {k: race_fit.setting_scores(race_fit.cross_validated(
        table, train, portfolio=lambda job, rest, k=k: job_portfolio(job, rest, k, features, max(race_fit.SIZES),
                                                                   own_lattice and k != EVERY))) for k in ks}


def chosen_k(scored: dict[int, list[race_fit.SettingScore]]) -> tuple[int, race_fit.SettingScore]:
    """The K and setting that `race_fit.chosen`'s rule takes over every K's settings (ties: every training job
    first, then the smaller K)."""
    best = race_fit.chosen([s for k in sorted(scored) for s in scored[k]])
    return next(k for k in sorted(scored) if best in scored[k]), best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table", default=None, help="a table to read and train the missing runs into "
                        "(default: a temporary copy of results/table)")
    parser.add_argument("--neighbours", type=int, nargs="+", default=[16, 32])
    parser.add_argument("--families", nargs="+", default=list(COMMITTED_FAMILIES))
    parser.add_argument("--count", type=int, default=8)
    parser.add_argument("--own-lattice", action="store_true", help="each job's candidates among its own "
                        "lattice's labels too (with K nearest jobs)")
    parser.add_argument("--out", default="benchmarks/knn_portfolio.md", help="write the report here too")
    parser.add_argument("--json", default=None, help="also write the figures here (benchmarks/make_table.py)")
    args = parser.parse_args()
    if min(args.neighbours) < 1:
        parser.error(f"--neighbours: each K must be at least 1, but got {min(args.neighbours)}")
    with tempfile.TemporaryDirectory() as tmp:
        table_dir = args.table or shutil.copytree(Path(__file__).resolve().parents[1] / "results" / "table",
                                                  Path(tmp) / "table")
        results, ks = measure(args, Table(table_dir))
    print(text := report(args, results, ks))
    if args.out:
        Path(args.out).write_text(text)
    figures(results).write(args.json)


def measure(args: argparse.Namespace, table: Table) -> tuple[dict[int, dict[str, dict]], list[int]]:
    """Every variant's race on every job, leave-one-family-out: per variant, per job, `race_fit.race`'s row."""
    jobs = family_times(table, args.families, args.count)
    features = {j.job: np.array(neighbours.cluster_features(j.spec)) for j in jobs}
    ks = [EVERY] + sorted(set(args.neighbours))
    variants = ks + [CHOSEN]
    results: dict[int, dict[str, dict]] = {v: {} for v in variants}
    for family in args.families:
        train = [j for j in jobs if j.family != family]
        scored = scored_settings(table, train, ks, features, args.own_lattice)
        picks = {k: (k, race_fit.chosen(scored[k])) for k in ks}
        picks[CHOSEN] = chosen_k(scored)
        for variant, (k, best) in picks.items():
            for job in (j for j in jobs if j.family == family):
                members = job_portfolio(job, train, k, features, best.size, args.own_lattice and k != EVERY)
                raced = race_fit.race(table, job, RaceSettings(tuple(members), best.margin))
                results[variant][job.job] = {**raced, "family": job.family, "k": k, "size": best.size,
                                             "margin": best.margin}
    return results, ks


def figures(results: dict[int, dict[str, dict]]) -> Figures:
    """Each variant's differences against the shipped race, and its worst ratio (benchmarks/README.md)."""
    out = Figures("bench_knn_portfolio")
    shipped = results[EVERY]
    jobs = sorted(shipped)
    for variant, rows in results.items():
        if variant == EVERY:
            continue
        dlog = [math.log(rows[j]["ratio"]) - math.log(shipped[j]["ratio"]) for j in jobs]
        dcost = [rows[j]["cost"] - shipped[j]["cost"] for j in jobs]
        (lo, hi), (clo, chi) = interval(dlog), interval(dcost)
        out.add(f"{name(variant)}: mean log ratio to the grid's choice minus the shipped race's ({len(jobs)} jobs; "
                f"90% interval {lo:+.3f} to {hi:+.3f})", statistics.fmean(dlog), "")
        out.add(f"{name(variant)}: mean cost minus the shipped race's (90% interval {clo:+.2f} to {chi:+.2f})",
                statistics.fmean(dcost), "BSP trainings")
        worst, shipped_worst = max(rows[j]["ratio"] for j in jobs), max(shipped[j]["ratio"] for j in jobs)
        out.add(f"{name(variant)}: worst answer over the grid's choice", worst, "x", "the shipped race's worst",
                worst / shipped_worst)
    return out


def name(variant: int) -> str:
    return {EVERY: "every training job (shipped)", CHOSEN: "K chosen by cross-validation"}.get(variant,
                                                                                            f"K = {variant}")


def report(args: argparse.Namespace, results: dict[int, dict[str, dict]], ks: list[int]) -> str:
    table = f"--table {args.table} " if args.table else ""
    command = (f"python benchmarks/bench_knn_portfolio.py {table}--neighbours "
               f"{' '.join(map(str, sorted(set(args.neighbours))))}{' --own-lattice' if args.own_lattice else ''} "
               f"--families {' '.join(args.families)} --count {args.count} --out {args.out}")
    shipped = results[EVERY]
    jobs = sorted(shipped)
    lines = ["# A first round per job: the greedy portfolio over each job's nearest tuned jobs", "", f"`{command}`",
             "", "Leave-one-family-out on the table: each family's jobs raced with the settings fitted on the other "
             "families, each job's portfolio fitted on its K nearest training jobs by cluster features "
             "(`benchmarks/bench_knn_portfolio.py` says how). Ratio: the answer's held-out time over the grid's "
             "choice; cost in BSP trainings. Differences against the shipped race (every training job), with "
             "90% bootstrap intervals over jobs (1000 draws, seed 0).", "",
             "| variant | median | 90th percentile | worst | mean log ratio | median cost | mean cost | "
             "mean log ratio minus the shipped race's | mean cost minus the shipped race's | answers changed |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for variant, rows in results.items():
        ratios = sorted(rows[j]["ratio"] for j in jobs)
        costs = [rows[j]["cost"] for j in jobs]
        dlog = [math.log(rows[j]["ratio"]) - math.log(shipped[j]["ratio"]) for j in jobs]
        dcost = [rows[j]["cost"] - shipped[j]["cost"] for j in jobs]
        (lo, hi), (clo, chi) = interval(dlog), interval(dcost)
        changed = sum(rows[j]["answer"] != shipped[j]["answer"] for j in jobs)
        lines.append(f"| {name(variant)} | {statistics.median(ratios):.2f} | "
                     f"{ratios[math.ceil(0.9 * len(ratios)) - 1]:.2f} | {ratios[-1]:.2f} | "
                     f"{statistics.fmean(math.log(r) for r in ratios):.4f} | {statistics.median(costs):.2f} | "
                     f"{statistics.fmean(costs):.2f} | {statistics.fmean(dlog):+.4f} [{lo:+.4f}, {hi:+.4f}] | "
                     f"{statistics.fmean(dcost):+.2f} [{clo:+.2f}, {chi:+.2f}] | {changed} |")
    lines += ["", "Resampling whole families instead (a family's jobs are not independent: the families drawn with "
              "replacement, each with all its jobs), the 90% intervals of the differences against the shipped race:"]
    families = [shipped[j]["family"] for j in jobs]
    for variant, rows in results.items():
        if variant != EVERY:
            (lo, hi), (clo, chi) = (family_interval(families, [value(rows[j]) - value(shipped[j]) for j in jobs])
                                    for value in (lambda r: math.log(r["ratio"]), lambda r: r["cost"]))
            lines.append(f"- {name(variant)}: mean log ratio [{lo:+.4f}, {hi:+.4f}], cost [{clo:+.2f}, {chi:+.2f}]")
    chosen = results[CHOSEN]
    lines += ["", "K chosen per held-out family: " + ", ".join(
        f"{f} {name(next(chosen[j]['k'] for j in jobs if j.startswith(f + '-')))}" for f in args.families), "",
        "| job | " + " | ".join(name(v) for v in results) + " |", "|---|" + "---|" * len(results)]
    for j in jobs:
        lines.append(f"| {j} | " + " | ".join(f"{results[v][j]['ratio']:.2f} ({results[v][j]['cost']:.2f})"
                                              for v in results) + " |")
    lines += ["", "Per job: the answer's held-out time over the grid's choice (its cost in BSP trainings)."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
