"""The figure of one race (`autosync tune`'s race.png, and docs/concepts/race.png): candidates by seeds by rounds.

A row per candidate, a column per round the race ran, in the order `autosync.race` runs them; a circle for a
run on the job's seed and a square for one on the next seed, a cross for a run stopped at its horizon, and
beside each run its time to the target (or, for a run to the end of the budget, its final metric).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from autosync.catalog import label_of
from autosync.race import REFERENCE, ROUNDS

ORDER = (ROUNDS[0], REFERENCE, *ROUNDS[1:])  # BSP's reference runs: queued inside the portfolio round, or first


def draw_race(race: dict[str, Any], answer: dict[str, Any], path: Path) -> Path:
    """Draw `race` (a cache record's race: its `rounds`, `autosync.search.race_trials.rounds`) with `answer`
    (the answer's policy) marked, into the PNG `path`; returns `path`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels: list[str] = []
    for row in race["rounds"]:
        for run in row["runs"]:
            if label_of(run["policy"]) not in labels:
                labels.append(label_of(run["policy"]))
    columns = [name for name in ORDER if any(row["round"] == name for row in race["rounds"])]
    seed0 = min(row["seed"] for row in race["rounds"])
    fig, ax = plt.subplots(figsize=(2.2 * len(columns) + 4.5, 0.45 * len(labels) + 1.6))
    for row in race["rounds"]:
        x = 2 * columns.index(row["round"]) + (0.35 if row["seed"] != seed0 else -0.55)
        for run in row["runs"]:
            y = labels.index(label_of(run["policy"]))
            stopped = run["time"] is None and "final" not in run
            marker = "x" if stopped else ("o" if row["seed"] == seed0 else "s")
            ax.scatter([x], [y], marker=marker, s=60, color="tab:red" if stopped else "tab:blue")
            final = run.get("final")
            text = "stopped" if stopped else (("diverged" if final is None else f"{final:.3f}") if "final" in run
                                              else f"{run['time']:.1f} s")
            ax.annotate(text, (x, y), textcoords="offset points", xytext=(7, -3), fontsize=7)
    named = label_of(answer)
    ax.set_yticks(range(len(labels)), [f"{name}  (answer)" if name == named else name for name in labels],
                  fontsize=8)
    ax.set_xticks([2 * i for i in range(len(columns))], columns)
    ax.set_xlim(-1.0, 2 * len(columns) - 0.6)
    ax.invert_yaxis()
    ax.set_title(f"seed {seed0}: circles, seed {seed0 + 1}: squares, x: stopped at its horizon; beside each run its "
                 "time to the target, or its final metric", fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
