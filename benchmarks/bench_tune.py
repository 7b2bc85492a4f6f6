"""Tuning static k against the exhaustive search it replaces, on the embedded default job.

    python benchmarks/bench_tune.py [--trials 18] [--seeds 0 1 2 3 4] [--sampler tpe]

The exhaustive search trains every (k, learning-rate rule) of search_spaces/static_k.yaml once (32
policies at n = 16) with the seed `autosync tune` uses, and its best is the fastest policy whose final
accuracy is within the tolerance of BSP's. Then `autosync tune` (TPE, as shipped) runs with a trial
budget, once per sampler seed, each in a fresh SQLite study. Printed per seed: the time-to-target of the
policy tune chose (read from the exhaustive table, the same seed's run) against the exhaustive best, and
tune's training (virtual seconds, BSP reference included) against the exhaustive search's. The issue's
target: within 5% of the best at <= 40% of the training.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from autosync.api import quiet_optuna
from autosync.core.job import load_job
from autosync.policy_score import evaluate
from autosync.search.objective import ObjectiveSettings, trial_seeds
from autosync.data import SPACE_DIR
from autosync.search.space import load_space
from autosync.search.request import TuneRequest
from autosync.search.tune import tune
from autosync.search.tune_options import TuneOptions

from _report import Figures


def exhaustive(job, space, tolerance: float) -> tuple[dict[tuple[int, str], dict], float, float]:
    """Every (k, lr_rule) once; returns the scores, the exhaustive best's time and its total training."""
    dims = space.dimensions["backup"]
    scores = {}
    for k in range(int(dims["k"].low), int(dims["k"].high) + 1):
        for rule in dims["lr_rule"].choices:
            scores[(k, rule)] = evaluate(job, {"policy": "backup", "params": {"k": k, "lr_rule": rule}},
                                       trial_seeds(job, 1))
    bsp_final = scores[(job.cluster.n_workers, "fixed")]["final_metric"]
    feasible = [s["time_to_target"] for s in scores.values() if s["final_metric"] >= bsp_final - tolerance]
    return scores, min(feasible), sum(s["virtual_seconds"] for s in scores.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=18)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--sampler", default="tpe", help="tpe | gp | random (as `autosync tune --sampler`)")
    parser.add_argument("--json", default=None, help="also write the figures here (benchmarks/make_table.py)")
    args = parser.parse_args()
    quiet_optuna()  # one line per tune below, as the command prints
    job = load_job(None)
    space = load_space(SPACE_DIR / "static_k.yaml", job.cluster.n_workers)
    settings = ObjectiveSettings()
    start = time.perf_counter()
    scores, best, exhaustive_cost = exhaustive(job, space, settings.tolerance)
    print(f"exhaustive: {len(scores)} policies, best time-to-target {best:.1f} virtual s, training "
          f"{exhaustive_cost:.0f} virtual s ({time.perf_counter() - start:.0f} s wall)")
    quality, cost = [], []
    for seed in args.seeds:
        with tempfile.TemporaryDirectory() as tmp:
            start = time.perf_counter()
            outcome = tune(TuneRequest.from_options(job, TuneOptions(
                n_trials=args.trials, seed=seed, sampler=args.sampler,
                storage=f"sqlite:///{Path(tmp) / 'bench.db'}"), space=space))
            wall = time.perf_counter() - start
        chosen = outcome.cache["best_policy"]["params"]
        found = scores[(chosen["k"], chosen["lr_rule"])]["time_to_target"]
        spent = outcome.cache["search_cost_virtual_seconds"]
        quality.append(found / best)
        cost.append(spent / exhaustive_cost)
        print(f"tune ({args.sampler}) seed {seed}, {args.trials} trials: chose k={chosen['k']} {chosen['lr_rule']}, "
              f"time-to-target "
              f"{found:.1f} s = {found / best:.3f}x the exhaustive best; training {spent:.0f} virtual s = "
              f"{spent / exhaustive_cost:.2f}x the exhaustive search's ({wall:.0f} s wall)")
    print(f"mean over {len(args.seeds)} sampler seeds: {statistics.fmean(quality):.3f}x the best time-to-target "
          f"(target <= 1.05) at {statistics.fmean(cost):.2f}x the exhaustive training (target <= 0.40)")
    figures = Figures("bench_tune")
    figures.add(f"tune static_k ({args.sampler}, {args.trials} trials): time-to-target of its pick", statistics.fmean(
        quality) * best, "virtual s", "the exhaustive search's best", statistics.fmean(quality), "<= 1.05x",
                statistics.fmean(quality) <= 1.05)
    figures.add(f"tune static_k ({args.sampler}, {args.trials} trials): training spent", statistics.fmean(cost) *
                exhaustive_cost, "virtual s", "the exhaustive search's", statistics.fmean(cost), "<= 0.40x",
                statistics.fmean(cost) <= 0.40)
    figures.write(args.json)


if __name__ == "__main__":
    main()
