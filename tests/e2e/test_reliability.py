"""Inputs a new user gives that once ended in a traceback or changed files the user did not hand over:
each is one line `error: ...` naming the file, field or flag, the rule and the value, exit code 2, and
nothing is created or changed (the folder's files and the storage's rows compared before and after)."""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
from pathlib import Path

import optuna
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autosync.data import SYNC_SWITCH_LOGS
from tests.conftest import autosync, no_traceback

TINY = ("name: tiny\nworkload: {dataset: {name: digits}, model: {name: logreg}}\ncluster: {n_workers: 4}\n"
        "budget: {max_virtual_seconds: 20}\n")


def _snapshot(folder: Path) -> dict[str, str]:
    """Every file under `folder` with a hash of its bytes (folders as 'dir'): what a command may not change."""
    return {str(p.relative_to(folder)): "dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*"))}


def _one_line(proc, start: str = "error: ") -> str:
    no_traceback(proc)
    lines = [line for line in proc.stderr.splitlines() if line.strip() and not line.startswith("study storage: ")]
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith(start), proc.stderr
    return lines[0]


def _job(folder: Path) -> Path:
    path = folder / "tiny.yaml"
    path.write_text(TINY)
    return path


def _storage_with_studies(folder: Path, damage: str | None = None, copy_of: Path | None = None) -> str:
    """A storage with a finished study of tiny.yaml and one of another job; with `damage`, tiny's cache record
    is stored as that text (Optuna stores attributes as JSON). With `copy_of`, a copy of that storage made
    by this function (creating Optuna's schema takes most of a second; a copy, a millisecond)."""
    from autosync.core.job import load_job

    url = f"sqlite:///{folder / 's.db'}"
    if copy_of is not None:
        shutil.copyfile(copy_of, folder / "s.db")
    else:
        fingerprint = load_job(folder / "tiny.yaml").fingerprint()
        optuna.logging.set_verbosity(optuna.logging.ERROR)
        for name, fp, job in ((f"{fingerprint}-static_k", fingerprint, "tiny"),
                              ("0123456789abcdef-static_k", "0123456789abcdef", "other")):
            study = optuna.create_study(storage=url, study_name=name)
            for key, value in {"fingerprint": fp, "job_name": job, "n_workers": 3 if job == "other" else 4,
                               "cache": {"best_policy": {"policy": "backup", "params": {"k": 3}}, "best_value": 1.0,
                                         "trials": 1}}.items():
                study.set_user_attr(key, value)
    if damage is not None:
        with sqlite3.connect(folder / "s.db") as conn:
            conn.execute("UPDATE study_user_attributes SET value_json = ? WHERE key = 'cache' AND study_id = 1",
                         (damage,))
    return url


def _rows(folder: Path) -> list[tuple]:
    with sqlite3.connect(folder / "s.db") as conn:
        return conn.execute("SELECT study_id, key, value_json FROM study_user_attributes ORDER BY 1, 2").fetchall()


# ---------------------------------------------------------------- a damaged cache record

def test_a_damaged_cache_record_is_one_line_naming_the_study_and_cache_clear_removes_it(tmp_path):
    job = _job(tmp_path)
    url = _storage_with_studies(tmp_path, damage="{not json")
    rows = _rows(tmp_path)
    for command in (["cache", "show", str(job)], ["run", str(job), "--policy", "tuned"],
                    ["tune", str(job), "--space", "static_k"],  # the damaged study's space
                    ["cache", "list"], ["recommend", str(job)],  # the commands that read every study: one rule
                    ["leaderboard", str(job), "--include-tuned", "--policies", "bsp", "--seeds", "1"]):
        line = _one_line(autosync(*command, "--storage", url, cwd=tmp_path))
        assert "-static_k: corrupt cache entry (not JSON" in line and "cache clear" in line, line
    assert _rows(tmp_path) == rows  # nothing written by reading, nor by the refused tune
    cleared = autosync("cache", "clear", str(job), "--storage", url, cwd=tmp_path)
    assert cleared.returncode == 0 and "deleted 1 studies of job tiny" in cleared.stdout, cleared.stderr
    assert autosync("cache", "list", "--storage", url, cwd=tmp_path).stderr == ""


# ---------------------------------------------------------------- files that are not a storage

def _not_a_storage(folder: Path, kind: str) -> Path:
    path = folder / "x.db"
    if kind == "directory":
        path.mkdir()
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "random":
        path.write_bytes(bytes(range(256)) * 8)
    else:
        with sqlite3.connect(path) as conn:
            conn.execute("CREATE TABLE mine (x)")
    return path


@pytest.mark.parametrize("kind, message", [
    ("directory", "is a directory, not an SQLite database file"), ("empty", "is an empty file, not an autosync"),
    ("random", "is not an SQLite database file"), ("other_sqlite", "without autosync's study tables")])
def test_read_only_commands_refuse_a_file_that_is_not_a_storage_and_change_nothing(tmp_path, kind, message):
    job = _job(tmp_path)
    path = _not_a_storage(tmp_path, kind)
    before = _snapshot(tmp_path)
    for command in (["cache", "show", str(job)], ["cache", "list"], ["cache", "clear", str(job)],
                    ["recommend", str(job)], ["run", str(job), "--policy", "tuned"]):
        line = _one_line(autosync(*command, "--storage", f"sqlite:///{path}", cwd=tmp_path))
        assert line.startswith(f"error: --storage sqlite:///{path}: ") and message in line, line
    assert _snapshot(tmp_path) == before  # no table added, no growth, no lock file


def test_a_storage_whose_pages_are_damaged_past_the_first_is_one_line_for_every_command_that_reads_it(tmp_path):
    """Opening a storage reads its schema; a page overwritten further in (a disk fault, a copy cut short)
    surfaces where a command reads its rows: one line naming the damage, exit 2, never a traceback."""
    from autosync.core.job import load_job

    job = _job(tmp_path)
    path = tmp_path / "s.db"
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = optuna.create_study(storage=f"sqlite:///{path}", study_name=f"{load_job(job).fingerprint()}-static_k")
    study.set_user_attr("cache", {"best_policy": {"policy": "bsp", "params": {}}, "best_value": 1.0, "trials": 1})
    for _ in range(60):  # rows on pages of their own, past the schema's
        trial = study.ask()
        trial.set_user_attr("policy", {"policy": "bsp", "params": {}, "note": "x" * 200})
        study.tell(trial, 1.0)
    with open(path, "r+b") as f:  # a page of the trials' rows
        f.seek(int(path.stat().st_size * 0.3) // 4096 * 4096)
        f.write(b"\xaa" * 4096)
    for command in (["cache", "show", str(job)], ["cache", "clear", str(job)]):  # the commands reading its trials
        line = _one_line(autosync(*command, "--storage", f"sqlite:///{path}", cwd=tmp_path))
        assert "database disk image is malformed" in line, (command, line)
    line = _one_line(autosync("cache", "list", "--storage", f"sqlite:///{path}", cwd=tmp_path))
    assert line.startswith("error: the study storage is damaged ((sqlite3.DatabaseError) database disk image is "
                           "malformed): its studies cannot be read"), line


@pytest.mark.parametrize("kind", ["directory", "random"])
def test_tune_refuses_a_folder_or_random_bytes_before_taking_the_lock(tmp_path, kind):
    job = _job(tmp_path)
    path = _not_a_storage(tmp_path, kind)
    before = _snapshot(tmp_path)
    _one_line(autosync("tune", str(job), "--storage", f"sqlite:///{path}", cwd=tmp_path), "error: --storage")
    assert _snapshot(tmp_path) == before


# ---------------------------------------------------------------- names and paths

@pytest.mark.parametrize("name, message", [
    ("..", "name must not be only dots"), ("a" * 300, "name must be at most 100 characters"),
    ("a/b", "name may hold only letters"),
])
def test_a_job_name_that_cannot_be_a_folder_is_one_line_before_anything_is_written(tmp_path, name, message):
    path = tmp_path / "job.yaml"
    path.write_text(f"name: '{name}'\nbudget: {{max_updates: 5}}\n")
    before = _snapshot(tmp_path)
    for command in ("validate", "run"):
        line = _one_line(autosync(command, str(path), cwd=tmp_path))
        assert line.startswith(f"error: {path}: {message}"), line
    assert _snapshot(tmp_path) == before


def test_study_of_another_job_is_refused_unless_adopted(tmp_path):
    job = _job(tmp_path)
    url = _storage_with_studies(tmp_path)
    rows = _rows(tmp_path)
    line = _one_line(autosync("tune", str(job), "--study", "0123456789abcdef-static_k", "--storage", url,
                              cwd=tmp_path))
    assert line.startswith("error: --study 0123456789abcdef-static_k: a study of job other (fingerprint "
                           "0123456789abcdef, n_workers 3), not of job tiny") and "--adopt-study" in line, line
    assert _rows(tmp_path) == rows  # its job identity is not overwritten


# ---------------------------------------------------------------- budgets

def test_the_queue_holds_a_bounded_lookahead_whatever_the_budget_and_never_passes_it(tmp_path):
    from autosync.search.study.trials import LOOKAHEAD, budget_used, top_up

    url = f"sqlite:///{tmp_path / 'b.db'}"
    study = optuna.create_study(storage=url)
    first = [{"x": 1}, {"x": 2}]
    assert top_up(study, url, 10 ** 9, first) == 2 + LOOKAHEAD
    assert top_up(study, url, 10 ** 9, first) == 0  # still queued: nothing more
    assert len(study.get_trials()) == 2 + LOOKAHEAD
    small = optuna.create_study(storage=url, study_name="small")
    assert top_up(small, url, 3, first) == 3 and budget_used(small) == (0, 3)
    for trial in small.get_trials():  # run them all: the budget is spent, nothing more is queued
        small.tell(small.ask(), 1.0) if trial.state.name == "WAITING" else None
    assert top_up(small, url, 3) == 0 and sum(budget_used(small)) == 3


# ---------------------------------------------------------------- values that cannot work

@pytest.mark.parametrize("text, message", [
    ("target: {threshold: 1.5}\n", "target.threshold must be > 0 and <= 1 for metric test_accuracy, but got 1.5"),
    ("target: {threshold: -1}\n", "target.threshold must be > 0 and <= 1 for metric test_accuracy, but got -1"),
    ("target: {metric: train_loss, threshold: 0}\n", "target.threshold must be > 0 for metric train_loss"),
    ("cluster: {n_workers: true}\n", "cluster.n_workers must be a number, not true or false, but got True"),
    ("workload: {lr_schedule: {gamma: .nan}}\n", "workload.lr_schedule.gamma must be a finite number"),
    ("workload: {dataset: {name: mnist, root: nowhere}}\n",
     "workload.dataset.root must be an existing directory (download is false), but got 'nowhere'"),
    ("cluster: {round_trip: {kind: trace, path: empty.csv}}\n", "the round-trip trace is empty"),
    ("cluster: {round_trip: {kind: trace, path: t.csv, column: z}}\n", "must name a header of the trace, but got 'z'"),
    ("cluster: {round_trip: {kind: trace, path: t.csv, column: a}}\n", "line 3 must hold a number, but got 'abc'"),
    ("cluster: {round_trip: {kind: trace, path: neg.csv}}\n", "line 2 must be a positive time, but got -1.0"),
    ("cluster: {round_trip: {kind: trace, path: nan.csv}}\n", "line 1 must be a positive time, but got nan"),
])
def test_values_that_cannot_work_are_refused_by_validate_and_run(tmp_path, text, message):
    (tmp_path / "empty.csv").write_text("")
    (tmp_path / "t.csv").write_text("a\n1\nabc\n")
    (tmp_path / "neg.csv").write_text("1\n-1\n")
    (tmp_path / "nan.csv").write_text("nan\n")
    path = tmp_path / "job.yaml"
    path.write_text("name: j\nbudget: {max_updates: 5}\n" + text)
    before = _snapshot(tmp_path)
    for command in ("validate", "run"):
        line = _one_line(autosync(command, str(path), cwd=tmp_path))
        assert line.startswith(f"error: {path}: ") and message in line, line
    assert _snapshot(tmp_path) == before


@pytest.mark.parametrize("dimension, message", [
    ("backup: {k: {type: int, low: 0, high: n_workers}}", "policies.backup.k can sample 0"),
    ("backup: {k: {type: int, low: 1, high: 99}}", "policies.backup.k can sample 99"),
    ("backup: {k: 2, lr_rule: {type: categorical, choices: [fixed, bogus]}}", "policies.backup.lr_rule can sample 'bogus'"),
    ("backup: {k: {type: int, low: 1, high: 3, step: 5}}", "policies.backup.k step must be at most high - low = 2"),
])
def test_impossible_search_space_bounds_are_refused_before_the_storage_exists(tmp_path, dimension, message):
    job = _job(tmp_path)
    space = tmp_path / "space.yaml"
    space.write_text(f"name: s\npolicies: {{{dimension}}}\n")
    before = _snapshot(tmp_path)
    line = _one_line(autosync("tune", str(job), "--space", str(space), "--storage", f"sqlite:///{tmp_path}/s.db",
                              cwd=tmp_path))
    assert line.startswith(f"error: {space}: ") and message in line, line
    assert _snapshot(tmp_path) == before


@pytest.mark.parametrize("args", [["tune", "--seed", "-1"], ["run", "--seed", str(2 ** 70)]])
def test_a_seed_out_of_range_is_a_parser_error(tmp_path, args):
    proc = autosync(*args, cwd=tmp_path)
    no_traceback(proc)
    assert proc.returncode == 2 and "invalid value for '--seed'" in proc.stderr, proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_device_or_a_pipe_is_not_called_missing(tmp_path):
    import os

    os.mkfifo(tmp_path / "pipe.yaml")
    for path in ("/dev/null", str(tmp_path / "pipe.yaml")):
        line = _one_line(autosync("validate", path, cwd=tmp_path))
        assert line == f"error: {path}: is not a regular file (a device, pipe or socket), not a YAML file"


@pytest.mark.parametrize("field, value, problem", [
    ("race", {"rounds": 5}, "race: must be a list, but got 5"),
    ("race", {"rounds": [5]}, "race: must be an object, but got 5"),
    ("speedup_vs_bsp", "x", "speedup_vs_bsp: must be a number, but got 'x'"),
    ("bsp_time_to_target", -3, "bsp_time_to_target: must be a number >= 0, but got -3"),
    ("best_value", -5, "best_value: must be a number >= 0, but got -5"),
    ("neighbour_jobs", 5, "neighbour_jobs: must be a list, but got 5"),
    ("best_reached", "x", "best_reached: must be a number, but got 'x'"),
])
def test_a_cache_record_field_its_readers_compute_with_damaged_is_one_line_for_each(tmp_path, field, value, problem):
    """Each was a traceback where the tune answered from the cache or `recommend` printed it (race_top, a
    number formatted with :.2f), or printed as it was (a negative time)."""
    job = _job(tmp_path)
    record = {"best_policy": {"policy": "backup", "params": {"k": 3}}, "best_value": 1.0, "trials": 1, field: value}
    url = _storage_with_studies(tmp_path, damage=json.dumps(record))
    for command in (["cache", "show", str(job)], ["tune", str(job), "--space", "static_k"], ["recommend", str(job)]):
        line = _one_line(autosync(*command, "--storage", url, cwd=tmp_path))
        assert f"-static_k: corrupt cache entry ({problem}); run `autosync cache clear`" in line, line


@pytest.mark.parametrize("value", ['"abc"', "[1, 2]", '["a", 1, 1, 1, 1]', "[NaN, 0, 0, 0, 0]"])
def test_a_studys_cluster_features_damaged_are_one_line_for_recommend(tmp_path, value):
    """A numpy traceback each (a loop of strings, a broadcast, NaN to an integer) where recommend measured
    the distance to the study."""
    job = _job(tmp_path)
    url = _storage_with_studies(tmp_path)
    with sqlite3.connect(tmp_path / "s.db") as conn:
        conn.execute("INSERT INTO study_user_attributes (study_id, key, value_json) VALUES (2, 'cluster_features', ?)",
                     (value,))
        conn.execute("INSERT INTO study_user_attributes (study_id, key, value_json) VALUES (2, 'workload_key', '\"w\"')")
    line = _one_line(autosync("recommend", str(job), "--storage", url, cwd=tmp_path))
    assert line.startswith("error: study 0123456789abcdef-static_k: corrupt cache entry (cluster_features: must be "), line


# ---------------------------------------------------------------- fuzz: damaged cache records

_DAMAGE = st.one_of(
    st.text(max_size=40),  # not JSON, or JSON of the wrong shape
    st.builds(json.dumps, st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
                                       | st.text(max_size=8), lambda inner: st.lists(inner, max_size=3)
                                       | st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=8)),
    st.builds(lambda k, v: json.dumps({"best_policy": {"policy": "backup", "params": {"k": 3}}, "best_value": 1.0,
                                       "trials": 1, k: v}), st.sampled_from(["best_policy", "best_value", "trials"]),
              st.none() | st.text(max_size=5) | st.integers() | st.lists(st.integers(), max_size=2)),
)


@pytest.fixture(scope="module")
def intact_storage(tmp_path_factory) -> Path:
    """The storage `_storage_with_studies` makes, made once for the examples below, which each damage a copy."""
    folder = tmp_path_factory.mktemp("intact")
    _job(folder)
    _storage_with_studies(folder)
    return folder / "s.db"


@pytest.mark.slow
@settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(damage=_DAMAGE)
def test_a_randomly_damaged_cache_record_is_read_or_refused_in_one_line(tmp_path_factory, intact_storage, damage):
    folder = tmp_path_factory.mktemp("damaged")
    job = _job(folder)
    url = _storage_with_studies(folder, damage=damage, copy_of=intact_storage)
    rows = _rows(folder)
    refused = set()
    for command in (["cache", "show", str(job)], ["cache", "list"], ["recommend", str(job)],
                    ["run", str(job), "--policy", "tuned", "--param", "k=9"]):
        proc = autosync(*command, "--storage", url, cwd=folder)
        no_traceback(proc)
        assert proc.returncode in (0, 2), proc.stderr
        if proc.returncode == 2:
            assert len([line for line in proc.stderr.splitlines() if line.strip()]) == 1, proc.stderr
        refused.add("corrupt cache entry" in proc.stderr)
    assert len(refused) == 1  # one rule: a record that one command refuses as damaged, each of them refuses
    assert _rows(folder) == rows
    cleared = autosync("cache", "clear", str(job), "--storage", url, cwd=folder)
    assert cleared.returncode == 0 and "deleted 1 studies" in cleared.stdout, cleared.stderr


@pytest.mark.parametrize("args", [[], ["cache"]])
def test_no_command_prints_the_help_once(tmp_path, args):
    proc = autosync(*args, cwd=tmp_path)
    no_traceback(proc)
    assert proc.returncode == 2 and (proc.stdout + proc.stderr).count("Usage: autosync") == 1


def test_an_integer_family_range_draws_inside_its_ends_or_is_refused():
    import numpy as np

    from autosync.core.family import Range, draw

    rng = np.random.default_rng(0)
    assert {draw(Range(low=3.6, high=5.4, integer=True), rng) for _ in range(200)} <= {4, 5}
    with pytest.raises(ValueError, match="an integer range must hold an integer, but got low=4.2, high=4.8"):
        Range(low=4.2, high=4.8, integer=True)


def test_an_out_name_too_long_for_the_file_system_is_one_line(tmp_path):
    job = _job(tmp_path)
    before = _snapshot(tmp_path)
    for command in (["tune", str(job), "--storage", f"sqlite:///{tmp_path}/s.db"], ["leaderboard", str(job)]):
        line = _one_line(autosync(*command, "--out", "x" * 300, cwd=tmp_path), "error: --out: cannot write in")
        assert line.endswith("File name too long"), line
    assert _snapshot(tmp_path) == before


@pytest.mark.parametrize("command, taken", [
    (["run"], "final_params.pt"),  # a traceback after the training, which was lost
    (["leaderboard", "--seeds", "1", "--policies", "bsp"], "curves.png"),
    (["leaderboard", "--seeds", "1", "--policies", "bsp"], "runs.jsonl"),
])
def test_a_folder_in_the_place_of_a_file_the_command_writes_is_one_line_before_any_run(tmp_path, command, taken):
    job = _job(tmp_path)
    (tmp_path / "out" / taken).mkdir(parents=True)
    before = _snapshot(tmp_path)
    line = _one_line(autosync(command[0], str(job), *command[1:], "--out", str(tmp_path / "out"), cwd=tmp_path))
    assert line == f"error: --out: {tmp_path / 'out' / taken} is a directory, but the command writes a file there"
    assert _snapshot(tmp_path) == before


@pytest.mark.parametrize("args, says", [
    (["leaderboard", "--seeds", "99999999999999999999999"], "--seeds"),  # an OverflowError traceback
    (["robustness", "FAMILY", "--seed-offset", "99999999999999999999999"], "--seed-offset"),  # every run failed
    (["robustness", "FAMILY", "--seed-offset", "4294967295", "--seeds", "2"],
     "--seed-offset + --seeds - 1 must be <= 4294967295"),
    (["family", "FAMILY", "--jobs", "99999999999999999999999"], "--jobs"),  # out of memory
    (["run", "--backend", "processes", "--worker-timeout", "inf"], "--worker-timeout"),  # an OverflowError traceback
])
def test_a_count_or_a_wait_past_what_a_run_can_hold_is_one_line(tmp_path, args, says):
    from autosync.data import BASELINE_DIR

    job = _job(tmp_path)
    args = [str(BASELINE_DIR / "family_quick.yaml") if a == "FAMILY" else a for a in args]
    if args[0] in ("leaderboard", "run"):
        args.insert(1, str(job))
    proc = autosync(*args, "--out", str(tmp_path / "out"), cwd=tmp_path)
    no_traceback(proc)
    assert proc.returncode == 2 and says in proc.stderr, proc.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("args, where", [
    (["leaderboard", "--out", ""], "after --out"),  # the parser reads '' as the current folder: written there
    (["run", "--out="], "--out="),
    (["tune", "--storage", ""], "after --storage"),  # read as the default storage
    (["recommend", "--storage", ""], "after --storage"),
    (["tune", "--race-settings", ""], "after --race-settings"),  # read as the shipped settings
    (["", "tune"], "as the command"),
    (["run", "--out", " "], "after --out"),  # a folder named " "
    (["tune", "--out= "], "--out="),
])
def test_an_empty_argument_is_one_line_before_anything_is_read_or_written(tmp_path, args, where):
    before = _snapshot(tmp_path)
    line = _one_line(autosync(*args, cwd=tmp_path))
    assert line == (f"error: an empty argument {where}: give a value, or leave the option out for its default "
                    "(an unset shell variable passes an empty one)"), line
    assert _snapshot(tmp_path) == before


# ---------------------------------------------------------------- reports, logs and output files

ROBUSTNESS = Path(__file__).resolve().parents[2] / "results" / "robustness"
SWITCH_LOGS = SYNC_SWITCH_LOGS  # the paper's published logs, shipped in autosync/data/sync_switch_logs


def _damaged_report(folder: Path, where: str) -> Path:
    """A copy of the committed stragglers report with one number turned into a string."""
    import shutil

    copy = folder / "stragglers"
    shutil.copytree(ROBUSTNESS / "stragglers", copy)
    data = json.loads((copy / "robustness.json").read_text())
    if where == "summary":
        data["summary"][0]["median_regret"] = "oops"
    elif where == "jobs":
        data["jobs"][1]["static"]["k=2 fixed"] = "oops"
    else:  # a top-level field or a job's text, emptied or of another type
        key, value = where.split("=", 1)
        target = data["jobs"][0] if key.startswith("jobs.0.") else data
        target[key.removeprefix("jobs.0.")] = json.loads(value)
    (copy / "robustness.json").write_text(json.dumps(data))
    return copy


@pytest.mark.parametrize("where, field", [("summary", "summary.0.median_regret"), ("jobs", "jobs.1.static.k=2 fixed")])
def test_a_robustness_report_holding_a_string_for_a_number_is_one_line(tmp_path, where, field):
    report = _damaged_report(tmp_path, where)
    before = _snapshot(tmp_path)
    for command in (["robustness-compare", str(ROBUSTNESS / "shared"), str(report), "--out", "t.md"],
                    ["recommend", "--grid", str(report), "--storage", f"sqlite:///{tmp_path}/none.db"]):
        line = _one_line(autosync(*command, cwd=tmp_path))
        assert line == (f"error: {report}/robustness.json: not a robustness report written by `autosync robustness` "
                        f"(TypeError: {field} must be a number, but got 'oops')"), line
    assert _snapshot(tmp_path) == before


@pytest.mark.parametrize("where, reason", [
    ("jobs=[]", "ValueError: jobs is empty: the report holds no drawn job"),
    ("jobs={}", "TypeError: jobs must be a list, but got {}"),
    ("lr_rules=5", "TypeError: lr_rules must be a list, but got 5"),
    ("seeds=\"x\"", "TypeError: seeds must be a list, but got 'x'"),
    ("jobs.0.fingerprint=null", "TypeError: jobs.0.fingerprint must be text, but got None"),
    ("jobs.0.budget=null", "ValueError: jobs.0: n_workers must be a whole number >= 1 and budget a number > 0, but "
                           "got 16 and None")])
def test_a_robustness_report_emptied_or_of_another_shape_is_one_line(tmp_path, where, reason):
    report = _damaged_report(tmp_path, where)  # each was a traceback in one reader or read on as if whole
    for command in (["robustness-compare", str(ROBUSTNESS / "shared"), str(report)],
                    ["recommend", "--grid", str(report), "--storage", f"sqlite:///{tmp_path}/none.db"]):
        line = _one_line(autosync(*command, cwd=tmp_path))
        assert line == (f"error: {report}/robustness.json: not a robustness report written by `autosync robustness` "
                        f"({reason})"), line


@pytest.mark.parametrize("where", ["jobs.0.bsp_time=null", "jobs.0.static={\"k=1 fixed\": null}"])
def test_a_robustness_report_with_a_time_not_measured_is_read_by_recommend(tmp_path, where):
    """A null time (none measured) was a TypeError where recommend compared it with the budget."""
    report = _damaged_report(tmp_path, where)
    proc = autosync("recommend", "--grid", str(report), "--storage", f"sqlite:///{tmp_path}/none.db", cwd=tmp_path)
    no_traceback(proc)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("out, message", [("/proc/x/table.md", "error: --out: cannot write in /proc/x: "),
                                          (".", "error: --out: . is a directory, but a file to write is needed")])
def test_robustness_compare_out_that_cannot_be_written_is_one_line(tmp_path, out, message):
    before = _snapshot(tmp_path)
    line = _one_line(autosync("robustness-compare", str(ROBUSTNESS / "shared"), str(ROBUSTNESS / "stragglers"),
                              "--out", out, cwd=tmp_path))
    assert line.startswith(message), line
    assert _snapshot(tmp_path) == before


def test_calibrate_out_an_existing_directory_is_refused_before_any_run(tmp_path):
    job = _job(tmp_path)
    (tmp_path / "cal").mkdir()
    before = _snapshot(tmp_path)
    line = _one_line(autosync("calibrate", str(job), "--out", "cal", cwd=tmp_path))
    assert line == "error: --out: cal is a directory, but a file to write is needed", line
    assert _snapshot(tmp_path) == before  # no calibration.json in it


def _damaged_logs(folder: Path, damage: str) -> Path:
    """Sync-Switch logs of one BSP and one ASP run and one switch run, damaged: a NaN final accuracy, or the
    ASP run as long as the BSP run."""
    import shutil

    logs = folder / "logs"
    shutil.copytree(SWITCH_LOGS / "baseline" / "bsp", logs / "baseline" / "bsp")
    if damage == "equal":
        shutil.copytree(SWITCH_LOGS / "baseline" / "bsp", logs / "baseline" / "asp")
    else:
        shutil.copytree(SWITCH_LOGS / "baseline" / "asp", logs / "baseline" / "asp")
        csv = logs / "baseline" / "bsp" / "acc_proc.csv"
        lines = csv.read_text().splitlines()
        # "short": a last row without its Value column (was a TypeError traceback)
        lines[-1] = lines[-1].rsplit(",", 1)[0] + ("" if damage == "short" else ",nan")
        csv.write_text("\n".join(lines) + "\n")
    switch = next(p for p in sorted((SWITCH_LOGS / "switch_exp").iterdir()) if p.name.startswith("b"))
    shutil.copytree(switch, logs / "switch_exp" / switch.name)
    return logs


@pytest.mark.parametrize("damage, message", [
    ("nan", "baseline/bsp/acc_proc.csv: the last row's Value must be a finite number >= 0, but got nan"),
    ("short", "baseline/bsp/acc_proc.csv: unreadable training log (TypeError: float() argument must be a string or "
              "a real number, not 'NoneType'); expected columns 'Wall time', 'Step', 'Value' and optionally 'Time'"),
    ("equal", "baseline: the ASP runs must take more steps than the BSP runs (an ASP step consumes one worker "
              "batch, a BSP step n), but got a median of 5000 ASP and 5000 BSP steps")])
def test_replay_of_damaged_logs_is_one_line_and_leaves_no_output_folder(tmp_path, damage, message):
    logs = _damaged_logs(tmp_path, damage)
    before = _snapshot(tmp_path)
    line = _one_line(autosync("replay", str(logs), "--out", "out/table", cwd=tmp_path))
    assert line == f"error: {logs}/{message}", line
    assert _snapshot(tmp_path) == before  # no out/ nor out/table


def test_failed_commands_leave_no_empty_output_folder(tmp_path):
    job = _job(tmp_path)
    (tmp_path / "family.yaml").write_text("name: f\n")
    (tmp_path / "kept").mkdir()  # a folder that was there before stays
    before = _snapshot(tmp_path)
    for command, start in ((["scaling", "nowhere", "--out", "sc/a"], "error: nowhere: no leaderboard here"),
                           (["leaderboard", str(job), "--policies", "bogus", "--out", "lb"], "error: --policies"),
                           (["robustness", "family.yaml", "--out", "rb"], "error: family.yaml: "),
                           (["scaling", "nowhere", "--out", "kept"], "error: nowhere: ")):
        proc = autosync(*command, cwd=tmp_path)
        no_traceback(proc)
        assert proc.returncode == 2 and proc.stderr.splitlines()[-1].startswith(start), proc.stderr
    assert _snapshot(tmp_path) == before


# ---------------------------------------------------------------- the user's code

@pytest.mark.parametrize("module, code, message", [
    ("exits_on_import", "import sys\nsys.exit(3)\n",
     "'exits_on_import:data' does not import: module 'exits_on_import' called sys.exit(3) while it was imported"),
    ("exits_when_called", "import sys\ndef data(seed=0):\n    sys.exit('no data')\n",
     "'exits_when_called:data' called sys.exit('no data')")])
def test_a_user_dataset_that_calls_sys_exit_is_one_line_naming_its_module(tmp_path, module, code, message):
    (tmp_path / f"{module}.py").write_text(code)
    path = tmp_path / "job.yaml"
    path.write_text(f"name: j\nbudget: {{max_updates: 5}}\nworkload: {{dataset: {{factory: '{module}:data'}}}}\n")
    before = _snapshot(tmp_path)
    for command in ("validate", "run"):
        line = _one_line(autosync(command, str(path), cwd=tmp_path))
        assert line == f"error: {path}: workload.dataset.factory: {message}", line
    assert {k: v for k, v in _snapshot(tmp_path).items() if "__pycache__" not in k} == before


# ---------------------------------------------------------------- parser messages

@pytest.mark.parametrize("args, first", [
    (["tune", "--bogus"], "error: autosync tune: no such option: --bogus"),  # no guess that shares only dashes
    (["tune", "--sed", "3"], "error: autosync tune: no such option: --sed (did you mean --seed?)"),
    (["tune", "--seed"], "error: autosync tune: option '--seed' requires an argument."),
    (["cache", "show", "--storage"], "error: autosync cache show: option '--storage' requires an argument."),
])
def test_parser_errors_name_the_command_and_suggest_only_close_options(tmp_path, args, first):
    proc = autosync(*args, cwd=tmp_path)
    no_traceback(proc)
    command = first.split(": ")[1]
    assert proc.returncode == 2 and proc.stderr.splitlines() == [first, f"hint: see '{command} --help'"], proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_robustness_tuned_space_that_does_not_exist_names_its_own_flag(tmp_path):
    import shutil

    family = Path(shutil.copy(Path(__file__).resolve().parents[2] / "baselines" / "family_quick.yaml", tmp_path))
    before = _snapshot(tmp_path)
    line = _one_line(autosync("robustness", str(family), "--tuned-space", "nosuch", cwd=tmp_path))
    assert line.startswith("error: --tuned-space: file ") and "nosuch.yaml does not exist (shipped spaces: " in line
    assert _snapshot(tmp_path) == before  # no job file written


# ---------------------------------------------------------------- a killed tune

@pytest.mark.slow
@pytest.mark.processes
def test_a_killed_tune_on_this_machine_is_resumed_at_once(tiny_job, tmp_path):
    """With the default 30 s heartbeat, the trial a SIGKILL left RUNNING is failed and re-queued when the
    same command starts again, without waiting out the 60 s grace: its process (host:pid) is gone."""
    import re
    import signal
    import socket

    from tests.conftest import freeze_when, signal_and_wait, start_autosync
    from tests.e2e.test_interruptions import _long, _mid_trial

    job = _long(tiny_job, threshold=0.99)
    db = tmp_path / "s.db"
    args = ("tune", str(job), "--sampler", "tpe", "--n-trials", "4", "--storage", f"sqlite:///{db}")
    tune = start_autosync(*args, cwd=tmp_path)
    if not freeze_when(tune, lambda: _mid_trial(db)):  # killed in the state seen, not in a later one
        tune.kill()
        raise AssertionError(f"the tune never got into its third trial; its stderr ends: {tune.communicate()[1][-2000:]}")
    signal_and_wait(tune, signal.SIGKILL)
    with sqlite3.connect(db) as conn:
        (number,) = conn.execute("SELECT number FROM trials WHERE state = 'RUNNING'").fetchone()
        (last,) = conn.execute("SELECT max(number) FROM trials").fetchone()
    resumed = autosync(*args, cwd=tmp_path)  # the same command again, in this process (no new imports to pay)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    line = next(x for x in resumed.stderr.splitlines(keepends=True) if not x.startswith("study storage: "))
    assert re.fullmatch(rf"resuming the study: \d+ finished trials? of the budget and BSP's reference runs found; "
                        rf"1 trial whose process died "
                        rf"\(#{number}\) re-queued\n", line), line
    with sqlite3.connect(db) as conn:
        reason = conn.execute("SELECT value_json FROM trial_user_attributes JOIN trials USING (trial_id) WHERE "
                              "number = ? AND key = 'fail_reason'", (number,)).fetchone()[0]
    assert re.search(rf"its process {socket.gethostname()}:\d+ is gone \(killed\); the trial is re-run", reason)
    # at once, not after the 60 s grace a trial of another machine gets: it was failed before the resumed
    # tune started any trial of its own (an order of events in the storage, not a bound on the wall clock)
    with sqlite3.connect(db) as conn:
        (failed_at,) = conn.execute("SELECT datetime_complete FROM trials WHERE number = ?", (number,)).fetchone()
        started = [s for (s,) in conn.execute("SELECT datetime_start FROM trials WHERE number > ? AND "
                                              "datetime_start IS NOT NULL", (last,))]
    assert failed_at is not None and started and failed_at <= min(started), (failed_at, started)
    assert _trials_in(db, "RUNNING") == 0 and _trials_in(db, "COMPLETE") + _trials_in(db, "PRUNED") >= 4


def _trials_in(db: Path, state: str) -> int:
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT count(*) FROM trials WHERE state = ?", (state,)).fetchone()[0]


def test_a_trial_of_a_gone_process_of_this_machine_is_dead_and_one_elsewhere_is_not_known():
    import os
    import socket
    import subprocess
    import sys

    from autosync.search.study.claim import process_gone

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    host = socket.gethostname()
    assert process_gone(f"{host}:{child.pid}")
    assert not process_gone(f"{host}:{os.getpid()}") and not process_gone(f"elsewhere-{host}:{child.pid}")
    assert not process_gone(None) and not process_gone(f"{host}:abc")
