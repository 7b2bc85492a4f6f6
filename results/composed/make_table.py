"""The composed-against-policy table from the cache records of a study storage.

    python results/composed/make_table.py --storage URL --trials N JOB.yaml ...
    python results/composed/make_table.py --storage URL --trials N --specs JOB.yaml ...
        (one line per job with both tunes cached: the job file, its name, the best single policy's and the
        best composition's --policies specs and the ratio of their times, tab-separated: what run.sh puts
        side by side in a leaderboard where the composition wins)
"""

from __future__ import annotations

import argparse
import json
import math

import autosync.api as autosync
from pathlib import Path

from autosync.catalog import label_of, spec_of
from autosync.search.study.cache import cached_studies
from autosync.search.objective import canonical_policy


def seeds_ratio(board: Path, single: dict, composed: dict, n: int, batch: int) -> float | None:
    """The single winner's time to target over the composition's in the job's leaderboard (3 seeds, MLPerf's
    score), or None where there is none; a winner that missed counts as infinitely slow."""
    path = board.with_suffix(".json")
    if not path.exists():
        return None
    times = {json.dumps(canonical_policy(r["spec"], n, batch), sort_keys=True): r["time_to_target"]
             for r in json.loads(path.read_text())["rows"]}
    single_t, composed_t = (times.get(json.dumps(canonical_policy(p, n, batch), sort_keys=True), math.nan)
                            for p in (single["best_policy"], composed["best_policy"]))
    single_t, composed_t = (math.inf if t is None else t for t in (single_t, composed_t))
    if math.isnan(single_t) or math.isnan(composed_t):
        return None
    return single_t / composed_t if composed_t < math.inf else 0.0


def _board_ratio(seeds: float | None) -> str:
    """The leaderboard's ratio ('' without a leaderboard; the single policy may miss the target there)."""
    if seeds is None:
        return ""
    return "single missed" if math.isinf(seeds) else f"{seeds:.2f}x"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("jobs", nargs="+")
    parser.add_argument("--storage", required=True)
    parser.add_argument("--trials", type=int, required=True)
    parser.add_argument("--specs", action="store_true", help="print job, single spec, composed spec per line")
    parser.add_argument("--why", default="results/composed/why", help="directory of the side-by-side leaderboards")
    args = parser.parse_args()
    rows, wins, not_slower, done, board_wins, boards = [], 0, 0, 0, 0, 0
    for path in args.jobs:
        job = autosync.load_job(path)
        found = {s["cache"]["space"]: s["cache"] for s in cached_studies(args.storage, job.fingerprint())
                 if isinstance(s.get("cache"), dict)}
        if not {"policy", "composed"} <= set(found):
            rows.append(f"| {job.name} | (not run) | | | | | | |")
            continue
        single, composed = found["policy"], found["composed"]
        if args.specs:  # a composition that runs as the single winner (its preset) is trained once
            same = canonical_policy(composed["best_policy"], job.cluster.n_workers, job.workload.batch_size) == \
                canonical_policy(single["best_policy"], job.cluster.n_workers, job.workload.batch_size)
            winner = spec_of(single["best_policy"])
            print(f"{path}\t{job.name}\t{winner}\t{winner if same else spec_of(composed['best_policy'])}\t"
                  f"{single['best_value'] / composed['best_value']:.6f}")
            continue
        done += 1
        ratio = single["best_value"] / composed["best_value"]
        wins += ratio >= 1.1
        not_slower += ratio >= 1.0 - 1e-9
        board = Path(args.why) / job.name / "leaderboard.md"
        why = f"[leaderboard](why/{job.name}/leaderboard.md)" if board.exists() else ""
        seeds = seeds_ratio(board, single, composed, job.cluster.n_workers, job.workload.batch_size)
        boards += seeds is not None
        board_wins += seeds is not None and seeds >= 1.1
        rows.append(f"| {job.name} | {label_of(single['best_policy'])} | {single['best_value']:.1f} | "
                    f"{label_of(composed['best_policy'])} | {composed['best_value']:.1f} | {ratio:.2f}x | "
                    f"{_board_ratio(seeds)} | {why} |")
    if args.specs:
        return
    print("# Composed policies against the best single seed policy\n")
    print(f"Each job: `autosync tune JOB --space policy` and `--space composed`, {args.trials} trials each, sampler "
          "seed 0, one seed per trial. Times are the answers' on the search's seed, in virtual seconds to the "
          "target (a miss counts twice the budget). The ratio is the single policy's time over the composition's "
          "(> 1: the composition is faster).\n")
    print("    bash results/composed/run.sh " + str(args.trials) + " " + " ".join(args.jobs) + "\n")
    print("| job | best single policy | time (s) | best composition | time (s) | ratio | leaderboard | why |")
    print("|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    print(f"\nOf the {done} jobs both tunes finished (of {len(args.jobs)}), the composition is at least as "
          f"fast on {not_slower} and at least 1.1x faster on {wins}. Where the composition is at least 1.1x faster, the job's leaderboard runs BSP and both on "
          f"seeds 0 to 2 side by side (the 'leaderboard' ratio, MLPerf's trimmed mean; 0 where the composition missed the target on two "
          f"seeds or more): the composition is at least 1.1x faster on {board_wins} of those {boards}. k per update, "
          "mean staleness and batch max/min there show what the composition changes.")


if __name__ == "__main__":
    main()
