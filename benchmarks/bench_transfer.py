"""Answers from jobs already tuned: a warm-started tune and `recommend`, against a cold tune of each job.

    python benchmarks/bench_transfer.py [--family baselines/family_stragglers.yaml] [--train 18] [--test 6]
                                        [--space static_k] [--trials 12] [--patience P] [--json FILE]
                                        [--constraint-at budget|bsp-target ...]

Jobs 0 .. train-1 of the family are tuned into one SQLite storage (the "tuned jobs"). For each of the next
`test` jobs, measured in the same run:
- cold: `tune --no-transfer` in a storage of its own: the baseline, its winner and what finding it cost
  (`cost_to_answer_bsp_trainings`: the trials up to the winner, BSP's reference included);
- warm: `tune` in the storage of tuned jobs (started from the nearest neighbours' winners): the cost to its answer over the cold one's, its whole search's cost over the cold
  one's (what the user pays), and its winner's time over the cold winner's (both the study's own scores on
  the job's seed: the same runs);
- recommend: `autosync recommend` from the tuned jobs, nothing trained: the recommended policy is then
  trained on the job's seed and its time to target is held against the cold winner's (the regret).
Every tune (the tuned jobs', cold and warm) stops once `--patience P` trials in a row found nothing faster
(by default the space's `patience`: 5 for `static_k`; 0 runs the whole budget). Printed per job, then the medians. Goals (issue: search cost): warm-start cost to the answer at most a
third of the cold one's; recommendation median regret <= 1.15.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from autosync.api import quiet_optuna
from autosync.core.family import load_family
from autosync.policy_score import RunFailed, evaluate
from autosync.search.objective import trial_seeds
from autosync.search.recommend.vote import recommend
from autosync.data import SPACE_DIR
from autosync.search.space import load_space
from autosync.search.study.storage import open_storage
from autosync.search.request import TuneRequest
from autosync.search.tune import tune
from autosync.search.tune_options import TuneOptions

from _report import Figures

HERE = Path(__file__).resolve().parent


def _tune(job, url: str, space_name: str, trials: int, transfer: bool = True, patience: int | None = None,
          constraint_at: str = "budget"):
    space = load_space(SPACE_DIR / f"{space_name}.yaml", job.cluster.n_workers)
    return tune(TuneRequest.from_options(job, TuneOptions(
        n_trials=trials, storage=url, transfer=transfer, patience=patience,
        constraint_at=constraint_at), space=space))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", default=str(HERE.parent / "baselines" / "family_stragglers.yaml"))
    parser.add_argument("--train", type=int, default=18)
    parser.add_argument("--test", type=int, default=6)
    parser.add_argument("--space", default="static_k")
    parser.add_argument("--trials", type=int, default=12)
    parser.add_argument("--patience", type=int, default=None,
                        help="every tune's --patience (default: the space's, 5 for static_k; 0: the whole budget)")
    parser.add_argument("--constraint-at", nargs="+", default=["budget"], choices=["budget", "bsp-target"],
                        help="every tune's --constraint-at; several: the whole measurement once per value")
    parser.add_argument("--json", default=None, help="also write the figures here (benchmarks/make_table.py)")
    args = parser.parse_args()
    quiet_optuna()
    figures = Figures("bench_transfer")
    for constraint_at in args.constraint_at:
        measure(args, constraint_at, figures)
    figures.write(args.json)


def measure(args: argparse.Namespace, constraint_at: str, figures: Figures) -> None:
    """Tune the family's first jobs, then each held-out job cold, warm and by `recommend`, every tune holding
    its constraint at `constraint_at`; print each job and add the medians to `figures`."""
    family = load_family(args.family)
    held = "" if constraint_at == "budget" else f", --constraint-at {constraint_at}"
    print(f"== every tune with --constraint-at {constraint_at}")
    with tempfile.TemporaryDirectory() as tmp:
        shared = f"sqlite:///{tmp}/tuned.db"
        started = time.perf_counter()
        for i in range(args.train):
            _tune(family.job(i), shared, args.space, args.trials, patience=args.patience, constraint_at=constraint_at)
        print(f"tuned {args.train} jobs of {Path(args.family).name} in {time.perf_counter() - started:.0f} s")
        rows = []
        for i in range(args.train, args.train + args.test):
            job = family.job(i)
            cold = _tune(job, f"sqlite:///{tmp}/cold{i}.db", args.space, args.trials, transfer=False,
                         patience=args.patience, constraint_at=constraint_at).cache
            answer = recommend(open_storage(shared), job, "tuned jobs")
            warm = _tune(job, shared, args.space, args.trials, patience=args.patience,
                         constraint_at=constraint_at).cache
            try:
                recommended = evaluate(job, answer.policy, trial_seeds(job, 1))["time_to_target"]
            except RunFailed:
                recommended = None
            row = {"job": i, "n": job.cluster.n_workers, "cold_winner": cold["best_policy"],
                   "cold_cost": cold["cost_to_answer_bsp_trainings"], "warm_cost": warm["cost_to_answer_bsp_trainings"],
                   "cold_total": cold["search_cost_bsp_trainings"], "warm_total": warm["search_cost_bsp_trainings"],
                   "warm_over_cold_time": warm["best_value"] / cold["best_value"],
                   "neighbours": [nb["job"] for nb in warm["neighbour_jobs"]],
                   "recommended": answer.policy,
                   "recommend_regret": recommended / cold["best_value"] if recommended is not None else None}
            row["warm_over_cold_cost"] = row["warm_cost"] / row["cold_cost"] if row["cold_cost"] else None
            row["warm_over_cold_total"] = row["warm_total"] / row["cold_total"] if row["cold_total"] else None
            rows.append(row)
            print(f"job {i} (n={row['n']}): cold {row['cold_cost']:.2f} BSP trainings to its answer, warm "
                  f"{row['warm_cost']:.2f} ({row['warm_over_cold_cost']:.2f}x); whole search cold {row['cold_total']:.2f}, "
                  f"warm {row['warm_total']:.2f} ({row['warm_over_cold_total']:.2f}x); warm answer's time "
                  f"{row['warm_over_cold_time']:.2f}x the cold one's; recommend regret "
                  f"{row['recommend_regret'] if row['recommend_regret'] is None else round(row['recommend_regret'], 2)}"
                  f" (neighbours {row['neighbours']})")
    costs = [r["warm_over_cold_cost"] for r in rows if r["warm_over_cold_cost"] is not None]
    regrets = [r["recommend_regret"] if r["recommend_regret"] is not None else float("inf") for r in rows]
    cost, regret = statistics.median(costs), statistics.median(regrets)
    total = statistics.median(r["warm_over_cold_total"] for r in rows if r["warm_over_cold_total"] is not None)
    time_ratio = statistics.median(r["warm_over_cold_time"] for r in rows)
    print(f"medians over {len(rows)} jobs: warm / cold cost to the answer {cost:.2f}, warm / cold whole search "
          f"{total:.2f}, warm / cold answer time "
          f"{time_ratio:.2f}, recommend regret {regret:.2f}")
    figures.add(f"warm-started tune{held}: cost to its answer (median)", cost, "x the cold tune's", against="cold tune",
                ratio=cost, goal="<= 1/3", met=cost <= 1 / 3)
    figures.add(f"warm-started tune{held}: its whole search's cost (median)", total, "x the cold tune's", against="cold tune",
                ratio=total)
    figures.add(f"warm-started tune{held}: its answer's time to target (median)", time_ratio, "x the cold winner's",
                against="cold tune", ratio=time_ratio)
    figures.add(f"recommend (nothing trained{held}): regret (median)", regret, "x the cold winner's time",
                against="cold tune", ratio=regret, goal="<= 1.15", met=regret <= 1.15)


if __name__ == "__main__":
    main()
