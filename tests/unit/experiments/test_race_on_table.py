"""The race on the table (`autosync.experiments.race_fit`): the search's procedure with every run read from the
table, its lattice neighbours, and its settings fitted on training jobs."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest

from autosync.data import BASELINE_DIR
from autosync.experiments import race_fit as race
from autosync.experiments.portfolio_fit import JobTimes
from autosync.lattice import BSP_LABEL
from autosync.race import ROUNDS, RaceSettings, neighbours, race_settings
from autosync.table import Table
from tests.unit.experiments.test_lofo import BSP

REPO = Path(__file__).resolve().parents[3]


def test_neighbours_change_one_parameter_and_static_k_only_by_one_worker():
    def backup(k, rule):
        return {"policy": "backup", "params": {"k": k, "lr_rule": rule}}

    lattice = {"a": backup(3, "sqrt"), "b": backup(4, "sqrt"), "c": backup(5, "sqrt"), "d": backup(3, "linear"),
               "e": backup(4, "linear"), "f": {"policy": "dbw", "params": {"lr_rule": "sqrt", "window": 5}},
               "g": BSP, "h": backup(4, "sqrt")}  # h: a second label of b's point
    assert neighbours(backup(3, "sqrt"), lattice) == ["b", "d"]
    assert neighbours(backup(4, "sqrt"), lattice) == ["a", "c", "e"]
    assert neighbours(BSP, lattice) == []


class _Spec:
    class budget:
        max_virtual_seconds = 100.0

    class target:
        metric = "test_accuracy"

    seed = 0


POINTS = {"bsp": BSP, "x": {"policy": "asp", "params": {}}, "y": {"policy": "ssp", "params": {}}}
SEARCH = {"bsp": [80.0, 80.0], "x": [10.0, 12.0], "y": [40.0, 30.0]}  # each run reaches the target: it trains its time
JOB = JobTimes("f", "j", _Spec, POINTS, SEARCH, {"bsp": 80.0, "x": 11.0, "y": 35.0}, 11.0, 100.0, SEARCH)
SETTINGS = RaceSettings(("x", "y", "bsp"), margin=2.0)


@pytest.fixture
def table_reads(monkeypatch):
    """The table's final metrics, search and held-out seeds as `race` reads them, for `JOB`."""
    finals = {0: {"bsp": 0.9, "x": 0.9, "y": 0.9}, 1: {"bsp": 0.9, "x": 0.9, "y": 0.9}}
    monkeypatch.setattr(race.lofo, "table_finals", lambda table, spec, seeds: lambda p: [finals[seeds[0]][
        next(k for k, v in POINTS.items() if v == p)]])
    monkeypatch.setattr(race.lofo, "table_lengths", lambda table, spec, seeds: lambda p: [100.0])  # the budget
    monkeypatch.setattr(race.lofo, "search_seeds", lambda spec: [0, 1])
    monkeypatch.setattr(race.lofo, "answer_keeps", lambda *a: True)
    monkeypatch.setattr(race, "held_out_seeds", lambda spec: [100])


def test_a_race_on_the_table_pays_each_run_up_to_its_horizon_and_the_rest_of_the_budget_for_a_check(table_reads):
    row = race.race(None, JOB, SETTINGS)
    assert row["answer"] == "x" and row["ratio"] == 1.0 and row["checked"] == ["x"]
    # x 10 + y stopped at 2 x 10 = 20 + bsp stopped at 20; x on seed 1: 12; checks: bsp 100 + 100 (stopped at
    # its horizon on seed 0, where no state was kept: from the start) ... x continued from its target: 90 + 88
    seconds = 10 + 20 + 20 + 12 + 100 + 100 + (100 - 10) + (100 - 12)
    assert math.isclose(row["cost"], seconds / 100.0) and row["cut_short"] == []


def test_a_race_on_the_table_under_a_budget_runs_bsp_s_full_runs_first_and_stops_exploring_once_it_is_spent(
        table_reads):
    # BSP's full runs 2 x 100 = 2 BSP trainings; the portfolio: x 10, y stopped at 20, BSP's time its full run's:
    # 2.3 >= 2.2, so x (the round's survivor) goes to its check ranked on seed 0, continued there (90) and run
    # whole on seed 1 (100)
    row = race.race(None, JOB, SETTINGS, budget=2.2)
    assert row["answer"] == "x" and row["checked"] == ["x"] and row["cut_short"] == ["second seed", "local step"]
    assert math.isclose(row["cost"], (200 + 10 + 20 + 90 + 100) / 100.0)
    whole = race.race(None, JOB, SETTINGS, budget=2.5)  # 2.3 < 2.5: x's second seed (12) too, then its checks
    assert whole["cut_short"] == [] and math.isclose(whole["cost"], (200 + 10 + 20 + 12 + 90 + 88) / 100.0)


def test_without_round_5_bsp_answers_where_every_candidate_broke_the_rule_and_no_race_pays_less_than_its_check(
        tmp_path):
    """Fleet's first job on the committed table: every candidate the shipped race checks breaks the final-metric rule.
    With round 5 the bisection answers static k at BSP's learning rate; without it (the ablation,
    benchmarks/bench_race_rounds.py) BSP answers, for less. Neither race pays less than its final-metric round
    alone for its answer (`check_floor`). On a copy of the table: a run it lacked would be trained into it."""
    shutil.copytree(REPO / "results" / "table", tmp_path / "table")
    table = Table(tmp_path / "table")
    (job,) = race.family_jobs(table, [BASELINE_DIR / "family_fleet.yaml"], 1)
    settings = race_settings()
    with_round = race.race(table, job, settings)
    without = race.race(table, job, settings, leave_out=frozenset({ROUNDS[4]}))
    assert with_round["towards_bsp"] and with_round["answer"] == "backup:k=0.5n,lr_rule=fixed"
    assert without["towards_bsp"] == [] and without["answer"] == BSP_LABEL
    assert without["checked"] == with_round["checked"] and without["cost"] < with_round["cost"]
    for row in (with_round, without):
        assert row["cost"] >= race.check_floor(table, job.spec, job.policies[row["answer"]]) - 1e-9
    assert race.check_floor(table, job.spec, job.policies[BSP_LABEL]) == 0.0  # unchecked as the fastest finalist
    assert not list((tmp_path / "table").glob("*.jsonl"))  # every run read from the table


def test_without_a_setting_meeting_the_cost_goal_the_fit_takes_the_cheapest_within_one_standard_error():
    lowest = race.SettingScore(loss=0.05, error=0.02, cost=9.0, size=20, margin=6.0)
    close = race.SettingScore(loss=0.069, error=0.03, cost=7.0, size=16, margin=3.0)  # within 0.05 + 0.02: taken
    cheap = race.SettingScore(loss=0.071, error=0.01, cost=5.0, size=4, margin=2.0)  # past it, though cheaper
    assert race.chosen([lowest, close, cheap]) == close
    assert race.chosen([lowest, cheap]) == lowest
    meets = race.SettingScore(loss=0.30, error=0.01, cost=race.COST_GOAL, size=4, margin=1.1)
    assert race.chosen([lowest, close, cheap, meets]) == meets  # the cost goal first, whatever the loss


def test_the_fit_cross_validates_over_families_or_over_jobs_of_one_family():
    def job(family: str, name: str) -> JobTimes:
        return JobTimes(family, name, None, {}, {}, {}, 1.0, 1.0, {})

    two = [job("a", "a0"), job("b", "b0"), job("a", "a1")]
    assert [[j.job for j in fold] for fold in race._folds(two)] == [["a0", "a1"], ["b0"]]
    one = [job("a", "a0"), job("a", "a1")]
    assert [[j.job for j in fold] for fold in race._folds(one)] == [["a0"], ["a1"]]


def test_the_cross_validation_races_each_job_with_a_portfolio_fitted_on_the_other_families(monkeypatch):
    """`cross_validated`'s per-job portfolio (benchmarks/bench_knn_portfolio.py's nearest jobs): each job's
    members come from the other folds' jobs alone, and every setting races every job once."""
    def job(family: str, name: str) -> JobTimes:
        return JobTimes(family, name, None, {}, {}, {}, 1.0, 1.0, {})

    raced = []
    monkeypatch.setattr(race, "race", lambda table, j, settings, budget=None, leave_out=frozenset(): raced.append(
        (j.job, settings.portfolio[0])) or {"ratio": 1.0, "cost": 2.0})
    jobs = [job("a", "a0"), job("b", "b0"), job("a", "a1")]
    rows = race.cross_validated(None, jobs, portfolio=lambda j, rest: [f"{j.job}:" + "+".join(r.job for r in rest)] * 20)
    assert set(raced) == {("a0", "a0:b0"), ("a1", "a1:b0"), ("b0", "b0:a0+a1")}
    assert len(rows) == len(race.SIZES) * len(race.MARGINS) and all(len(r) == 3 for r in rows.values())
    assert {(s.loss, s.error, s.cost) for s in race.setting_scores(rows)} == {(0.0, 0.0, 2.0)}


def test_a_fit_stopped_by_ctrl_c_says_its_runs_are_kept_in_the_table(tmp_path, monkeypatch):
    """Every run a fit trains is appended to the table as it finishes (`Table.put`): a Ctrl-C keeps them, and
    the error says so and that the same command goes on from them."""
    from autosync import api
    from autosync.core.errors import Interrupted

    def stopped(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(race, "fit_families", stopped)
    with pytest.raises(Interrupted, match=f"the runs this fit trained are kept in the table {tmp_path}; the same "
                                          "command goes on from them"):
        api.fit([BASELINE_DIR / "family_fresh.yaml"], table=str(tmp_path), out=str(tmp_path / "race.yaml"))
    assert not (tmp_path / "race.yaml").exists()


def test_a_fit_refuses_an_empty_out_a_directory_and_a_family_given_twice_before_any_run(tmp_path):
    """--out '' was read as the default and rewrote the shipped settings; --check --out DIR fitted whole, then
    exit 1; a family file given twice counted its jobs twice, each held-out job in its own training folds."""
    from autosync import api
    from autosync.core.errors import UserError
    from autosync.data import RACE_SETTINGS

    shipped = RACE_SETTINGS.read_bytes()
    family = BASELINE_DIR / "family_fresh.yaml"
    empty = tmp_path / "empty"  # no table: each refusal comes before any run is read
    empty.mkdir()
    with pytest.raises(UserError, match=r"--out must name a file \(leave it out for the settings autosync ships\)"):
        api.fit([family], table=str(empty), out="")
    with pytest.raises(UserError, match=f"--out {tmp_path} is a directory"):
        api.fit([family], table=str(empty), out=str(tmp_path), check=True)
    with pytest.raises(UserError, match=r"family 'fresh' is given already"):
        api.fit([family, family], table=str(empty), out=str(tmp_path / "race.yaml"))
    assert RACE_SETTINGS.read_bytes() == shipped and not any(empty.iterdir())


def test_a_fit_checked_against_a_file_that_is_not_text_says_it_does_not_hold_the_fit(tmp_path):
    """`fit --check --out FILE` with FILE not UTF-8 raised UnicodeDecodeError: it holds no fit (exit 1)."""
    from autosync import api
    from autosync.race import race_settings

    path = tmp_path / "race.yaml"
    path.write_bytes(b"\xff\xfe")
    assert not api._same_settings(path, race_settings(None))
