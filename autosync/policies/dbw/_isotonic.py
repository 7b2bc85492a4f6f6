"""The pure-Python solver of DBW's problem (17) (`_eq17`): Dykstra's alternating projections, each family
by pool-adjacent-violators, finished exactly by the partitioning algorithm (`_isotonic_partition`).

DBW uses the compiled exact solver (`_eq17_exact`) where `pip install` built it, and this one where it is
not. Each of (17)'s three cones alone is a set of independent chains (the n rows, the n columns, the
diagonal), and the weighted projection onto a chain is the weighted isotonic regression, solved exactly by
pool-adjacent-violators (PAV; `isotonic_rows`, one call of scipy's linear-time PAV on a family's chains laid
end to end). The intersection is reached by Dykstra's alternating projections in the weighted norm (Boyle
and Dykstra 1986; for isotonic regression in several variables, Dykstra and Robertson 1982), which converges
to the exact projection, not just to a feasible point.

Dykstra's method is block-coordinate ascent on the dual problem: its increments p_i are scaled dual
variables. They are kept as multipliers lam_i = w * p_i, which do not depend on the weights (the normal
cone of a family is weight-free), so a re-solve after new samples starts from the previous dual point,
still dual feasible (`PythonEq17Solver`). The sweep z -> G(z) on the increments is a fixed-point iteration;
Anderson acceleration extrapolates it from the last few residuals, and a safeguard falls back to the plain
sweep whenever an extrapolated point does much worse (twice the residual) than the point it came from.

Dykstra converges fast where DBW's samples put it (whole rows sampled, the prior elsewhere) and crawls where
a light pair (the 1e-3 prior) sits between heavy ones in both its row and its column or on the diagonal,
which scattered samples produce: a flow of multiplier through such a pair grows by little per sweep. So
after at most `DEFAULT_SWEEPS` sweeps the iterate is taken as a guess of the optimum's order and the
partition finishes the solve exactly (`_isotonic_partition.partition`). Where Dykstra meets its tolerance
within those sweeps and no run's end binds its answer is kept: within tol * max |t| of the optimum.
`Eq17Result.converged` is False only where the partition does not settle within its rounds, twice (the
second time after up to `max_sweeps` more sweeps).

The merged runs of equal rows (`_eq17.Problem`): where a diagonal constraint at a run's end binds (within
100 tolerances) in Dykstra's answer, it is checked on the unmerged problem, started from the merged
multipliers (a run's column multiplier plus diagonal multiplier shared equally by its rows, the diagonal's
kept on its own cell), which is (17)'s optimal dual point when the merged optimum is (17)'s, so that one
sweep confirms it (and the partition finishes the unmerged problem where the sweeps do not). Where one
binds in the partition's exact answer, the runs on both sides are split into single rows (`_eq17.peel`)
and the smaller merged problem is solved again (sweeps from the multipliers, then the partition).

What it costs, measured, is in benchmarks/README.md (bench_dbw_solver) and on the docs site
(contributing/benchmarks.md, "The pure-Python solver, measured").
"""

from __future__ import annotations

import numpy as np

from autosync.policies.dbw._eq17 import ROUNDING, Eq17Result, Problem, checked_instance, group_of_rows, \
    isotone_majorant, peel, row_runs, transposed
from autosync.policies.dbw._isotonic_partition import partition

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


class PythonEq17Solver:
    """Problem (17): Dykstra's sweeps (PAV per family, warm-started across solves), whose answer stands where
    they meet the tolerance within `sweeps` and no run's end binds; elsewhere they guess the solution's
    order and the partitioning algorithm (`partition`) finishes it exactly.

    Runs of adjacent rows with the same weights and targets are solved as one row (`Problem`); where a
    diagonal constraint at a run's end binds, the run is split into single rows and the smaller merged
    problem solved again (`peel`, module docstring).

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
        Dykstra's tolerance (its answer stood) or up to rounding (the KKT conditions checked by `partition`).
        """
        w, t = checked_instance(weights, targets)
        n = t.shape[0]
        if self._merged is not None and self._merged[2].size != n:
            self.reset()
        starts = row_runs(w, t)
        problem = Problem(w, t, starts)
        x, converged, sweeps = self._dykstra(problem, self.sweeps)
        scale = max(float(np.abs(t).max()), np.finfo(float).tiny)
        if converged and problem.sizes.size < n and peel(x, problem, _SLACK * self.tol * scale) is not None:
            # A run's end binds (within _SLACK tolerances) in Dykstra's answer: check it on the unmerged
            # problem, from the merged multipliers (module docstring; one sweep where it is the optimum).
            problem = Problem(w, t, np.arange(n))
            x, converged, more = self._dykstra(problem, self.sweeps)
            sweeps += more
        if converged:
            # Dykstra met the tolerance and no run's end binds: its answer.
            return Eq17Result(x=np.repeat(x, problem.sizes, axis=0), converged=True, sweeps=sweeps)
        rounds = 0
        while True:
            exact, more = partition(problem, x)
            rounds += more
            if exact is None:
                # The partition did not settle (a few times on the recorded instances at n = 512): sweep
                # on, and try once more from the better guess.
                x, _, extra = self._dykstra(problem, self.max_sweeps)
                sweeps += extra
                exact, more = partition(problem, x)
                rounds += more
                if exact is None:
                    return Eq17Result(x=np.repeat(x, problem.sizes, axis=0), converged=False, sweeps=sweeps,
                                      rounds=rounds)
            peeled = peel(exact, problem, ROUNDING * scale)
            if peeled is None:
                return Eq17Result(x=np.repeat(exact, problem.sizes, axis=0), converged=True, sweeps=sweeps,
                                  rounds=rounds)
            # A diagonal constraint at a merged run's end binds: solve again with rows at that end on their
            # own, guessing from sweeps warm-started from the last multipliers.
            problem = Problem(w, t, peeled)
            x, _, extra = self._dykstra(problem, self.sweeps)
            sweeps += extra

    def _dykstra(self, problem: Problem, max_sweeps: int) -> tuple[np.ndarray, bool, int]:
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
            z = np.concatenate([(transposed(lam_col) / problem.w_t).ravel(), self._merged[2] / problem.w_diag])
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
        x = transposed(fitted_cols_t)
        np.negative(x, out=x)
        x[problem.diag_rows, problem.diag_cols] = fitted_diag
        self._starts = problem.starts
        self._merged = ((y_rows - x_rows) * problem.w, transposed(g[:mn].reshape(n, m) * problem.w_t),
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
    combined[group_of_rows(old, n), cols] += lam_diag
    lam = _regroup(combined, old, new)
    lam[group_of_rows(new, n), cols] -= lam_diag
    return lam


def _sweep(z: np.ndarray, problem: Problem):
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
    y_rows = transposed(p_col_t)
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

