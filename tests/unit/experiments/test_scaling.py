"""`autosync scaling`: a metric against the worker count, read back from real leaderboards."""

from __future__ import annotations

import json
import re
import statistics

import pytest

from autosync.core.errors import UserError
from autosync.experiments.scaling import collect
from tests.conftest import autosync, no_traceback


@pytest.fixture(scope="module")
def boards(tmp_path_factory):
    """Leaderboards of one small job at 2 and 4 workers, made and written as `autosync leaderboard` does
    (`api.leaderboard`; the command itself is tested in test_leaderboard)."""
    from autosync import api

    root = tmp_path_factory.mktemp("scaling")
    for n in (2, 4):
        job = root / f"job{n}.yaml"
        job.write_text(f"name: job{n}\nworkload: {{dataset: {{name: digits}}, model: {{name: logreg}}, batch_size: 16,"
                       " optimizer: {lr: 0.2}, evaluation: {every_seconds: 2}}\n"
                       f"cluster: {{n_workers: {n}}}\ntarget: {{threshold: 0.8}}\nbudget: {{max_virtual_seconds: 8}}\n")
        board = api.leaderboard(api.load_job(job), ["asp", "nag_asgd"], seeds=2)
        board.write(root / f"lb{n}", f"autosync leaderboard {job.name} --policies asp --policies nag_asgd --seeds 2")
    return root


@pytest.mark.slow
def test_scaling_gathers_every_seed_per_policy_and_worker_count(boards):
    result = collect([boards / "lb4", boards / "lb2"])
    assert result.worker_counts == [2, 4]
    for n in (2, 4):
        runs = json.loads((boards / f"lb{n}" / "leaderboard.json").read_text())["runs"]
        for policy in ("asp", "nag_asgd"):
            point = next(p for p in result.points[policy] if p.n_workers == n)
            expected = [r["final_test_accuracy"] for r in runs[policy]]
            assert point.values == expected and point.mean == pytest.approx(statistics.fmean(expected))


@pytest.mark.slow
def test_scaling_command_writes_table_json_and_plot(boards):
    proc = autosync("scaling", "lb2", "lb4", "--metric", "final_train_loss", "--out", "sc", cwd=boards)
    assert proc.returncode == 0, proc.stderr
    md = (boards / "sc" / "scaling.md").read_text()
    assert "autosync scaling lb2 lb4 --metric final_train_loss --out sc" in md
    assert "| policy | n = 2 | n = 4 |" in md and "| nag_asgd |" in md
    data = json.loads((boards / "sc" / "scaling.json").read_text())
    assert [s["n_workers"] for s in data["policies"]["asp"]] == [2, 4]
    assert (boards / "sc" / "scaling.png").stat().st_size > 0


@pytest.mark.parametrize("args, message", [
    (["missing"], "missing: no leaderboard here"),
    (["lb2", "--metric", "nope"], "metric 'nope' is missing or not a number for policy 'asp'"),
    (["lb2", "lb2"], "two leaderboards have the same worker count ([2, 2])"),
    (["broken"], "broken/leaderboard.json: not a leaderboard written by autosync"),
])
@pytest.mark.slow
def test_scaling_bad_input_is_one_line_and_exit_2(boards, args, message):
    (boards / "broken").mkdir(exist_ok=True)
    (boards / "broken" / "leaderboard.json").write_text("{\"runs\": [")
    proc = autosync("scaling", *args, "--out", "bad", cwd=boards)
    assert proc.returncode == 2 and message in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    no_traceback(proc)


def test_collect_needs_a_folder():
    with pytest.raises(UserError, match="at least one leaderboard"):
        collect([])


@pytest.mark.slow
def test_leaderboards_of_another_job_are_refused_not_drawn_as_one(boards, tmp_path):
    """A leaderboard of another model (here lb4's, its model changed, at 8 workers) was drawn beside the
    others as if one job scaled."""
    data = json.loads((boards / "lb4" / "leaderboard.json").read_text())
    data["job"]["cluster"]["n_workers"] = 8
    data["job"]["workload"]["model"] = {"name": "mlp"}
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "leaderboard.json").write_text(json.dumps(data))
    with pytest.raises(UserError, match=r"^scaling: .*other/leaderboard.json is of another job than .*lb2/"
                                        r"leaderboard.json \(its model is \{'name': 'mlp'\}, not .*\); give "
                                        r"leaderboards of one job at several worker counts$"):
        collect([boards / "lb2", tmp_path / "other"])


@pytest.mark.parametrize("damage, problem", [
    (lambda d: d["runs"].update(asp=5), "TypeError: runs.asp must be a list of runs, but got 5"),
    (lambda d: d["runs"].update(asp=[1, 2]), "TypeError: runs.asp must be a list of runs, but got [1, 2]"),
    (lambda d: d["runs"].update(asp=[]), "TypeError: runs.asp must be a list of runs, but got []"),
    (lambda d: d["job"]["cluster"].update(n_workers=0), "n_workers must be a whole number >= 1, but got 0"),
    (lambda d: d["job"]["cluster"].update(n_workers=2.9), "n_workers must be a whole number >= 1, but got 2.9"),
])
@pytest.mark.slow
def test_a_damaged_leaderboard_is_one_line_naming_it(boards, tmp_path, damage, problem):
    """Each was a traceback (TypeError, AttributeError, StatisticsError), or a point drawn at n = 0 or 2."""
    data = json.loads((boards / "lb2" / "leaderboard.json").read_text())
    damage(data)
    (tmp_path / "lb").mkdir()
    (tmp_path / "lb" / "leaderboard.json").write_text(json.dumps(data))
    with pytest.raises(UserError, match=f"^{tmp_path / 'lb' / 'leaderboard.json'}: not a leaderboard written by "
                                        f"autosync \\(.*{re.escape(problem)}\\)$"):
        collect([tmp_path / "lb"])


def test_a_policy_named_bare_and_sized_to_each_n_is_one_series():
    """`--policies backup` is backup(k=3) at n = 4 and backup(k=6) at n = 8: two series of one point each,
    and no line in the plot; a k given explicitly stays a series of its own."""
    from autosync.catalog import checked_spec
    from autosync.experiments.scaling import series_name

    sized = {series_name(f"backup(k={3 * n // 4})", checked_spec("backup", n), n) for n in (4, 8)}
    assert sized == {"backup (k sized to n)"}
    assert series_name("backup(k=2)", checked_spec("backup:k=2", 4), 4) == "backup(k=2)"
    assert series_name("asp", checked_spec("asp", 4), 4) == "asp"  # nothing sized to n
    assert series_name("gone", {"policy": "no_such_policy", "params": {}}, 4) == "gone"  # another catalog's
