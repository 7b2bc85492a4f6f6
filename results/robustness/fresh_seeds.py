"""How much of an online policy's regret is the reference's luck: each job's best static k, chosen in
hindsight on the report's seeds out of every k and learning-rate rule, trained again on three fresh seeds
(the three after the report's last), and the online policies on the same fresh seeds. Prints the table quoted in results/robustness/README.md:

    python results/robustness/fresh_seeds.py results/robustness/shared \\
        --policies dbw:lr_rule=linear,step_growth=2,beta=1.2 bdbw:lr_rule=linear   # about 2 minutes

The report's regret divides by the fastest of about 4n static settings on the report's seeds; a setting chosen that
way is, on a fresh seed, slower than it was (the minimum of many noisy times is biased low). The second
regret here divides by the chosen setting's time on the fresh seeds: what a user who picked that static k
from the report would see.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from pathlib import Path

FRESH = 3  # fresh seeds, after the report's


def time_to_target(job_file: str, spec: "str | dict", seed: int) -> float:
    """One run's time to target (twice the budget when missed)."""
    import torch

    from autosync import api

    torch.set_num_threads(1)
    job = api.load_job(job_file)
    result = api.run(job, spec, seed=seed)
    reached = result.metrics.get("time_to_target")
    return reached if reached is not None else 2 * job.budget.max_virtual_seconds


def main() -> None:
    from joblib import Parallel, delayed

    from autosync.search.recommend.grid import policies_by_label

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", help="a robustness report's folder")
    parser.add_argument("--policies", nargs="+", required=True, help="online policy specs (NAME:key=value,...)")
    parser.add_argument("--n-jobs", type=int, default=2)
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    folder = Path(args.report)
    data = json.loads((folder / "robustness.json").read_text())
    rows = data["jobs"]
    fresh = [max(data["seeds"]) + 1 + i for i in range(FRESH)]
    statics = {r["job"]: policies_by_label(data, r)[r["best_static"]] for r in rows}
    specs = {r["job"]: [statics[r["job"]], *args.policies] for r in rows}
    tasks = [(r["job"], spec, seed) for r in rows for spec in specs[r["job"]] for seed in fresh]
    times = Parallel(n_jobs=args.n_jobs)(delayed(time_to_target)(str(folder / "jobs" / f"{job}.yaml"), spec, seed)
                                         for job, spec, seed in tasks)
    mean = {}
    for (job, spec, _), t in zip(tasks, times):
        mean.setdefault((job, json.dumps(spec, sort_keys=True)), []).append(t)
    mean = {key: statistics.fmean(ts) for key, ts in mean.items()}
    at = lambda job, spec: mean[(job, json.dumps(spec, sort_keys=True))]
    seen, new = ", ".join(map(str, data["seeds"])), f"{fresh[0]}-{fresh[-1]}"
    header = f"| job | best static k (seeds {seen}) | its time there | seeds {new} | drift | " + " | ".join(
        f"{p}: seeds {new} | / static" for p in args.policies) + " |"
    print(header)
    print("|---" * (5 + 2 * len(args.policies)) + "|")
    drift, regret = [], {p: [] for p in args.policies}
    for r in rows:
        static = at(r["job"], statics[r["job"]])
        drift.append(static / r["best_static_time"])
        cells = [r["job"], r["best_static"], f"{r['best_static_time']:.1f}", f"{static:.1f}", f"{drift[-1]:.2f}"]
        for p in args.policies:
            regret[p].append(at(r["job"], p) / static)
            cells += [f"{at(r['job'], p):.1f}", f"{regret[p][-1]:.2f}"]
        print("| " + " | ".join(cells) + " |")
    print(f"\nthe best static k on fresh seeds: median {statistics.median(drift):.2f}x its time on the report's seeds")
    for p in args.policies:
        print(f"{p}: median regret {statistics.median(regret[p]):.2f} (worst {max(regret[p]):.2f}) against that "
              "static k on the same fresh seeds")


if __name__ == "__main__":
    main()
