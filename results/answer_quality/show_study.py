"""Print a tune's study trial by trial, its confirmation and its answer: where the per-job 'why' of this
folder's README is read from.

    python results/answer_quality/show_study.py results/answer_quality/decay/studies-policy/decay-003.db

Per trial: number, state, policy, time to target (a pruned trial: its bound), `pend` when its final metric
is not known (stopped at the target), `chkN` for the full-budget check of trial N, the final metric and the
constraint against BSP's (<= 0 keeps it), `=N` when answered by trial N without training, `pace` when pruned on
its pace. Then the confirmation's rows (policy, per-seed times, missed seeds) and the cached answer.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def main(path: str) -> int:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    url = f"sqlite:///{path}"
    for summary in optuna.get_all_study_summaries(url):
        study = optuna.load_study(study_name=summary.study_name, storage=url)
        attrs = study.user_attrs
        print(summary.study_name, "BSP final metric", attrs.get("bsp_reference", {}).get("final_metric"),
              "unchecked", len(attrs.get("unchecked_candidates") or []))
        for t in study.trials:
            ua = t.user_attrs
            value = t.values[0] if t.values else (t.intermediate_values.get(t.last_step) if t.last_step is not None else None)
            same = ua.get("same_as_trial") if "full_budget_check_of" not in ua else None
            print(t.number, t.state.name, json.dumps(ua.get("policy")), None if value is None else round(value, 1),
                  "pend" if ua.get("final_metric_pending") else "",
                  f"chk{ua['full_budget_check_of']}" if "full_budget_check_of" in ua else "",
                  None if ua.get("final_metric") is None else round(ua["final_metric"], 4),
                  (t.constraints or {}).get("final_metric_vs_bsp"), "" if same is None else f"={same}",
                  "pace" if ua.get("pruned_on_pace") else "")
        cache = attrs.get("cache") or {}
        for row in (cache.get("confirmed") or {}).get("rows", []):
            print("confirmed:", json.dumps(row["policy"]), row["source"], row.get("seed_times"), "missed",
                  row.get("missed_seeds"))
        print("answer:", json.dumps(cache.get("best_policy")), cache.get("best_value"), "search's best:",
              json.dumps(cache.get("search_best_policy")), cache.get("search_best_value"))
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("study_db", type=Path, help="an SQLite study file the benchmark wrote")
    args = parser.parse_args()
    if not args.study_db.is_file():  # never create an empty database where a path was mistyped
        parser.error(f"{args.study_db}: no such study file")
    sys.exit(main(str(args.study_db)))
