"""The command line as a user meets it: exit codes, one-line errors, files written."""

from __future__ import annotations

import json

import pytest

from tests.conftest import autosync, no_traceback as _no_traceback


@pytest.mark.slow
def test_run_writes_trace_summary_and_plot(tiny_job, tmp_path):
    out = tmp_path / "out"
    proc = autosync("run", str(tiny_job), "--policy", "backup", "--param", "k=3", "--param", "lr_rule=proportional",
                    "--seed", "5", "--out", str(out), "--plot", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["policy"] == {"policy": "backup", "params": {"k": 3, "lr_rule": "proportional"}}
    assert summary["seed"] == 5 and summary["updates"] > 0
    for name in ("trace.json", "updates.csv", "arrivals.csv", "evals.csv", "plot.png"):
        assert (out / name).stat().st_size > 0
    assert "time to test_accuracy" in proc.stdout


def test_runs_of_one_policy_with_other_parameters_keep_folders_of_their_own_and_no_earlier_plot(tiny_job, tmp_path):
    """The default folder is named by the policy and the parameters it sets: backup k = 1 and k = 3 were both
    results/runs/tiny/backup-seed0, the second overwriting the first and leaving its plot.png beside it."""
    for k, plot in ((1, ["--plot"]), (3, [])):
        proc = autosync("run", str(tiny_job), "--policy", f"backup:k={k}", *plot, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
    runs = tmp_path / "results" / "runs" / "tiny"
    assert sorted(p.name for p in runs.iterdir()) == ["backup-k=1-seed0", "backup-k=3-seed0"]
    assert (runs / "backup-k=1-seed0" / "plot.png").exists() and not (runs / "backup-k=3-seed0" / "plot.png").exists()
    again = autosync("run", str(tiny_job), "--policy", "backup:k=1", cwd=tmp_path)  # the same folder, no --plot
    assert again.returncode == 0 and not (runs / "backup-k=1-seed0" / "plot.png").exists()


@pytest.mark.parametrize("args, message", [
    (["--policy", "nope"], "--policy must be one of"),
    (["--policy", "backup", "--param", "k=99"], "k must be between 1 and n_workers=4, but got k=99"),
    (["--policy", "backup", "--param", "z=1"], "policy backup has no parameter 'z'"),
    (["--policy", "backup", "--param", "k"], "--param must look like key=value"),
    (["--policy", "backup", "--param", "k=abc"], "parameter k must be int, but got 'abc'"),
    (["--policy", "sync_switch", "--param", "switch_at=1" + "0" * 400],  # an OverflowError traceback before
     "parameter switch_at must be a float (at most 1.798e+308), but got 100000"),
])
@pytest.mark.slow
def test_bad_cli_options_exit_2_with_one_line(tiny_job, tmp_path, args, message):
    proc = autosync("run", str(tiny_job), *args, cwd=tmp_path)
    assert proc.returncode == 2
    _no_traceback(proc)
    assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_validate_reports_all_problems(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("cluster: {n_workers: 0}\nworkload: {batch_size: 0}\n")
    proc = autosync("validate", str(bad), cwd=tmp_path)
    assert proc.returncode == 2
    _no_traceback(proc)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 2 and all(str(bad) in l for l in lines)
    assert "cluster.n_workers must be >= 1, but got 0" in proc.stderr


def test_validate_ok_and_policies_listing(tiny_job, tmp_path):
    proc = autosync("validate", str(tiny_job), cwd=tmp_path)
    assert proc.returncode == 0 and "fingerprint" in proc.stdout
    proc = autosync("policies", cwd=tmp_path)
    assert proc.returncode == 0
    for name in ("bsp", "asp", "ssp", "backup"):
        assert name in proc.stdout


def test_missing_job_file_exit_2(tmp_path):
    proc = autosync("run", "nope.yaml", cwd=tmp_path)
    assert proc.returncode == 2 and "nope.yaml: file not found" in proc.stderr
    _no_traceback(proc)


@pytest.mark.parametrize("args, message", [
    (["tune", "--n-trials", "0"], "error: autosync tune: invalid value for '--n-trials'"),
    (["tune", "--seed", "abc"], "but got 'abc'"),
    (["tune", "--seed=abc"], "but got 'abc'"),
    (["frob"], "error: autosync: no such command 'frob'"),
    (["tune", "--frob"], "error: autosync tune: no such option: --frob"),
])
def test_parser_errors_are_one_error_line_and_a_hint(tmp_path, args, message):
    proc = autosync(*args, cwd=tmp_path)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 2, proc.stderr
    assert lines[0].startswith(message) or message in lines[0], lines[0]
    assert lines[1].startswith("hint: see 'autosync") and lines[1].endswith("--help'")
    assert "╭" not in proc.stderr  # no boxed panel
    _no_traceback(proc)


@pytest.mark.parametrize("inside, message", [
    ("", "is a file, but an output directory is needed"),
    ("sub", "--out: cannot write in"),  # a folder inside a file cannot be made
])
@pytest.mark.slow
def test_a_bad_output_location_is_refused_before_training(tiny_job, tmp_path, inside, message):
    (tmp_path / "afile").write_text("")
    out = tmp_path / "afile" / inside if inside else tmp_path / "afile"
    for command in (["run", str(tiny_job)], ["leaderboard", str(tiny_job), "--seeds", "1"]):
        proc = autosync(*command, "--out", str(out), cwd=tmp_path)
        assert proc.returncode == 2 and message in proc.stderr, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1 and "training" not in proc.stderr
        _no_traceback(proc)


@pytest.mark.slow
def test_reading_the_cache_never_creates_the_storage(tiny_job, tmp_path):
    url = f"sqlite:///{tmp_path / 'new.db'}"
    shown = autosync("cache", "show", str(tiny_job), "--storage", url, cwd=tmp_path)
    listed = autosync("cache", "list", "--storage", url, cwd=tmp_path)
    cleared = autosync("cache", "clear", str(tiny_job), "--storage", url, cwd=tmp_path)
    tuned = autosync("run", str(tiny_job), "--policy", "tuned", "--storage", url, cwd=tmp_path)
    assert (shown.returncode, listed.returncode, cleared.returncode, tuned.returncode) == (2, 2, 2, 2)
    assert all("no such file" in p.stderr for p in (shown, listed, cleared, tuned))  # (a misspelt path, likely)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny.yaml"]


@pytest.mark.slow
def test_the_leaderboard_printed_into_a_pipe_reads_at_80_columns(tiny_job, tmp_path):
    """Piped, the leaderboard shows its default columns whole in 80 columns and names the others;
    --wide shows them all."""
    proc = autosync("leaderboard", str(tiny_job), "--seeds", "1", "--policies", "bsp", "--policies", "backup:k=3",
                    cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "…" not in proc.stdout and max(map(len, proc.stdout.splitlines())) <= 80
    assert "vs BSP" in proc.stdout and "--wide shows every column" in proc.stdout
    wide = autosync("leaderboard", str(tiny_job), "--seeds", "1", "--policies", "bsp", "--wide", cwd=tmp_path)
    assert "batch max/min" in wide.stdout and "not shown" not in wide.stdout


def test_the_policies_table_printed_into_a_pipe_cuts_nothing(tmp_path):
    proc = autosync("policies", cwd=tmp_path)
    assert proc.returncode == 0 and "…" not in proc.stdout and max(map(len, proc.stdout.splitlines())) <= 80
    assert "not shown" not in proc.stdout  # every column is text: they wrap, none is left out


@pytest.mark.parametrize("args, message", [
    (["--policies", "backup:k=abc"], "--policies backup:k=abc: policy backup parameter k must be int, but got 'abc'"),
    (["--policies", "backup:k=0"], "--policies backup:k=0: k must be between 1 and n_workers=4, but got k=0"),
    (["--policies", "backup:k=99"], "--policies backup:k=99: k must be between 1 and n_workers=4, but got k=99"),
    (["--policies", "nosuch"], "--policies must be one of"),
    (["--policies", "local_sgd:period=0"], "--policies local_sgd:period=0: period must be an integer >= 1"),
    (["--include-tuned", "--storage", "sqlite:///{tmp}/missing.db"],
     "--storage sqlite:///{tmp}/missing.db: no such file {tmp}/missing.db (no study storage there)"),
    (["--include-tuned", "--storage", "postgresql://u@127.0.0.1:1/db"],
     "--storage postgresql://u@127.0.0.1:1/db: cannot open the study storage"),  # nothing listens on port 1
])
def test_leaderboard_refuses_bad_policies_and_storages_before_its_progress_bar(tiny_job, tmp_path, args, message):
    args = [arg.replace("{tmp}", str(tmp_path)) for arg in args]
    proc = autosync("leaderboard", str(tiny_job), "--seeds", "1", "--out", str(tmp_path / "lb"), *args, cwd=tmp_path)
    _no_traceback(proc)
    message = message.replace("{tmp}", str(tmp_path))
    assert proc.returncode == 2 and proc.stderr.startswith(f"error: {message}"), proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1  # the error line alone: no progress bar was drawn
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny.yaml"]  # nor a storage nor an output folder


def test_the_help_prints_an_extra_s_name_in_brackets(tmp_path, monkeypatch):
    """The help reads rich markup, where "[cluster]" was a tag and vanished: users were told to install
    "autosync" for --scheduler and --mlflow."""
    monkeypatch.setenv("COLUMNS", "250")  # each help line whole
    for command, extra in (("table", "cluster"), ("run", "mlflow")):
        proc = autosync(command, "--help", cwd=tmp_path)
        assert f'"autosync[{extra}]"' in proc.stdout, proc.stdout


def test_replay_refuses_a_space_that_does_not_search_the_switch_point(tmp_path):
    from autosync.data import SYNC_SWITCH_LOGS

    proc = autosync("replay", str(SYNC_SWITCH_LOGS), "--space", "policy",
                    "--simulations", "1", "--out", "r", cwd=tmp_path)
    _no_traceback(proc)
    assert proc.returncode == 2 and "autosync replay --space policy: searches the switch point" in proc.stderr
    assert not (tmp_path / "r").exists()


def test_an_output_file_whose_name_a_folder_takes_is_one_line(tmp_path):
    (tmp_path / "job.yaml").write_text("name: tiny\nworkload: {dataset: {name: digits}, model: {name: logreg}, "
                                       "batch_size: 16, optimizer: {lr: 0.2}}\ncluster: {n_workers: 2}\n"
                                       "target: {metric: test_accuracy, threshold: 0.5}\nbudget: {max_updates: 20}\n")
    (tmp_path / "out" / "leaderboard.md").mkdir(parents=True)
    proc = autosync("leaderboard", "job.yaml", "--policies", "bsp", "--seeds", "1", "--out", "out", cwd=tmp_path)
    _no_traceback(proc)
    assert proc.returncode == 2, proc.stderr
    # refused before the run (it was refused after it, the run lost)
    assert "error: --out: out/leaderboard.md is a directory, but the command writes a file there" in proc.stderr, \
        proc.stderr


@pytest.mark.parametrize("command", [["cache", "list"], ["cache", "show", "JOB"], ["cache", "clear", "JOB"],
                                     ["run", "JOB", "--policy", "tuned"],
                                     ["leaderboard", "JOB", "--policies", "bsp", "--include-tuned"]])
def test_a_command_reading_a_storage_file_that_does_not_exist_says_so(tiny_job, tmp_path, command):
    """A misspelt --storage listed no study and cleared none (exit 0), as if the storage were empty; `run
    --policy tuned` and `leaderboard --include-tuned` said "run `autosync tune` on this job first"."""
    argv = [str(tiny_job) if a == "JOB" else a for a in command]
    proc = autosync(*argv, "--storage", f"sqlite:///{tmp_path}/nope.db", cwd=tmp_path)
    _no_traceback(proc)
    assert proc.returncode == 2 and proc.stderr.strip() == \
        f"error: --storage sqlite:///{tmp_path}/nope.db: no such file {tmp_path}/nope.db (no study storage there)"
    assert not (tmp_path / "nope.db").exists()


def test_a_run_of_a_policy_whose_parameters_have_no_spec_form_is_named_by_the_policy(tiny_job, tmp_path):
    """split's fractions (a list) have no --policies spec: the folder is named by the policy alone (it was a
    traceback, also after `tune --space batch_split`'s own hint 'autosync run --policy tuned')."""
    proc = autosync("run", str(tiny_job), "--policy", "split", "--param", "fractions=[1,1,1,1]", cwd=tmp_path)
    _no_traceback(proc)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "results" / "runs" / "tiny" / "split-seed0" / "summary.json").is_file()
