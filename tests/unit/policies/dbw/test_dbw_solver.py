"""The structured solver of DBW's problem (17) (PAV + Dykstra + the exact partition, `_isotonic`) against cvxpy,
the reference.

The reference is cvxpy's Clarabel with tightened tolerances: at its defaults Clarabel stops about 1e-5
to 1e-3 (relative to max |x|) from the optimum on pairs that carry only the 1e-3 prior weight, which is
the size of the differences this suite must resolve.

tests/data/dbw_eq17_instances.npz holds (weights, targets) that DBW really solved: the default job
(`load_job(None)`) run with `DBW()`, captured from `IterationTimeEstimator.targets()` at the 2nd, 6th,
13th, 21st and 34th of its 34 solves (26 to 2,159 samples; the run used Clarabel, then the default).
tests/data/dbw_eq17_scattered.npz holds instances recorded from DBW runs of bench_scale's job, 60 updates
at n = 32 and 64 (`bench_dbw_solver.recorded_instances`): of each run's 24 solves, the three a cold solve
took the most sweeps on (at n = 32 the 3rd, 4th and 21st: 160, 196 and 73 sweeps; at n = 64 the 18th,
22nd and 24th: 418, 755 and 391; before Anderson's safeguard was relaxed), keys weights_<n>_<j> and targets_<n>_<j>. Early in a run k_t varies
and scattered rows are sampled, which the synthetic `dbw_instance` does not reproduce.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from autosync.policies.dbw import _isotonic as isotonic
from autosync.policies.dbw._eq17 import Problem, isotone_majorant, peel, row_runs, transposed, violation
from autosync.policies.dbw._isotonic import DEFAULT_SWEEPS, PythonEq17Solver, isotonic_rows
from autosync.policies.dbw._isotonic_partition import _violations, partition
from autosync.policies.dbw._time import EMPTY_PAIR_WEIGHT, IterationTimeEstimator, _compiled_problem

INSTANCES = Path(__file__).resolve().parents[3] / "data" / "dbw_eq17_instances.npz"
SCATTERED = Path(__file__).resolve().parents[3] / "data" / "dbw_eq17_scattered.npz"
AGREE = 1e-4  # relative to max |x|


def reference(weights: np.ndarray, targets: np.ndarray) -> np.ndarray:
    problem, x, w, b = _compiled_problem(targets.shape[0])
    root = np.sqrt(weights)
    w.value = root
    b.value = root * targets
    problem.solve(solver="CLARABEL", warm_start=False, tol_gap_abs=1e-12, tol_gap_rel=1e-12, tol_feas=1e-12)
    return np.asarray(x.value)


def relative_difference(x: np.ndarray, ref: np.ndarray) -> float:
    return float(np.abs(x - ref).max() / max(np.abs(ref).max(), 1e-12))


def estimator_targets(counts: np.ndarray, means: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The (weights, targets) `IterationTimeEstimator` builds from per-pair counts and means."""
    est = IterationTimeEstimator(counts.shape[0])
    est.count, est.total = counts, counts * means
    return est.targets()


def noisy_means(rng: np.random.Generator, n: int) -> np.ndarray:
    """Sample means noisy around a matrix that satisfies (17) (small or large noise)."""
    k = np.arange(1, n + 1)
    truth = np.log1p(k)[None, :] + 0.1 * (n - k[:, None]) / n
    return truth + rng.normal(scale=rng.choice([0.05, 0.5]), size=(n, n))


def dense_instance(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Every pair sampled: random counts and means."""
    return rng.integers(1, 30, size=(n, n)).astype(float), noisy_means(rng, n)


def dbw_instance(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """DBW's pattern: the rows h that k_t visited (h = n always: k_0 = n) hold the first ranks, as many as
    arrived before the version was dropped; every other pair has the prior (weight 1e-3, column means)."""
    counts = np.zeros((n, n))
    visited = rng.uniform(size=n) < rng.choice([0.1, 0.3, 0.7])
    visited[-1] = True
    for h in np.flatnonzero(visited):
        ranks = n if h == n - 1 else int(rng.integers(1, n + 1))
        counts[h, :ranks] = rng.integers(1, 30, size=ranks)
    return estimator_targets(counts, noisy_means(rng, n))


def scattered_instance(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Half the pairs sampled at random places, random targets on the others too: harder than DBW's data."""
    counts = rng.integers(1, 30, size=(n, n)).astype(float)
    return np.where(rng.uniform(size=(n, n)) < 0.5, EMPTY_PAIR_WEIGHT, counts), noisy_means(rng, n)


def pav_reference(y: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Textbook sequential pool-adjacent-violators."""
    values: list[float] = []
    weights: list[float] = []
    sizes: list[int] = []
    for yi, wi in zip(y, w):
        values.append(yi)
        weights.append(wi)
        sizes.append(1)
        while len(values) > 1 and values[-2] >= values[-1]:
            v, u, c = values.pop(), weights.pop(), sizes.pop()
            values[-1] = (values[-1] * weights[-1] + v * u) / (weights[-1] + u)
            weights[-1] += u
            sizes[-1] += c
    return np.repeat(values, sizes)


def test_vectorised_pav_is_pav():
    rng = np.random.default_rng(0)
    for trial in range(200):
        m, length = int(rng.integers(1, 5)), int(rng.integers(1, 30))
        y = rng.normal(size=(m, length)) + rng.uniform(0, 1) * np.arange(length)
        if trial % 3 == 0:
            y = np.round(y)  # ties
        w = np.where(rng.uniform(size=(m, length)) < 0.5, 1e-3, rng.integers(1, 30, size=(m, length)).astype(float))
        fitted = isotonic_rows(y, w)
        assert np.allclose(fitted, [pav_reference(a, b) for a, b in zip(y, w)], rtol=0, atol=1e-12)
        assert (np.diff(fitted, axis=1) >= 0).all()


def test_one_heavy_block_absorbs_a_long_light_run():
    """The case one-pair-per-round pooling takes L rounds on: a heavy outlier before many light entries."""
    y = np.linspace(1.0, 2.0, 500)
    w = np.full(500, 1e-3)
    y[3], w[3] = 50.0, 30.0
    assert np.allclose(isotonic_rows(y[None], w[None])[0], pav_reference(y, w), rtol=0, atol=1e-12)


@pytest.mark.parametrize("n", [1, 2, 3, 8, 16, 32])
def test_structured_solution_is_cvxpy_solution_on_random_instances(n):
    rng = np.random.default_rng(n)
    instances = [dense_instance(rng, n)] + [dbw_instance(rng, n) for _ in range(3)]
    for weights, targets in instances:
        result = PythonEq17Solver().solve(weights, targets)
        assert result.converged
        assert relative_difference(result.x, reference(weights, targets)) <= AGREE
        assert violation(result.x) <= 1e-9


def test_a_size_that_transposes_tile_by_tile():
    """n = 64 takes the tiled transposition of the column step; one DBW instance against the reference."""
    weights, targets = dbw_instance(np.random.default_rng(64), 64)
    result = PythonEq17Solver().solve(weights, targets)
    assert result.converged
    assert relative_difference(result.x, reference(weights, targets)) <= AGREE
    for n in (1, 5, 64, 96):
        a = np.arange(n * n, dtype=float).reshape(n, n)
        copy = transposed(a)
        assert np.array_equal(copy, a.T) and copy.flags.c_contiguous and not np.shares_memory(copy, a)


def test_merged_runs_give_the_optimum_whether_or_not_a_run_end_binds():
    """Runs of prior-only rows are solved as one row; where a diagonal constraint at a run's end binds,
    rows at that end are split off and the problem solved again. Both cases occur (seeds 5 and 1)."""
    binds = []
    for seed in (1, 5):
        weights, targets = dbw_instance(np.random.default_rng(seed), 8)
        problem = Problem(weights, targets, row_runs(weights, targets))
        assert problem.sizes.max() > 1
        x, rounds = partition(problem, isotone_majorant(problem.t, (problem.diag_rows, problem.diag_cols)))
        binds.append(peel(x, problem, 1e-12) is not None)
        result = PythonEq17Solver().solve(weights, targets)
        assert result.converged and violation(result.x) <= 1e-9
        assert relative_difference(result.x, reference(weights, targets)) <= AGREE
    assert binds == [False, True]


@pytest.mark.parametrize("n", [2, 3, 8, 16, 32])
def test_estimator_answer_is_cvxpy_answer_on_scattered_instances(n):
    """Where Dykstra may crawl the estimator falls back to cvxpy: either way its answer is (17)'s optimum."""
    weights, targets = scattered_instance(np.random.default_rng(100 + n), n)
    est = IterationTimeEstimator(n)
    est.targets = lambda: (weights, targets)  # type: ignore[method-assign]
    est.add(1, 1, 1.0)  # any sample: solve() refuses an empty estimator
    x = est.solve()
    assert est.failures == 0
    assert relative_difference(x, reference(weights, targets)) <= AGREE
    assert violation(x) <= 1e-9


def test_structured_solution_is_cvxpy_solution_on_instances_dbw_solved():
    data = np.load(INSTANCES)
    solver = PythonEq17Solver()  # warm-started from one instance to the next, as in a run
    for weights, targets in zip(data["weights"], data["targets"]):
        result = solver.solve(weights, targets)
        assert result.converged
        assert relative_difference(result.x, reference(weights, targets)) <= AGREE
        assert violation(result.x) <= 1e-9


def scattered_instances() -> list[tuple[np.ndarray, np.ndarray]]:
    data = np.load(SCATTERED)
    return [(data[key], data[key.replace("weights", "targets")]) for key in data.files if key.startswith("weights")]


def test_structured_solution_is_cvxpy_solution_on_scattered_rows_recorded_from_dbw_runs():
    for weights, targets in scattered_instances():
        result = PythonEq17Solver(max_sweeps=2000).solve(weights, targets)
        assert result.converged
        assert relative_difference(result.x, reference(weights, targets)) <= AGREE
        assert violation(result.x) <= 1e-9


def test_scattered_rows_recorded_from_dbw_runs_are_finished_exactly():
    """Dykstra crawls on these (73 to 755 sweeps to its tolerance); the partition finishes them after at
    most `DEFAULT_SWEEPS` sweeps, with no sweep cap reached and no fallback needed."""
    solver = PythonEq17Solver()
    for weights, targets in scattered_instances():
        result = solver.solve(weights, targets)
        assert result.converged and result.rounds >= 1
        assert result.sweeps <= 10 * DEFAULT_SWEEPS
        assert violation(result.x) == 0.0


def test_constraints_hold_exactly():
    rng = np.random.default_rng(7)
    for n in (2, 5, 16):
        weights, targets = scattered_instance(rng, n)
        x = PythonEq17Solver().solve(weights, targets).x
        assert (x[:, 1:] >= x[:, :-1]).all() and (x[:-1, :] >= x[1:, :]).all()
        assert (np.diff(np.diagonal(x)) >= 0).all()


def test_warm_start_gives_the_cold_answer():
    """A run's sequence of growing sample sets: each warm solve matches a solve from scratch."""
    rng = np.random.default_rng(3)
    n = 12
    est = IterationTimeEstimator(n)
    for _ in range(25):
        h = int(rng.integers(max(1, n // 2 - 2), n // 2 + 3))
        for i, t in enumerate(np.sort(0.3 + 0.7 * rng.exponential(size=n))):
            est.add(h, i + 1, float(t))
        warm = est.solve()
        cold = PythonEq17Solver().solve(*est.targets())
        assert cold.converged
        assert relative_difference(warm, cold.x) <= 1e-6
    assert est.fallbacks == 0 and est.failures == 0


def test_estimator_uses_the_structured_solver_and_keeps_cvxpy_selectable():
    data = np.load(INSTANCES)
    weights, targets = data["weights"][2], data["targets"][2]
    structured = IterationTimeEstimator(16)
    assert structured.solver == "structured"
    structured.targets = lambda: (weights, targets)  # type: ignore[method-assign]
    cvxpy = IterationTimeEstimator(16, solver="CLARABEL")
    cvxpy.targets = lambda: (weights, targets)  # type: ignore[method-assign]
    for est in (structured, cvxpy):
        est.add(1, 1, 1.0)  # any sample: solve() refuses an empty estimator
    # Clarabel's default tolerances: agreement to its own accuracy, not the tight reference's.
    assert relative_difference(structured.solve(), cvxpy.solve()) <= 1e-2
    assert structured._structured is not None and cvxpy._structured is None


def test_an_unsettled_partition_falls_back_to_cvxpy_and_is_counted(monkeypatch):
    data = np.load(INSTANCES)
    weights, targets = data["weights"][-1], data["targets"][-1]
    monkeypatch.setattr(isotonic, "partition", lambda problem, guess: (None, 1))
    est = IterationTimeEstimator(16)
    est._structured = PythonEq17Solver(max_sweeps=1, sweeps=1)
    est.targets = lambda: (weights, targets)  # type: ignore[method-assign]
    est.add(1, 1, 1.0)
    x = est.solve()
    assert est.fallbacks == 1 and est.failures == 0
    assert relative_difference(x, reference(weights, targets)) <= AGREE  # the fallback's tightened Clarabel


def test_isotone_majorant_is_the_least_feasible_point_above():
    x = np.array([[1.0, 0.5, 2.0], [1.5, 1.0, 0.0], [0.0, 3.0, 1.0]])
    u = isotone_majorant(x)
    assert violation(u) == 0.0 and (u >= x).all()
    feasible = np.array([[1.0, 2.0, 3.0], [0.5, 1.5, 2.5], [0.0, 1.0, 2.0]])
    assert isotone_majorant(feasible) is feasible


@pytest.mark.parametrize("weights,targets,message", [
    (np.ones((2, 3)), np.ones((2, 3)), "n x n"),
    (np.ones((2, 2)), np.ones((3, 3)), "n x n"),
    (np.array([[1.0, 0.0], [1.0, 1.0]]), np.ones((2, 2)), "weights must be finite and > 0"),
    (np.ones((2, 2)), np.array([[1.0, np.nan], [1.0, 1.0]]), "targets must be finite"),
])
def test_bad_inputs_are_refused_with_the_rule(weights, targets, message):
    with pytest.raises(ValueError, match=message):
        PythonEq17Solver().solve(weights, targets)


@pytest.mark.parametrize("kwargs,message", [({"tol": 0.0}, "tol must be > 0"), ({"max_sweeps": 0}, "max_sweeps")])
def test_bad_settings_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        PythonEq17Solver(**kwargs)


def brute_force_best_upper_sets(label, gain, ends):
    """Each block's largest sum of gain over its upper subsets (closed under the block's own edges of the
    merged grid: rows, columns and the diagonal steps (j, ends[j]) -> (j + 1, ends[j] + 1)), by enumeration."""
    m, n = label.shape
    edges = [((j, k), (j, k + 1)) for j in range(m) for k in range(n - 1)]
    edges += [((j + 1, k), (j, k)) for j in range(m - 1) for k in range(n)]
    edges += [((j, ends[j]), (j + 1, ends[j] + 1)) for j in range(m - 1) if ends[j] + 1 < n]
    best = {}
    for b in np.unique(label):
        cells = [c for c in np.ndindex(m, n) if label[c] == b]
        inside = [(u, v) for u, v in edges if label[u] == b and label[v] == b]
        best[b] = 0.0
        for bits in range(1 << len(cells)):
            subset = {cells[i] for i in range(len(cells)) if bits >> i & 1}
            if all(v in subset for u, v in inside if u in subset):
                best[b] = max(best[b], sum(gain[c] for c in subset))
    return best


def test_violations_finds_each_blocks_best_upper_subset():
    """`_violations` (a dynamic programme over the rows) against enumeration on small merged grids, with
    the blocks PAV makes on a linear extension of the order (convex, as `partition` makes them)."""
    from scipy.optimize import isotonic_regression

    rng = np.random.default_rng(11)
    for _ in range(150):
        m, n = int(rng.integers(1, 4)), int(rng.integers(1, 5))
        starts = np.sort(rng.choice(np.arange(1, n), size=min(m - 1, n - 1), replace=False)) if m > 1 else []
        starts = np.concatenate([[0], starts]).astype(int)
        m = starts.size
        ends = starts[1:] - 1
        t = rng.normal(size=(m, n)).round(1)  # ties
        w = np.where(rng.uniform(size=(m, n)) < 0.5, 1e-3, rng.integers(1, 5, size=(m, n)).astype(float))
        h, k = np.divmod(np.arange(m * n), n)
        order = np.lexsort((k + h, k - h))
        fit = isotonic_regression(t.ravel()[order], weights=w.ravel()[order])
        label = np.empty(m * n, dtype=np.intp)
        label[order] = np.repeat(np.arange(fit.blocks.size - 1), np.diff(fit.blocks))
        x = np.empty(m * n)
        x[order] = fit.x
        label, gain = label.reshape(m, n), (w * (t - x.reshape(m, n)))
        best = brute_force_best_upper_sets(label, gain, ends)
        upper = _violations(label, gain, np.abs(t).max() * w, ends)
        violated = {b for b, v in best.items() if v > 1e-9}
        if upper is None:
            assert not violated
            continue
        for b in np.unique(label):
            chosen = upper & (label == b)
            if b in violated:
                assert gain[chosen].sum() == pytest.approx(best[b], abs=1e-9)
            else:
                assert not chosen.any()


def test_edge_cases_one_worker_ties_and_rows_all_alike():
    solver = PythonEq17Solver()
    result = solver.solve(np.array([[2.0]]), np.array([[3.5]]))
    assert result.converged and result.x.tolist() == [[3.5]]
    n = 6
    # every row alike (one merged row): the answer is the row's PAV, for every row
    w = np.tile(np.arange(1.0, n + 1), (n, 1))
    t = np.tile(np.array([3.0, 1.0, 2.0, 2.0, 5.0, 4.0]), (n, 1))
    result = PythonEq17Solver().solve(w, t)
    assert result.converged
    assert np.allclose(result.x, isotonic_rows(t[:1], w[:1]), rtol=0, atol=1e-12)
    # constant targets, ties everywhere: x = t
    result = PythonEq17Solver().solve(np.ones((n, n)), np.full((n, n), 2.0))
    assert result.converged and np.array_equal(result.x, np.full((n, n), 2.0))
    # targets on a coarse grid (many ties) with light pairs, against the reference
    rng = np.random.default_rng(4)
    t = rng.integers(0, 3, size=(n, n)).astype(float)
    w = np.where(rng.uniform(size=(n, n)) < 0.5, EMPTY_PAIR_WEIGHT, 1.0)
    result = PythonEq17Solver().solve(w, t)
    assert result.converged and violation(result.x) == 0.0
    assert relative_difference(result.x, reference(w, t)) <= AGREE


def test_partition_is_exact_from_a_poor_guess():
    """The partition needs only a feasible guess: from the targets' least isotone majorant (no sweep) it
    still reaches the optimum on the recorded scattered instances, with the KKT test passed."""
    for weights, targets in scattered_instances()[:2]:
        problem = Problem(weights, targets, np.arange(weights.shape[0]))
        x, rounds = partition(problem, isotone_majorant(targets))
        assert x is not None and violation(x) == 0.0
        assert relative_difference(x, reference(weights, targets)) <= AGREE
