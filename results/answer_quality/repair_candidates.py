"""What a failed static k's repairs score on held-out seeds: the evidence for `strategies/repair.py`.

    python results/answer_quality/repair_candidates.py crest fleet mosaic steady

For each family's tunes (`results/answer_quality/<family>/studies-policy/`, as `bench_answer_quality.py`
left them), every full-budget check that failed (broke the final-metric rule or diverged) of a policy with
settings one step closer to BSP (`Policy.toward_bsp`), and those settings, each scored from the family's
grid cells on the held-out seeds: its time over the grid's best that keeps the rule, and whether it keeps
the rule there itself (full-budget runs trained on demand and added to the cache, as the benchmark does).
BSP's ratio is beside them: the answer the checks fall back to at worst.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


def main() -> int:
    import optuna

    from autosync.catalog import POLICIES, label_of, policy_from_dict
    from autosync.core.family import load_family
    from autosync.experiments.reference_grid import (
        answer_cells, cached_full_budget_finals, feasible_best, grid_scores, keeps_constraint, score,
    )
    from autosync.lattice import BSP_POLICY
    from autosync.experiments.robustness import CELLS_FILE
    from autosync.search.study.records import failed_check
    from autosync.search.study.records import FINGERPRINT, FULL_BUDGET_OF, POLICY

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("families", nargs="+")
    parser.add_argument("--count", type=int, default=6)
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    print("| job | n | failed check | its ratio | repairs (ratio; x: breaks the rule held out) | BSP |")
    print("|---|---|---|---|---|---|")
    for name in args.families:
        folder = HERE / name
        jobs = {job.fingerprint(): job for job in load_family(REPO / "baselines" / f"family_{name}.yaml").jobs(args.count)}
        cells = {}
        for line in (folder / CELLS_FILE).read_text().splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue  # a line cut short by an interrupted run
            cells[record["key"]] = record
        for db in sorted((folder / "studies-policy").glob("*.db")):
            url = f"sqlite:///{db}"
            for summary in optuna.get_all_study_summaries(url):
                study = optuna.load_study(study_name=summary.study_name, storage=url)
                job = jobs.get(study.user_attrs.get(FINGERPRINT))
                if job is None:
                    continue
                n = job.cluster.n_workers
                seeds = [job.seed + 100, job.seed + 101]
                finals = cached_full_budget_finals(job, seeds, cells, folder)
                best = feasible_best(job, grid_scores(job, cells, seeds), finals)
                bsp_finals = finals(BSP_POLICY)

                def ratio(policy: dict) -> str:
                    policy = answer_cells(job, policy)  # its grid twin (k = n under `fixed` is BSP's cells)
                    try:
                        scored = score(job, policy, cells, seeds)
                    except KeyError:
                        return "not in the grid"
                    keeps = keeps_constraint(job, finals(policy), bsp_finals)
                    return f"{scored.time / best.time:.2f}{'' if keeps else ' x'}"

                for check in study.get_trials(deepcopy=False):
                    policy = check.user_attrs.get(POLICY) or {}
                    if FULL_BUDGET_OF not in check.user_attrs or not failed_check(check) \
                            or policy.get("policy") not in POLICIES:
                        continue
                    steps = policy_from_dict(policy).toward_bsp(n)
                    if not steps:
                        continue
                    repairs = ", ".join(f"`{label_of(s.to_dict())}` {ratio(s.to_dict())}" for s in steps)
                    print(f"| {job.name} | {n} | `{label_of(policy)}` | {ratio(policy)} | {repairs} | "
                          f"{ratio(BSP_POLICY)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
