"""What the reference grid pays when it must choose on one seed and is judged on another.

    python results/answer_quality/one_seed_choice.py ridge inverse mosaic tiers steady fleet heldout bursty

Per job of each family (its first jobs, as many as results/answer_quality/<family>/cells.jsonl holds),
read from the grid's runs on the two held-out seeds alone (no training): the grid policy fastest to the
target on one seed, its time on the other seed over that seed's fastest, both ways round, and their mean.
Time alone (the final-metric rule is left out: it needs full-budget runs the cache holds only for the
fastest policies); a missed target counts twice the budget, as everywhere in the grid. The grid's best
that a tune is judged against is the least of a few hundred such noisy means on the seeds it is scored
on: a choice made on other seeds, even by the whole grid, does not expect 1.0. `bench_answer_quality.py
--choice-seeds 2` measures the same with two seeds to choose on (and the rule), at the cost of a grid run.
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from autosync.core.job import JobSpec

REPO = Path(__file__).resolve().parents[2]


FAMILY_JOBS = 64  # jobs drawn from a family file: more than any grid folder holds


def times_by_job(family: str, jobs: dict[str, "JobSpec"]) -> dict[str, dict[str, dict[int, float]]]:
    """{job: {policy as JSON: {seed: penalised time to target}}} of the grid's runs to the target of `jobs`
    (cells of another version of a job, by its fingerprint, are left out)."""
    from autosync.experiments.robustness import penalised_time, read_cells

    fingerprints = {job.fingerprint(): name for name, job in jobs.items()}
    out: dict[str, dict[str, dict[int, float]]] = collections.defaultdict(lambda: collections.defaultdict(dict))
    for key, cell in read_cells(REPO / "results" / "answer_quality" / family).items():
        if not key.endswith("|full") and fingerprints.get(key.split("|")[0]) == cell.get("job"):
            policy = json.dumps(cell["policy"], sort_keys=True)
            out[cell["job"]][policy][cell["seed"]] = penalised_time(cell, jobs[cell["job"]])
    return out


def one_seed_choice(times: dict[str, dict[int, float]], held_out: tuple[int, int]) -> float | None:
    """The mean, over choosing on either seed, of the chosen policy's time on the other seed over that
    seed's fastest time (1.0: the choice is the other seed's fastest too); None where no policy ran on both."""
    both = {policy: by_seed for policy, by_seed in times.items() if all(s in by_seed for s in held_out)}
    if not both:
        return None
    ratios = []
    for chosen_on, judged_on in (held_out, held_out[::-1]):
        choice = min(both, key=lambda policy: both[policy][chosen_on])
        ratios.append(both[choice][judged_on] / min(by_seed[judged_on] for by_seed in both.values()))
    return statistics.fmean(ratios)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("families", nargs="+", help="folders of results/answer_quality (family names)")
    parser.add_argument("--seeds", type=int, nargs=2, default=None,
                        help="the two held-out seeds' offsets from the job's seed (default 100 101)")
    args = parser.parse_args()
    offsets = tuple(args.seeds or (100, 101))
    from autosync.core.family import load_family

    for family in args.families:
        jobs = {job.name: job for job in load_family(REPO / "baselines" / f"family_{family}.yaml").jobs(FAMILY_JOBS)}
        found = {name: one_seed_choice(times, (jobs[name].seed + offsets[0], jobs[name].seed + offsets[1]))
                 for name, times in sorted(times_by_job(family, jobs).items())}
        ratios = {name: ratio for name, ratio in found.items() if ratio is not None}
        print(f"{family}: " + ", ".join(f"{job} {ratio:.2f}" for job, ratio in ratios.items()))
        print(f"{family}: median {statistics.median(ratios.values()):.2f}, worst {max(ratios.values()):.2f}")


if __name__ == "__main__":
    main()
