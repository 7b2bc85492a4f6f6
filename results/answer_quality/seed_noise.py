"""How much a job's final metric moves between seeds, beside the tune's answer on that job.

    python results/answer_quality/seed_noise.py tiers inverse mosaic steady fleet [--over 1.3] [--noisy 0.05]
    python results/answer_quality/seed_noise.py bursty heldout fleet steady --verdicts

Per job of each family: the median, over the policies its reference grid trained to the end of the budget
on both held-out seeds (the `|full` cells of results/answer_quality/<family>/cells.jsonl), of the difference
between their two final metrics, beside the answer's ratio to the grid's best in the committed table
(benchmarks/answer_quality_<family>_policy.md). The final-metric rule's tolerance is 0.01: where the metric
moves by much more between seeds, one seed's full-budget check is a coin flip. With --verdicts: over those
policies, how often the first held-out seed's verdict on the rule (against BSP's final metric on that seed)
disagrees with the two seeds' mean (against BSP's mean), the grid's own way of judging.
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def full_finals(family: str) -> dict[tuple[str, str], dict[int, float]]:
    """{(job, policy as JSON): {seed: final metric}} of the grid's full-budget cells that did not fail."""
    finals: dict[tuple[str, str], dict[int, float]] = collections.defaultdict(dict)
    for line in (REPO / "results" / "answer_quality" / family / "cells.jsonl").read_text().splitlines():
        cell = json.loads(line)
        if cell["key"].endswith("|full") and cell.get("final_metric") is not None:
            finals[(cell["job"], json.dumps(cell["policy"], sort_keys=True))][cell["seed"]] = cell["final_metric"]
    return finals


def verdicts(family: str, count: int, tolerance: float = 0.01) -> tuple[int, int]:
    """(policies judged, of them those whose first seed's verdict disagrees with the two seeds' mean)."""
    from autosync.core.family import load_family
    from autosync.policy_score import constraint

    jobs = {job.name: job for job in load_family(REPO / "baselines" / f"family_{family}.yaml").jobs(count)}
    finals = full_finals(family)
    bsp = json.dumps({"params": {}, "policy": "bsp"}, sort_keys=True)
    judged = disagree = 0
    for (name, policy), seeds in finals.items():
        reference = finals.get((name, bsp), {})
        both = sorted(seed for seed in seeds if seed in reference)
        if policy == bsp or name not in jobs or len(both) < 2:
            continue
        one = constraint(jobs[name], seeds[both[0]], reference[both[0]], tolerance) <= 0
        mean = constraint(jobs[name], statistics.fmean(seeds[s] for s in both),
                          statistics.fmean(reference[s] for s in both), tolerance) <= 0
        judged, disagree = judged + 1, disagree + (one != mean)
    return judged, disagree


def seed_noise(family: str) -> dict[str, float]:
    """{job: median |final metric on one held-out seed - on the other|} over the grid's full-budget cells."""
    finals = full_finals(family)
    by_job: dict[str, list[float]] = collections.defaultdict(list)
    for (job, _), seeds in finals.items():
        if len(seeds) == 2:
            first, second = seeds.values()
            by_job[job].append(abs(first - second))
    return {job: statistics.median(values) for job, values in sorted(by_job.items())}


def answer_ratios(family: str) -> dict[str, float]:
    """{job: the answer's ratio to the grid's best} from the committed table."""
    lines = (REPO / "benchmarks" / f"answer_quality_{family}_policy.md").read_text().splitlines()
    header = [c.strip() for c in next(line for line in lines if line.startswith("| job")).split("|")]
    column = header.index("ratio")
    rows = [[c.strip() for c in line.split("|")] for line in lines if line.startswith(f"| {family}-")]
    return {cols[1]: float(cols[column]) for cols in rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("families", nargs="+")
    parser.add_argument("--over", type=float, default=1.3, help="an answer's ratio counted as a miss above this")
    parser.add_argument("--noisy", type=float, default=0.05, help="a job counted as noisy above this difference")
    parser.add_argument("--verdicts", action="store_true", help="count one-seed verdicts against two-seed ones")
    parser.add_argument("--count", type=int, default=8, help="the family's first COUNT jobs (--verdicts)")
    args = parser.parse_args()
    if args.verdicts:
        totals = [verdicts(family, args.count) for family in args.families]
        print(f"one seed's verdict disagrees with the two seeds' mean on {sum(d for _, d in totals)} of "
              f"{sum(j for j, _ in totals)} policies")
        return
    misses = noisy_misses = 0
    for family in args.families:
        noise, ratios = seed_noise(family), answer_ratios(family)
        for job, ratio in ratios.items():
            moved = noise.get(job)
            flag = "noisy" if moved is not None and moved > args.noisy else ""
            print(f"{job:12s} final metric moves {moved if moved is not None else float('nan'):10.3f}  "
                  f"answer {ratio:6.2f}x  {flag}")
            if ratio > args.over:
                misses += 1
                noisy_misses += bool(flag)
    print(f"answers over {args.over}x: {misses}, on noisy jobs (> {args.noisy}): {noisy_misses}")


if __name__ == "__main__":
    main()
