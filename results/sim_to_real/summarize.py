"""The sim-to-real goals, checked on the verify.json files run.sh wrote (one table row per case).

    python results/sim_to_real/summarize.py [DIRECTORY [CASE ...]]   (default: results/sim_to_real and its 3 cases)

Goals: every verified candidate's real / simulated time within 0.9-1.1; Kendall's tau >= 0.85; the
simulated winner's real time within 5% of the real winner's. The real span (slowest over fastest real
time) is printed beside them: tau means little over candidates that run alike.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

CASES = ("injected", "machine", "heterogeneous")


def row(case: str, verification: dict) -> str:
    rows = [r for r in verification["rows"] if r["real_time"] is not None]
    ratios = [r["real_over_simulated"] for r in rows]
    reals = [r["real_time"] for r in rows]
    inside = sum(0.9 <= x <= 1.1 for x in ratios)
    span = max(reals) / min(reals)
    tau, gap = verification["kendall_tau"], verification["winner_gap"]
    met = [inside == len(rows), tau is not None and tau >= 0.85, gap is not None and gap <= 1.05]
    return (f"| {case} | {len(rows)} | {span:.2f} | {min(ratios):.2f}-{max(ratios):.2f} ({inside}/{len(rows)} "
            f"within 0.9-1.1) | {tau:.2f} | {gap:.2f} | {sum(met)}/3 |")


def main(root: Path, cases: tuple[str, ...] = CASES) -> None:
    print("| case | candidates | real span | real / simulated | Kendall's tau | winner gap | goals met |")
    print("|---|---|---|---|---|---|---|")
    for case in cases:
        path = root / case / "verify.json"
        if path.is_file():
            print(row(case, json.loads(path.read_text())))


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "results/sim_to_real"), tuple(sys.argv[2:]) or CASES)
