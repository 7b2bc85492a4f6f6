"""Every table, JSON file and figure autosync writes, one module per report.

- `output`: the output directory (created and proven writable before any training), the command line a
  result records, and cell formats.
- `console`: what the command line prints (the tune, verification, calibration, run, rerun and cache
  reports), as rich lines and tables.
- `error_lines`: an error as its `error: ...` lines, a parser error with its hint, an interruption with the
  command that resumes it.
- `progress`: the bars and spinners the command line draws while a command runs.
- `tune_files`: a tune's verification and study plots (`Tuned.write`, the outcome `autosync.api.tune` returns).
- `runs`: one run's summary, trace tables, final parameters and plot (`Run.write`, the run `autosync.api.run` returns).
- `leaderboard_files`: the scored leaderboard as Markdown, CSV, JSON and plots (`autosync leaderboard`).
- `robustness_files`: a family's regret tables and figure (`autosync robustness`).
- `scaling_files`: a metric against the worker count (`autosync scaling`).
- `switch_log_replay_files`: Sync-Switch's Table II from recorded runs (`autosync replay`).
- `study_plots`: a study's optimization history, parameter importances or Pareto front (`autosync tune`).
- `race_figure`: a race's candidates by seeds by rounds (`autosync tune`'s race.png, and the docs' figure).
- `verification`: a tune's candidates re-run on a real backend, as table and figure (`tune --verify-top`).
- `profile_files`: the timed rounds and the fitted job (`autosync profile`).
- `calibration_files`: the calibrated job and calibration.json (`autosync calibrate`).
- `tracking`: what `--mlflow URI` logs to MLflow: each trial or run with its policy, time to target, final
  metric and cost, the answer tagged, the files as artifacts (`.write(..., mlflow=URI)` of a run, a tune and a
  leaderboard).
- `results`: what the API's `leaderboard`, `profile`, `family`, `robustness`, `replay` and `scaling` return,
  each writing itself through the modules above (`.write`).

The modules that compute these results return plain data; the writers here only render it. A module that
writes a command's files is named for them (`leaderboard_files` beside `autosync.experiments.leaderboard`,
`tune_files` beside `autosync.search.tune`), so that no file name stands for both the computation and its report.

The modules listed in `__all__` are the package's public surface; a name starting with `_` is internal.
"""

__all__ = ["calibration_files", "console", "error_lines", "leaderboard_files", "output", "profile_files",
           "progress", "race_figure", "resources", "results", "robustness_files", "runs", "scaling_files",
           "study_plots", "switch_log_replay_files", "tables", "tracking", "tune_files", "verification"]
