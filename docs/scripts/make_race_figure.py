"""Draw docs/concepts/race.png: one race of `autosync tune --sampler race` on the default job, candidates by
seeds by rounds.

    python docs/scripts/make_race_figure.py [--table results/table]

Replays the race on the table (a run it lacks is trained and stored there), in a study storage of its
own, and draws its cache record's rounds as `autosync tune` draws its race.png
(`autosync.reporting.race_figure`).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from autosync import api
from autosync.data import DEFAULT_JOB_PATH
from autosync.reporting.race_figure import draw_race

FIGURE = Path(__file__).resolve().parents[1] / "concepts" / "race.png"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table", default="results/table")
    args = parser.parse_args()
    api.quiet_optuna()
    with tempfile.TemporaryDirectory() as tmp:
        outcome = api.tune(api.load_job(DEFAULT_JOB_PATH), sampler="race", table=args.table,
                           storage=f"sqlite:///{tmp}/race.db")
    draw_race(outcome.cache["race"], outcome.cache["best_policy"], FIGURE)
    print(f"wrote {FIGURE}")


if __name__ == "__main__":
    main()
