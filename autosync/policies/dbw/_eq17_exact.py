"""DBW's problem (17) solved exactly by isotonic recursive partitioning, compiled.

The algorithm and its proof of exactness are in `_eq17_partition.c`: a region of the grid (convex in (17)'s
order) at the weighted mean m of its targets is split along the upper subset with the largest sum of
w (t - m), found by a dynamic programme over its rows (each row of an upper subset is a suffix), until no
region has one; every region is then one block of the optimum at its mean (Luss and Rosset 2014; the
split is Hochbaum and Queyranne's 2003 minimum cut). Nothing is carried from one solve to the next, so an
answer depends only on its (weights, targets).

Runs of adjacent rows with equal weights and targets (DBW's rows not sampled yet) are solved as one row
first, as the pure-Python solver does (`_eq17.Problem`; that module's docstring proves the merged
optimum is (17)'s where no diagonal constraint at a run's end binds, for any split of the runs). Where one
binds, the merged optimum is tested directly (`check`, the KKT conditions of (17) on the unmerged rows of the
level sets where a diagonal edge touches a run of two rows or more; the others pass, `_eq17_partition.c`):
it is often (17)'s optimum all the same. Where it is not, the runs are split only at the rows where a cut
moves when a failing level set is partitioned on its own, and the merged problem is solved again: on the
problems a DBW run hands its solver the runs that bind have many distinct rows in the optimum, but far fewer
than their rows (at n = 2,048 about 80 to 520 groups of rows where the runs hold about 2,000 rows), where
splitting them whole leaves every row of them single. Where the first test names no row, the 4 rows of the
runs on both sides nearest the step are split off (on DBW's synthetic samples, benchmarks/bench_dbw_solver.py,
the long run of unsampled rows has one distinct row in the optimum even where its end binds, and a few rows
split off settle it). The test runs from the first solve on: until issue 52 it ran from the second, after the
4 rows were split off first. On dbw1 (benchmarks/bench_scale.py, 200 updates) testing the first solve cut the
merged problems solved from 664 to 491 at n = 2,048 (their time by 12 to 18%) and from 781 to 606 at 4,096
(their time not at all: the tests after the first named a few rows at a time there, until MIN_EXTEND), with
DBW's decisions unchanged.
"""

from __future__ import annotations

import numpy as np

from autosync.policies.dbw._eq17 import (ROUNDING, Eq17Result, Problem, checked_instance, feasible, group_of_rows,
                                         isotone_majorant, peel, row_runs)

try:
    from autosync.policies.dbw import _eq17_partition as _compiled
except ImportError:  # not built: see the module docstring
    _compiled = None

COMPILED = _compiled is not None

# A region is split only where its best upper subset gains more than this times the sum of |w (t - m)|
# over the region: below it the gain is rounding (its sum over the whole region is 0 exactly).
SPLIT_TOLERANCE = 1e-12
# Rows split off each side of a binding step where the KKT test of the first solve names no row to split at.
FIRST_PEEL = 4
# KKT tests (`check`) before binding runs are split whole instead.
MAX_CHECKS = 8
# Each stretch of rows a KKT test names is widened by this fraction of its length on both sides (`_extended`).
# On the problems recorded from DBW runs, replayed back to back at n = 1,024, 2,048 and 4,096, 0.1 to 0.3 cut
# the merged problems solved from about 4.1 to 4.9 a solve to 3.0 to 3.9, with about 5 to 25% more merged rows.
EXTEND = 0.25
# ... and by at least this many rows. On dbw1 (benchmarks/bench_scale.py, 200 updates) the tests after the first
# named 1 to 11 rows a solve at n = 4,096, each a re-solve of the whole merged problem (600 to 2,200 merged rows):
# at least 24 rows (2 until issue 52) cut the merged problems solved from 606 to 435 and their time by 30%
# (2,048: 491 to 427, 8%); 12 and 64 rows saved less (merged problems solved one after the other, one thread).
MIN_EXTEND = 24
# A level set's mean may differ from its value by this much, relative to max |t|, for the KKT test to go on
# (rounding: the level set's cells are summed in another order than its blocks' were).
MEAN_TOLERANCE = 1e-9


class CompiledEq17Solver:
    """Problem (17) by the compiled recursive partitioning: every answer is (17)'s optimum up to rounding.

    `solve` has the signature of `_isotonic.PythonEq17Solver.solve`; its result's `rounds` counts the merged
    problems solved (1 where no run's end binds). `solve_rows` takes (17)'s data as a `RowTable` and
    answers with the merged rows (`MergedSolution`), so that neither the data nor the answer is ever laid
    out on the n x n grid.
    """

    def __init__(self):
        if _compiled is None:
            raise RuntimeError("autosync's compiled (17) solver is not built (reinstall autosync where a C compiler "
                               "and Python's headers are present); the pure-Python one is _isotonic.PythonEq17Solver")

    def solve(self, weights: np.ndarray, targets: np.ndarray) -> Eq17Result:
        w, t = checked_instance(weights, targets)
        margin = ROUNDING * max(float(np.abs(t).max()), np.finfo(float).tiny)
        x, problem, rounds = _settle(_Merged(w, t, row_runs(w, t), None), margin)
        # Blocks are ordered up to rounding; the majorant makes the constraints hold exactly.
        return Eq17Result(x=isotone_majorant(np.repeat(x, problem.sizes, axis=0)), converged=True, sweeps=0,
                          rounds=rounds)

    def solve_rows(self, table: RowTable) -> MergedSolution:
        """(17)'s optimum for the data `table` stands for: the same answer as `solve` on its dense
        (weights, targets), the same runs merged and the same merged problems solved, reading the table's
        rows and the merged problems' m x n cells but never the n x n grid."""
        w, t, source = table.weights, table.targets, table.source
        used = np.zeros(t.shape[0], dtype=bool)
        used[source] = True
        w, t = w[used], t[used]  # the values of the dense data: what `checked_instance` and the margin read
        if not np.all(w > 0) or not np.all(np.isfinite(w)):
            raise ValueError(f"weights must be finite and > 0, but got min {w.min()}")
        if not np.all(np.isfinite(t)):
            raise ValueError("targets must be finite, but got a NaN or an infinity")
        margin = ROUNDING * max(float(np.abs(t).max()), np.finfo(float).tiny)
        x, problem, rounds = _settle(_Merged(table.weights, table.targets, table.runs(), source), margin)
        return MergedSolution(x, problem.starts, problem.sizes, problem.diag_rows, rounds)


class RowTable:
    """(17)'s data as distinct rows: row h of the n x n weights and targets is row source[h] of `weights`
    and `targets` (r x n each). DBW's estimator samples the rows of the few k it used; every other row is
    one prior row, so its data is r = (sampled rows) + 1 rows however large n is."""

    def __init__(self, weights: np.ndarray, targets: np.ndarray, source: np.ndarray):
        self.weights = np.asarray(weights, dtype=float)
        self.targets = np.asarray(targets, dtype=float)
        self.source = np.asarray(source, dtype=np.intp)
        n = self.source.size
        if (self.weights.ndim != 2 or self.weights.shape != self.targets.shape or self.weights.shape[1] != n
                or n == 0 or self.source.min() < 0 or self.source.max() >= self.weights.shape[0]):
            raise ValueError(f"weights and targets must be r x n arrays of one shape and source n indices of "
                             f"their rows, but got weights {self.weights.shape}, targets {self.targets.shape} and "
                             f"{n} sources")

    def dense(self) -> tuple[np.ndarray, np.ndarray]:
        """The n x n (weights, targets) the table stands for."""
        return self.weights[self.source], self.targets[self.source]

    def runs(self) -> np.ndarray:
        """`_eq17.row_runs` of the dense data: rows h - 1 and h of one source are equal, and rows of two
        sources are compared where the source changes."""
        change = np.flatnonzero(self.source[1:] != self.source[:-1]) + 1
        before, after = self.source[change - 1], self.source[change]
        differ = ((self.weights[before] != self.weights[after]).any(axis=1)
                  | (self.targets[before] != self.targets[after]).any(axis=1))
        return np.concatenate([[0], change[differ]])


class MergedSolution:
    """(17)'s optimum on merged rows: row h of the n x n answer is x[j] for the merged row j holding h (rows
    starts[j] to starts[j] + sizes[j] - 1); `rounds` merged problems were solved."""

    def __init__(self, x: np.ndarray, starts: np.ndarray, sizes: np.ndarray, diag_rows: np.ndarray, rounds: int):
        self.x, self.starts, self.sizes, self.diag_rows, self.rounds = x, starts, sizes, diag_rows, rounds

    def dense(self) -> np.ndarray:
        """The n x n answer, exactly `CompiledEq17Solver.solve`'s: the blocks are ordered up to rounding, and
        `isotone_majorant` makes the constraints hold exactly."""
        return isotone_majorant(np.repeat(self.x, self.sizes, axis=0))

    def diagonal(self) -> np.ndarray:
        """x[k, k] for k = 1..n of `dense()`, from the merged rows. The dense answer is feasible iff the merged
        one is for the merged diagonal chain (rows of one run are copies, so a column can only step down where
        a run ends, and the diagonal cells are the same); where it is, the majorant leaves it as it is."""
        cells = (self.diag_rows, np.arange(self.diag_rows.size))
        if feasible(self.x, cells):
            return self.x[cells]
        return np.diagonal(self.dense()).copy()


class _Merged:
    """A merged problem of (17) whose data stay where they are: row h of (17)'s data is row source[h] of w and t
    (row h where source is None), and merged row j holds rows starts[j] to starts[j] + sizes[j] - 1 with their
    weights summed (`_eq17.Problem`'s merged problem, without its m x n copies of the data; `peel`
    reads its starts, sizes and diagonal chain)."""

    def __init__(self, w: np.ndarray, t: np.ndarray, starts: np.ndarray, source: np.ndarray | None):
        n = t.shape[1]
        self.w, self.t = np.ascontiguousarray(w, dtype=float), np.ascontiguousarray(t, dtype=float)
        self.source, self.starts = source, starts
        self.sizes = np.diff(starts, append=n)
        self.src = np.ascontiguousarray(starts if source is None else source[starts], dtype=np.intc)
        self.scale = self.sizes.astype(float)
        self.diag_rows = group_of_rows(starts, n)
        self.diag_cols = np.arange(n)

    def split(self, starts: np.ndarray) -> _Merged:
        """The merged problem of the same data with other runs."""
        return _Merged(self.w, self.t, starts, self.source)

    def solve(self) -> np.ndarray:
        """Its exact optimum, one row per merged row (`_eq17_partition.c`, solve_table)."""
        m, n = self.starts.size, self.t.shape[1]
        x = np.empty((m, n))
        _compiled.solve_table(m, n, self.t.shape[0], self.w, self.t, self.src, self.scale,
                              np.ascontiguousarray(self.starts[1:], dtype=np.intc), x, SPLIT_TOLERANCE)
        return x


def _settle(problem: _Merged, margin: float) -> tuple[np.ndarray, _Merged, int]:
    """Solve merged problems until the answer is (17)'s optimum: where no diagonal constraint at a merged run's
    end binds (`peel`), or where the KKT test on the unmerged rows passes (`check`). Where the test fails, the
    runs are split at the rows it names (widened, `_extended`); where it names none, the first solve's binding
    runs lose the FIRST_PEEL rows nearest the step, and later ones (or any after MAX_CHECKS tests) are split
    whole. Returns the last solution, its problem and the merged problems solved."""
    rounds = 0
    while True:
        x = problem.solve()
        rounds += 1
        peeled = peel(x, problem, margin, depth=FIRST_PEEL if rounds == 1 else None)
        if peeled is None:
            return x, problem, rounds
        if rounds <= MAX_CHECKS:
            optimal, rows = check(x, problem, margin)
            if optimal:
                return x, problem, rounds
            if rows.size:
                peeled = np.union1d(problem.starts, _extended(rows, problem))
        problem = problem.split(peeled)


def _extended(rows: np.ndarray, problem: _Merged) -> np.ndarray:
    """The rows the KKT test named, each stretch of consecutive ones widened on both sides by EXTEND of its length
    (at least MIN_EXTEND rows), inside its merged run. Where a test names a stretch, the optimum's staircase of distinct
    rows in a run often goes on past it, and the next test names the rows that follow one by one (at n = 4,096,
    17 to 27 rows next to a stretch); splitting a run at more rows than needed keeps the answer exact, and the
    widened split saves those re-solves."""
    out = [rows]
    for stretch in np.split(rows, np.flatnonzero(np.diff(rows) != 1) + 1):
        wide = max(MIN_EXTEND, int(np.ceil(EXTEND * stretch.size)))
        run = problem.diag_rows[stretch[0]]
        first, last = problem.starts[run] + 1, problem.starts[run] + problem.sizes[run] - 1
        out.append(np.arange(max(stretch[0] - wide, first), stretch[0]))
        out.append(np.arange(stretch[-1] + 1, min(stretch[-1] + wide, last) + 1))
    return np.unique(np.concatenate(out))


def check(x: np.ndarray, problem: _Merged, margin: float) -> tuple[bool, np.ndarray]:
    """Whether x, the optimum of the merged problem, is (17)'s, by the KKT test on the unmerged rows of the level
    sets that need it (`_eq17_partition.c`, check_merged); where it is not, the rows at which merged runs must
    split, named by partitioning each failing level set on its own (none where the test names none). `margin`
    is ROUNDING * max |t|."""
    m, n = x.shape
    split = np.zeros(n, dtype=np.uint8)
    status = _compiled.check(m, n, problem.t.shape[0], problem.w, problem.t, problem.src, problem.scale,
                             np.ascontiguousarray(problem.starts, dtype=np.intc), x, SPLIT_TOLERANCE,
                             MEAN_TOLERANCE / ROUNDING * margin, split)
    return status == 1, np.flatnonzero(split)


def solve_merged(problem: Problem) -> np.ndarray:
    """(17) restricted to x equal on each merged run of rows: its exact optimum, one row per merged run."""
    m, n = problem.t.shape
    x = np.empty((m, n))
    diagonal = np.ascontiguousarray(problem.starts[1:], dtype=np.intc)  # row j + 1's first diagonal column
    _compiled.solve(m, n, np.ascontiguousarray(problem.w), np.ascontiguousarray(problem.t), diagonal, x,
                    SPLIT_TOLERANCE)
    return x
