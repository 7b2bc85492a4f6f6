"""DBW's problem (17) solved exactly by isotonic recursive partitioning, compiled.

The algorithm and its proof of exactness are in `_eq17_partition.c`: a region of the grid (convex in (17)'s
order) at the weighted mean m of its targets is split along the upper subset with the largest sum of
w (t - m), found by a dynamic programme over its rows (each row of an upper subset is a suffix), until no
region has one; every region is then one block of the optimum at its mean (Luss and Rosset 2014; the
split is Hochbaum and Queyranne's 2003 minimum cut). Nothing is carried from one solve to the next, so an
answer depends only on its (weights, targets).

Runs of adjacent rows with equal weights and targets (DBW's rows not sampled yet) are solved as one row
first, as the pure-Python solver does (`_isotonic._Problem`; its module docstring proves the merged
optimum is (17)'s where no diagonal constraint at a run's end binds, for any split of the runs); where one
binds, the 4 rows of the runs on both sides nearest the step are split off as single rows, and where a
run still binds after that it is split whole (`_isotonic._peel`, with a depth, then without), and the
merged problem is solved again. On DBW's synthetic samples (benchmarks/bench_dbw_solver.py) the long run
of unsampled rows has one distinct row in the optimum even where its end binds, and a few rows split off
settle it: split whole at once (as the Python solver does) it costs a solve of nearly all n rows for
nothing. On the instances recorded from DBW runs the runs that bind have many distinct rows, and
splitting them whole at the second try saves rounds. Measured back to back, ms a solve on the recorded
instances at n = 128, 256, 512 and on the synthetic re-solves at n = 256, 512, 1024: 4 rows then whole
1.83, 6.5, 24.6 and 2.45, 5.4, 10.2; whole at once 1.60, 5.8, 23.3 and 3.3, 16.5, 10.5; 1, 4, 16, ...
rows 1.92, 7.8, 33.7 and 2.6, 6.6, 10.5.
"""

from __future__ import annotations

import numpy as np

from autosync.policies._isotonic import (_ROUNDING, Eq17Result, _peel, _Problem, _row_runs, checked_instance,
                                        isotone_majorant)

try:
    from autosync.policies import _eq17_partition as _compiled
except ImportError:  # not built: see the module docstring
    _compiled = None

COMPILED = _compiled is not None

# A region is split only where its best upper subset gains more than this times the sum of |w (t - m)|
# over the region: below it the gain is rounding (its sum over the whole region is 0 exactly).
SPLIT_TOLERANCE = 1e-12
# Rows split off each side of a binding step at the first try; the runs that still bind are split whole.
FIRST_PEEL = 4


class CompiledEq17Solver:
    """Problem (17) by the compiled recursive partitioning: every answer is (17)'s optimum up to rounding.

    `solve` has the signature of `_isotonic.PythonEq17Solver.solve`; its result's `rounds` counts the merged
    problems solved (1 where no run's end binds).
    """

    def __init__(self):
        if _compiled is None:
            raise RuntimeError("autosync's compiled (17) solver is not built (reinstall autosync where a C compiler "
                               "and Python's headers are present); the pure-Python one is _isotonic.PythonEq17Solver")

    def solve(self, weights: np.ndarray, targets: np.ndarray) -> Eq17Result:
        w, t = checked_instance(weights, targets)
        margin = _ROUNDING * max(float(np.abs(t).max()), np.finfo(float).tiny)
        problem = _Problem(w, t, _row_runs(w, t))
        rounds = 0
        while True:
            x = solve_merged(problem)
            rounds += 1
            peeled = _peel(x, problem, margin, depth=FIRST_PEEL if rounds == 1 else None)
            if peeled is None:
                break
            problem = _Problem(w, t, peeled)
        # Blocks are ordered up to rounding; the majorant makes the constraints hold exactly.
        return Eq17Result(x=isotone_majorant(np.repeat(x, problem.sizes, axis=0)), converged=True, sweeps=0,
                          rounds=rounds)


def solve_merged(problem: _Problem) -> np.ndarray:
    """(17) restricted to x equal on each merged run of rows: its exact optimum, one row per merged run."""
    m, n = problem.t.shape
    x = np.empty((m, n))
    diagonal = np.ascontiguousarray(problem.starts[1:], dtype=np.intc)  # row j + 1's first diagonal column
    _compiled.solve(m, n, np.ascontiguousarray(problem.w), np.ascontiguousarray(problem.t), diagonal, x,
                    SPLIT_TOLERANCE)
    return x
