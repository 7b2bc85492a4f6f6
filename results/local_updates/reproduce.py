"""The local-update papers' headline results, in their shape, on jobs the simulator runs here.

    python results/local_updates/reproduce.py communications   # local SGD / DiLoCo: BSP's target, fewer exchanges
    python results/local_updates/reproduce.py adacomm          # AdaComm's adaptive period against fixed periods
    python results/local_updates/reproduce.py stragglers       # asynchronous against synchronous local SGD

Each writes <name>.md (the table, with the command), <name>.json (every run's numbers) and <name>.png
(training loss against virtual time and against exchanges) into this folder. An exchange is one worker's
push of a gradient or a change (and the pull of the parameters that follows it): what the server's link
carries. Time to target and exchanges to target are means over the seeds; a missed target counts the
budget. Seed 0 trains the whole budget (its curves are the figure's), the others stop at the target.
About 5 to 10 minutes each on 2 cores.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SEEDS = (0, 1, 2)
EXPERIMENTS = {
    # Stich 2019 / Douillard et al. 2023: the same target at many times fewer communications.
    "communications": ("bandwidth.yaml", ["bsp", "local_sgd:period=4", "local_sgd:period=8", "local_sgd:period=16",
                                          "diloco:period=8", "diloco:period=16", "diloco:period=32"]),
    # Wang & Joshi 2019: the adaptive period against fixed ones (1 is BSP).
    "adacomm": ("bandwidth.yaml", ["bsp", "local_sgd:period=2", "local_sgd:period=4", "local_sgd:period=8",
                                   "local_sgd:period=16", "adacomm:period=16", "adacomm:period=8"]),
    # Liu et al. 2024: asynchronous against synchronous local SGD with stragglers.
    "stragglers": ("stragglers.yaml", ["bsp", "local_sgd:period=8", "diloco:period=8", "local_sgd:period=8,steps=speed",
                                       "async_local_sgd:period=8", "easgd:period=8"]),
}


def run(name: str) -> dict:
    from autosync.catalog import make_policy
    from autosync.core.job import load_job
    from autosync.engine import simulate

    job_file, specs = EXPERIMENTS[name]
    job = load_job(str(HERE / job_file))
    rows = []
    for spec in specs:
        runs = []
        for seed in SEEDS:
            # seed 0 trains the whole budget (the figure's curves); the others stop at the target
            budget = job.budget.model_copy(update={"stop_at_target": seed != SEEDS[0]})
            result = simulate(job.model_copy(update={"seed": seed, "budget": budget}), make_policy(spec))
            reached = result.metrics.get("time_to_target")
            arrivals = [a[0] for a in result.trace.arrivals]
            until = reached if reached is not None else job.budget.max_virtual_seconds
            runs.append({
                "seed": seed, "time_to_target": reached,
                "exchanges_to_target": sum(1 for t in arrivals if t <= until),
                "updates": len(result.trace.updates),
                "curve": [(e[1], sum(1 for t in arrivals if t <= e[1]), e[3]) for e in result.trace.evals],
            })
        budget = job.budget.max_virtual_seconds
        rows.append({
            "policy": spec, "runs": runs,
            "time": statistics.fmean(r["time_to_target"] if r["time_to_target"] is not None else budget for r in runs),
            "exchanges": statistics.fmean(r["exchanges_to_target"] for r in runs),
            "missed": sum(r["time_to_target"] is None for r in runs),
        })
        print(f"{spec}: {rows[-1]['time']:.0f} s, {rows[-1]['exchanges']:.0f} exchanges", flush=True)
    return {"experiment": name, "job": job_file, "seeds": list(SEEDS), "rows": rows}


def write(data: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    name, rows = data["experiment"], data["rows"]
    base = rows[0]
    lines = [f"# {name}", "", f"    python results/local_updates/reproduce.py {name}", "",
             f"Job `{data['job']}`, seeds {data['seeds']}; means over the seeds (a miss counts the budget).", "",
             "| policy | time to target (s) | vs bsp | exchanges to target | bsp's / this | missed |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['policy']} | {r['time']:.0f} | {base['time'] / r['time']:.2f}x faster | "
                     f"{r['exchanges']:.0f} | {base['exchanges'] / r['exchanges']:.1f}x fewer | {r['missed']} |")
    (HERE / f"{name}.md").write_text("\n".join(lines) + "\n")
    (HERE / f"{name}.json").write_text(json.dumps(data, indent=1) + "\n")
    fig, (by_time, by_exchange) = plt.subplots(1, 2, figsize=(11, 4))
    for r in rows:
        curve = r["runs"][0]["curve"]
        times, exchanges, losses = zip(*[c for c in curve if c[2] is not None])
        by_time.plot(times, losses, label=r["policy"])
        by_exchange.plot(exchanges, losses, label=r["policy"])
    for ax, label in ((by_time, "virtual seconds"), (by_exchange, "exchanges (pushes to the server)")):
        ax.set_yscale("log")
        ax.set_xlabel(label)
        ax.set_ylabel("training loss (seed 0)")
        ax.axhline(0.3, color="grey", linestyle=":", linewidth=1)
    by_exchange.set_xscale("log")
    by_time.legend(fontsize=7)
    fig.suptitle(f"{name}: python results/local_updates/reproduce.py {name}", fontsize=9)
    fig.tight_layout()
    fig.savefig(HERE / f"{name}.png", dpi=110)


def main() -> int:
    names = sys.argv[1:] or list(EXPERIMENTS)
    unknown = [n for n in names if n not in EXPERIMENTS]
    if unknown:
        print(f"experiment must be one of {list(EXPERIMENTS)}, but got {unknown[0]!r}", file=sys.stderr)
        return 2
    for name in names:
        write(run(name))
    return 0


if __name__ == "__main__":
    sys.exit(main())
