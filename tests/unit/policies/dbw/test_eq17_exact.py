"""The compiled exact solver of DBW's problem (17) (`_eq17_exact`, recursive partitioning in C) against cvxpy,
the reference, and against the pure-Python structured solver (`_isotonic.PythonEq17Solver`) it stands in for.

Skipped with the reason where the extension is not built; it is built by `pip install -e .` wherever a C
compiler is present, which `test_the_extension_is_built_where_a_compiler_is` checks.
"""

from __future__ import annotations

import shutil
import sysconfig
from pathlib import Path

import numpy as np
import pytest

from autosync.policies.dbw import _eq17_exact as exact
from autosync.policies.dbw._time import EMPTY_PAIR_WEIGHT, IterationTimeEstimator, structured_solver
from autosync.policies.dbw._eq17 import Problem, peel, row_runs, violation
from autosync.policies.dbw._isotonic import PythonEq17Solver
from tests.unit.policies.dbw.test_dbw_solver import (AGREE, INSTANCES, dbw_instance, dense_instance, reference, relative_difference,
                                   scattered_instance, scattered_instances)

compiled = pytest.mark.skipif(not exact.COMPILED, reason="the compiled (17) solver is not built here")


def objective(weights: np.ndarray, targets: np.ndarray, x: np.ndarray) -> float:
    return float((weights * (x - targets) ** 2).sum())


def test_the_extension_is_built_where_a_compiler_is():
    headers = Path(sysconfig.get_paths()["include"]) / "Python.h"
    if shutil.which("cc") is None and shutil.which("gcc") is None or not headers.exists():
        pytest.skip("no C compiler or no Python headers here: the pure-Python solver is used")
    assert exact.COMPILED, "a C compiler is present, but autosync/policies/dbw/_eq17_partition.c was not built"
    assert isinstance(structured_solver(), exact.CompiledEq17Solver)


@compiled
@pytest.mark.parametrize("n", [1, 2, 3, 8, 16, 32])
def test_the_optimum_of_random_instances_is_cvxpy_s(n):
    """No worse than the tightened reference in the objective, feasible exactly, and the same x (the
    instances of test_dbw_solver's, where the tightened Clarabel solves)."""
    rng = np.random.default_rng(n)
    instances = [dense_instance(rng, n)] + [dbw_instance(rng, n) for _ in range(4)]
    for weights, targets in instances:
        result = exact.CompiledEq17Solver().solve(weights, targets)
        ref = reference(weights, targets)
        assert result.converged
        assert violation(result.x) == 0.0
        assert objective(weights, targets, result.x) <= objective(weights, targets, ref) * (1 + 1e-9) + 1e-12
        assert relative_difference(result.x, ref) <= AGREE


@compiled
@pytest.mark.parametrize("n", [2, 3, 8, 16, 32])
def test_scattered_instances_give_the_python_solver_s_optimum(n):
    """Half the pairs light at random places (where tight Clarabel may fail): the Python solver's answer,
    finished exactly by its partition, and an objective no worse."""
    weights, targets = scattered_instance(np.random.default_rng(200 + n), n)
    x = exact.CompiledEq17Solver().solve(weights, targets).x
    python = PythonEq17Solver(max_sweeps=2000).solve(weights, targets)
    assert python.converged and violation(x) == 0.0
    assert relative_difference(x, python.x) <= 1e-6
    assert objective(weights, targets, x) <= objective(weights, targets, python.x) * (1 + 1e-9)


@compiled
def test_recorded_instances_give_the_reference_s_and_the_python_solver_s_answer():
    data = np.load(INSTANCES)
    recorded = list(zip(data["weights"], data["targets"])) + scattered_instances()
    for weights, targets in recorded:
        x = exact.CompiledEq17Solver().solve(weights, targets).x
        assert violation(x) == 0.0
        assert relative_difference(x, reference(weights, targets)) <= AGREE
        python = PythonEq17Solver(max_sweeps=2000).solve(weights, targets)
        assert python.converged
        assert relative_difference(x, python.x) <= 1e-6


@compiled
def test_a_merged_optimum_where_a_run_end_binds_is_tested_and_the_answer_is_the_unmerged_one():
    """dbw_instance(seed 5, n = 8) binds at a run's end (test_dbw_solver); seed 1 does not. Seed 5's merged
    optimum passes the KKT test on the unmerged rows all the same (`check`): one merged problem is solved."""
    for seed, binds in ((1, False), (5, True)):
        weights, targets = dbw_instance(np.random.default_rng(seed), 8)
        merged = Problem(weights, targets, row_runs(weights, targets))
        assert merged.sizes.max() > 1
        assert (peel(exact.solve_merged(merged), merged, 1e-12) is not None) == binds
        result = exact.CompiledEq17Solver().solve(weights, targets)
        assert result.rounds == 1
        unmerged = exact.solve_merged(Problem(weights, targets, np.arange(8)))
        assert relative_difference(result.x, unmerged) <= 1e-12


@compiled
def test_ties_and_equal_targets_are_one_block():
    n = 6
    x = exact.CompiledEq17Solver().solve(np.ones((n, n)), np.full((n, n), 2.5)).x
    assert np.array_equal(x, np.full((n, n), 2.5))
    one = exact.CompiledEq17Solver().solve(np.array([[2.0]]), np.array([[3.5]]))
    assert one.x.tolist() == [[3.5]]


@compiled
def test_an_answer_depends_only_on_its_instance():
    """Stateless: a solve after others gives what a fresh solver gives, bit for bit."""
    rng = np.random.default_rng(11)
    instances = [dbw_instance(rng, 16) for _ in range(4)]
    solver = exact.CompiledEq17Solver()
    for weights, targets in instances:
        solver.solve(weights, targets)
    weights, targets = instances[0]
    assert np.array_equal(solver.solve(weights, targets).x, exact.CompiledEq17Solver().solve(weights, targets).x)


@compiled
def test_bad_instances_are_refused_with_the_rule():
    with pytest.raises(ValueError, match="weights must be finite and > 0"):
        exact.CompiledEq17Solver().solve(np.zeros((2, 2)), np.ones((2, 2)))
    with pytest.raises(ValueError, match="n x n arrays"):
        exact.CompiledEq17Solver().solve(np.ones((2, 3)), np.ones((2, 3)))
    out = np.empty((2, 2))
    with pytest.raises(ValueError, match="targets must be a C-contiguous buffer of 4 values of format 'd'"):
        exact._compiled.solve(2, 2, np.ones((2, 2)), np.ones((2, 2), dtype=np.float32), np.array([1], np.intc), out,
                              1e-12)
    with pytest.raises(ValueError, match=r"weights must be finite and > 0 and targets finite, but got weight 0.0 "
                                         r"and target 1.0 at index 3"):
        exact._compiled.solve(2, 2, np.array([[1.0, 1.0], [1.0, 0.0]]), np.ones((2, 2)), np.array([1], np.intc), out,
                              1e-12)
    with pytest.raises(ValueError, match=r"diagonal\[0\] must be in \[1, n\)"):
        exact._compiled.solve(2, 2, np.ones((2, 2)), np.ones((2, 2)), np.array([2], np.intc), out, 1e-12)


@compiled
def test_the_estimator_solves_with_it_and_agrees_with_the_python_solver_over_a_run():
    """A run's growing sample sets (DBW's pattern: a few rows near k sampled, the prior elsewhere)."""
    rng = np.random.default_rng(3)
    n = 24
    est = IterationTimeEstimator(n)
    assert isinstance(est._structured, exact.CompiledEq17Solver)
    python = PythonEq17Solver()
    for _ in range(30):
        h = int(rng.integers(n // 2 - 3, n // 2 + 4))
        for i, t in enumerate(np.sort(0.3 + 0.7 * rng.exponential(size=n))):
            est.add(h, i + 1, float(t))
        x = est.solve()
        weights, targets = est.targets()
        assert weights.min() == EMPTY_PAIR_WEIGHT
        assert relative_difference(x, python.solve(weights, targets).x) <= 1e-6
    assert est.fallbacks == 0 and est.failures == 0
