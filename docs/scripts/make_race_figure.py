"""Draw docs/concepts/race.png: one race of `autosync tune --sampler race` on the default job, candidates by
seeds by rounds.

    python docs/scripts/make_race_figure.py [--table results/table]

Replays the race on the table (a run it lacks is trained and stored there), in a study storage of its
own, and draws its cache record's rounds (`autosync.search.race_trials.rounds`): a row per candidate, a
column per round, a circle for a run on the job's seed and a square for one on the next seed, a cross
for a run stopped at its horizon, each run's time to the target (or final metric) beside it.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from autosync import api  # noqa: E402
from autosync.catalog import label_of  # noqa: E402
from autosync.data import DEFAULT_JOB_PATH  # noqa: E402

FIGURE = Path(__file__).resolve().parents[1] / "concepts" / "race.png"
ROUNDS = ("portfolio", "second seed", "local step", "final metric")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table", default="results/table")
    args = parser.parse_args()
    api.quiet_optuna()
    with tempfile.TemporaryDirectory() as tmp:
        outcome = api.tune(api.load_job(DEFAULT_JOB_PATH), sampler="race", table=args.table,
                           storage=f"sqlite:///{tmp}/race.db")
    race = outcome.cache["race"]
    labels: list[str] = []
    for row in race["rounds"]:
        for run in row["runs"]:
            name = label_of(run["policy"])
            if name not in labels:
                labels.append(name)
    fig, ax = plt.subplots(figsize=(10, 0.45 * len(labels) + 1.6))
    seed0 = min(row["seed"] for row in race["rounds"])
    for row in race["rounds"]:
        x = 2 * ROUNDS.index(row["round"]) + (0.35 if row["seed"] != seed0 else -0.55)
        for run in row["runs"]:
            y = labels.index(label_of(run["policy"]))
            stopped = run["time"] is None
            marker = "x" if stopped else ("o" if row["seed"] == seed0 else "s")
            ax.scatter([x], [y], marker=marker, s=60, color="tab:red" if stopped else "tab:blue")
            text = "stopped" if stopped else (f"{run['final']:.3f}" if "final" in run else f"{run['time']:.1f} s")
            ax.annotate(text, (x, y), textcoords="offset points", xytext=(7, -3), fontsize=7)
    answer = label_of(outcome.cache["best_policy"])
    ax.set_yticks(range(len(labels)), [f"{name}  (answer)" if name == answer else name for name in labels],
                  fontsize=8)
    ax.set_xticks([2 * i for i in range(len(ROUNDS))], ROUNDS)
    ax.set_xlim(-1.0, 2 * len(ROUNDS) - 0.6)
    ax.invert_yaxis()
    ax.set_title(f"seed {seed0}: circles, seed {seed0 + 1}: squares, x: stopped at its horizon", fontsize=9)
    fig.tight_layout()
    fig.savefig(FIGURE, dpi=110)
    print(f"wrote {FIGURE}")


if __name__ == "__main__":
    main()
