"""DBW, dynamic backup workers (Xu, Neglia, Sebastianelli 2020): the policy, its two estimators and the
solvers of its problem (17).

- `_policy`: `DynamicK` (the barrier choosing k_t each iteration), and the presets `DBW` and `BlindDBW`.
- `_gain`: the gain estimator (the expected loss decrease of an update of k gradients, eq. 9).
- `_time`: the iteration-time estimator (the expected time of the k-th arrival, problem (17)'s data and
  which solver answers it).
- `_eq17`: problem (17) itself, shared by both solvers: its data checked, runs of equal rows merged, the
  result, and the steps both take to reach (17)'s optimum from a merged one.
- `_eq17_exact`: the compiled exact solver (`_eq17_partition.c`, built by `pip install`);
  `_isotonic` and `_isotonic_partition`: the pure-Python solver used where it is not built.
"""

from autosync.policies.dbw._eq17_exact import COMPILED
from autosync.policies.dbw._isotonic import PythonEq17Solver
from autosync.policies.dbw._policy import DBW, BlindDBW, DynamicK
from autosync.policies.dbw._time import STRUCTURED, IterationTimeEstimator, structured_solver

# The policies; then the iteration-time estimator and the solvers of (17), for the solver benchmarks
# (benchmarks/bench_dbw_solver.py): whether the compiled solver is built, the pure-Python one, and the
# solver the estimator's structured method uses.
__all__ = ["BlindDBW", "DBW", "DynamicK", "IterationTimeEstimator", "STRUCTURED", "structured_solver", "COMPILED",
           "PythonEq17Solver"]
