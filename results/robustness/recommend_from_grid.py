"""`autosync recommend --grid` on a committed report, leave one out: each drawn job of a family gets the
policy its nearest other jobs of the report voted for (nothing tuned, nothing in a study storage), which
is then trained on it on the report's seeds (a missed seed counted at twice the budget, as the report
counts it) and held against the job's best static k and the fastest policy the report ran on it. Prints the table quoted in results/robustness/README.md:

    python results/robustness/recommend_from_grid.py results/robustness/shared   # about a minute
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from pathlib import Path


def recommend_and_run(folder: str, job_file: str, seeds: list[int]) -> tuple[dict, float, int]:
    import torch

    from autosync import api
    from autosync.catalog import label_of
    from autosync.search.recommend.vote import recommend

    torch.set_num_threads(1)
    job = api.load_job(job_file)
    answer = recommend(None, job, "no storage", [Path(folder)])  # the report's jobs alone
    times = [api.run(job, answer.policy, seed=s).metrics.get("time_to_target") for s in seeds]
    penalty = 2 * job.budget.max_virtual_seconds
    mean = statistics.fmean(t if t is not None else penalty for t in times)
    return {"policy": label_of(answer.policy), "predicted": answer.predicted_time}, mean, times.count(None)


def main() -> None:
    from joblib import Parallel, delayed

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", help="a robustness report's folder")
    parser.add_argument("--n-jobs", type=int, default=2)
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    data = json.loads((Path(args.report) / "robustness.json").read_text())
    rows = data["jobs"]
    done = Parallel(n_jobs=args.n_jobs)(delayed(recommend_and_run)(args.report, str(Path(args.report) / "jobs" /
                                                                                    f"{r['job']}.yaml"), data["seeds"])
                                        for r in rows)
    print("| job | recommended | its time | predicted | best static k (time) | regret | fastest run (time) "
          "| vs fastest |")
    print("|---|---|---|---|---|---|---|---|")
    regrets, overall = [], []
    for row, (answer, time, missed) in zip(rows, done):
        fastest = min([row["best_static_time"]] + [p["time"] for p in row["policies"].values()])
        regrets.append(time / row["best_static_time"])
        overall.append(time / fastest)
        predicted = f"{answer['predicted']:.1f}" if answer["predicted"] is not None else "-"
        print(f"| {row['job']} | {answer['policy']} | {f'{time:.1f}' if not missed else f'{time:.1f} ({missed} missed)'} | {predicted} | "
              f"{row['best_static']} ({row['best_static_time']:.1f}) | {regrets[-1]:.2f} | {fastest:.1f} | "
              f"{overall[-1]:.2f} |")
    print(f"\nmedian regret against the best static k {statistics.median(regrets):.2f} (worst {max(regrets):.2f}); "
          f"against the fastest run {statistics.median(overall):.2f} (worst {max(overall):.2f})")


if __name__ == "__main__":
    main()
