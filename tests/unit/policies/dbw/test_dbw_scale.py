"""Issue #52: DBW's decisions are unchanged by the work on its per-update cost at scale.

tests/data/dbw_trace_n1024.json is the golden trace, recorded before those changes (`tests/dbw_trace.py
--workers 1024 --updates 60 --write`): k_t after each of 60 updates of bench_scale's job (seed 0) at
n = 1,024 for DBW and B-DBW. The run takes about half a minute on two loaded cores.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests import dbw_trace

GOLDEN = Path(__file__).resolve().parents[3] / "data" / "dbw_trace_n1024.json"


@pytest.mark.slow  # two runs at 1,024 workers: about 5 s on 2 cores
def test_dbw_and_bdbw_decisions_at_1024_workers_match_the_recorded_trace():
    golden = json.loads(GOLDEN.read_text())
    assert golden["workers"] == 1024
    for policy in ("dbw", "bdbw"):
        assert dbw_trace.decisions(policy, golden["workers"], golden["updates"]) == golden[policy]["k"], policy


def dbw_problem(n: int, iterations: int, seed: int):
    """(weights, targets) as DBW's estimator builds them after `iterations` iterations at n workers: each
    iteration's n sorted shifted-exponential arrivals are samples of T_{k,i}, k drifting from n towards 0.6 n
    with jitter (benchmarks/bench_dbw_solver.py's `Samples`), so a few scattered rows are sampled and long runs
    of rows carry only the prior."""
    import numpy as np

    from autosync.policies.dbw._time import IterationTimeEstimator

    rng = np.random.default_rng(seed)
    est = IterationTimeEstimator(n)
    k, center = n, max(1, round(0.6 * n))
    for _ in range(iterations):
        times = np.sort(0.3 + 0.7 * rng.exponential(size=n))
        est.count[k - 1] += 1
        est.total[k - 1] += times
        drift = int(np.sign(center - k)) if abs(center - k) > 3 else 0
        k = int(np.clip(k + drift * max(1, n // 64) + rng.integers(-2, 3), 1, n))
    return est.targets()


# n = 4,096 takes about 8 s, most of it the unmerged reference (n^2 cells): in the full suite, not the quick run
@pytest.mark.parametrize("n, iterations, seed", [(1024, 30, 0), (1024, 12, 1),
                                                 pytest.param(4096, 20, 2, marks=pytest.mark.slow)])
def test_the_solver_at_1024_and_4096_workers_equals_the_unmerged_reference(n, iterations, seed):
    """The compiled solver (runs of equal rows merged, binding runs peeled) against the same partition on the
    unmerged grid, the slow reference, at n = 1,024 and 4,096."""
    import numpy as np

    from autosync.policies.dbw import _eq17_exact as exact
    from autosync.policies.dbw._eq17 import Problem, isotone_majorant

    if not exact.COMPILED:
        pytest.skip("the compiled solver is not built")
    weights, targets = dbw_problem(n, iterations, seed)
    x = exact.CompiledEq17Solver().solve(weights, targets).x
    reference = isotone_majorant(exact.solve_merged(Problem(weights, targets, np.arange(n))))
    assert np.abs(x - reference).max() <= 1e-12 * np.abs(reference).max(), (n, seed)


def _dense_targets(est) -> tuple:
    """`IterationTimeEstimator.targets` computed pair by pair over the whole matrix, as it was before it
    computed only the sampled rows: the reference its values must equal bit for bit."""
    import numpy as np

    from autosync.policies.dbw._time import EMPTY_PAIR_WEIGHT

    sampled = est.count > 0
    means = np.divide(est.total, est.count, out=np.zeros_like(est.total), where=sampled)
    per_column = sampled.sum(axis=0)
    overall = est.total.sum() / max(est.count.sum(), 1)
    prior = np.divide(means.sum(axis=0), per_column, out=np.full(est.n, overall), where=per_column > 0)
    return np.where(sampled, est.count, EMPTY_PAIR_WEIGHT), np.where(sampled, means, prior[None, :])


def test_targets_from_the_sampled_rows_are_bit_for_bit_the_dense_ones():
    import numpy as np

    from autosync.policies.dbw._time import IterationTimeEstimator

    rng = np.random.default_rng(0)
    for _ in range(40):
        n = int(rng.integers(1, 60))
        est = IterationTimeEstimator(n)
        est.add(1, 1, 0.5)
        for _ in range(int(rng.integers(0, 3 * n + 2))):  # scattered pairs: some columns never sampled
            est.add(int(rng.integers(1, n + 1)), int(rng.integers(1, n + 1)), float(rng.exponential()))
        for fast, dense in zip(est.targets(), _dense_targets(est)):
            assert fast.dtype == dense.dtype and np.array_equal(fast, dense)
    weights, targets = dbw_problem(512, 20, 3)  # whole rows sampled, as DBW samples them
    est = IterationTimeEstimator(512)
    est.count = np.where(weights >= 1, weights, 0.0)
    est.total = est.count * targets
    for fast, dense in zip(est.targets(), _dense_targets(est)):
        assert np.array_equal(fast, dense)


def test_the_diagonal_from_the_distinct_rows_is_bit_for_bit_the_dense_solve_s():
    """`IterationTimeEstimator.times` (the solve on the distinct rows, the diagonal read from the merged rows)
    against the diagonal of `solve()` (the dense data and answer), over a DBW-like run with scattered ranks, and
    `RowTable.runs` against `row_runs` of the dense data."""
    import numpy as np
    import pytest

    from autosync.policies.dbw import _eq17_exact as exact
    from autosync.policies.dbw._time import IterationTimeEstimator
    from autosync.policies.dbw._eq17 import row_runs

    if not exact.COMPILED:
        pytest.skip("the compiled solver is not built")
    rng = np.random.default_rng(5)
    n = 96
    est = IterationTimeEstimator(n)
    k = n
    for iteration in range(40):
        ranks = n if iteration % 3 else int(rng.integers(1, n + 1))  # some iterations see only the first ranks
        for i, t in enumerate(np.sort(0.3 + 0.7 * rng.exponential(size=ranks))):
            est.add(k, i + 1, float(t))
        k = int(np.clip(k - 3 + rng.integers(-4, 3), 1, n))
        times = est.times()
        table = est.table()
        weights, targets = est.targets()
        dense = [np.array_equal(a, b) for a, b in zip(table.dense(), (weights, targets))]
        assert all(dense) and np.array_equal(table.runs(), row_runs(weights, targets))
        assert np.array_equal(times, np.diag(est.solve())), iteration
    assert est.failures == 0


def test_runs_split_where_the_kkt_test_names_rows_give_the_unmerged_reference_s_answer(monkeypatch):
    """On the problems a DBW run at n = 128 hands its solver (scattered rows, some with only their first ranks
    sampled), the compiled solver's KKT test (`_eq17_exact.check`) names rows at which merged runs must split,
    and the answers equal the unmerged reference's and the pure-Python solver's (its own partition, in numpy).
    The runs split into staircases of single rows, whose parts have empty rows inside from the third problem on
    (69 to 312 such parts a solve, counted with the C code instrumented): `_eq17_partition.c` solves those as
    their independent regions (`push_components`)."""
    import numpy as np
    import pytest

    from autosync.policies.dbw import _eq17_exact as exact
    from autosync.policies.dbw._eq17 import Problem, isotone_majorant
    from autosync.policies.dbw._isotonic import PythonEq17Solver

    if not exact.COMPILED:
        pytest.skip("the compiled solver is not built")
    tables, named = [], []
    solve_rows, check = exact.CompiledEq17Solver.solve_rows, exact.check

    def recording_solve_rows(self, table):
        tables.append(table)
        return solve_rows(self, table)

    def recording_check(*args):
        optimal, rows = check(*args)
        named.append(rows.size)
        return optimal, rows

    monkeypatch.setattr(exact.CompiledEq17Solver, "solve_rows", recording_solve_rows)
    monkeypatch.setattr(exact, "check", recording_check)
    dbw_trace.decisions("dbw", 128, 30)
    monkeypatch.undo()
    assert sum(size > 0 for size in named) >= 5
    for table in tables:
        weights, targets = table.dense()
        x = exact.CompiledEq17Solver().solve_rows(table).dense()
        reference = isotone_majorant(exact.solve_merged(Problem(weights, targets, np.arange(weights.shape[0]))))
        assert np.abs(x - reference).max() <= 1e-12 * np.abs(reference).max()
        python = PythonEq17Solver(max_sweeps=2000).solve(weights, targets)
        assert python.converged and np.abs(x - python.x).max() <= 1e-9 * np.abs(python.x).max()


def test_bad_row_tables_are_refused_with_the_rule():
    import numpy as np
    import pytest

    from autosync.policies.dbw import _eq17_exact as exact

    if not exact.COMPILED:
        pytest.skip("the compiled solver is not built")
    weights, targets, source = np.ones((2, 3)), np.array([[1.0, 2.0, 3.0], [1.0, np.nan, 3.0]]), np.array([0, 1, 0])
    with pytest.raises(ValueError, match="targets must be finite"):
        exact.CompiledEq17Solver().solve_rows(exact.RowTable(weights, targets, source))
    exact.CompiledEq17Solver().solve_rows(exact.RowTable(weights, targets, np.array([0, 0, 0])))  # row 1 unused
    with pytest.raises(ValueError, match="source n indices"):
        exact.RowTable(weights, targets, np.array([0, 2, 0]))
    with pytest.raises(ValueError, match="source must index rows"):
        exact._compiled.solve_table(2, 3, 2, weights, targets, np.array([0, 5], np.intc), np.ones(2),
                                    np.array([1], np.intc), np.empty((2, 3)), 1e-12)
    with pytest.raises(ValueError, match="scale must be finite"):
        exact._compiled.solve_table(2, 3, 2, weights, targets, np.array([0, 0], np.intc), np.array([1.0, 0.0]),
                                    np.array([1], np.intc), np.empty((2, 3)), 1e-12)
