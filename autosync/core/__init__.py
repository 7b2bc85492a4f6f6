"""The foundation every other part stands on: what a job is and the errors and streams it needs.

- `errors`: the one-line errors a user can cause (`UserError`, exit code 2) and runtime failures (1).
- `rng`: seeded random streams, one per purpose, so that the same seed gives the same run.
- `strict_json`: JSON without NaN or Infinity (null where a number is missing).
- `job`: the job file (workload, cluster, target, budget), validated, with its fingerprint; `limits`: the
  bounds it shares with the command-line options.
- `main_module`: whether a spawned child may import the main module again (the `--n-jobs` helpers).
- `ctrl_c`: the worker processes a command starts (joblib's) are spared a terminal's Ctrl-C.
- `cluster`: the cluster model the job describes: round trips, stragglers, compute units.
- `record_checks`: the types of a record read back from autosync's own files, checked.

The modules listed in `__all__` are the package's public surface; a name starting with `_` is internal.
"""

__all__ = ["arrivals", "cluster", "ctrl_c", "declare", "errors", "family", "fingerprint", "job", "job_schema",
           "limits", "loader", "main_module", "phases", "record_checks", "rng", "strict_json", "traces"]
