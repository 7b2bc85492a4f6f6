"""`autosync tune --table`: a tune replayed on the table runs the live tune's trials, gives its answer and
reports its cost; `autosync table` builds a table that a second build leaves byte for byte as it was."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest

from autosync.data import BASELINE_DIR
from autosync.engine.forks import FORKS
from autosync.table import KEPT
from tests.conftest import autosync, no_traceback

COMMITTED_TABLE = Path(__file__).resolve().parents[2] / "results" / "table"

pytestmark = pytest.mark.slow


def _trials(storage: str) -> list[tuple]:
    """Every trial of the storage's one study as the search left it: number, state, parameters, values and
    what it recorded (the process that ran it left out)."""
    (summary,) = optuna.get_all_study_summaries(storage)
    study = optuna.load_study(study_name=summary.study_name, storage=storage)
    return [(t.number, t.state.name, t.params, t.values,
             {k: v for k, v in t.user_attrs.items() if k != "process"}) for t in study.get_trials()]


def _tune(tmp_path: Path, job: Path, name: str, *extra: str) -> dict:
    FORKS.clear()  # each tune as in a process of its own: nothing kept from the one before
    KEPT.clear()
    url = f"sqlite:///{tmp_path / name}.db"
    proc = autosync("tune", str(job), "--storage", url, "--json", *extra, cwd=tmp_path)
    no_traceback(proc)
    assert proc.returncode == 0, proc.stderr
    return {"url": url, "out": json.loads(proc.stdout)}


def test_a_tune_replayed_on_the_table_runs_the_live_tune_s_trials_and_answers_alike(tiny_job, tmp_path):
    table = tmp_path / "table"
    live = _tune(tmp_path, tiny_job, "live")
    filling = _tune(tmp_path, tiny_job, "filling", "--table", str(table))
    files = {p.name: p.read_bytes() for p in table.iterdir()}
    replayed = _tune(tmp_path, tiny_job, "replayed", "--table", str(table))
    assert {p.name: p.read_bytes() for p in table.iterdir()} == files  # every run came from the table
    trials = _trials(live["url"])
    assert len(trials) >= 10  # the default space's race: many families, forks and checks
    for other in (filling, replayed):
        assert _trials(other["url"]) == trials
        for key in ("best_policy", "best_value", "search_cost_bsp_trainings", "cost_to_answer_bsp_trainings"):
            assert other["out"]["cache"][key] == live["out"]["cache"][key], key


@pytest.fixture
def own_joblib_workers():
    """joblib's worker processes shut down after the test: a later test in this process (a leaderboard of a
    user's workload) would otherwise reuse workers spawned before its job's code was on the path."""
    yield
    from joblib.externals.loky import get_reusable_executor

    get_reusable_executor().shutdown(wait=True)


def test_a_table_built_twice_has_the_same_bytes_and_the_second_build_runs_nothing(tiny_job, tmp_path,
                                                                                  own_joblib_workers):
    args = ("table", str(tiny_job), "--policies", "bsp", "--policies", "asp", "--policies", "backup:k=3",
            "--held-out", "1", "--n-jobs", "2", "--json")
    first = autosync(*args, "--out", "a", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    built = json.loads(first.stdout)
    assert (built["computed"], built["reused"], built["failed"]) == (9, 0, [])  # 3 points x 3 seeds
    again = json.loads(autosync(*args, "--out", "a", cwd=tmp_path).stdout)
    assert (again["computed"], again["reused"]) == (0, 9)
    other = autosync(*args[:-3], "--n-jobs", "1", "--json", "--out", "b", cwd=tmp_path)
    assert other.returncode == 0, other.stderr
    (a,), (b,) = ((tmp_path / d).glob("*.cells.xz") for d in "ab")
    assert a.read_bytes() == b.read_bytes()


def test_a_bad_table_option_is_one_line_before_anything_runs(tiny_job, tmp_path):
    (tmp_path / "file").write_text("")
    for args, message in ((("tune", str(tiny_job), "--table", "file"), "--table must be a directory"),
                          (("tune", str(tiny_job), "--table", "t", "--backend", "processes"),
                           "--table replays simulator runs"),
                          (("table", str(tiny_job), "--policies", "backup:k=9", "--out", "t"),
                           "k must be between 1 and n_workers=4"),
                          (("table", "missing.yaml", "--out", "t"), "missing.yaml: file not found"),
                          (("table", str(tiny_job), "--out", "file"), "--out: file is a file, but an output directory "
                           "is needed"),
                          (("table", str(tiny_job), "--out", "file/t"), "--out: cannot write in file/t: Not a directory"),
                          (("fit", str(BASELINE_DIR / "family_fresh.yaml"), "--table", "file"),
                           "--table file: a file, but the table is a directory"),
                          (("fit", str(BASELINE_DIR / "family_fresh.yaml"), "--table", ""),
                           "error: an empty argument after --table: give a value"),
                          (("fit", str(BASELINE_DIR / "family_fresh.yaml"), "--table", str(COMMITTED_TABLE), "--out",
                            str(tmp_path)), f"--out: {tmp_path} is a directory")):
        proc = autosync(*args, cwd=tmp_path)
        no_traceback(proc)
        assert proc.returncode == 2 and message in proc.stderr, (args, proc.stderr)
        assert "cells" not in proc.stderr  # no progress bar before the refusal
    assert not (tmp_path / "t").exists()
