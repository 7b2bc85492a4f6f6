"""What the command line prints (`autosync.reporting.console`): every table reads at 80 columns when piped (a
number is shown whole, or its column is left out and named in a note under the table: `reporting.tables`), and
`--wide` shows every column; every ratio says which way it points."""

from __future__ import annotations

import inspect
import io
import os
import re
from types import SimpleNamespace

import pytest
from rich.console import Console

from autosync import cli
from autosync.reporting import console as reports
from autosync.reporting.leaderboard_files import leaderboard_columns
from autosync.reporting.tables import Column, Fitted, fitted

LONG_POLICY = {"policy": "sync_switch", "params": {"switch_at": 0.5, "order": "asp_bsp"}}
SPEC = SimpleNamespace(name="stragglers_resnet_cifar10", target=SimpleNamespace(metric="test_accuracy", threshold=0.95))


def _printed(lines: list, width: int = 80, wide: bool = False) -> str:
    """What the command line prints of `lines` into a pipe (a file, not a terminal) `width` columns wide."""
    console = Console(file=io.StringIO(), width=width)
    cli._show(lines, console, wide=wide)
    return console.file.getvalue()


def _leaderboard_rows() -> list[dict]:
    row = {key: 1234.5678 for key, _, _ in leaderboard_columns()}
    return [{**row, "policy": "sync_switch(switch_at=0.5,order=asp_bsp)", "time_to_target": float("inf"),
             "median_time_to_target": float("inf"), "never_reached": 5, "speedup_vs_bsp": 12.3456},
            {**row, "policy": "bsp", "speedup_vs_bsp": 1.0, "final_test_accuracy": 0.9512}]


# One call of each report that prints a table, with long labels and wide numbers
CASES = {
    "run_summary": lambda: reports.run_summary(SimpleNamespace(
        job_name=SPEC.name, policy=LONG_POLICY, seed=12345, status="reached", wall_seconds=12345.678,
        metrics={"time_to_target": 12345.678, "target_metric": "test_accuracy", "target_threshold": 0.95,
                 "updates_to_target": 123456, "final_train_loss": 0.1234, "final_test_loss": 0.2345,
                 "final_test_accuracy": 0.9512, "updates": 234567, "virtual_time": 23456.78,
                 "updates_per_virtual_second": 12.345, "gradients_discarded": 123456, "gradients_arrived": 987654})),
    "calibration_report": lambda: reports.calibration_report(SimpleNamespace(
        updates=100, before=[SimpleNamespace(name="backup(k=1)", real_seconds=123.456, simulated_seconds=120.123,
                                             ratio=1.0277, ratio_text="1.03")] * 2,
        after=[SimpleNamespace(simulated_seconds=123.001, ratio=1.0037, ratio_text="1.00")] * 2, server=None,
        units=None,
        verdict=lambda: "fits")),
    "jobs_table": lambda: reports.jobs_table("family stragglers: 24 jobs", [
        {"job": "stragglers-0023", "n_workers": 128, "round_trip": "shifted_exponential alpha=0.7 shift=1.0",
         "slow_workers": 16, "speed_spread": 12.5, "slowdowns": 3, "workload": "resnet18 on cifar10", "momentum": 0.9,
         "fingerprint": "86edddd667e815f6"}]),
    "tune_report": lambda: reports.tune_report(SimpleNamespace(
        cached=False, study_name="86edddd667e815f6-policy", new_trials=20, faster_elsewhere=[],
        top=[{"trial": 1234, "policy": LONG_POLICY, "time_to_target": 12345.678, "final_metric": 0.9512,
              "reached": 5, "runs": 5}],
        cache={"best_policy": LONG_POLICY, "trials": 20, "recurrences_to_amortize": 13,
               "speedup_vs_bsp": 3.2345, "best_value": 1300.25, "bsp_time_to_target": 4205.5,
               "search_cost_bsp_trainings": 7.43}), SPEC),
    "race_report": lambda: reports.race_report({"answer": "share", "checked": ["k", "share"], "budget": 2.5,
                                                "cut_short": ["second seed", "local step"], "rounds": [
        {"round": "portfolio", "seed": 0, "runs": [
            {"label": "share", "policy": LONG_POLICY, "time": 123.456, "new_seed": True},
            {"label": "k", "policy": {"policy": "backup", "params": {"k": 3}}, "time": None, "new_seed": True}]},
        {"round": "final metric", "seed": 1, "runs": [
            {"label": "share", "policy": LONG_POLICY, "time": 130.25, "final": 0.95123, "new_seed": False}]}]},
        SPEC),
    "verification_report": lambda: reports.verification_report(SimpleNamespace(
        execution={"backend": "processes", "clock": "real"}, seeds=[0, 1], kendall_tau=0.3333,
        real_winner=LONG_POLICY, same_winner=True, answer=lambda: None,
        rows=[{"policy": LONG_POLICY, "simulated_time": 12345.6, "real_time": 13456.7, "real_over_simulated": 1.09,
               "real_final_metric": 0.9512, "real_feasible": True}])),
    "profile_report": lambda: reports.profile_report(SimpleNamespace(
        cluster={"compute": "0.012 s x batch", "communication_seconds": 0.0012, "speed_factors": [1.0, 2.5]},
        server=SimpleNamespace(apply_seconds=0.0001, bandwidth=1.2e9), workers="2 worker processes",
        rows=lambda: [(1024, 1.23456, 2.34567, 3.45678)]), SPEC.name, "cuda:0"),
    "leaderboard_report": lambda: reports.leaderboard_report(SPEC, 5, _leaderboard_rows()),
    "scaling_report": lambda: reports.scaling_report(SimpleNamespace(
        worker_counts=[1, 4, 8, 16, 32, 64], rows=lambda: [("dana_zero", ["0.9512 ± 0.0123"] * 6)]),
        "final_test_accuracy"),
    "robustness_report": lambda: reports.robustness_report(SimpleNamespace(family="stragglers", result={"summary": [
        {"policy": "dbw(window=19)", "median_regret": 1.2345, "p90_regret": 12.345, "worst_regret": 123.45,
         "within": 0.5, "slower_than_bsp": 12, "median_vs_bsp": 0.8, "min_vs_bsp_spread": 12.5,
         "median_overall_regret": 1.5, "missed_runs": 123, "errors": 0}]}), 24, 3),
    "replay_report": lambda: reports.replay_report(SimpleNamespace(rows=[SimpleNamespace(
        strategy="binary search", setting="M = 4, beta = 0.01", mean_cost=12.345, success=0.987,
        same_as_full_information=0.876, valid=1.0)]), "autosync/data/sync_switch_logs/cifar10_res32", 1000),
    "recommendation_report": lambda: reports.recommendation_report(SimpleNamespace(
        neighbours=[{"job": "stragglers-0023", "distance": 12.345, "same_workload": True, "policy": LONG_POLICY,
                     "weight": 0.5}], policy=LONG_POLICY, predicted_time=None, predicted_bsp_time=None,
        predicted_speedup=20.21), SPEC),
    "cache_report": lambda: reports.cache_report([{"study": "86edddd667e815f6-policy", "trials": 20, "cache": {
        "best_policy": LONG_POLICY, "job_name": "digits_default", "best_value": 52.95,
        "finished_at": "2026-11-29T06:12:34.567890+00:00"}}], "sqlite:///results/autosync-studies.db"),
    "policies_report": lambda: reports.policies_report(),
    "comparison_report": lambda: reports.comparison_report(SimpleNamespace(
        reports=[SimpleNamespace(family=f) for f in ("stragglers", "bandwidth")], developed_on=None,
        rows=lambda: [("dbw(window=19)", [1.2345, 12.345, 3, 17, 1.5, 2.5, 0, 4])])),  # 4 columns a family
}


def test_every_report_that_prints_a_table_is_checked():
    """A report added to `autosync.reporting.console` with a table must be added to CASES."""
    with_tables = {name for name, f in inspect.getmembers(reports, inspect.isfunction)
                   if f.__module__ == reports.__name__ and "fitted(" in inspect.getsource(f)}
    assert with_tables == set(CASES)


@pytest.mark.parametrize("report", sorted(CASES))
def test_every_table_shows_its_numbers_whole_at_80_columns_piped(report):
    lines = CASES[report]()
    tables = [line.what for line in lines if isinstance(line.what, Fitted)]
    assert tables, report
    out = _printed(lines)
    assert "…" not in out
    assert max(len(line) for line in out.splitlines()) <= 80
    for table in tables:
        shown = table.shown(80)
        for row in table.rows:
            for i in shown:
                if not table.columns[i].text:
                    assert row[i] in out, (report, table.columns[i].header, row[i])
        left_out = table.left_out(80)
        if left_out:
            note = " ".join(out.split())
            assert f"not shown in 80 columns: {', '.join(left_out)}" in note


def test_a_cached_answer_of_an_older_autosync_with_a_confirmation_prints_as_any_other():
    """A record that a tune with a confirmation step wrote (`confirmed`, the search's own best) prints its
    answer, and nothing of the step."""
    plain = " ".join(_printed(CASES["tune_report"]()).split())
    old = reports.tune_report(SimpleNamespace(
        cached=False, study_name="86edddd667e815f6-policy", new_trials=20, faster_elsewhere=[], top=[],
        cache={"best_policy": LONG_POLICY, "trials": 20, "recurrences_to_amortize": 13, "speedup_vs_bsp": 3.2345,
               "best_value": 1300.25, "bsp_time_to_target": 4205.5, "search_cost_bsp_trainings": 7.43,
               "search_best_policy": {"policy": "bsp", "params": {}}, "search_best_value": 4205.5,
               "confirmed": {"top": 2, "seeds": [0, 1], "rows": [], "winner": LONG_POLICY}}), SPEC)
    printed = " ".join(_printed(old).split())
    assert "(3.23x faster than BSP)" in printed and "confirm" not in printed
    assert printed.split("best: ")[1] == plain.split("best: ")[1]


def test_a_breakdown_of_an_older_autosync_with_checks_judged_on_a_second_seed_prints_as_any_other():
    """A record whose tune judged checks near the rule's edge on a second seed (the breakdown's
    `second_seed_checks`) prints its breakdown, and nothing of that count."""
    plain = {"stopped_at_target": 12, "answered_by_equivalent": 3, "pruned": 4, "full_budget_checks": 2}
    line = reports.breakdown_line({**plain, "second_seed_checks": 1})
    assert line == reports.breakdown_line(plain) and "2 full-budget checks" in line and "second seed" not in line


def test_a_column_that_does_not_fit_is_left_out_and_named():
    table = fitted("t", [Column("policy", text=True), Column("time"), Column("fingerprint")],
                   [("bsp", "123.45", "86edddd667e815f6")])
    out = _printed([reports.Line(table)], width=30)
    assert "123.45" in out and "86edddd" not in out
    assert "not shown in 30 columns: fingerprint (--wide shows every column)" in " ".join(out.split())


def test_wide_shows_every_column_whole_however_wide():
    rows = _leaderboard_rows()
    lines = reports.leaderboard_report(SPEC, 5, rows)
    narrow, wide = _printed(lines), _printed(lines, wide=True)
    assert "not shown in 80 columns: median, train loss, upd to T" in " ".join(narrow.split())
    assert all(h in wide for _, h, _ in leaderboard_columns())
    assert "sync_switch(switch_at=0.5,order=asp_bsp)" in wide and "not shown" not in wide
    assert max(len(line) for line in wide.splitlines()) > 80


def test_the_printed_leaderboard_shows_the_policy_time_spread_misses_speedup_and_final_metric():
    out = _printed(reports.leaderboard_report(SPEC, 5, _leaderboard_rows()))
    header = next(line for line in out.splitlines() if "policy" in line)
    assert re.findall(r"[a-zA-Z][\w ]*[\w]", header) == ["policy", "TTT s", "std", "missed", "vs BSP", "test acc"]
    loss = SimpleNamespace(name="j", target=SimpleNamespace(metric="train_loss", threshold=0.1))
    out = _printed(reports.leaderboard_report(loss, 5, _leaderboard_rows()))
    assert "train loss" in next(line for line in out.splitlines() if "policy" in line)


def test_every_ratio_says_which_way_it_points():
    out = " ".join(_printed(reports.leaderboard_report(SPEC, 5, _leaderboard_rows())).split())
    assert "12.35x faster" in out and "as fast" in out
    tuned = " ".join(_printed(CASES["tune_report"]()).split())
    assert "(3.23x faster than BSP)" in tuned
    assert "16 (up to 12.5x slower)" in _printed(CASES["jobs_table"]())  # the slowest worker against the fastest
    summary = " ".join(_printed(CASES["robustness_report"]()).split())
    assert "1.25x slower" in summary  # a median speedup of 0.8
    assert "1.23x" in summary and "multiple of the best static k's" in summary  # a regret: x the best's time
    assert "12.35x" in " ".join(_printed(CASES["comparison_report"]()).split())


def test_the_race_report_says_when_its_budget_cut_it_short():
    out = " ".join(_printed(CASES["race_report"]()).split())
    assert ("the budget of 2.5 BSP trainings was spent before the race's second seed and local step: it skipped "
            "them and went to the final-metric check") in out
    whole = reports.race_report({"answer": "bsp", "checked": [], "budget": None, "cut_short": [], "rounds": []}, SPEC)
    assert "budget" not in " ".join(_printed(whole).split())


def test_recommend_predicts_a_speedup_as_faster_than_bsp_not_as_a_share_of_its_time():
    """A predicted speedup of 20.21 is BSP's time over the policy's: the policy is 20.21x faster, not "20.21x
    BSP's time to target"."""
    answer = SimpleNamespace(neighbours=[], policy={"policy": "dbw", "params": {}}, predicted_time=None,
                             predicted_bsp_time=None, predicted_speedup=20.21)
    out = " ".join(_printed(reports.recommendation_report(answer, SPEC)).split())
    assert "predicted 20.21x faster than BSP to target (from another workload)" in out
    assert "BSP's time" not in out
    timed = SimpleNamespace(**{**vars(answer), "predicted_time": 10.0, "predicted_bsp_time": 202.1})
    out = " ".join(_printed(reports.recommendation_report(timed, SPEC)).split())
    assert "predicted 10.0 s to test_accuracy 0.95 vs BSP 202.1 s (20.21x faster than BSP)" in out
    slower = SimpleNamespace(**{**vars(answer), "predicted_speedup": 0.5})
    assert "predicted 2.00x slower than BSP" in " ".join(_printed(reports.recommendation_report(slower, SPEC)).split())


def test_the_race_report_says_how_many_faster_finalists_broke_the_rule_before_the_answer_kept_it():
    def verdict(checked: list[str]) -> str:
        race = {"answer": "c", "checked": checked, "budget": None, "cut_short": [], "rounds": []}
        return " ".join(_printed(reports.race_report(race, SPEC)).split())

    assert "the fastest finalist kept it" in verdict(["c"])
    assert "the 3 faster finalists broke it, the next kept it" in verdict(["a", "b", "d", "c"])


def test_the_race_report_says_no_candidate_was_left_to_check_where_round_5_answered_without_finalists():
    """--budget 2 skips every round that races candidates: round 5's bisection answers, which the verdict said
    was "the fastest candidate is BSP: nothing to check" beside its backup(k=2) answer."""
    race = {"answer": "k2", "checked": [], "towards_bsp": ["k8", "k4", "k2", "k1"], "budget": 2.0,
            "cut_short": [], "rounds": []}
    out = " ".join(_printed(reports.race_report(race, SPEC)).split())
    assert "nothing to check" not in out
    assert ("no candidate was left to check (each stopped on a seed, or the budget skipped the rounds that race "
            "them); static k at BSP's learning rate, bisected towards BSP (4 tried): the fewest workers that kept it "
            "are the answer") in out


def test_the_tune_hint_names_a_storage_other_than_the_default_with_its_password_masked():
    from autosync.reporting.console import tune_hint

    job = "my jobs/mine.yaml"  # the job file as the tune was given it, quoted for the shell
    assert tune_hint(job)[0].what == "train with it: autosync run 'my jobs/mine.yaml' --policy tuned"
    assert tune_hint(None)[0].what == "train with it: autosync run --policy tuned"  # the embedded default job
    assert tune_hint(job, "sqlite:///results/autosync-studies.db")[0].what.endswith("--policy tuned")
    hint = tune_hint(job, "postgresql://me:secret@db:5432/studies")[0].what
    assert "--storage 'postgresql://me:" in hint and "secret" not in hint, hint
    # quoted for the shell as the job file is: a space in the file's path split the storage in two
    hint = tune_hint(job, "sqlite:////data/my studies/s.db")[0].what
    assert hint.endswith("--policy tuned --storage 'sqlite:////data/my studies/s.db'"), hint


def test_the_command_line_written_beside_results_is_quoted_as_a_shell_reads_it(monkeypatch):
    """A result's recorded command runs again as written: a path with a space was two arguments."""
    import shlex

    from autosync.reporting.output import command_line

    argv = ["autosync", "leaderboard", "my jobs/a job.yaml", "--out", "results/x"]
    monkeypatch.setattr("sys.argv", argv)
    assert command_line("leaderboard") == "autosync leaderboard 'my jobs/a job.yaml' --out results/x"
    assert shlex.split(command_line("leaderboard")) == argv


def test_the_policies_listing_says_what_each_policy_does_in_a_whole_sentence():
    """Its first docstring line alone stopped mid-sentence ('...and shrinks with the'; 'Zhang et al.')."""
    from autosync.catalog import POLICIES
    from autosync.reporting.console import _first_sentence

    for name, cls in POLICIES.items():
        said = _first_sentence(cls.__doc__ or "")
        assert said.endswith(".") and said.count("(") == said.count(")"), (name, said)


def test_a_written_job_naming_the_users_code_is_tuned_with_the_path_that_imports_it(tmp_path, monkeypatch):
    """`profile` writes profiled_job.yaml in results/profiles/: its hint 'autosync tune PROFILED' said "No
    module named ..." where the job's code sits beside the job file. The user's own PYTHONPATH stays after
    it (the hint replaced it: what the code imports from there was gone)."""
    from types import SimpleNamespace

    from autosync.reporting.console import written_job

    monkeypatch.delenv("PYTHONPATH", raising=False)

    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "job.yaml").write_text("name: mine\n")
    spec = SimpleNamespace(uses_user_code=True, source=str(tmp_path / "mine" / "job.yaml"))
    elsewhere = tmp_path / "profiles" / "profiled_job.yaml"
    assert written_job(spec, elsewhere) == f"PYTHONPATH={tmp_path / 'mine'} autosync tune {elsewhere}"
    beside = tmp_path / "mine" / "calibrated_job.yaml"
    assert written_job(spec, beside) == f"autosync tune {beside}"
    builtin = SimpleNamespace(uses_user_code=False, source=spec.source)
    assert written_job(builtin, elsewhere) == f"autosync tune {elsewhere}"
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path / "libs"), str(tmp_path / "mine")]))
    assert written_job(spec, elsewhere) == \
        f"PYTHONPATH={tmp_path / 'mine'}{os.pathsep}{tmp_path / 'libs'} autosync tune {elsewhere}"


def test_the_tune_hint_names_the_pythonpath_the_tune_imported_the_jobs_code_from(tmp_path, monkeypatch):
    """`PYTHONPATH=CODE autosync tune results/profiles/J/profiled_job.yaml` hinted `autosync run
    results/profiles/J/profiled_job.yaml --policy tuned`, which said "No module named ..." in a new shell."""
    import sys
    from types import ModuleType, SimpleNamespace

    from autosync.reporting.console import tune_hint

    (tmp_path / "code" / "hintpkg").mkdir(parents=True)
    (tmp_path / "code" / "hintpkg" / "__init__.py").write_text("")
    module = ModuleType("hintpkg")
    module.__file__ = str(tmp_path / "code" / "hintpkg" / "__init__.py")
    monkeypatch.setitem(sys.modules, "hintpkg", module)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "code"))
    part = SimpleNamespace(factory="hintpkg:data")
    spec = SimpleNamespace(uses_user_code=True, workload=SimpleNamespace(dataset=part, model=SimpleNamespace(
        factory=None), loss=None))
    profiled = tmp_path / "profiles" / "profiled_job.yaml"
    assert tune_hint(profiled, spec=spec)[0].what == \
        f"train with it: PYTHONPATH={tmp_path / 'code'} autosync run {profiled} --policy tuned"
    beside = tmp_path / "code" / "job.yaml"  # the code beside the job file: imported from its folder anyway
    assert tune_hint(beside, spec=spec)[0].what == f"train with it: autosync run {beside} --policy tuned"
    monkeypatch.delenv("PYTHONPATH")  # imported, but not by a PYTHONPATH the user set (installed, say)
    assert tune_hint(profiled, spec=spec)[0].what == f"train with it: autosync run {profiled} --policy tuned"


def test_a_faster_space_hint_names_the_job_file_the_job_was_loaded_from(tmp_path):
    """It printed 'autosync tune JOB.yaml --space ...' for a job loaded from a file of another name."""
    from types import SimpleNamespace

    from autosync.reporting.console import _job_argument

    job = tmp_path / "mine.yaml"
    job.write_text("name: mine\n")
    assert _job_argument(SimpleNamespace(name="mine", source=str(job))) == f"{job} "
    assert _job_argument(SimpleNamespace(name="digits_default", source=str(job))) == ""
    assert _job_argument(SimpleNamespace(name="mine", source="<job>")) == "JOB.yaml "  # made from a dict
