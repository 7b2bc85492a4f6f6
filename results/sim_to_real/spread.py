"""Clock error or the trajectory's own spread? Repeats and seeds of a verified case, on both sides.

    python results/sim_to_real/spread.py CASE_DIR [--seeds 3] [--repeats 2] [--candidates 3]

CASE_DIR holds a `verify.json` and the job it verified (`calibrated_job.yaml`), as `two_cores.sh` writes
them. For the simulated winner, the real winner and BSP (`--candidates` of them, distinct), this runs:
- on the simulator: seeds job.seed .. job.seed + seeds - 1;
- on the real backend of the verification (the same execution options): the same seeds, and the first
  seed `--repeats` times more.
A run that misses the target counts as the verification counts it (the penalty times the time run).
Written beside verify.json: `spread.json` and `spread.md`, one row per candidate: simulated mean and
spread over seeds, real mean and spread over seeds, the real repeats' spread on one seed (the clock's own
noise), and the ratio of the means. A real / simulated gap larger than both spreads is the model's; one
inside them is the trajectory's luck (which gradients arrive stale, and so when the target is crossed).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from autosync import api
from autosync.core.job import load_job
from autosync.policy_score import evaluate


def _time(job, policy: dict[str, Any], seed: int, execution: dict[str, Any] | None) -> float:
    """The run's time to target, scored as the verification scores it (a miss: twice the time run)."""
    on = None
    if execution is not None:
        on = api.backend(execution["backend"], clock=execution["clock"], stragglers=execution["stragglers"],
                         time_scale=execution["time_scale"], device=execution["device"],
                         workers_per_device=execution["processes"])
    return evaluate(job, policy, [seed], 2.0, backend=on)["time_to_target"]


def _stats(values: list[float]) -> dict[str, float]:
    return {"mean": statistics.fmean(values), "min": min(values), "max": max(values),
            "spread": max(values) / min(values), "values": values}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("case", type=Path)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--candidates", type=int, default=3)
    args = parser.parse_args()
    verification = json.loads((args.case / "verify.json").read_text())
    job = load_job(args.case / "calibrated_job.yaml")
    by_name = {json.dumps(r["policy"], sort_keys=True): r["policy"] for r in verification["rows"]}
    wanted = [verification["simulated_winner"], verification["real_winner"], {"policy": "bsp", "params": {}}]
    chosen = []
    for policy in wanted:
        key = json.dumps(policy, sort_keys=True)
        if key in by_name and by_name[key] not in chosen:
            chosen.append(by_name[key])
    rows = []
    seeds = [job.seed + i for i in range(args.seeds)]
    for policy in chosen[: args.candidates]:
        simulated = [_time(job, policy, s, None) for s in seeds]
        real = [_time(job, policy, s, verification["execution"]) for s in seeds]
        repeats = [real[0]] + [_time(job, policy, seeds[0], verification["execution"]) for _ in range(args.repeats)]
        rows.append({"policy": policy, "seeds": seeds, "simulated": _stats(simulated), "real": _stats(real),
                     "real_repeats": _stats(repeats),
                     "real_over_simulated": statistics.fmean(real) / statistics.fmean(simulated)})
    (args.case / "spread.json").write_text(json.dumps({"execution": verification["execution"], "rows": rows}, indent=2))
    lines = [f"# Spread of `{args.case}`", "", f"Produced by `python results/sim_to_real/spread.py {args.case} --seeds "
             f"{args.seeds} --repeats {args.repeats} --candidates {args.candidates}`. Times in job seconds; spread "
             "= slowest / fastest.", "",
             "| policy | simulated mean (spread over seeds) | real mean (spread over seeds) | real repeats on seed "
             f"{seeds[0]} (spread) | real / simulated, means |", "|---|---|---|---|---|"]
    for row in rows:
        p = row["policy"]
        name = p["policy"] + (f"({', '.join(f'{k}={v}' for k, v in p['params'].items())})" if p["params"] else "")
        s, r, q = row["simulated"], row["real"], row["real_repeats"]
        lines.append(f"| {name} | {s['mean']:.1f} ({s['spread']:.2f}) | {r['mean']:.1f} ({r['spread']:.2f}) | "
                     f"{', '.join(f'{v:.1f}' for v in q['values'])} ({q['spread']:.2f}) | "
                     f"{row['real_over_simulated']:.2f} |")
    (args.case / "spread.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
