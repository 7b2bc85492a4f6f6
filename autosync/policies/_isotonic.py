"""A structured solver for DBW's problem (17): weighted least squares under three monotonicity families.

This is the pure-Python solver: DBW uses the compiled exact one (`_eq17_exact`) where `pip install` built
it (about 18 times faster on the instances recorded from DBW runs at n = 128), and this one where it is
not. Its `_Problem`, `_row_runs`, `_peel`, `isotone_majorant` and `checked_instance` serve both.

Problem (17) of the DBW paper (Xu, Neglia, Sebastianelli 2020), with per-pair weights w (sample counts)
and targets t (sample means):

    minimize  sum_{h,k} w[h,k] (x[h,k] - t[h,k])^2
    subject to  x[h,k] <= x[h,k+1]          (rows nondecreasing)
                x[h+1,k] <= x[h,k]          (columns nonincreasing)
                x[k,k] <= x[k+1,k+1]        (diagonal nondecreasing)

is the weighted projection of t onto the intersection of three convex cones. Each cone alone is a set of
independent chains (the n rows, the n columns, the diagonal), and the weighted projection onto a chain is
the weighted isotonic regression, solved exactly by pool-adjacent-violators (PAV; `isotonic_rows`, one
call of scipy's linear-time PAV on a family's chains laid end to end). The intersection is reached by
Dykstra's alternating projections in the weighted norm (Boyle and Dykstra 1986; for isotonic regression in
several variables, Dykstra and Robertson 1982), which converges to the exact projection, not just to a feasible point.

Dykstra's method is block-coordinate ascent on the dual problem: its increments p_i are scaled dual
variables. They are kept as multipliers lam_i = w * p_i, which do not depend on the weights (the normal
cone of a family is weight-free), so a re-solve after new samples starts from the previous dual point,
still dual feasible (`PythonEq17Solver`). The sweep z -> G(z) on the increments is a fixed-point iteration;
Anderson acceleration extrapolates it from the last few residuals, and a safeguard falls back to the plain
sweep whenever an extrapolated point does much worse (twice the residual) than the point it came from.

Dykstra converges fast where DBW's samples put it (whole rows sampled, the prior elsewhere: a few to a few
tens of sweeps) and crawls where a light pair (the 1e-3 prior) sits between heavy ones in both its row and
its column or on the diagonal, which scattered samples produce: a flow of multiplier through such a pair
grows by little per sweep (on the instances recorded from DBW runs, benchmarks/bench_dbw_solver.py, 256
sweeps a solve at n = 128 and 621 at n = 512, where 8 of 24 reached the 500-sweep cap). So after at most
`DEFAULT_SWEEPS` sweeps the solve is finished exactly (`_partition`): (17) is isotonic regression on a
partial order (a DAG on the grid), and its optimum is piecewise constant, each piece (a block) at its
weighted mean of t. The sweeps' iterate orders the cells into a linear extension of the order; PAV on
that sequence gives blocks (the isotonic regression under the total order, feasible for (17)); the KKT
conditions of isotonic regression on a partial order (nonnegative multipliers on a block's edges balance
w (x - t) at each cell) hold iff no block has an upper subset (closed under the block's own edges) whose
w (t - mean) sums above 0, and a dynamic programme over the rows finds each block's best such subset
exactly (`_violations`: a block is convex, so it meets each row in one run of columns and an upper subset
takes a suffix of each). A block that has one is split (the partitioning algorithm: Maxwell and
Muckstadt 1985; Spouge, Wan and Wilbur 2003; the subset found is Hochbaum and Queyranne's 2003 minimum
cut) and PAV pools the sequence again, until the KKT test passes: the answer is then (17)'s optimum up
to rounding. Where Dykstra meets its tolerance within those sweeps and no run's end binds (below) its
answer is kept, as before: within tol * max |t| of the optimum. `Eq17Result.converged` is False only
where the partition does not settle within `_ROUNDS` rounds, twice (the second time after up to
`max_sweeps` more sweeps); this was not seen on DBW's instances (the first try failed on a few at
n = 512: PAV can pool back what a round split, and such a sequence of rounds may cycle).

Runs of adjacent rows with equal weights and equal targets (in DBW's samples every row not sampled yet:
the 1e-3 prior and the column means) are solved as one row with their weights summed (`_Problem`): that is
(17) restricted to x equal on each run, and its solution x_R is (17)'s optimum when every diagonal
constraint between a run and the row next to it holds strictly. Proof: averaging a feasible x over each
run's rows keeps every other constraint (a column's average over a run lies between the run's end values;
averaged rows stay nondecreasing, and so does the diagonal inside a run) and does not raise the objective
(the run's rows have one data, so by Jensen); if a feasible x did better than x_R, the average of
x_R + s (x - x_R) for a small s > 0 would be a point of the restricted problem better than x_R. The same
holds for any split of the runs into shorter runs. Where such a constraint binds (within 100 tolerances)
in Dykstra's answer, it is checked on the unmerged problem, started from the merged multipliers: a run's
column multiplier plus diagonal multiplier shared equally by its rows, the diagonal's kept on its own
cell, which is (17)'s optimal dual point when x_R is optimal, so that one sweep confirms it (and the
partition finishes the unmerged problem where the sweeps do not). Where one binds in the partition's
exact answer, the runs on both sides of it are split into single rows (`_peel`), and the smaller merged
problem is solved again (sweeps from the multipliers, then the partition) until none binds. On the
recorded instances a run's end binds in 21 of 24 solves, and the runs it splits have many distinct rows
in the optimum (24 of 44 rows, 32 of 43).

What it costs, measured, is on the docs site (reference/benchmarks.md, "The pure-Python solver").
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

# A diagonal constraint at a merged run's end counts as binding in Dykstra's answer within this many
# tolerances of equality.
_SLACK = 100.0
# Default stopping tolerance, relative to max |t|: the estimated distance of the iterate to the optimum.
# The estimator's consumer (rule 19) treats ratios within 1e-4 as ties, so 1e-7 leaves three orders.
DEFAULT_TOL = 1e-7
DEFAULT_MAX_SWEEPS = 500
# Sweeps before the exact finish: they order the cells for it. On DBW's recorded instances at n = 128
# (bench_dbw_solver.py) 10 sweeps left the partition about 2.7 times the rounds that 40 did, and 40 was
# the fastest of 10, 20, 40 and 60 in back-to-back replays.
DEFAULT_SWEEPS = 40
DEFAULT_MEMORY = 3


def _pava(y: np.ndarray, w: np.ndarray) -> np.ndarray:
    """The weighted isotonic regression of one chain: scipy's linear-time pool-adjacent-violators (imported
    here: importing scipy.optimize costs 0.2 s, which only DBW's solver needs)."""
    from scipy.optimize import isotonic_regression

    return isotonic_regression(y, weights=w).x


def isotonic_rows(y: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Weighted isotonic regression of every row of y: the nondecreasing rows closest in sum w (x - y)^2.

    Pool-adjacent-violators on the rows that need it (`_pav_rows`).

    Args:
        y: (m, L) values.
        w: (m, L) positive weights.

    Returns:
        (m, L) array, each row nondecreasing; rows of y that are already nondecreasing are returned
        unchanged.
    """
    y = np.asarray(y, dtype=float)
    w = np.asarray(w, dtype=float)
    if y.ndim != 2 or y.shape != w.shape:
        raise ValueError(f"y and w must be 2-D arrays of one shape, but got y {y.shape} and w {w.shape}")
    if not np.all(w > 0):
        raise ValueError(f"w must be > 0, but got min {w.min()}")
    if y.shape[1] < 2 or y.shape[0] == 0:
        return y.copy()
    return _isotonic_some_rows(y, w, (y[:, 1:] < y[:, :-1]).any(axis=1), copy=True)[0]


def _pav_rows(y: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Weighted isotonic regression of every row of y (m, L) by one call of scipy's linear-time PAV.

    The rows are laid end to end, row r raised by an offset c_r chosen so that no pooling can cross from
    one row into the next: a row's regression lies between its smallest and largest value, so with
    c_{r+1} - c_r >= max(y_r) - min(y_{r+1}) the last fitted value of row r is at most the first of row
    r + 1 (where they are equal, pooling the two blocks leaves both values as they are). The offsets cost
    a rounding error of about eps * c_m, far below the sweeps' tolerance.
    """
    m, length = y.shape
    if m == 1:
        return _pava(y[0], w[0])[None, :]
    gap = np.maximum(y.max(axis=1)[:-1] - y.min(axis=1)[1:], 0.0)
    offset = np.zeros((m, 1))
    np.cumsum(gap, out=offset[1:, 0])
    fitted = _pava((y + offset).ravel(), w.ravel()).reshape(m, length)
    fitted -= offset
    return fitted


def _isotonic_some_rows(y: np.ndarray, w: np.ndarray, unsorted: np.ndarray,
                        copy: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """`isotonic_rows` given which rows need pooling: a gather for a few, the whole matrix for many.

    Returns the fitted rows and the indices of the rows that were fitted (all where the whole matrix was);
    the others are y's as they are, and y itself is returned where no row needs pooling, unless `copy`.
    """
    rows = np.flatnonzero(unsorted)
    if rows.size == 0:
        return (y.copy() if copy else y), rows
    if 2 * rows.size > y.shape[0]:
        return _pav_rows(y, w), np.arange(y.shape[0])
    x = y.copy()
    x[rows] = _pav_rows(y[rows], w[rows])
    return x, rows


@dataclass
class Eq17Result:
    """One solve of (17): the solution, whether it is optimal (within Dykstra's tolerance where its sweeps
    converged with no run's end binding; up to rounding where `_partition` settled), the Dykstra sweeps
    run before (and, where the partition did not settle, after) and the partition's rounds."""

    x: np.ndarray
    converged: bool
    sweeps: int
    rounds: int = 0


def checked_instance(weights: np.ndarray, targets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(weights, targets) of (17) as float arrays, checked: both n x n, weights finite and > 0, targets finite."""
    w = np.asarray(weights, dtype=float)
    t = np.asarray(targets, dtype=float)
    if w.ndim != 2 or w.shape[0] != w.shape[1] or w.shape != t.shape:
        raise ValueError(f"weights and targets must be n x n arrays of one shape, but got weights {w.shape} "
                         f"and targets {t.shape}")
    if not np.all(w > 0) or not np.all(np.isfinite(w)):
        raise ValueError(f"weights must be finite and > 0, but got min {w.min()} (prior weights keep empty "
                         f"pairs positive)")
    if not np.all(np.isfinite(t)):
        raise ValueError("targets must be finite, but got a NaN or an infinity")
    return w, t


class PythonEq17Solver:
    """Problem (17): Dykstra's sweeps (PAV per family, warm-started across solves), whose answer stands where
    they meet the tolerance within `sweeps` and no run's end binds; elsewhere they guess the solution's
    order and the partitioning algorithm (`_partition`) finishes it exactly.

    Runs of adjacent rows with the same weights and targets are solved as one row (`_Problem`); where a
    diagonal constraint at a run's end binds, the run is split into single rows and the smaller merged
    problem solved again (`_peel`, module docstring).

    Args:
        tol: Dykstra stops before `sweeps` sweeps when the estimated distance of the iterate to the
            optimum, max over entries, is at most tol * max |t|. The distance is estimated from s, the
            largest change of a column or diagonal increment in one sweep (the row increments follow from
            them), and the observed contraction r of s from the previous sweep: s * r / (1 - r), never
            below s itself. Where Dykstra's answer stands it is within that tolerance; where the partition
            finishes, exact up to rounding.
        max_sweeps: sweeps run before a second try where the partition does not settle in its rounds
            (`Eq17Result.converged` is False if the second try does not settle either).
        memory: residuals Anderson acceleration extrapolates from (0: plain Dykstra).
        sweeps: Dykstra's sweeps before the partition (the guess of its order).
    """

    def __init__(self, tol: float = DEFAULT_TOL, max_sweeps: int = DEFAULT_MAX_SWEEPS,
                 memory: int = DEFAULT_MEMORY, sweeps: int = DEFAULT_SWEEPS):
        if not tol > 0:
            raise ValueError(f"tol must be > 0, but got tol={tol}")
        if max_sweeps < 1:
            raise ValueError(f"max_sweeps must be >= 1, but got max_sweeps={max_sweeps}")
        if sweeps < 1:
            raise ValueError(f"sweeps must be >= 1, but got sweeps={sweeps}")
        if memory < 0:
            raise ValueError(f"memory must be >= 0, but got memory={memory}")
        self.tol = tol
        self.max_sweeps = max_sweeps
        self.sweeps = sweeps
        self.memory = memory
        # The last solve's row groups (first row of each) and its multipliers on the merged rows.
        self._starts: np.ndarray | None = None
        self._merged: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self._accel: _Anderson | None = None  # kept across solves, for its buffers

    @property
    def multipliers(self) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """(row, column, diagonal) dual variables of the last solve, n x n, n x n and n: lam_i = w * p_i
        with p_i Dykstra's increments, a merged row's shared equally by its rows; None before the first
        solve or after `reset`."""
        if self._merged is None:
            return None
        lam_row, lam_col, lam_diag = self._merged
        each = np.arange(lam_diag.size)
        return (_regroup(lam_row, self._starts, each), _regroup_columns(lam_col, lam_diag, self._starts, each),
                lam_diag)

    def reset(self) -> None:
        """Forget the warm start: the next solve starts from zero multipliers."""
        self._starts = self._merged = None

    def solve(self, weights: np.ndarray, targets: np.ndarray) -> Eq17Result:
        """Solve (17) for (weights, targets), both n x n, starting from the last solve's multipliers.

        The returned x satisfies the three families exactly; where `converged` it is (17)'s optimum within
        Dykstra's tolerance (its answer stood) or up to rounding (the KKT conditions checked by `_partition`).
        """
        w, t = checked_instance(weights, targets)
        n = t.shape[0]
        if self._merged is not None and self._merged[2].size != n:
            self.reset()
        starts = _row_runs(w, t)
        problem = _Problem(w, t, starts)
        x, converged, sweeps = self._dykstra(problem, self.sweeps)
        scale = max(float(np.abs(t).max()), np.finfo(float).tiny)
        if converged and problem.sizes.size < n and _peel(x, problem, _SLACK * self.tol * scale) is not None:
            # A run's end binds (within _SLACK tolerances) in Dykstra's answer: check it on the unmerged
            # problem, from the merged multipliers (module docstring; one sweep where it is the optimum).
            problem = _Problem(w, t, np.arange(n))
            x, converged, more = self._dykstra(problem, self.sweeps)
            sweeps += more
        if converged:
            # Dykstra met the tolerance and no run's end binds: its answer.
            return Eq17Result(x=np.repeat(x, problem.sizes, axis=0), converged=True, sweeps=sweeps)
        rounds = 0
        while True:
            exact, more = _partition(problem, x)
            rounds += more
            if exact is None:
                # The partition did not settle (a few times on the recorded instances at n = 512): sweep
                # on, and try once more from the better guess.
                x, _, extra = self._dykstra(problem, self.max_sweeps)
                sweeps += extra
                exact, more = _partition(problem, x)
                rounds += more
                if exact is None:
                    return Eq17Result(x=np.repeat(x, problem.sizes, axis=0), converged=False, sweeps=sweeps,
                                      rounds=rounds)
            peeled = _peel(exact, problem, _ROUNDING * scale)
            if peeled is None:
                return Eq17Result(x=np.repeat(exact, problem.sizes, axis=0), converged=True, sweeps=sweeps,
                                  rounds=rounds)
            # A diagonal constraint at a merged run's end binds: solve again with rows at that end on their
            # own, guessing from sweeps warm-started from the last multipliers.
            problem = _Problem(w, t, peeled)
            x, _, extra = self._dykstra(problem, self.sweeps)
            sweeps += extra

    def _dykstra(self, problem: _Problem, max_sweeps: int) -> tuple[np.ndarray, bool, int]:
        """At most max_sweeps of Dykstra's sweeps on one (merged) problem from the stored multipliers,
        Anderson-accelerated.

        Returns the iterate (m x n, made feasible by `isotone_majorant`), whether the tolerance was met and
        the sweeps run; stores the problem's multipliers as the next warm start.
        """
        m, n = problem.t.shape
        mn = m * n
        # The state is (p_col, p_diag), p_col transposed: Dykstra's row step overwrites p_row (its input is
        # t - p_col - p_diag), so the row multipliers are kept for the caller but not needed to warm-start.
        warm = self._merged is not None
        if not warm:
            z = np.zeros(mn + n)
        else:
            lam_col = _regroup_columns(self._merged[1], self._merged[2], self._starts, problem.starts)
            z = np.concatenate([(_transposed(lam_col) / problem.w_t).ravel(), self._merged[2] / problem.w_diag])
        scale = max(float(np.abs(problem.t).max()), np.finfo(float).tiny)
        if self._accel is None or self._accel.d_g.shape[1] != z.size:
            self._accel = _Anderson(self.memory, z.size)
        accel = self._accel
        accel.start(np.concatenate([problem.w_t.ravel(), problem.w_diag]))
        previous = np.inf
        converged = False
        sweep = 0
        # (plain step, its point's residual and largest change) behind an extrapolated point
        fallback: tuple[np.ndarray, float, float] | None = None
        for sweep in range(1, max_sweeps + 1):
            g, state = _sweep(z, problem)
            f = g - z
            fw = accel.weighted(f)
            residual = _dot(fw, fw)
            step = max(float(f.max(initial=0.0)), -float(f.min(initial=0.0)))
            if fallback is not None and (residual > _SAFEGUARD * fallback[1] or step > _SAFEGUARD * fallback[2]):
                # Safeguard: the extrapolated point is much worse than the one it came from; take the
                # plain step instead and restart the acceleration.
                z, fallback = fallback[0], None
                accel.restart()
                continue
            # The change of x in a projection equals the change of that family's increment; if no
            # projection moves x, x is in all three cones with its increments fixed: the optimum.
            ratio = min(step / previous, 0.999) if previous > 0 else 0.0
            estimate = step * max(1.0, ratio / (1.0 - ratio))
            previous = step
            if estimate <= self.tol * scale:
                converged = True
                break
            if warm and sweep >= _WARM_SWEEPS:
                # A warm start that has not converged by now is worse than none (seen where newly sampled
                # rows split a merged run): start again from zero multipliers.
                z, fallback, previous, warm = np.zeros_like(z), None, np.inf, False
                accel.restart()
                continue
            z = accel.extrapolate(g, fw)
            fallback = (g, residual, step) if z is not g else None
        y_rows, x_rows, fitted_cols_t, fitted_diag = state
        x = _transposed(fitted_cols_t)
        np.negative(x, out=x)
        x[problem.diag_rows, problem.diag_cols] = fitted_diag
        self._starts = problem.starts
        self._merged = ((y_rows - x_rows) * problem.w, _transposed(g[:mn].reshape(n, m) * problem.w_t),
                        g[mn:] * problem.w_diag)
        return isotone_majorant(x, (problem.diag_rows, problem.diag_cols)), converged, sweep


# Sweeps from the warm start before starting from zero instead; DBW's re-solves take 2 to 40 (up to about
# 20 from zero), a few hundreds where the warm start misleads (seen at n = 256, where a start from zero
# takes about 10). Below DEFAULT_SWEEPS, so that such a solve still ends in Dykstra's answer: at 50 the
# synthetic re-solves at n = 256 went to the partition and took about 8 times as long, and on the
# recorded instances at n = 128 the partition took 20 rounds a solve instead of 13 (a start from zero
# orders the cells better there than a misleading warm start).
_WARM_SWEEPS = 20
# Anderson's safeguard rejects an extrapolated point whose sweep residual or largest change exceeds this
# many times the plain step's. On DBW's recorded instances (bench_dbw_solver.py) a strict test (1) rejected
# about one extrapolation in three and restarted the acceleration each time; 2 cut the sweeps per solve at
# n = 128 from 315 to 256 (max 885 to 595) and the solves at the 500-sweep cap from 2 of 24 to 0, and left
# the synthetic re-solves' sweeps as they were.
_SAFEGUARD = 2.0


def _row_runs(w: np.ndarray, t: np.ndarray) -> np.ndarray:
    """The first row of each run of adjacent rows with equal weights and equal targets (rows of DBW's data
    that carry only the prior are such runs)."""
    same = (w[1:] == w[:-1]).all(axis=1) & (t[1:] == t[:-1]).all(axis=1)
    return np.flatnonzero(np.concatenate([[True], ~same]))


def _group_of_rows(starts: np.ndarray, n: int) -> np.ndarray:
    """The merged row of each of the n rows, given the first row of each merged row."""
    return np.repeat(np.arange(starts.size), np.diff(starts, append=n))


def _regroup(lam: np.ndarray, old: np.ndarray, new: np.ndarray) -> np.ndarray:
    """Multipliers of merged rows (first rows `old`) for other merged rows (first rows `new`) of one matrix.

    A merged row's multiplier is the sum of its rows' and is shared equally by its rows (where their
    weights, targets and solution are equal, and so are their gradients).
    """
    n = lam.shape[1]
    pieces = np.union1d(old, new)
    length = np.diff(pieces, append=n)
    source = np.searchsorted(old, pieces, side="right") - 1
    share = length / np.diff(old, append=n)[source]
    return np.add.reduceat(lam[source] * share[:, None], np.searchsorted(pieces, new), axis=0)


def _regroup_columns(lam_col: np.ndarray, lam_diag: np.ndarray, old: np.ndarray, new: np.ndarray) -> np.ndarray:
    """`_regroup` for the column multipliers: what is shared equally is the column's plus the diagonal's
    multiplier (the gradient less the row's), the diagonal's staying on its own cell. On rows that
    (17)'s optimum keeps equal this is the optimum's own column multiplier wherever it is dual feasible."""
    n = lam_diag.size
    cols = np.arange(n)
    combined = lam_col.copy()
    combined[_group_of_rows(old, n), cols] += lam_diag
    lam = _regroup(combined, old, new)
    lam[_group_of_rows(new, n), cols] -= lam_diag
    return lam


class _Problem:
    """(17)'s data with runs of equal rows merged, laid out for the sweeps.

    Rows starts[j] to starts[j + 1] - 1 become merged row j, with their weights summed and their (equal)
    targets; the diagonal family is the chain of cells (diag_rows[k], k), k's merged row and column k.
    With `source`, w and t hold only distinct rows and row h of (17)'s data is their row source[h]
    (`_eq17_exact.RowTable`: DBW's rows not sampled yet are all one prior row). For the sweeps' column
    family the weights are also kept transposed, and the targets negated and transposed, made when the
    sweeps first ask (the compiled solver's merged problems never do).
    """

    def __init__(self, w: np.ndarray, t: np.ndarray, starts: np.ndarray, source: np.ndarray | None = None):
        n = t.shape[0] if source is None else source.size
        self.starts = starts
        self.sizes = np.diff(starts, append=n)
        rows = starts if source is None else source[starts]
        self.t = t[rows]
        self.w = w[rows] * self.sizes[:, None]
        self.diag_rows = _group_of_rows(starts, n)
        self.diag_cols = np.arange(n)
        self.w_diag = self.w[self.diag_rows, self.diag_cols]

    @cached_property
    def w_t(self) -> np.ndarray:
        return _transposed(self.w)

    @cached_property
    def neg_t_t(self) -> np.ndarray:
        neg = _transposed(self.t)
        np.negative(neg, out=neg)
        return neg


def _sweep(z: np.ndarray, problem: _Problem):
    """One Dykstra sweep (rows, columns, diagonal) from the increments z = (p_col transposed, p_diag).

    The column family works on transposed, negated matrices, whose rows are the columns read upward:
    the columns' PAV then runs on contiguous rows. The transposition is paid once a sweep, to read p_col
    for the row step; the column step's input -(x + p_col).T = -t.T + p_diag (on the diagonal) + p_row.T
    needs only the rows the row step changed transposed, which on DBW's data are a few (rows that carry
    the prior alone are already nondecreasing).

    Returns the new increments and (the row step's input and output, whose difference is p_row; the
    column step's fitted values, transposed and negated; the diagonal after its projection).
    """
    t, w, rows_d, cols_d = problem.t, problem.w, problem.diag_rows, problem.diag_cols
    m, n = t.shape
    mn = m * n
    p_col_t = z[:mn].reshape(n, m)
    p_diag = z[mn:]
    # Rows nondecreasing; the input is t minus the other families' increments.
    y_rows = _transposed(p_col_t)
    np.subtract(t, y_rows, out=y_rows)
    y_rows[rows_d, cols_d] -= p_diag
    x_rows, rows = _isotonic_some_rows(y_rows, w, (y_rows[:, 1:] < y_rows[:, :-1]).any(axis=1))
    # Columns nonincreasing in h: the rows of u = -(x + p_col).T nondecreasing.
    u = problem.neg_t_t.copy()
    u[cols_d, rows_d] += p_diag
    u[:, rows] += (y_rows[rows] - x_rows[rows]).T
    v, _ = _isotonic_some_rows(u, problem.w_t, (u[:, 1:] < u[:, :-1]).any(axis=1))
    g = np.empty_like(z)
    np.subtract(v, u, out=g[:mn].reshape(n, m))  # p_col = y - x = (v - u).T
    # Diagonal nondecreasing.
    y_diag = p_diag - v[cols_d, rows_d]
    fitted_diag = y_diag
    if (y_diag[1:] < y_diag[:-1]).any():
        fitted_diag = _pava(y_diag, problem.w_diag)
    g[mn:] = y_diag - fitted_diag
    return g, (y_rows, x_rows, v, fitted_diag)


def _transposed(a: np.ndarray) -> np.ndarray:
    """A new C-contiguous array holding a.T, copied tile by tile where the shape allows (about 3x faster
    at n = 1024 than a strided copy, which misses the cache on every element). Never a view: callers
    write into it."""
    m, n = a.shape
    tile = 32
    if m % tile or n % tile or min(m, n) < 2 * tile:
        return np.array(a.T, order="C")
    i, j = m // tile, n // tile
    tiles = np.ascontiguousarray(a.reshape(i, tile, j, tile).transpose(0, 2, 1, 3))  # (i, j, r, c)
    return np.ascontiguousarray(tiles.transpose(1, 3, 0, 2)).reshape(n, m)  # (j, c, i, r)


class _Anderson:
    """Anderson acceleration (type II) of the sweep's fixed-point iteration z -> G(z), in the weighted norm.

    Near the solution the sweep is an affine map on the active set, where Anderson's extrapolation from
    the last `memory` residuals acts like GMRES. The differences are kept in two (memory, size) ring
    buffers, reused from solve to solve, so that one extrapolation reads each vector a few times and
    allocates only its result.
    Products use einsum, not BLAS: a multithreaded BLAS call on vectors this size costs milliseconds when
    the cores are busy (measured at n = 128 on a loaded 2-core machine: 51 ms per re-solve with BLAS dot
    products, 6 ms with BLAS held to one thread; at n = 1024, 8 ms for one np.dot against 0.6 ms).
    """

    def __init__(self, memory: int, size: int):
        self.memory = memory
        self.root_w = np.empty(size)
        self.last: tuple[np.ndarray, np.ndarray] | None = None  # (g, weighted f) of the last sweep
        self.d_g = np.empty((memory, size))
        self.d_f = np.empty((memory, size))
        self.used = 0  # rows of d_g, d_f in use
        self.slot = 0  # the row the next difference overwrites
        self.gram = np.zeros((memory, memory))  # d_f[i] . d_f[j]

    def start(self, weights: np.ndarray) -> None:
        """Begin a solve in the norm of these weights (one per entry of z), with no history."""
        np.sqrt(weights, out=self.root_w)
        self.restart()

    def weighted(self, f: np.ndarray) -> np.ndarray:
        """f in the weighted norm's coordinates, whose squared length the extrapolation minimises."""
        return f * self.root_w

    def restart(self) -> None:
        self.used = self.slot = 0
        self.last = None

    def extrapolate(self, g: np.ndarray, fw: np.ndarray) -> np.ndarray:
        """The next point after the sweep took z to g = z + f (fw: `weighted(f)`)."""
        if self.memory == 0:
            return g
        if self.last is not None:
            i = self.slot
            np.subtract(g, self.last[0], out=self.d_g[i])
            np.subtract(fw, self.last[1], out=self.d_f[i])
            self.used = min(self.used + 1, self.memory)
            self.slot = (i + 1) % self.memory
            self.gram[i, :self.used] = self.gram[:self.used, i] = np.einsum("ij,j->i", self.d_f[:self.used],
                                                                             self.d_f[i])
        self.last = (g, fw)
        m = self.used
        if m == 0:
            return g
        gram = self.gram[:m, :m].copy()
        gram[np.diag_indices(m)] += 1e-12 * np.trace(gram) + np.finfo(float).tiny
        try:
            gamma = np.linalg.solve(gram, np.einsum("ij,j->i", self.d_f[:m], fw))
        except np.linalg.LinAlgError:
            return g
        z = np.einsum("i,ij->j", gamma, self.d_g[:m])
        np.subtract(g, z, out=z)
        return z


def _dot(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.einsum("i,i->", a, b))

def violation(x: np.ndarray) -> float:
    """Largest violation of (17)'s constraints by x (0 when x is feasible)."""
    d = np.diagonal(x)
    return float(max((x[:, :-1] - x[:, 1:]).max(initial=0.0), (x[1:, :] - x[:-1, :]).max(initial=0.0),
                     (d[:-1] - d[1:]).max(initial=0.0)))


def isotone_majorant(x: np.ndarray, diagonal: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """The least x' >= x that satisfies (17)'s three families (x itself when it does already).

    x'[v] is the largest x[u] over the entries u that (17) orders below v; it is reached by running
    maxima along rows, up columns and along the diagonal, repeated until nothing changes (each pass only
    raises entries to values x already has, so this ends). An iterate that violates the constraints by
    at most e moves by at most about 2 n e. The running maxima are taken where they are cheap: along the
    rows that violate, and up the columns one whole row at a time (a strided accumulate along axis 0 or
    1 costs about 4 to 8 ms at n = 1024, the row loop about 1 ms).

    Args:
        x: (m, n) values.
        diagonal: the diagonal family's chain, as (row indices, column indices) of its cells in order;
            (k, k) for k < n when None (x square). A merged problem (`_Problem`) has its own.
    """
    if diagonal is None:
        diagonal = (np.arange(x.shape[0]),) * 2
    if _feasible(x, diagonal):
        return x
    x = x.copy()
    while not _feasible(x, diagonal):
        rows = np.flatnonzero((x[:, 1:] < x[:, :-1]).any(axis=1))
        x[rows] = np.maximum.accumulate(x[rows], axis=1)
        for h in range(x.shape[0] - 2, -1, -1):
            np.maximum(x[h], x[h + 1], out=x[h])
        x[diagonal] = np.maximum.accumulate(x[diagonal])
    return x


def _feasible(x: np.ndarray, diagonal: tuple[np.ndarray, np.ndarray]) -> bool:
    """violation(x) == 0, by comparisons alone, for the diagonal chain `diagonal` (`isotone_majorant`)."""
    d = x[diagonal]
    return not ((x[:, 1:] < x[:, :-1]).any() or (x[1:, :] > x[:-1, :]).any() or (d[1:] < d[:-1]).any())


# The partition's rounds before it gives up. On DBW's recorded instances (bench_dbw_solver.py) a solve's
# partitions took 13 rounds in all on average at n = 128 (at most 21); at n = 512 a few of them reached
# this cap (the solve then sweeps on and tries again, which settled every one).
_ROUNDS = 50
# A block's violating upper set must gain more than this, relative to the block's sum of |w (t - mean)|
# and w max |t| (the rounding of the sums and of the mean), to be split off: a few thousand roundings.
_ROUNDING = 1e-13


def _partition(problem: _Problem, guess: np.ndarray, rounds: int = _ROUNDS) -> tuple[np.ndarray | None, int]:
    """(17) on a merged problem solved exactly from a feasible guess: the partitioning algorithm for
    isotonic regression on a partial order (Maxwell and Muckstadt 1985; Spouge, Wan and Wilbur 2003).

    The cells are sorted by the guess into a linear extension of (17)'s order (ties broken by k - h,
    then k + h, which every edge increases), and scipy's PAV on that sequence pools them into blocks,
    each set to its weighted mean of t: the isotonic regression under the stronger total order, which is
    feasible for (17). It is (17)'s optimum iff every block passes the KKT test for isotonic regression on
    a partial order: no upper subset of the block (closed under the block's own edges) has w (t - mean)
    summing above 0 (equivalently, nonnegative multipliers on the block's edges balance w (x - t) at each
    cell). `_violations` finds the worst such subset of every block exactly; a block that has one is
    split in the sequence, the rest of the block first (the subset is upper within the block, so the
    sequence stays a linear extension), and PAV pools again. Returns the solution (m x n) and the rounds
    run; None for the solution if the rounds did not settle it.
    """
    from scipy.optimize import isotonic_regression

    m, n = problem.t.shape
    t, w = problem.t.ravel(), problem.w.ravel()
    h, k = np.divmod(np.arange(m * n), n)
    extension = np.lexsort((k + h, k - h))
    order = extension[np.argsort(guess.ravel()[extension], kind="stable")]
    floor = float(np.abs(t).max()) * problem.w
    ends = problem.starts[1:] - 1  # merged row j's last diagonal cell is (j, ends[j]), followed by (j + 1, ends[j] + 1)
    x = np.empty(m * n)
    label = np.empty(m * n, dtype=np.intp)
    # Blocks that passed the test (as start * (m n + 1) + end in the sequence), in the round they did, and
    # the round in which each place of the sequence last changed its cell.
    passed, passed_in = np.empty(0, dtype=np.int64), np.empty(0, dtype=np.intp)
    changed = np.zeros(m * n, dtype=np.intp)
    for r in range(1, rounds + 1):
        fit = isotonic_regression(t[order], weights=w[order])
        block = np.repeat(np.arange(fit.blocks.size - 1), np.diff(fit.blocks))
        x[order] = fit.x
        label[order] = block
        # A block of the same places as one that passed, none of them changed since, passes again: the
        # test runs on the rows of the others.
        code = fit.blocks[:-1] * (m * n + 1) + fit.blocks[1:]
        at = np.searchsorted(passed, code).clip(max=max(passed.size - 1, 0))
        known = (passed[at] == code) if passed.size else np.zeros(code.size, dtype=bool)
        fresh = ~known | (np.maximum.reduceat(changed, fit.blocks[:-1]) >= passed_in[at] if passed.size else True)
        gain = w * (t - x)
        gain[~fresh[label]] = 0.0
        rows = np.flatnonzero(fresh[label].reshape(m, n).any(axis=1))
        if rows.size == 0:  # not seen: a failed block always changes the sequence (its subset is no suffix)
            return x.reshape(m, n), r
        lo, hi = int(rows[0]), int(rows[-1]) + 1
        upper = _violations(label.reshape(m, n)[lo:hi], gain.reshape(m, n)[lo:hi], floor[lo:hi], ends[lo:hi - 1])
        if upper is None:
            return x.reshape(m, n), r
        failed = np.zeros(m * n, dtype=bool)
        failed.reshape(m, n)[lo:hi] = upper
        new = fresh & ~(np.bincount(label, weights=failed, minlength=code.size) > 0)
        passed, first = np.unique(np.concatenate([code[new], passed]), return_index=True)
        passed_in = np.concatenate([np.full(int(new.sum()), r), passed_in])[first]
        reordered = order[np.argsort(2 * block + failed[order], kind="stable")]
        changed[reordered != order] = r
        order = reordered
    return None, rounds


def _violations(label: np.ndarray, gain: np.ndarray, floor: np.ndarray, ends: np.ndarray) -> np.ndarray | None:
    """The cells of each block's upper subset of largest total gain, for the blocks where it exceeds the
    rounding (a mask, m x n), or None where no block has one.

    Args:
        label: (m, n) block of each cell of a merged problem; each block convex in (17)'s order.
        gain: (m, n) gains, w (t - mean of the block).
        floor: (m, n) w max |t|, the scale of the rounding of the means.
        ends: merged row j's last diagonal cell is (j, ends[j]), followed by (j + 1, ends[j] + 1).

    A convex block meets each row in one run of columns, so an upper subset of it takes a suffix c_j..
    of each of its rows; the block's own edges between rows j - 1 and j only ask c_{j-1} <= max(c_j, lo)
    where c_j <= hi ([lo, hi] the columns both rows of the block share) and, for a diagonal edge
    (j - 1, e) -> (j, e + 1) inside the block, c_{j-1} > e where c_j > e + 1. The best subset is then a
    dynamic programme over the rows, run for all blocks at once: a block's runs in consecutive rows form
    chains (no edge of the block joins two chains), and the states of row j are each run's columns
    ("from here on") and one state "none" after them, laid end to end.
    """
    m, n = gain.shape
    change = np.ones((m, n), dtype=bool)
    change[:, 1:] = label[:, 1:] != label[:, :-1]
    run_row, run_first = np.nonzero(change)  # the runs of equal labels along the rows, row-major
    runs = run_row.size
    run_last = np.append(run_first[1:], n) - 1
    run_last[np.append(run_row[1:] != run_row[:-1], True)] = n - 1
    row_runs = np.searchsorted(run_row, np.arange(m + 1))
    rank = np.arange(runs) - row_runs[run_row]  # a run's place in its row
    run_label = label[run_row, run_first]
    by_label = np.lexsort((run_row, run_label))
    linked = ((run_label[by_label[1:]] == run_label[by_label[:-1]])
              & (run_row[by_label[1:]] == run_row[by_label[:-1]] + 1))
    pred = np.full(runs, -1)  # the run of the same block in the row before
    pred[by_label[1:][linked]] = by_label[:-1][linked]
    chain = np.empty(runs, dtype=np.intp)
    chain[by_label] = np.cumsum(np.concatenate([[True], ~linked])) - 1
    last = np.ones(runs, dtype=bool)  # the last run of its chain
    last[pred[pred >= 0]] = False
    # States: row j's n + (its runs) states start at offset[j]; state `states` is "nothing before".
    offset = np.concatenate([[0], np.cumsum(n + np.diff(row_runs))])
    states = int(offset[-1])
    cell_run = np.repeat(np.arange(runs), run_last - run_first + 1)
    cols = np.tile(np.arange(n), m)
    cell_state = offset[np.repeat(np.arange(m), n)] + cols + rank[cell_run]
    none_state = offset[run_row] + run_last + 1 + rank
    state_run = np.empty(states, dtype=np.intp)
    state_run[cell_state] = cell_run
    state_run[none_state] = np.arange(runs)
    state_col = np.empty(states, dtype=np.intp)
    state_col[cell_state] = cols
    state_col[none_state] = run_last + 1
    # A row's gain from column k to its run's end.
    suffix = np.append(np.cumsum(gain[:, ::-1], axis=1)[:, ::-1].ravel(), 0.0)
    value = np.zeros(states)
    value[cell_state] = suffix[:-1] - suffix[np.where(run_last + 1 < n, run_row * n + run_last + 1, m * n)][cell_run]
    # The states of the row before that a state may follow: its run's states up to `limit`.
    r, p = state_run, pred[state_run]
    lo = np.maximum(run_first[r], run_first[p])
    hi = np.minimum(run_last[r], run_last[p])
    limit = np.where((lo <= hi) & (state_col <= hi), np.maximum(state_col, lo), run_last[p] + 1)
    at = np.where(p >= 0, offset[run_row[p]] + limit + rank[p], states)
    diagonal = {}
    for j in range(1, m):
        e = int(ends[j - 1])
        if e + 1 < n:
            r = cell_run[j * n + e + 1]
            p = pred[r]
            if p >= 0 and run_first[p] <= e <= run_last[p]:
                # c_{j-1} > e where c_j > e + 1: a prefix maximum of row j - 1's run from column e + 1 on
                start = offset[j - 1] + e + 1 + rank[p]
                targets = np.arange(cell_state[j * n + e + 1] + 1, none_state[r] + 1)
                diagonal[j] = (start, none_state[p] + 1, targets, at[targets] - start)
    best = np.zeros(states + 1)  # prefix maxima within runs, and the states that reach them
    best_at = np.full(states + 1, -1, dtype=np.intp)
    f = np.empty(states)
    followed = {}  # the diagonal's targets: the state of the row before each follows
    place = np.empty(states, dtype=np.intp)
    run_key = rank[state_run] * (n + runs + 1)
    count = np.arange(n + runs + 1)
    bounds = offset.tolist()
    for j in range(m):
        a, b = bounds[j], bounds[j + 1]
        np.add(value[a:b], best.take(at[a:b]), out=f[a:b])
        if j in diagonal:
            start, stop, targets, k = diagonal[j]
            sub = f[start:stop]
            top = np.maximum.accumulate(sub)
            reach = np.maximum.accumulate(np.where(sub == top, np.arange(sub.size), 0))
            f[targets] = value[targets] + top[k]
            followed[j] = start + reach[k]
        # prefix maxima within each run by ranks (exact; ties go to the later state, the smaller subset)
        order = np.argsort(f[a:b], kind="stable")
        key = place[a:b]
        key[order] = count[:b - a]
        key += run_key[a:b]
        np.maximum.accumulate(key, out=key)
        key -= run_key[a:b]
        arg = order.take(key)
        arg += a
        f.take(arg, out=best[a:b])
        best_at[a:b] = arg
    ends_of = np.flatnonzero(last)
    chain_index = np.empty(ends_of.size, dtype=np.intp)
    chain_index[chain[ends_of]] = np.arange(ends_of.size)
    cell_chain = chain_index[chain[cell_run]]
    scale = np.bincount(cell_chain, weights=(np.abs(gain) + floor).ravel(), minlength=ends_of.size)
    bad = best[none_state[ends_of]] > _ROUNDING * scale
    if not bad.any():
        return None
    back = best_at[at]  # the state of the row before that each state follows
    for j, states_before in followed.items():
        back[diagonal[j][2]] = states_before
    choice = np.full(runs, -1, dtype=np.intp)  # each run's chosen state
    choice[ends_of] = best_at[none_state[ends_of]]
    for j in range(m - 1, 0, -1):
        here = np.arange(row_runs[j], row_runs[j + 1])
        here = here[pred[here] >= 0]
        choice[pred[here]] = back[choice[here]]
    upper = (cols >= state_col[choice][cell_run]) & bad[cell_chain]
    return upper.reshape(m, n)


def _peel(x: np.ndarray, problem: _Problem, margin: float, depth: int | None = None) -> np.ndarray | None:
    """Where a diagonal constraint between a merged run (two rows or more) and the next merged row binds
    (within margin) in x, the merged problem's solution, the first rows of the merged rows with the runs
    on both sides of it split into single rows (with `depth`, only the `depth` rows of each run nearest
    the step); None where none binds (x is then (17)'s optimum, module docstring).

    Without `depth` (this module's solver) a binding run is split whole: the runs that bind have many
    distinct rows in the optimum, and split in doubling steps instead (one row, then two, four, ...)
    they cost this solver more re-solves than they save rows (on the instances recorded from a DBW run
    at n = 128, 72 sweeps and 5 rounds a solve against 172 and 13, 39 ms against 54 to 66; bench_scale's
    DBW at n = 256, 44 ms an update against 83). The compiled solver (`_eq17_exact`), whose re-solves
    are cheap, splits off 4 rows (`depth`) first, then where its KKT test names rows, and whole runs only
    where the test names none.
    """
    ends = problem.starts[1:] - 1  # the diagonal's step from merged row j to j + 1: ends[j] -> ends[j] + 1
    d = x[problem.diag_rows, problem.diag_cols]
    binds = np.flatnonzero(d[ends + 1] - d[ends] <= margin)
    split = np.union1d(binds, binds + 1)  # the merged rows on both sides of each binding step
    split = split[problem.sizes[split] > 1]
    if split.size == 0:
        return None
    if depth is None:
        rows = [np.arange(problem.starts[j], problem.starts[j] + problem.sizes[j]) for j in split.tolist()]
    else:
        before = np.intersect1d(split, binds)  # runs whose last rows meet a binding step
        after = np.intersect1d(split, binds + 1)  # runs whose first rows do
        rows = [problem.starts[j] + np.arange(max(problem.sizes[j] - depth, 1), problem.sizes[j])
                for j in before.tolist()]
        rows += [problem.starts[j] + np.arange(1, min(depth, problem.sizes[j] - 1) + 1) for j in after.tolist()]
    return np.union1d(problem.starts, np.concatenate(rows))
