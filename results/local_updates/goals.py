"""The issue's goals, read off robustness reports that ran the local-update policies beside the static-k grid.

    python results/local_updates/goals.py results/local_updates/bandwidth_robustness/robustness.json \
        results/local_updates/quick_robustness/robustness.json

For each job: the best static k's time to target, the best local-update policy's (and which), their ratio,
and the policy the tune chose ('tuned' row) with its time. Writes nothing; prints a Markdown table.
"""

from __future__ import annotations

import json
import sys

LOCAL = ("local_sgd", "adacomm", "diloco", "async_local_sgd", "easgd")


def rows(path: str) -> list[str]:
    report = json.loads(open(path).read())
    out = [f"`{path}`", "", "| job | n | best static k | best local-update policy | static / local | tuned pick | tuned time | tuned is local |",
           "|---|---|---|---|---|---|---|---|"]
    for job in report["jobs"]:
        local = {label: row["time"] for label, row in job["policies"].items()
                 if label.partition("(")[0] in LOCAL and row.get("time") is not None}
        best = min(local, key=local.get) if local else None
        tuned = job.get("tuned_policy") or {}
        tuned_time = job["policies"].get("tuned", {}).get("time")
        ratio = job["best_static_time"] / local[best] if best else float("nan")
        out.append(f"| {job['job']} | {job['n_workers']} | {job['best_static']}: {job['best_static_time']:.0f} s | "
                   f"{best}: {local[best]:.0f} s | {ratio:.2f}x | {tuned.get('policy')} {tuned.get('params', {})} | "
                   f"{tuned_time if tuned_time is None else round(tuned_time)} s | {tuned.get('policy') in LOCAL} |")
    return out + [""]


if __name__ == "__main__":
    print("\n".join(line for path in sys.argv[1:] for line in rows(path)))
