"""BSP's and ASP's curves on a family's first jobs, to set the family's targets before any other policy runs.

    python results/answer_quality/family_targets.py baselines/family_decay.yaml --count 6

Runs BSP and ASP with a staleness-scaled step (`asp:lr_rule=sqrt_staleness`) on each job's own seed for the
whole budget and prints, per job, the target metric of each at 10%, 25%, 50%, 75% and 100% of the budget,
the best it reached, and when each reached the job's current target (or "-"). Only these two policies
run: a target read from them is not tuned to any policy the search could answer.
"""

from __future__ import annotations

import argparse
import sys

FRACTIONS = (0.1, 0.25, 0.5, 0.75, 1.0)


def main() -> int:
    from autosync.catalog import make_policy
    from autosync.engine import simulate
    from autosync.core.family import load_family

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("family")
    parser.add_argument("--count", type=int, default=6)
    args = parser.parse_args()
    for job in load_family(args.family).jobs(args.count):
        budget = job.budget.max_virtual_seconds
        metric = job.target.metric
        for label, policy in (("bsp", make_policy("bsp")), ("asp sqrt", make_policy("asp", {"lr_rule": "sqrt_staleness"}))):
            evals = simulate(job, policy).trace.records("evals")
            at = [next((e[metric] for e in evals if e["time"] >= f * budget - 1e-9), evals[-1][metric])
                  for f in FRACTIONS]
            best = (max if metric == "test_accuracy" else min)(e[metric] for e in evals)
            hit = next((e["time"] for e in evals if job.target.reached(e[metric])), None)
            print(f"{job.name} n={job.cluster.n_workers} {job.cluster.round_trip.kind} {label}: {metric} at "
                  + ", ".join(f"{f:.0%} {v:.3f}" for f, v in zip(FRACTIONS, at))
                  + f"; best {best:.3f}; target {job.target.threshold} at {'-' if hit is None else f'{hit:.0f} s'}",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
