"""DBW's iteration-time estimator: the constrained least squares of eq. (17).

x[h, i] estimates E[T_{h,i}], the time from publishing w_t until the i-th gradient of w_t arrives when
the previous iteration waited for h gradients. Samples of every (h, i) are kept as a count and a sum
(the least-squares objective only needs those), including the arrivals of late, discarded gradients.
The three monotonicity families of (17) let pairs with few or no samples borrow strength from their
neighbours; T_k = x*[k, k] is the estimate DBW's rule (19) uses.

(17) is solved by a structured solver by default: the compiled exact recursive partitioning of
`_eq17_exact` where it is built (by `pip install`), else the pure-Python solver of `_isotonic`
(pool-adjacent-violators per row, column and diagonal, combined by Dykstra's alternating projections,
warm-started from the previous solve, finished exactly by the partitioning algorithm where the sweeps are
slow); or by cvxpy with a named conic solver ("CLARABEL", "OSQP", ...), the reference.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from autosync.policies.dbw._eq17_exact import COMPILED, CompiledEq17Solver, MergedSolution, RowTable
from autosync.policies.dbw._isotonic import PythonEq17Solver

# Weight of the prior that makes (17) strictly convex where a pair has no sample: a thousandth of one
# sample, so every sampled pair is still fitted by its samples as the paper's problem does.
EMPTY_PAIR_WEIGHT = 1e-3

# The `solver` value that selects the structured solver; any other value names a cvxpy solver.
STRUCTURED = "structured"
# The cvxpy solver that takes over when the structured solver does not converge, with tolerances tightened
# to the structured solver's accuracy: at its defaults Clarabel stops up to about 1e-3 (relative to max |x|)
# from the optimum on pairs that carry only the prior weight.
FALLBACK_SOLVER = "CLARABEL"
FALLBACK_OPTIONS = {"tol_gap_abs": 1e-10, "tol_gap_rel": 1e-10, "tol_feas": 1e-10}


def structured_solver() -> CompiledEq17Solver | PythonEq17Solver:
    """The structured solver of (17): the compiled exact partition where it is built, else the pure-Python one."""
    return CompiledEq17Solver() if COMPILED else PythonEq17Solver()


class IterationTimeEstimator:
    """Collects (h, i, time) samples and solves problem (17) for the n x n matrix of expected times.

    With solver="structured" (the default) each estimator keeps its own structured solver
    (`structured_solver`): the compiled `CompiledEq17Solver`, exact and stateless, or where it is not built an
    `PythonEq17Solver` warm-started from its previous solve (so a run's estimates depend only on that run's
    samples); a solve that does not converge is redone with cvxpy (counted in `fallbacks`). With a cvxpy
    solver name the cvxpy problem is built and compiled once per process and n (DPP parameters for the
    weights and targets) and re-solved with new data, never warm-started. If a solve fails the previous
    solution is kept, and before any solution exists the row-wise running maximum of the targets is used
    (counted in `failures`).

    Args:
        n_workers: n, the size of the matrix.
        solver: "structured", or the name of a cvxpy solver (e.g. "CLARABEL", "OSQP").
    """

    def __init__(self, n_workers: int, solver: str = STRUCTURED):
        self.n = n_workers
        self.solver = solver
        self.count = np.zeros((n_workers, n_workers))
        self.total = np.zeros((n_workers, n_workers))
        self.failures = 0
        self.fallbacks = 0
        self._structured = structured_solver() if solver == STRUCTURED else None
        self._sampled = np.zeros(n_workers, dtype=bool)  # the rows h - 1 that add() gave a sample
        self._solution: np.ndarray | None = None
        self._merged: MergedSolution | None = None  # the last solve's answer where `times` kept it merged

    @property
    def solution(self) -> np.ndarray | None:
        """The last solve's x (n x n), None before any."""
        if self._solution is None and self._merged is not None:
            self._solution = self._merged.dense()
        return self._solution

    @solution.setter
    def solution(self, x: np.ndarray | None) -> None:
        self._solution, self._merged = x, None

    def add(self, h: int, i: int, seconds: float) -> None:
        """A sample of T_{h,i}: h gradients were awaited last iteration, this is the i-th arrival (1-based)."""
        self.count[h - 1, i - 1] += 1
        self.total[h - 1, i - 1] += seconds
        self._sampled[h - 1] = True

    @property
    def n_samples(self) -> int:
        return int(self.count.sum())

    def targets(self) -> tuple[np.ndarray, np.ndarray]:
        """Per-pair weights (sample counts, with a small prior for empty pairs) and targets (means).

        Only the rows with a sample are computed pair by pair (`_rows`); every other row is the prior, filled
        at once.
        """
        n = self.n
        rows = np.flatnonzero(self.count.any(axis=1))
        weights_rows, targets_rows, prior = self._rows(rows)
        targets = np.empty((n, n))
        targets[...] = prior
        targets[rows] = targets_rows
        weights = np.full((n, n), EMPTY_PAIR_WEIGHT)
        weights[rows] = weights_rows
        return weights, targets

    def table(self) -> RowTable:
        """`targets()` as its distinct rows (`_eq17_exact.RowTable`): the rows that `add` gave a sample, then
        the prior row, which every other row copies."""
        rows = np.flatnonzero(self._sampled)
        weights_rows, targets_rows, prior = self._rows(rows)
        source = np.full(self.n, rows.size)
        source[rows] = np.arange(rows.size)
        return RowTable(np.vstack([weights_rows, np.full((1, self.n), EMPTY_PAIR_WEIGHT)]),
                        np.vstack([targets_rows, prior[None, :]]), source)

    def _rows(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The weights and targets of the given rows (those with a sample), and the prior row (targets) that
        every other row has.

        The values are bit for bit those of the dense computation over all n rows: a column's sum over the
        sampled rows is the sum over all rows (numpy sums axis 0 row by row, and the others add 0.0), and the
        overall mean (of all pairs, summed pairwise as before) is only computed where a column has no sample.
        """
        count, total = self.count[rows], self.total[rows]
        sampled = count > 0
        means = np.divide(total, count, out=np.zeros_like(total), where=sampled)
        per_column = sampled.sum(axis=0)
        prior = means.sum(axis=0)
        empty = per_column == 0
        if empty.any():
            # The mean over the sampled pairs of each column (same rank, any h), as np.nanmean computes it.
            overall = self.total.sum() / max(self.count.sum(), 1)
            prior = np.divide(prior, per_column, out=np.full(self.n, overall), where=~empty)
        else:
            prior = prior / per_column
        return (np.where(sampled, count, EMPTY_PAIR_WEIGHT), np.where(sampled, means, prior[None, :]), prior)

    def solve(self) -> np.ndarray:
        """Solve (17) on the samples so far; returns x (n x n), x[h-1, k-1] ~ E[T_{h,k}]."""
        if self.count.sum() == 0:
            raise ValueError("no iteration-time sample yet")
        weights, targets = self.targets()
        try:
            if self._structured is not None:
                x = self._solve_structured(weights, targets)
            else:
                x = self._solve_cvxpy(weights, targets, self.solver)
        except Exception:  # solver failure: keep the last good estimate rather than stop training
            x = None
        if x is None:
            self.failures += 1
            x = self.solution if self.solution is not None else np.maximum.accumulate(targets, axis=1)
        self.solution = x
        return x

    def times(self) -> np.ndarray:
        """T_k = x*[k, k] for k = 1..n (eq. 17's diagonal).

        With the compiled solver, (17) is solved on the distinct rows (`table`, `CompiledEq17Solver.solve_rows`)
        and the diagonal read from the merged rows: bit for bit `solve()`'s diagonal, without building,
        checking or scanning an n x n array (DBW needs only T_k; `solution` lays the answer out on the grid
        when read).
        Where that solve fails, `solve()` is tried and its failures counted.
        """
        if isinstance(self._structured, CompiledEq17Solver) and self._sampled.any():
            try:
                merged = self._structured.solve_rows(self.table())
            except Exception:  # counted by solve() below, which keeps the last estimate if it fails too
                merged = None
            if merged is not None:
                self._solution, self._merged = None, merged
                return merged.diagonal()
        return np.diag(self.solve()).copy()

    def _solve_structured(self, weights: np.ndarray, targets: np.ndarray) -> np.ndarray | None:
        result = self._structured.solve(weights, targets)
        if result.converged:
            return result.x
        # Not seen on DBW's data: the exact partition did not settle (`_isotonic_partition.partition`), twice. The
        # reference gives this solve's answer, and the structured solver keeps its (dual feasible)
        # multipliers as the next warm start.
        self.fallbacks += 1
        return self._solve_cvxpy(weights, targets, FALLBACK_SOLVER, **FALLBACK_OPTIONS)

    def _solve_cvxpy(self, weights: np.ndarray, targets: np.ndarray, solver: str,
                     **options: float) -> np.ndarray | None:
        problem, x, w, b = _compiled_problem(self.n)
        root = np.sqrt(weights)
        w.value = root
        b.value = root * targets
        problem.solve(solver=solver, warm_start=False, **options)  # runs must not depend on earlier runs
        if problem.status not in ("optimal", "optimal_inaccurate") or x.value is None:
            return None
        return np.asarray(x.value)


@lru_cache(maxsize=8)
def _compiled_problem(n: int):
    """Problem (17) for n workers with DPP parameters, built once per process and re-solved with new data."""
    import cvxpy as cp

    x = cp.Variable((n, n))
    w = cp.Parameter((n, n), nonneg=True)
    b = cp.Parameter((n, n))
    constraints = []
    if n > 1:
        diag = cp.diag(x)
        constraints = [x[:, :-1] <= x[:, 1:],  # more arrivals take longer: x[h,k] <= x[h,k+1]
                       x[1:, :] <= x[:-1, :],  # more idle workers are faster: x[h+1,k] <= x[h,k]
                       diag[:-1] <= diag[1:]]  # waiting for fewer is faster: x[k,k] <= x[k+1,k+1]
    problem = cp.Problem(cp.Minimize(cp.sum_squares(cp.multiply(w, x) - b)), constraints)
    return problem, x, w, b
