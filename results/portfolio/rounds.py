"""What the portfolio's two rounds keep and lose, read from the development reference grids.

The portfolio search (`autosync.search.strategies.portfolio`) races each family's first portfolio setting
(the first round), then runs a family's other settings only while the family is within `FAMILY_MARGIN` of
the best family, then TPE inside the families. This script checks that rule against the broad reference
grids of the development families (`benchmarks/bench_answer_quality.py --grid-only`, cached under
results/answer_quality/<family>/), scored on their held-out seeds:

    python results/portfolio/rounds.py --family baselines/family_bursty.yaml --count 8
    python results/portfolio/rounds.py --jobs quick:0 quick:1 ...   # cache results/answer_quality/jobs

Per job: the grid's best (time alone); its family's first-round setting over it; the first round's best
setting and its time over the grid's best;
the whole portfolio's best over the grid's best; the grid best's family and whether that family survives
the first round (its first-round time within FAMILY_MARGIN of the first round's best: it then gets its
second-round settings and TPE's trials); and how many families survive. Portfolio settings that no grid
policy runs like are trained beside the grid first (a few runs per job).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))


def main() -> int:
    from bench_answer_quality import selected_jobs

    from autosync.catalog import label_of
    from autosync.experiments.reference_grid import ReferenceGrid, answer_cells, grid_scores, held_out_seeds, score
    from autosync.experiments.robustness import read_cells, run_grid
    from autosync.search.space import SPACE_DIR, load_space
    from autosync.core.arrivals import fast_workers
    from autosync.search.strategies.portfolio import FAMILY_MARGIN, portfolio_policies, portfolio_rounds

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", default=None)
    parser.add_argument("--count", type=int, default=8)
    parser.add_argument("--jobs", nargs="+", default=None)
    parser.add_argument("--out", default=None, help="the grid's cache (default results/answer_quality/<name>)")
    args = parser.parse_args()
    name, jobs, out = selected_jobs(args.jobs, args.family, args.count, args.out)

    rows = []
    for job in jobs:
        n, seeds = job.cluster.n_workers, held_out_seeds(job)
        space = load_space(SPACE_DIR / "policy.yaml", n)
        fast = fast_workers(job.cluster, job.workload.batch_size, job.seed)  # as the tune reads it
        first, second = portfolio_rounds(portfolio_policies(space, n, fast))
        as_run = {id(p): answer_cells(job, p) for p in first + second}
        extra = [p for p in as_run.values() if p in first + second]  # no grid twin: trained here
        if extra:
            run_grid(ReferenceGrid([job], seeds, extra={job.fingerprint(): extra}, policies=lambda n: []), out)
        cells = read_cells(out)
        best = grid_scores(job, cells, seeds)[0]
        time = {id(p): score(job, as_run[id(p)], cells, seeds).time for p in first + second}
        by_family = {p["policy"]: time[id(p)] for p in first}
        lead = min(by_family.values())
        survivors = [f for f, t in by_family.items() if t <= FAMILY_MARGIN * lead]
        winner = _space_family(best.policy)
        rows.append({"job": job.name, "best": label_of(best.policy), "family": winner,
                     "own": by_family[winner] / best.time if winner in by_family else None,
                     "first": min(time[id(p)] for p in first) / best.time,
                     "all": min(time.values()) / best.time,
                     "survives": winner in survivors if winner is not None else None,
                     "survivors": len(survivors), "families": len(by_family)})
    print("| job | grid best | its family | its family's first-round setting / grid best | first round's best / "
          "grid best | portfolio's best / grid best | family survives round 1 | families surviving |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        own = "-" if r["own"] is None else f"{r['own']:.2f}"
        print(f"| {r['job']} | `{r['best']}` | {r['family'] or 'outside the policy space'} | {own} | {r['first']:.2f} | "
              f"{r['all']:.2f} | {'-' if r['survives'] is None else 'yes' if r['survives'] else 'no'} | "
              f"{r['survivors']} of {r['families']} |")
    judged = [r for r in rows if r["survives"] is not None]
    print(f"\n{len(rows)} jobs: median first round / grid best {statistics.median(r['first'] for r in rows):.2f}, "
          f"whole portfolio {statistics.median(r['all'] for r in rows):.2f}; the grid best's family survives "
          f"round 1 on {sum(r['survives'] for r in judged)} of the {len(judged)} jobs whose best is in the policy "
          f"space; median families surviving {statistics.median(r['survivors'] for r in rows)}")
    return 0


def _space_family(policy: dict) -> str | None:
    """The `policy` space's family of a grid policy (its name), or None for one outside the space (a
    composition, a DANA appendix baseline the space does not list)."""
    from autosync.search.space import SPACE_DIR, load_space

    return policy["policy"] if policy["policy"] in load_space(SPACE_DIR / "policy.yaml", 8).policies else None


if __name__ == "__main__":
    sys.exit(main())
