"""Computations that compare policies (not the search): each returns data that `autosync.reporting` renders.

- `leaderboard`: every policy x seeds on one job, scored as MLPerf does (`autosync leaderboard`).
- `robustness`: online policies against each drawn job's best static k over a job family
  (`autosync robustness`); `reference_grid`: the broad reference grid over every policy family it may add.
- `compare`: several families' robustness reports side by side (`autosync robustness-compare`).
- `run_records`: finished runs kept a JSON line each, so that an interrupted report resumes.
- `scaling`: each policy's score against the number of workers, read from leaderboards (`autosync scaling`).
- `race_fit` and `portfolio_fit`: the race (`autosync.race`) run on the table, its settings and the portfolio it starts from fitted
  on other families, judged leave-one-family-out beside the shipped search (`benchmarks/bench_race.py`).

The modules listed in `__all__` are the package's public surface; a name starting with `_` is internal.
"""

__all__ = ["compare", "leaderboard", "lofo", "portfolio_fit", "race_fit", "reference_grid", "robustness", "run_records",
           "scaling"]
