"""Leaderboards: MLPerf-style scoring, parallel runs equal serial runs, files written."""

from __future__ import annotations

import json
import math
import re

import pytest

from autosync.core.errors import UserError
from autosync.catalog import parse_policy_spec
from autosync.experiments.leaderboard import Entry, run_grid, score, trimmed_mean
from tests.conftest import small_job
from tests.e2e.test_cli import autosync


def test_trimmed_mean_drops_fastest_and_slowest():
    assert trimmed_mean([1.0, 10.0, 2.0, 3.0, 100.0]) == pytest.approx(5.0)
    assert trimmed_mean([1.0, 2.0, math.inf]) == 2.0  # one miss is dropped as the slowest
    assert trimmed_mean([1.0, math.inf, math.inf]) == math.inf
    assert trimmed_mean([4.0, 6.0]) == 5.0  # too few runs to trim


def _run(seed, ttt, acc=0.9):
    return {"seed": seed, "time_to_target": ttt, "updates_to_target": 10 if ttt else None,
            "final_test_accuracy": acc, "final_train_loss": 0.1, "updates_per_virtual_second": 1.0}


def test_score_ranks_by_time_to_target_and_computes_speedups():
    bsp = Entry("bsp", {"policy": "bsp", "params": {}}, [_run(s, t) for s, t in enumerate([10.0, 12.0, 14.0])])
    fast = Entry("backup", {"policy": "backup", "params": {"k": 3}}, [_run(s, t) for s, t in enumerate([4.0, 6.0, 5.0])])
    never = Entry("asp", {"policy": "asp", "params": {}}, [_run(s, None, 0.1) for s in range(3)])
    rows = score([bsp, never, fast])
    assert [r["policy"] for r in rows] == ["backup", "bsp", "asp"]
    assert rows[0]["speedup_vs_bsp"] == pytest.approx(12.0 / 5.0)
    assert rows[2]["never_reached"] == 3 and rows[2]["speedup_vs_bsp"] is None


def test_policy_specs_are_parsed_and_validated():
    assert parse_policy_spec("backup", 16) == {"policy": "backup", "params": {"k": 12, "lr_rule": "fixed"}}
    assert parse_policy_spec("ssp:staleness=2", 4)["params"] == {"staleness": 2}
    with pytest.raises(UserError, match="k must be between 1 and n_workers=4, but got k=9"):
        parse_policy_spec("backup:k=9", 4)


@pytest.mark.slow
@pytest.mark.processes
def test_parallel_grid_equals_serial_grid():
    job = small_job(budget={"max_updates": 15})
    policies = [parse_policy_spec(p, 4) for p in ("bsp", "asp")]
    serial = run_grid(job, policies, [0, 1], n_jobs=1)
    parallel = run_grid(job, policies, [0, 1], n_jobs=2)
    strip = lambda es: [[{k: v for k, v in r.items() if k != "wall_seconds"} for r in e.runs] for e in es]
    assert strip(serial) == strip(parallel)


@pytest.mark.slow
def test_leaderboard_command_writes_tables_and_plots(tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text("name: lb\nworkload: {dataset: {name: digits}, model: {name: logreg}, batch_size: 16,"
                   " optimizer: {lr: 0.2}, evaluation: {every_seconds: 2}}\n"
                   "cluster: {n_workers: 4}\ntarget: {threshold: 0.8}\nbudget: {max_virtual_seconds: 15}\n")
    proc = autosync("leaderboard", str(job), "--policies", "bsp", "--policies", "backup:k=3", "--seeds", "3",
                    "--n-jobs", "2", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "results" / "lb"
    data = json.loads((out / "leaderboard.json").read_text())
    assert {r["policy"] for r in data["rows"]} == {"bsp", "backup(k=3)"}
    assert all(len(runs) == 3 for runs in data["runs"].values())
    assert "autosync leaderboard" in (out / "leaderboard.md").read_text()
    for name in ("leaderboard.csv", "curves.png", "k_over_time.png"):
        assert (out / name).stat().st_size > 0
    proc = autosync("leaderboard", str(job), "--policies", "nope", cwd=tmp_path)
    assert proc.returncode == 2 and "--policies must be one of" in proc.stderr


def test_early_and_late_mean_k_average_the_gradients_per_update_of_each_half():
    from autosync.engine.trace import Trace
    from autosync.engine.metrics import run_metrics

    trace = Trace()
    for t, k in [(0.0, 16), (2.0, 16), (4.9, 13), (5.0, 8), (7.0, 9), (9.5, 7)]:
        trace.updates.append((0, t, 0.0, 0, k, k, (), (), (), 0.0, 0.1, 0.0))
    metrics = run_metrics(trace, small_job().target, 10.0)
    assert metrics["early_mean_k"] == pytest.approx(15.0) and metrics["late_mean_k"] == pytest.approx(8.0)
    empty = run_metrics(Trace(), small_job().target, 10.0)
    assert empty["early_mean_k"] is None and empty["late_mean_k"] is None


def test_labels_show_changed_parameters_and_always_backups_k():
    from autosync.catalog import label_of

    assert label_of(parse_policy_spec("backup:lr_rule=proportional", 16)) == "backup(k=12,lr_rule=proportional)"
    assert label_of(parse_policy_spec("dbw", 16)) == "dbw"
    assert label_of(parse_policy_spec("ssp:staleness=2", 4)) == "ssp(staleness=2)"


def test_json_is_strict_everywhere_autosync_writes_it():
    import json
    import math
    from pathlib import Path

    from autosync.core import strict_json

    def refuse(constant: str) -> None:
        raise ValueError(f"non-standard JSON constant {constant}")

    assert json.loads(strict_json.dumps({"a": [math.inf, -math.inf, math.nan, 1.5]}), parse_constant=refuse) == \
        {"a": [None, None, None, 1.5]}
    for path in (Path(__file__).resolve().parents[3] / "results").rglob("*.json"):
        json.loads(path.read_text(), parse_constant=refuse)  # committed results too


def test_k_weighted_by_virtual_time_shows_where_a_policy_spends_its_time():
    from autosync.catalog import make_policy
    from autosync.engine import simulate
    from autosync.engine.metrics import time_at_k
    from tests.conftest import small_job

    # updates at virtual times 1, 3, 4 aggregating 2, 4, 1 gradients: 1 s at k=2, 2 s at k=4, 1 s at k=1
    assert time_at_k([1.0, 3.0, 4.0], [2, 4, 1]) == {2: 1.0, 4: 2.0, 1: 1.0}
    constant = simulate(small_job(), make_policy("backup", {"k": 3})).metrics
    assert constant["time_weighted_k"] == pytest.approx(3.0)
    dynamic = simulate(small_job(), make_policy("dbw")).metrics
    per_update = [dynamic["early_mean_k"], dynamic["late_mean_k"]]
    assert 1.0 <= dynamic["time_weighted_k"] <= 4.0 and all(k is not None for k in per_update)


@pytest.mark.parametrize("spec", ["backup:lr_rule=proportional", "compose:barrier=ssp,staleness=2,update=dana_slim",
                                  "compose:barrier=dbw,batch=lbbsp,window=7", "dana_dc:dc_lambda=1.8552011619816655",
                                  "sync_switch:switch_at=0.25,config=none", "bsp"])
def test_a_policy_spec_reads_back_as_the_same_policy(spec):
    from autosync.catalog import spec_of

    policy = parse_policy_spec(spec, 16)
    assert parse_policy_spec(spec_of(policy), 16) == policy


def test_a_leaderboard_keeps_its_runs_and_runs_again_only_what_it_lacks(tmp_path):
    """Each finished run is kept as it comes (runs.jsonl), and the same call reads back what it holds: a
    leaderboard stopped by Ctrl-C (the last line cut short, say) or extended by a seed runs only the rest,
    and scores as one run whole."""
    job = small_job(budget={"max_updates": 15})
    policies = [parse_policy_spec(p, job.cluster.n_workers) for p in ("bsp", "asp")]
    runs_file = tmp_path / "runs.jsonl"
    whole = run_grid(job, policies, [0, 1], runs_file=runs_file)
    lines = runs_file.read_text().splitlines()
    assert len(lines) == 4
    runs_file.write_text("\n".join(lines[:2]) + "\n" + lines[2][: len(lines[2]) // 2])  # a line cut short
    ran, said = [], []
    resumed = run_grid(job, policies, [0, 1], runs_file=runs_file, on_done=lambda run: ran.append(run["seed"]),
                       on_resume=lambda *reused: said.append(reused))
    assert len(ran) == 4 and len(runs_file.read_text().splitlines()) == 5  # 2 read back, 2 run again
    assert said == [(2, 4, runs_file)]
    assert json.dumps(score(resumed), sort_keys=True) == json.dumps(score(whole), sort_keys=True)
    extended = run_grid(job, policies, [0, 1, 2], runs_file=runs_file)
    assert len(runs_file.read_text().splitlines()) == 7  # seed 2 alone ran
    assert [len(e.runs) for e in extended] == [3, 3]


def test_a_leaderboard_does_not_take_a_run_kept_under_another_budget_for_its_own(tmp_path):
    """The job's fingerprint leaves the budget out: a 3 s job read back the 20 s job's runs in the same folder."""
    runs_file = tmp_path / "runs.jsonl"
    policies = [parse_policy_spec("bsp", 4)]
    long = run_grid(small_job(budget={"max_updates": 15}), policies, [0], runs_file=runs_file)
    short = run_grid(small_job(budget={"max_updates": 3}), policies, [0], runs_file=runs_file)
    assert long[0].runs[0]["updates"] == 15 and short[0].runs[0]["updates"] == 3
    again = run_grid(small_job(budget={"max_updates": 15}), policies, [0], runs_file=runs_file,
                     on_done=lambda run: None)
    assert again[0].runs[0] == long[0].runs[0] and len(runs_file.read_text().splitlines()) == 2  # read back


def test_rows_that_never_reached_the_target_are_ordered_by_the_target_metric():
    """Under a training-loss target the unreached rows were ordered by test accuracy, the highest first."""
    from autosync.experiments.leaderboard import Entry

    def entry(name, accuracy, loss):
        e = Entry(name, {"policy": name, "params": {}})
        e.runs = [{"seed": 0, "time_to_target": None, "final_test_accuracy": accuracy, "final_train_loss": loss,
                   "updates_to_target": None, "updates_per_virtual_second": 1.0}]
        return e

    entries = [entry("bsp", 0.9, 0.5), entry("asp", 0.8, 0.2)]
    assert [r["policy"] for r in score(entries, metric="train_loss")] == ["asp", "bsp"]  # the lower loss first
    assert [r["policy"] for r in score(entries)] == ["bsp", "asp"]  # the higher accuracy first


def test_a_policy_given_twice_is_one_row():
    from autosync.experiments.leaderboard import policy_specs

    assert policy_specs(["bsp", "BSP", "backup:k=2", "backup(k=2)"], 4) == policy_specs(["bsp", "backup:k=2"], 4)


@pytest.mark.parametrize("value", ['"abc"', "-5.0", "true"])
def test_a_kept_run_whose_time_is_not_a_time_is_one_line_naming_the_file_and_line(tmp_path, value):
    """A robustness report's cells.jsonl or a leaderboard's runs.jsonl edited or damaged: 'abc' was a traceback
    where the score read it, and -5.0 ranked first with a negative regret."""
    from autosync.experiments.run_records import read_records

    path = tmp_path / "runs.jsonl"
    path.write_text('{"key": "a", "seed": 0, "time_to_target": 3.5}\n{"key": "b", "seed": 0, "time_to_target": '
                    + value + '}\n{"key": "c"')
    with pytest.raises(UserError, match=f"^{path}: line 2: time_to_target must be a number >= 0 or null \\(missed\\), "
                                        "but got .*; delete the line and the same command runs that run again$"):
        read_records(path)
    path.write_text('{"key": "a", "seed": 0, "time_to_target": 3.5}\n{"key": "b", "seed": 1, "time_to_target": null}'
                    '\n{"key": "c"')
    assert sorted(read_records(path)) == ["a", "b"]  # a missed target, and a line cut short (run again)
    path.write_text('{"key": "a", "seed": 0, "time_to_target": null, "error": "ValueError: overflow"}\n'
                    '{"key": "b", "seed": 0, "final_metric": null, "error": "diverged"}\n')
    assert list(read_records(path)) == ["a", "b"]  # runs that failed (robustness, reference grid): read back


@pytest.mark.parametrize("damage, problem", [
    (lambda r: r.pop("run"), "run must be an object, but got None"),
    (lambda r: r.update(run=3), "run must be an object, but got 3"),
    (lambda r: r["run"].pop("seed"), "run.seed is missing"),
    (lambda r: r["run"].update(time_to_target=-5.0), "run.time_to_target must be a number >= 0 or null"),
    (lambda r: r["run"].update(final_test_accuracy="x"), "run.final_test_accuracy must be a number or null, but got 'x'"),
    (lambda r: r["run"].update(status=5), "run.status must be text, but got 5"),
    (lambda r: r["run"].update(curve={"time": ["a"]}), "run.curve must map names to lists of numbers"),
])
def test_a_damaged_leaderboard_run_is_one_line_naming_the_file_line_and_field(tiny_job, tmp_path, damage, problem):
    """Each was a traceback (KeyError, TypeError) where the leaderboard read its runs.jsonl back, or, for the
    negative time, a ranking with it first."""
    from autosync import api

    job = api.load_job(tiny_job)
    api.leaderboard(job, ["bsp"], seeds=1, keep_runs_in=tmp_path)
    record = json.loads((tmp_path / "runs.jsonl").read_text())
    damage(record)
    (tmp_path / "runs.jsonl").write_text(json.dumps(record) + "\n")
    with pytest.raises(UserError, match=f"^{tmp_path / 'runs.jsonl'}: line 1: {re.escape(problem)}"):
        api.leaderboard(job, ["bsp"], seeds=1, keep_runs_in=tmp_path)


def test_a_spread_over_fewer_than_two_runs_that_reached_the_target_is_none_not_zero():
    """The std column read 0.0 for a policy that missed on every seed, or reached on one: no spread at all."""
    from autosync.experiments.leaderboard import Entry

    def run(seed, ttt):
        return {"seed": seed, "time_to_target": ttt, "final_test_accuracy": 0.9, "final_train_loss": 0.1,
                "updates_to_target": None if ttt is None else 10, "updates_per_virtual_second": 1.0}

    entries = [Entry("bsp", {"policy": "bsp", "params": {}}), Entry("asp", {"policy": "asp", "params": {}}),
               Entry("dbw", {"policy": "dbw", "params": {}})]
    entries[0].runs = [run(0, None), run(1, None), run(2, None)]
    entries[1].runs = [run(0, 5.0), run(1, None), run(2, None)]
    entries[2].runs = [run(0, 5.0), run(1, 7.0), run(2, None)]
    std = {row["policy"]: row["std_time_to_target"] for row in score(entries)}
    assert std["bsp"] is None and std["asp"] is None and std["dbw"] == pytest.approx(2 ** 0.5)
