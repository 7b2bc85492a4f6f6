"""The composed-against-policy table from the cache records of results/composed/studies.db.

    python results/composed/make_table.py --storage sqlite:///results/composed/studies.db --trials N JOB.yaml ...
"""

from __future__ import annotations

import argparse
import math

import autosync.api as autosync
from autosync.leaderboard import label_of
from autosync.search.cache import cached_studies


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("jobs", nargs="+")
    parser.add_argument("--storage", required=True)
    parser.add_argument("--trials", type=int, required=True)
    args = parser.parse_args()
    rows, wins, not_slower = [], 0, 0
    for path in args.jobs:
        job = autosync.load_job(path)
        found = {s["cache"]["space"]: s["cache"] for s in cached_studies(args.storage, job.fingerprint())
                 if isinstance(s.get("cache"), dict)}
        if "policy" not in found or "composed" not in found:
            rows.append(f"| {job.name} | (not run) | | | | |")
            continue
        single, composed = found["policy"], found["composed"]
        ratio = single["best_value"] / composed["best_value"]
        wins += ratio >= 1.1
        not_slower += ratio >= 1.0 - 1e-9
        rows.append(f"| {job.name} | {label_of(single['best_policy'])} | {single['best_value']:.1f} | "
                    f"{label_of(composed['best_policy'])} | {composed['best_value']:.1f} | {ratio:.2f}x |")
    print("# Composed policies against the best single seed policy\n")
    print(f"Each job: `autosync tune JOB --space policy` and `--space composed`, {args.trials} trials each, sampler "
          "seed 0, one seed per trial; time to target in virtual seconds (a miss counts twice the budget). The "
          "ratio is the single policy's time over the composition's (> 1: the composition is faster).\n")
    print("    bash results/composed/run.sh " + str(args.trials) + " " + " ".join(args.jobs) + "\n")
    print("| job | best single policy | time (s) | best composition | time (s) | ratio |")
    print("|---|---|---|---|---|---|")
    print("\n".join(rows))
    print(f"\nThe composition is at least as fast on {not_slower} of {len(args.jobs)} jobs and at least 1.1x "
          f"faster on {wins}.")


if __name__ == "__main__":
    main()
