"""DBW's problem (17), shared by its two solvers: the data checked, runs of equal rows merged, the result,
and the steps both take from a merged problem's optimum to (17)'s.

Problem (17) of the DBW paper (Xu, Neglia, Sebastianelli 2020), with per-pair weights w (sample counts)
and targets t (sample means):

    minimize  sum_{h,k} w[h,k] (x[h,k] - t[h,k])^2
    subject to  x[h,k] <= x[h,k+1]          (rows nondecreasing)
                x[h+1,k] <= x[h,k]          (columns nonincreasing)
                x[k,k] <= x[k+1,k+1]        (diagonal nondecreasing)

is the weighted projection of t onto the intersection of three convex cones: isotonic regression on a
partial order (a DAG on the grid). Its optimum is piecewise constant, each piece at its weighted mean of t.
Two solvers answer it: the compiled exact one (`_eq17_exact`, built by `pip install`) and the pure-Python
one (`_isotonic`, with `_isotonic_partition`) where it is not built. Both solve merged problems (`Problem`)
and reach (17)'s optimum through `peel`, and both answer with an `Eq17Result` whose constraints hold exactly
(`isotone_majorant`).

Runs of adjacent rows with equal weights and equal targets (in DBW's samples every row not sampled yet:
the 1e-3 prior and the column means) are solved as one row with their weights summed (`Problem`): that is
(17) restricted to x equal on each run, and its solution x_R is (17)'s optimum when every diagonal
constraint between a run and the row next to it holds strictly. Proof: averaging a feasible x over each
run's rows keeps every other constraint (a column's average over a run lies between the run's end values;
averaged rows stay nondecreasing, and so does the diagonal inside a run) and does not raise the objective
(the run's rows have one data, so by Jensen); if a feasible x did better than x_R, the average of
x_R + s (x - x_R) for a small s > 0 would be a point of the restricted problem better than x_R. The same
holds for any split of the runs into shorter runs. Where such a constraint binds, the runs on both sides
of it are split (`peel`) and the smaller merged problem is solved again, until none binds.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

# A block's violating upper set must gain more than this, relative to the block's sum of |w (t - mean)|
# and w max |t| (the rounding of the sums and of the mean), to be split off: a few thousand roundings.
# Also the margin, times max |t|, within which a diagonal constraint at a run's end counts as binding in
# an exact answer.
ROUNDING = 1e-13

@dataclass
class Eq17Result:
    """One solve of (17): the solution, whether it is optimal (within Dykstra's tolerance where its sweeps
    converged with no run's end binding; up to rounding where `partition` settled), the Dykstra sweeps
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


def row_runs(w: np.ndarray, t: np.ndarray) -> np.ndarray:
    """The first row of each run of adjacent rows with equal weights and equal targets (rows of DBW's data
    that carry only the prior are such runs)."""
    same = (w[1:] == w[:-1]).all(axis=1) & (t[1:] == t[:-1]).all(axis=1)
    return np.flatnonzero(np.concatenate([[True], ~same]))


def group_of_rows(starts: np.ndarray, n: int) -> np.ndarray:
    """The merged row of each of the n rows, given the first row of each merged row."""
    return np.repeat(np.arange(starts.size), np.diff(starts, append=n))


class Problem:
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
        self.diag_rows = group_of_rows(starts, n)
        self.diag_cols = np.arange(n)
        self.w_diag = self.w[self.diag_rows, self.diag_cols]

    @cached_property
    def w_t(self) -> np.ndarray:
        return transposed(self.w)

    @cached_property
    def neg_t_t(self) -> np.ndarray:
        neg = transposed(self.t)
        np.negative(neg, out=neg)
        return neg

def transposed(a: np.ndarray) -> np.ndarray:
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
            (k, k) for k < n when None (x square). A merged problem (`Problem`) has its own.
    """
    if diagonal is None:
        diagonal = (np.arange(x.shape[0]),) * 2
    if feasible(x, diagonal):
        return x
    x = x.copy()
    while not feasible(x, diagonal):
        rows = np.flatnonzero((x[:, 1:] < x[:, :-1]).any(axis=1))
        x[rows] = np.maximum.accumulate(x[rows], axis=1)
        for h in range(x.shape[0] - 2, -1, -1):
            np.maximum(x[h], x[h + 1], out=x[h])
        x[diagonal] = np.maximum.accumulate(x[diagonal])
    return x


def feasible(x: np.ndarray, diagonal: tuple[np.ndarray, np.ndarray]) -> bool:
    """violation(x) == 0, by comparisons alone, for the diagonal chain `diagonal` (`isotone_majorant`)."""
    d = x[diagonal]
    return not ((x[:, 1:] < x[:, :-1]).any() or (x[1:, :] > x[:-1, :]).any() or (d[1:] < d[:-1]).any())


def peel(x: np.ndarray, problem: Problem, margin: float, depth: int | None = None) -> np.ndarray | None:
    """Where a diagonal constraint between a merged run (two rows or more) and the next merged row binds
    (within margin) in x, the merged problem's solution, the first rows of the merged rows with the runs
    on both sides of it split into single rows (with `depth`, only the `depth` rows of each run nearest
    the step); None where none binds (x is then (17)'s optimum, module docstring).

    Without `depth` (the pure-Python solver, `_isotonic`) a binding run is split whole: the runs that bind
    have many distinct rows in the optimum, and split in doubling steps instead (one row, then two, four,
    ...) they cost that solver more re-solves than they save rows (measured: docs/contributing/benchmarks.md,
    "The pure-Python solver, measured"). The compiled solver (`_eq17_exact`), whose re-solves are cheap,
    splits where its KKT test names rows, 4 rows (`depth`) where the test of its first solve names none, and
    whole runs only where a later one names none.
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
