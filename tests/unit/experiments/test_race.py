"""The race on the table (`autosync.experiments.race`): lattice neighbours and the final-metric rule as a
test on paired seeds."""

from __future__ import annotations

from autosync.experiments import lofo, race
from autosync.experiments.portfolio_fit import JobTimes
from autosync.table import Table
from tests.unit.experiments.test_lofo import BSP, job


def test_neighbours_change_one_parameter_and_static_k_only_by_one_worker():
    def backup(k, rule):
        return {"policy": "backup", "params": {"k": k, "lr_rule": rule}}

    lattice = {"a": backup(3, "sqrt"), "b": backup(4, "sqrt"), "c": backup(5, "sqrt"), "d": backup(3, "linear"),
               "e": backup(4, "linear"), "f": {"policy": "dbw", "params": {"lr_rule": "sqrt", "window": 5}},
               "g": BSP, "h": backup(4, "sqrt")}  # h: a second label of b's point
    assert race.neighbours(backup(3, "sqrt"), lattice) == ["b", "d"]
    assert race.neighbours(backup(4, "sqrt"), lattice) == ["a", "c", "e"]
    assert race.neighbours(BSP, lattice) == []


def test_the_paired_rule_widens_the_tolerance_to_bsp_s_own_spread_between_the_seeds(tmp_path):
    table, job_ = Table(tmp_path), job()
    times = JobTimes("f", "j", job_, {}, {}, {}, 1.0, 1.0)
    assert race.keeps_paired(times, table, BSP)  # BSP keeps its own metric by definition
    other = {"policy": "local_sgd", "params": {"period": 16}}  # ends below BSP's accuracy by more than its spread
    seeds = [job_.seed, job_.seed + 1]
    own = [lofo.table_final(table, job_, [s])(other) for s in seeds]
    bsp = [lofo.table_final(table, job_, [s])(BSP) for s in seeds]
    assert job_.target.metric == "test_accuracy"  # lower is worse
    worse = sum(b - o for o, b in zip(own, bsp)) / 2
    spread = max(bsp) - min(bsp)
    assert worse > spread > 0
    for tolerance in (0.0, spread / 2, worse - 1e-9, worse + 1e-9, 10.0):
        assert race.keeps_paired(times, table, other, tolerance) == (worse <= max(tolerance, spread))
