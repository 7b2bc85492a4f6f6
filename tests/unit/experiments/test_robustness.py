"""The robustness report: regret against each drawn job's best static k, on a tiny family; resumable."""

from __future__ import annotations

import json
import statistics

import pytest

from autosync.core.family import FamilySpec
from autosync.experiments.robustness import CELLS_FILE, penalised_time, score_job, summarize
from autosync.experiments.run_records import cell_key
from autosync.policy_grid import online_policies, static_k_policies
from tests.conftest import autosync, no_traceback

TINY = """\
name: tiny
n_workers: 3
momentum: [0.0, 0.9]
round_trips:
  - {kind: shifted_exponential, alpha: {low: 0.2, high: 1.0}}
speed_factors: {slow_share: 0.34, slowdown: {low: 2.0, high: 3.0}}
workloads:
  - name: logreg
    workload: {dataset: {name: digits}, model: {name: logreg}, batch_size: 16, optimizer: {lr: 0.2},
               evaluation: {every_seconds: 1.0, max_samples: 300}}
    target: {metric: train_loss, threshold: 1.2}
    budget: {max_virtual_seconds: 20}
"""


def test_static_k_grid_is_every_k_under_both_rules_and_bsp():
    grid = static_k_policies(4)
    assert len(grid) == 3 * 2 + 1 and grid[-1] == {"policy": "bsp", "params": {}}
    assert {(p["params"]["k"], p["params"]["lr_rule"]) for p in grid[:-1]} == {
        (k, r) for k in (1, 2, 3) for r in ("fixed", "proportional")}


def test_the_grid_can_take_every_lr_rule_and_then_scales_bsp_too():
    grid = static_k_policies(3, ("fixed", "sqrt", "linear"))
    assert {(p["params"].get("k"), p["params"].get("lr_rule")) for p in grid} == {
        (k, r) for k in (1, 2, 3) for r in ("fixed", "sqrt", "linear") if (k, r) != (3, "fixed")} | {(None, None)}
    assert grid[-1] == {"policy": "bsp", "params": {}}  # k = n fixed is BSP


def _job():
    import yaml

    return FamilySpec.model_validate(yaml.safe_load(TINY)).job(0)


def test_regret_is_the_mean_time_over_the_best_static_k_with_misses_at_twice_the_budget():
    job = _job()
    fp, seeds = job.fingerprint(), [0, 1]
    online = online_policies(["dbw"])
    times = {}  # static k: the best is k=2 fixed (mean 10); dbw misses once (40) and takes 14 once
    for p in static_k_policies(3):
        label = p["params"].get("k"), p["params"].get("lr_rule")
        times[json.dumps(p)] = {(2, "fixed"): [8.0, 12.0], (None, None): [18.0, None]}.get(label, [15.0, 16.0])
    times[json.dumps(online[0])] = [14.0, None]
    cells = {cell_key(fp, json.loads(p), s): {"time_to_target": t[s]} for p, t in times.items() for s in seeds}
    row = score_job(job, cells, online, seeds)
    assert row["best_static"] == "k=2 fixed" and row["best_static_time"] == 10.0
    assert row["bsp_time"] == statistics.fmean([18.0, 40.0])  # missed: twice the 20 s budget
    dbw = row["policies"]["dbw"]
    assert dbw["time"] == 27.0 and dbw["regret"] == 2.7 and dbw["missed"] == 1
    assert dbw["vs_bsp"] == pytest.approx(29.0 / 27.0)
    assert row["policies"]["bsp"]["regret"] == 2.9
    assert row["best_overall"] == "k=2 fixed" and dbw["overall_regret"] == 2.7  # no online policy beat it
    tuned = {"policy": "backup", "params": {"k": 1, "lr_rule": "fixed"}}  # a job's own tune's answer
    with_tuned = score_job(job, cells, online, seeds, tuned=tuned)
    assert with_tuned["policies"]["tuned"]["regret"] == 15.5 / 10.0 and with_tuned["tuned_policy"] == tuned
    fast = {**cells, **{cell_key(fp, online[0], s): {"time_to_target": 5.0} for s in seeds}}
    beaten = score_job(job, fast, online, seeds)
    assert beaten["best_overall"] == "dbw" and beaten["policies"]["bsp"]["overall_regret"] == 29.0 / 5.0
    summary = {r["policy"]: r for r in summarize([row, {**row, "speed_spread": 1.0}])}
    assert summary["dbw"]["median_regret"] == 2.7 and summary["dbw"]["within"] == 0.0
    assert summary["dbw"]["slower_than_bsp"] == 0 and summary["dbw"]["missed_runs"] == 2
    assert summary["dbw"]["spread_jobs"] == (1 if row["speed_spread"] >= 2 else 0)
    assert penalised_time({"time_to_target": None, "error": "boom"}, job) == 40.0


def test_a_report_folder_of_another_budget_is_refused_before_anything_is_written(tmp_path):
    """A family's budget is not in its jobs' fingerprints (nor in the cells' keys): the same folder with the
    budget changed read the old budget's runs back as the new jobs'."""
    family = tmp_path / "tiny.yaml"
    family.write_text(TINY)
    out = tmp_path / "out"
    first = autosync("robustness", str(family), "--jobs", "1", "--seeds", "1", "--policies", "ssp", "--out",
                     str(out), cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    cells = (out / CELLS_FILE).read_text()
    family.write_text(TINY.replace("max_virtual_seconds: 20", "max_virtual_seconds: 15"))
    again = autosync("robustness", str(family), "--jobs", "1", "--seeds", "1", "--policies", "ssp", "--out",
                     str(out), cwd=tmp_path)
    no_traceback(again)
    assert again.returncode == 2 and "its job tiny-000 has the budget {'max_virtual_seconds': 20.0}, the " \
        "family's now {'max_virtual_seconds': 15.0}" in again.stderr, again.stderr
    assert (out / CELLS_FILE).read_text() == cells and "20" in (out / "jobs" / "tiny-000.yaml").read_text()


@pytest.mark.slow
def test_robustness_tunes_each_job_by_the_race_on_the_default_tuned_space(tmp_path):
    """--tuned-trials on the policy space (the default --tuned-space) passed its count to the race, which takes
    no trial budget: every such report was refused, after writing its job files."""
    family = tmp_path / "tiny.yaml"
    family.write_text(TINY)
    proc = autosync("robustness", str(family), "--jobs", "1", "--seeds", "1", "--policies", "dbw",
                    "--tuned-trials", "1", "--out", str(tmp_path / "out"), "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert "tuned" in {r["policy"] for r in result["summary"]} and result["jobs"][0]["tuned_policy"]


@pytest.mark.slow
def test_robustness_command_writes_the_table_and_resumes(tmp_path):
    family = tmp_path / "tiny.yaml"
    family.write_text(TINY)
    out = tmp_path / "out"
    args = ("robustness", str(family), "--jobs", "2", "--seeds", "1", "--policies", "dbw", "--policies", "ssp",
            "--tuned-trials", "2", "--tuned-space", "static_k", "--out", str(out), "--json")
    first = autosync(*args, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    result = json.loads(first.stdout)
    for name in ("robustness.md", "robustness.csv", "robustness.json", "regret.png", "jobs/tiny-000.yaml"):
        assert (out / name).stat().st_size > 0
    lines = (out / CELLS_FILE).read_text().splitlines()
    # 2 jobs x (static k = 1, 2 under two rules, BSP; dbw; ssp) x 1 seed, and each job's tuned policy (static_k
    # space) where it is not one of those already run
    known = static_k_policies(3) + online_policies(["dbw", "ssp"])
    assert len(lines) == 2 * (5 + 2) + sum(job["tuned_policy"] not in known for job in result["jobs"])
    assert {r["policy"] for r in result["summary"]} == {"dbw", "ssp", "bsp", "tuned"}
    assert (out / "studies.db").is_file()
    cells = [json.loads(line) for line in lines]
    for job in result["jobs"]:  # every regret follows from the recorded cells
        mine = [c for c in cells if c["job"] == job["job"]]
        budget = job["budget"]
        static = {}
        for c in mine:
            if c["policy"]["policy"] in ("backup", "bsp"):
                static[json.dumps(c["policy"])] = c["time_to_target"] if c["time_to_target"] is not None else 2 * budget
        assert job["best_static_time"] == min(static.values())
        for c in mine:
            if c["policy"]["policy"] == "dbw":
                t = c["time_to_target"] if c["time_to_target"] is not None else 2 * budget
                assert job["policies"]["dbw"]["regret"] == pytest.approx(t / min(static.values()))
            if c["policy"] == job["tuned_policy"]:  # the job's own tune's answer, scored from its cell
                t = c["time_to_target"] if c["time_to_target"] is not None else 2 * budget
                assert job["policies"]["tuned"]["regret"] == pytest.approx(t / min(static.values()))
    assert "# Robustness: family tiny" in (out / "robustness.md").read_text()

    # a rerun reuses every finished cell; a cell lost to an interruption (a cut line) is run again
    (out / CELLS_FILE).write_text("\n".join(lines[:-1]) + "\n" + lines[-1][:20])
    again = autosync(*args, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert f"reusing {len(lines) - 1} of {len(lines)} finished runs" in again.stderr
    assert json.loads(again.stdout)["summary"] == result["summary"]  # same seeds, same results


def test_bad_options_exit_2(tmp_path):
    family = tmp_path / "tiny.yaml"
    family.write_text(TINY)
    for extra, message in ((["--n-jobs", "0"], "--n-jobs must be >= 1 or -1"),
                           (["--policies", "nope"], "--policies must be one of"),
                           (["--lr-rules", "fixed,cubic"], "--lr-rules must be comma-separated rules of"),
                           (["--lr-rules", "fixed,sqrt,fixed"], "--lr-rules must name each rule once, but got "
                                                                "'fixed,sqrt,fixed' (fixed twice)")):
        proc = autosync("robustness", str(family), "--jobs", "1", *extra, cwd=tmp_path)
        assert proc.returncode == 2, proc.stderr
        no_traceback(proc)
        assert message in proc.stderr


@pytest.mark.slow
def test_a_tiny_two_family_report_puts_each_policy_s_regret_on_both_families_side_by_side(tmp_path):
    """Two tiny families, each reported by `autosync robustness`; `robustness-compare` reads the two reports
    (nothing trained again) into one table of the policies run on both, the developers' family marked."""
    reports = []
    for name, policies in (("dev", ("dbw", "ssp")), ("heldout", ("dbw", "bdbw"))):
        family = tmp_path / f"{name}.yaml"
        family.write_text(TINY.replace("name: tiny", f"name: {name}"))
        args = ["robustness", str(family), "--jobs", "1", "--seeds", "1", "--out", str(tmp_path / name)]
        for policy in policies:
            args += ["--policies", policy]
        done = autosync(*args, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        reports.append(json.loads((tmp_path / name / "robustness.json").read_text()))
    out = tmp_path / "families.md"
    done = autosync("robustness-compare", str(tmp_path / "dev"), str(tmp_path / "heldout" / "robustness.json"),
                    "--developed-on", "dev", "--out", str(out), "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    compared = json.loads(done.stdout)
    assert compared["columns"][:3] == ["policy", "dev (dev): median", "dev (dev): worst"]
    assert "heldout (held out): median" in compared["columns"]
    rows = {row[0]: row[1:] for row in compared["rows"]}
    assert set(rows) == {"dbw", "bsp"} and set(compared["not_compared"]) == {"ssp", "bdbw"}
    for label, values in rows.items():  # each family's columns are its own report's summary, as written
        for i, report in enumerate(reports):
            summary = next(r for r in report["summary"] if r["policy"] == label)
            assert values[4 * i:4 * i + 4] == [summary["median_regret"], summary["worst_regret"],
                                               summary["slower_than_bsp"], summary["missed_runs"]]
    text = out.read_text()
    assert "| policy | dev (dev): median |" in text and "family heldout, 1 jobs" in text

    for bad, says in ((["robustness-compare", str(tmp_path / "dev")], "at least two reports"),
                      (["robustness-compare", str(tmp_path / "dev"), str(tmp_path / "none")], "no robustness report"),
                      (["robustness-compare", str(tmp_path / "dev"), str(tmp_path / "heldout"),
                        "--developed-on", "other"], "--developed-on must name one of")):
        refused = autosync(*bad, cwd=tmp_path)
        assert refused.returncode == 2 and says in refused.stderr
        no_traceback(refused)


def test_a_report_into_a_folder_of_another_familys_report_is_refused_before_any_file(tmp_path):
    """That family's job files and runs stayed beside the new report's."""
    from autosync import api
    from autosync.core.errors import UserError

    family = tmp_path / "tiny.yaml"
    family.write_text(TINY)
    out = tmp_path / "report"
    out.mkdir()
    (out / "robustness.json").write_text('{"family": "other", "jobs": []}')
    with pytest.raises(UserError, match=f"^--out {out} holds the robustness report of family other, not tiny: name "
                                        "another folder"):
        api.robustness(family, out, jobs=1, seeds=1, policies=["ssp"])
    assert sorted(p.name for p in out.iterdir()) == ["robustness.json"]
