"""The race on the table (`autosync.experiments.race`): lattice neighbours and the final-metric rule as a
test on paired seeds."""

from __future__ import annotations

from autosync.experiments import lofo, race
from autosync.experiments.portfolio_fit import JobTimes
from autosync.table import Table
from tests.unit.experiments.test_lofo import BSP, job


def test_a_label_splits_into_its_policy_and_parameters():
    assert race.split_label("backup:k=0.25n,lr_rule=sqrt") == ("backup", {"k": "0.25n", "lr_rule": "sqrt"})
    assert race.split_label("dbw,lr_rule=linear,window=5") == ("dbw", {"lr_rule": "linear", "window": "5"})
    assert race.split_label("bsp") == ("bsp", {})


def test_neighbours_change_one_parameter_and_static_k_only_to_the_next_share():
    labels = ["backup:k=0.25n,lr_rule=sqrt", "backup:k=0.375n,lr_rule=sqrt", "backup:k=0.5n,lr_rule=sqrt",
              "backup:k=0.25n,lr_rule=linear", "backup:k=0.375n,lr_rule=linear", "dbw,lr_rule=sqrt,window=5", "bsp"]
    assert race.neighbours("backup:k=0.25n,lr_rule=sqrt", labels) == [
        "backup:k=0.375n,lr_rule=sqrt", "backup:k=0.25n,lr_rule=linear"]
    assert race.neighbours("bsp", labels) == []


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
