"""Search spaces, the tuning objective and studies: the cache of recurring jobs, resumption, bad input."""

from __future__ import annotations

import gc
import json
import os
import sqlite3
import subprocess
import re
import sys
import time
from pathlib import Path

import optuna
import pytest

from autosync.core.errors import UserError
from autosync.search.strategies.binary import binary_search
from autosync.search.strategies.ladder import DEFAULT_RUNGS, SWITCH_PARAM, LadderSampler, ladder_finished
from autosync.policy_score import RunFailed, evaluate
from autosync.search.objective import Objective, ObjectiveSettings
from autosync.search.study.records import CONSTRAINT, GIVEN_UP, RESAMPLED
from autosync.search.space import SPACE_DIR, load_space
from autosync.search.study.storage import open_storage
from autosync.search.study.trials import counted_trials
from autosync.search.tune import TuneRequest, tune
from tests.conftest import autosync, no_traceback, small_job, tune_request


def _space(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "space.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("name", ["static_k", "switch_point", "batch_split", "policy"])
def test_shipped_spaces_load_and_sample_valid_policies(name):
    from autosync.catalog import policy_from_dict

    space = load_space(SPACE_DIR / f"{name}.yaml", 4)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    for _ in range(10):
        trial = study.ask()
        policy = space.suggest(trial)
        policy_from_dict(policy).bind(4, 8)
        study.tell(trial, 0.0)
        again = optuna.create_study()
        again.enqueue_trial(space.trial_params(policy))
        replay = space.suggest(again.ask())  # enqueue_trial reproduces the policy
        assert replay["policy"] == policy["policy"]
        for key, value in policy["params"].items():
            assert replay["params"][key] == (pytest.approx(value, rel=1e-6) if isinstance(value, list) else value)


def test_the_size_of_a_huge_int_range_is_counted_without_listing_its_values(tmp_path):
    """Found by the input fuzzer: `size` listed every value, so 0..10^12 never returned (the alarm turns a
    hang into a failure)."""
    import signal

    def hung(*_):
        raise TimeoutError("SearchSpace.size() lists the range's values")

    space = load_space(_space(tmp_path, "policies: {ssp: {staleness: {type: int, low: 0, high: 1000000000000}},"
                                        " bsp: {}}"), 4)
    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(10)
    try:
        assert space.size() == 10 ** 12 + 2
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize("text,message", [
    ("policies: {sync_switch: {switch_at: {type: float, low: 0.0, high: 1.0, step: 2.2e-311}}}",  # the fuzzer's
     "policies.sync_switch.switch_at step must leave a countable grid between low and high, but got step=2.2e-311"),
    ("policies: {backup: {k: {type: int, low: 5, high: 2}}}", "policies.backup.k.high must be >= low=5, but got 2"),
    ("policies: {backup: {k: {type: integer, low: 1, high: 2}}}", "policies.backup.k.type must be one of"),
    ("policies: {backup: {k: {type: int, low: 1, high: 2, stepp: 1}}}", "unknown key 'stepp'"),
    ("policies: {bakup: {}}", "unknown policy 'bakup'"),
    ("policies: {backup: {kk: 3}}", "policy backup has no parameter 'kk'"),
    ("policies: {dana_dc: {dc_lambda: {type: float, low: 0, high: 1, log: true}}}", "log needs low > 0"),
    ("polices: {bsp: {}}", "unknown key 'polices'"),
    ("equivalence_check: false\npolicies: {bsp: {}}",  # a key of the format's past: why it went
     "equivalence_check was removed with the proxy equivalence check"),
    ("policies: [bsp]", "policies must be a non-empty mapping"),
    ("policies: {backup: {k: {type: int, low: 1, high: n_workers * x}}}", "must be a number or n_workers"),
    ("policies: {backup: {k: {type: int, low: 1, high: .inf}}}", "policies.backup.k.high must be a finite number"),
    ("policies: {backup: {k: {type: int, low: 1, high: 4, step: 0.5}}}", "step must be an integer for type int"),
    ("policies: {ssp: {staleness: {type: categorical, choices: [[1, 2]]}}}", "choices must hold numbers, strings"),
])
def test_bad_spaces_name_file_key_rule_and_value(tmp_path, text, message):
    path = _space(tmp_path, text)
    with pytest.raises(UserError, match="space.yaml") as info:
        load_space(path, 4)
    lines = str(info.value).splitlines()  # every problem at once, each one line naming the file
    assert any(message in line for line in lines) and all(line.startswith(f"{path}: ") for line in lines)


def test_every_problem_of_a_space_file_is_reported_at_once(tmp_path):
    path = _space(tmp_path, "name: bad name\npolicies:\n  bakup: {}\n  backup: {k: {type: int, low: 5, high: 2},"
                            " kk: 3, lr_rule: {type: categorical, choices: []}}\n")
    with pytest.raises(UserError) as info:
        load_space(path, 4)
    lines = str(info.value).splitlines()
    assert len(lines) == 5, lines
    for part in ("name may hold only", "policies.backup.k.high must be >= low=5, but got 2",
                 "policies.backup.lr_rule.choices must not be empty", "unknown policy 'bakup'",
                 "policy backup has no parameter 'kk'"):
        assert any(part in line for line in lines), (part, lines)


def test_an_edited_copy_of_a_shipped_space_that_keeps_its_name_is_refused(tmp_path):
    """Studies are keyed by the space's name: the copy shared the shipped space's study, whose cached answer
    (backup k = 9) answered for a copy whose k ran from 12 up."""
    shipped = (SPACE_DIR / "static_k.yaml").read_text()
    copy = tmp_path / "my_space.yaml"
    copy.write_text(shipped)
    assert load_space(copy, 16).name == "static_k"  # the same space under another path: the same study
    edited = shipped.replace("low: 1", "low: 12")
    assert edited != shipped
    copy.write_text(edited)
    with pytest.raises(UserError, match=r"my_space.yaml: name: 'static_k' is the shipped space static_k.yaml's, but "
                                        r"the file differs from it: .* give the file a name of its own"):
        load_space(copy, 16)
    copy.write_text(edited.replace("name: static_k", "name: my_space"))
    assert load_space(copy, 16).name == "my_space"
    unnamed = tmp_path / "policy.yaml"  # no name: its file's name is the shipped policy space's
    unnamed.write_text("policies: {bsp: {}, asp: {}}\n")
    with pytest.raises(UserError, match=r"its file name makes it space 'policy' \(it has no name:\), which is the "
                                        r"shipped space policy.yaml's"):
        load_space(unnamed, 16)


def test_binary_search_follows_algorithm_1():
    # accuracy rises with the BSP share; anything >= 0.3 is within beta of BSP
    accuracy = lambda s: 0.9 if s >= 0.3 else 0.8  # noqa: E731
    runs = []

    def run(s):
        runs.append(s)
        return accuracy(s)

    assert binary_search(run, threshold=0.01, runs_per_candidate=2, max_settings=4, bsp_runs=3) == 0.3125
    assert runs == [1.0] * 3 + [s for s in (0.5, 0.25, 0.375, 0.3125) for _ in range(2)]
    runs.clear()
    binary_search(run, max_settings=2, target_accuracy=0.9)
    assert 1.0 not in runs


def _ladder_study(accuracy, rungs=DEFAULT_RUNGS, target=0.9, threshold=0.01):
    """Ask and tell a study whose sampler is the ladder until it says it is finished."""
    study = optuna.create_study(sampler=LadderSampler(rungs=rungs))
    while not ladder_finished(study, rungs):
        trial = study.ask()
        s = trial.suggest_float(SWITCH_PARAM, 0.0, 1.0, step=1 / 32)
        assert trial.suggest_categorical("sync_switch.config", ["sync_switch", "none"]) == "sync_switch"
        trial.set_constraint(CONSTRAINT, target - threshold - accuracy(s))
        study.tell(trial, s)
    return [t.params[SWITCH_PARAM] for t in study.trials]


def test_ladder_sampler_stops_at_the_cheapest_rung_that_holds():
    assert _ladder_study(lambda s: 0.9 if s >= 0.1 else 0.8) == [1 / 32, 1 / 16, 1 / 8]
    assert _ladder_study(lambda s: 0.0, rungs=(0.5, 0.25)) == [0.25, 0.5]  # none holds: every rung once
    with pytest.raises(ValueError, match="rungs in"):
        LadderSampler(rungs=(0.0, 0.5))


def test_ladder_sampler_gives_each_process_its_own_rung():
    study = optuna.create_study(sampler=LadderSampler())
    running = [study.ask() for _ in range(3)]  # three trials in flight at once, as with --n-jobs 3
    assert [t.suggest_float(SWITCH_PARAM, 0.0, 1.0, step=1 / 32) for t in running] == [1 / 32, 1 / 16, 1 / 8]
    with pytest.raises(ValueError, match="must be categorical"):
        study.ask().suggest_int("sync_switch.other", 0, 3)


def _request(tmp_path: Path, job=None, space=None, **changes) -> TuneRequest:
    space = space or load_space(SPACE_DIR / "static_k.yaml", 4)
    base = dict(storage=f"sqlite:///{tmp_path / 'studies.db'}", tolerance=0.05)
    base.update({} if space.name == "policy" else {"n_trials": 4})  # the race takes no --n-trials
    base.update(changes)
    return tune_request(job or small_job(), space, **base)


@pytest.mark.parametrize("space", ["static_k", "policy"])  # TPE, and the race
def test_a_target_the_initial_model_meets_is_refused_before_a_study_is_made(tmp_path, space):
    """Every run evaluates the initial parameters first: a target met there is met by every policy at time 0."""
    request = _request(tmp_path, job=small_job(target={"metric": "test_accuracy", "threshold": 0.01}),
                       space=load_space(SPACE_DIR / f"{space}.yaml", 4))
    with pytest.raises(UserError, match=r"job small: target.threshold 0.01 is met before training: the initial "
                                        r"model's test_accuracy is [0-9.]+ on seed 3"):
        tune(request)
    assert optuna.get_all_study_names(open_storage(request.storage)) == []  # nothing left behind


@pytest.mark.slow
def test_a_space_of_one_point_a_sibling_study_ran_ends_once_its_answers_from_others_stop_being_free(tmp_path):
    """Every trial of a one-point space is answered untrained (from the sibling study's run, then from its own
    copies): the first MAX_UNCOUNTED take no slot of the budget, and the next count, so the search ends. A copy
    does not inherit its twin's free pass (it did, and the search never ended)."""
    from autosync.search.objective import MAX_UNCOUNTED

    import yaml

    from autosync.core.job import DEFAULT_JOB_PATH, job_from_dict

    data = yaml.safe_load(DEFAULT_JOB_PATH.read_text())  # the default job, small: k = 1 leads its static_k study
    data["cluster"]["n_workers"], data["budget"], data["target"]["threshold"] = 4, {"max_virtual_seconds": 60}, 0.5
    job = job_from_dict(data)
    tune(_request(tmp_path, job=job))  # the static_k study: it runs backup k = 1 among others
    one = load_space(_space(tmp_path, "policies: {backup: {k: {type: categorical, choices: [1]}}}"), 4)
    outcome = tune(_request(tmp_path, job=job, space=one, n_trials=2, timeout=120))
    assert outcome.roles["answered"] == MAX_UNCOUNTED and outcome.roles["budget"] == 2, outcome.roles


@pytest.mark.slow
def test_tune_caches_the_best_policy_for_the_recurring_job(tmp_path):
    first = tune(_request(tmp_path))
    assert not first.cached and first.new_trials == 4
    # every finished trial says what it is to the search (the dashboard shows it): 4 of the budget
    roles = [t.user_attrs.get("role") for t in first.study.trials if t.state.is_finished()]
    assert roles.count("budget") == 4 and None not in roles and first.roles["budget"] == 4, roles
    record = first.cache
    assert record["best_policy"]["policy"] == "backup" and record["trials"] == 4
    assert record["search_cost_bsp_trainings"] > 0 and record["fingerprint"] == small_job().fingerprint()
    second = tune(_request(tmp_path))
    assert second.cached and second.new_trials == 0 and second.cache == record
    refreshed = tune(_request(tmp_path, refresh=True, n_trials=2))
    assert not refreshed.cached and refreshed.cache["trials"] == 6
    study = optuna.load_study(study_name=first.study_name, storage=open_storage(_request(tmp_path).storage))
    assert study.trials[4].params == study.trials[record["best_trial"]].params  # warm start: cached best first


def test_a_study_named_by_study_is_the_jobs_for_cache_show_run_tuned_and_clear(tmp_path):
    """A tune into `--study mine` says "train with it: autosync run JOB.yaml --policy tuned": the job's studies
    are those its fingerprint names and those made for it under another name, so that cached policy is found,
    shown and cleared (they were named by fingerprint only: "no cached policy", and clear deleted nothing)."""
    from autosync.search.study.cache import cached_studies, clear_cache, tuned_policy

    outcome = tune(_request(tmp_path, study="mine"))
    url = _request(tmp_path).storage
    other = small_job(cluster__n_workers=3)
    tune(_request(tmp_path, job=other, space=load_space(SPACE_DIR / "static_k.yaml", 3)))
    assert [s["study"] for s in cached_studies(url, small_job().fingerprint())] == ["mine"]
    assert tuned_policy(url, small_job()) == outcome.cache["best_policy"]
    assert clear_cache(url, small_job()) == ["mine"]
    assert [s["study"] for s in cached_studies(url)] == [f"{other.fingerprint()}-static_k"]  # another job's stays


def test_reading_the_cache_leaves_the_sqlite_file_alone_with_no_log_beside_it(tmp_path):
    """`cache list`, `show`, `clear` and `recommend` open the storage read-only and close it: its write-ahead
    log is merged and removed (they left `-wal` and `-shm` files beside it, their storage collected before the
    command's end closed it)."""
    from autosync.search.recommend.vote import recommend_from
    from autosync.search.study.cache import cached_studies, clear_cache
    from autosync.search.study.storage import close_storages

    tune(_request(tmp_path))
    gc.collect()  # the tune's storages closed, as its command's end closes them
    close_storages()
    url = _request(tmp_path).storage
    path = Path(url.removeprefix("sqlite:///"))
    beside = lambda: sorted(p.name for p in path.parent.iterdir() if p.name.startswith(path.name + "-"))  # noqa: E731
    assert beside() == []
    assert cached_studies(url) and beside() == []
    assert recommend_from(url, small_job(cluster__n_workers=3)).policy and beside() == []
    assert clear_cache(url, small_job()) and beside() == []


def test_a_study_named_by_study_over_another_space_is_refused(tmp_path):
    """`--study mine --space composed` on a study of static_k answered static_k's cached policy as composed's
    (and --refresh mixed the two spaces' trials): refused in one line naming both spaces."""
    tune(_request(tmp_path, study="mine"))
    with pytest.raises(UserError, match=r"^--study mine: a study of space static_k, not composed: its trials and "
                                        r"cached answer are points of that space; name another study, or tune "
                                        r"--space static_k$"):
        tune(_request(tmp_path, study="mine", space=load_space(SPACE_DIR / "composed.yaml", 4), sampler="random"))


@pytest.mark.slow
def test_baselines_are_enqueued_first(tmp_path):
    outcome = tune(_request(tmp_path, n_trials=2))
    study = optuna.load_study(study_name=outcome.study_name, storage=open_storage(_request(tmp_path).storage))
    assert study.trials[0].user_attrs["policy"] == {"policy": "backup", "params": {"k": 4, "lr_rule": "fixed"}}


@pytest.mark.slow
def test_a_diverging_policy_is_a_failed_trial_with_its_reason(tmp_path):
    # Sync-Switch's configuration policy trains BSP with 8 x eta: too much for this MLP, which then diverges
    # (at update 25), where BSP reaches the target at its first evaluation past time 0
    space = load_space(_space(tmp_path, "policies: {sync_switch: {config: {type: categorical, "
                                        "choices: [none, sync_switch]}}, bsp: {}}"), 8)
    job = small_job(workload__optimizer={"lr": 3.0, "momentum": 0.9}, workload__model={"name": "mlp"},
                    cluster__n_workers=8, target={"metric": "train_loss", "threshold": 1.1},
                    budget={"max_updates": 80})
    for stop in (False, True):  # trained whole, or stopped at the target and then checked
        outcome = tune(_request(tmp_path, job=job, space=space, n_trials=3, sampler="grid", study=f"stop-{stop}",
                                tolerance=1e9, settings={"stop_at_target": stop, "prune": False}))
        study = optuna.load_study(study_name=outcome.study_name, storage=open_storage(_request(tmp_path).storage))
        failed = [t for t in study.trials if t.state == optuna.trial.TrialState.FAIL]
        assert failed and "diverged" in failed[0].user_attrs["fail_reason"]
        assert outcome.cache["best_policy"] != failed[0].user_attrs["policy"]
        if not stop:  # its cost is what it trained to where it diverged, not to its last evaluation before that
            attrs = failed[0].user_attrs  # (the second study copies the first's failure, training nothing)
            with pytest.raises(RunFailed) as run:
                evaluate(job, attrs["policy"], [job.seed])
            assert attrs["virtual_seconds"] + attrs.get("forked_seconds", 0.0) == run.value.spent + run.value.forked > 0


def _switch_point_search(tmp_path: Path, sampler: str, n_trials: int, tolerance: float):
    """Tune the switch point of a small job with `sampler`; returns the outcome and its study."""
    space = load_space(SPACE_DIR / "switch_point.yaml", 4)
    job = small_job(budget={"max_epochs": 2.0})
    outcome = tune(_request(tmp_path, job=job, space=space, n_trials=n_trials, sampler=sampler,
                            tolerance=tolerance))
    return outcome, optuna.load_study(study_name=outcome.study_name, storage=open_storage(_request(tmp_path).storage))


@pytest.mark.slow
def test_binary_sampler_records_every_candidate_in_the_study(tmp_path):
    _, study = _switch_point_search(tmp_path, "binary", 3, 0.2)
    switch_points = [t.params["sync_switch.switch_at"] for t in study.trials]
    assert switch_points[0] == 0.5 and len(switch_points) == 3
    assert all(t.user_attrs["runs"] == 3 for t in study.trials)  # R = 3 runs per candidate


def test_the_binary_search_stops_where_its_midpoints_would_leave_the_spaces_grid():
    """The shipped switch_at has a step of 1/32: five bisections of [0, 1] stay on it; the sixth midpoint
    (1/64 apart) was a point outside the space, run with an Optuna warning."""
    from autosync.search.strategies.switch_point import grid_levels

    space = load_space(SPACE_DIR / "switch_point.yaml", 4)
    dim = space.dimensions["sync_switch"]["switch_at"]
    assert dim.step == 1 / 32 and grid_levels(dim) == 5
    assert grid_levels(type(dim)("float", low=0.0, high=1.0)) > 10 ** 6  # a continuous one: no such limit


def test_ladder_sampler_tries_the_cheapest_switch_point_first(tmp_path):
    outcome, study = _switch_point_search(tmp_path, "ladder", 2, 1.0)
    assert [t.params["sync_switch.switch_at"] for t in study.trials] == [1 / 32]  # it holds: the search stops
    assert outcome.cache["best_policy"]["params"]["switch_at"] == 1 / 32


def _tiny(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text("name: tiny\nworkload: {dataset: {name: synthetic_classification, n_samples: 600}, "
                    "model: {name: logreg}, batch_size: 16, optimizer: {lr: 0.2}, evaluation: {every_seconds: 2}}\n"
                    "cluster: {n_workers: 4}\ntarget: {metric: test_accuracy, threshold: 0.7}\n"
                    "budget: {max_virtual_seconds: 30}\n")
    return path


@pytest.mark.slow
def test_cli_tune_then_cache_hit_then_run_tuned_then_clear_each_json_one_strict_document(tmp_path):
    job = _tiny(tmp_path)

    def document(*args: str) -> tuple[object, str]:
        proc = autosync(*args, "--json", cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout, parse_constant=lambda c: pytest.fail(f"non-standard JSON {c}")), proc.stderr

    tuned, stderr = document("tune", str(job), "--sampler", "tpe", "--n-trials", "3", "--tolerance", "0.05")
    assert tuned["cached"] is False and tuned["cache"]["trials"] == 3 and tuned["top"]
    assert "storage: sqlite:///results/autosync-studies.db" in stderr  # status on stderr, results on stdout
    again = subprocess.run([sys.executable, "-X", "importtime", "-m", "autosync.cli", "tune", str(job),
                            "--sampler", "tpe", "--n-trials", "3"], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0 and "cache hit" in again.stdout and "no new trial" in again.stdout
    imported = {line.rsplit("|", 1)[1].strip() for line in again.stderr.splitlines() if line.startswith("import time:")}
    assert "optuna" in imported and "torch" not in imported  # a cache hit answers without loading torch
    assert document("cache", "list")[0][0]["cache"]["job_name"] == "tiny"
    assert "tiny" in autosync("cache", "list", cwd=tmp_path).stdout
    assert document("cache", "show", str(job))[0][0]["study"] == tuned["study"]
    run, stderr = document("run", str(job), "--policy", "tuned", "--out", "r")
    assert "tuned policy from the cache" in stderr and run["policy"] == tuned["cache"]["best_policy"] and run["files"]
    board, _ = document("leaderboard", str(job), "--policies", "bsp", "--policies", "DANA-Slim", "--seeds", "1",
                        "--out", "lb")
    assert [r["policy"] for r in board["rows"]] and "speedup_vs_bsp" in board["rows"][0]
    assert any("dana_slim" in r["policy"] for r in board["rows"]), board["rows"]
    cleared = autosync("cache", "clear", str(job), cwd=tmp_path)
    assert "deleted 1 studies" in cleared.stdout
    missing = autosync("run", str(job), "--policy", "tuned", cwd=tmp_path)
    assert missing.returncode == 2 and "no cached policy" in missing.stderr
    no_traceback(missing)


@pytest.mark.slow
def test_cli_version_and_exit_code_1_for_a_runtime_failure(tmp_path):
    from autosync import __version__

    version = autosync("--version", cwd=tmp_path)
    assert version.returncode == 0 and version.stdout.strip() == f"autosync {__version__}"
    # every trial diverges (Sync-Switch's configuration policy trains BSP with 8 x eta): nothing to cache
    space = _space(tmp_path, "policies: {sync_switch: {config: sync_switch}}")
    job = tmp_path / "diverges.yaml"
    job.write_text("name: diverges\nworkload: {dataset: {name: synthetic_classification, n_samples: 600, n_features: 10,"
                   " n_classes: 3}, model: {name: mlp}, batch_size: 16, optimizer: {lr: 5.0, momentum: 0.9}}\n"
                   "cluster: {n_workers: 8}\ntarget: {metric: train_loss, threshold: 0.5}\nbudget: {max_updates: 40}\n")
    failed = autosync("tune", str(job), "--space", str(space), "--n-trials", "1", "--tolerance", "1e9", cwd=tmp_path)
    no_traceback(failed)
    assert failed.returncode == 1 and "no trial met the target" in failed.stderr, failed.stderr


@pytest.mark.parametrize("args,message", [
    (["--storage", "nosuchdb://x"], "--storage nosuchdb://x: cannot open the study storage"),
    (["--sampler", "cmaes"], "--sampler must be one of"),
    (["--space", "nope"], "--space: file"),
    (["--objective", "accuracy"], "--objective must be"),
])
def test_cli_tune_bad_options_are_one_line_errors(tmp_path, args, message):
    proc = autosync("tune", str(_tiny(tmp_path)), *args, cwd=tmp_path)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]  # beside status lines
    assert len(errors) == 1 and message in errors[0]
    no_traceback(proc)


def test_read_only_storage_is_a_clear_error(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root can write read-only files")
    locked = tmp_path / "locked"
    locked.mkdir()
    db = locked / "s.db"
    sqlite3.connect(db).close()
    os.chmod(db, 0o444)
    os.chmod(locked, 0o555)
    try:
        proc = autosync("tune", str(_tiny(tmp_path)), "--storage", f"sqlite:///{db}", cwd=tmp_path)
    finally:
        os.chmod(locked, 0o755)
    assert proc.returncode == 2 and "cannot open the study storage" in proc.stderr
    no_traceback(proc)


@pytest.mark.slow
def test_a_corrupt_cache_entry_is_a_clear_error_and_refresh_repairs_it(tmp_path):
    outcome = tune(_request(tmp_path, n_trials=2))
    study = optuna.load_study(study_name=outcome.study_name, storage=open_storage(_request(tmp_path).storage))
    study.set_user_attr("cache", {"best_policy": {"policy": "nope"}})
    with pytest.raises(UserError, match="corrupt cache entry"):
        tune(_request(tmp_path, n_trials=2))
    repaired = tune(_request(tmp_path, n_trials=1, refresh=True))
    assert repaired.cache["trials"] == 3


@pytest.mark.slow
@pytest.mark.processes
def test_two_processes_on_one_sqlite_file_lose_no_trial(tmp_path):
    """Nothing is left running or queued, and the only failures are proposals of a point the other process
    was training (`Resampled`: proposed again, not counted) or queued trials the patience rule gave up:
    which proposals collide, and in which order trials finish, is the two processes' timing."""
    outcome = tune(_request(tmp_path, n_trials=6, n_jobs=2))
    study = optuna.load_study(study_name=outcome.study_name, storage=open_storage(_request(tmp_path).storage))
    numbers = [t.number for t in study.trials]
    assert len(numbers) == len(set(numbers)) and counted_trials(study) >= 6
    finished = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
    lost = [(t.number, t.state.name, t.user_attrs) for t in study.trials
            if t.state not in finished and not (t.state == optuna.trial.TrialState.FAIL
                                                     and (RESAMPLED in t.user_attrs or GIVEN_UP in t.user_attrs))]
    assert lost == []


def test_a_proposal_seen_before_is_scored_from_its_twin_without_training(tmp_path):
    job = small_job()
    space = load_space(SPACE_DIR / "static_k.yaml", 4)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    objective = Objective(job, space, ObjectiveSettings(tolerance=0.05), reference=0.9)
    study.enqueue_trial({"backup.k": 2, "backup.lr_rule": "fixed"})
    study.enqueue_trial({"backup.k": 2, "backup.lr_rule": "fixed"})
    study.optimize(objective, n_trials=2)
    first, second = study.trials
    assert first.user_attrs["virtual_seconds"] > 0 and second.user_attrs["virtual_seconds"] == 0.0
    assert second.values == first.values and second.user_attrs["same_as_trial"] == 0
    assert second.constraints == first.constraints


@pytest.mark.slow
def test_a_tune_over_another_space_reuses_what_a_sibling_study_of_the_job_trained(tmp_path):
    """policy, then composed, in one storage: composed's BSP reference and its compose(asp) trial (ASP's
    canonical form) come from the policy study, untrained; a study of another job shares nothing."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    job = small_job(budget={"max_updates": 30})
    first = tune(tune_request(job, load_space(SPACE_DIR / "policy.yaml", 4), n_trials=3, storage=url,
                             sampler="tpe"))  # TPE's first proposals
    second = tune(tune_request(job, load_space(SPACE_DIR / "composed.yaml", 4), n_trials=3, storage=url))
    policy_trials = {json.dumps(t.user_attrs["canonical_policy"], sort_keys=True): t for t in first.study.trials}
    assert second.study.user_attrs["bsp_reference"] == {**first.study.user_attrs["bsp_reference"],
                                                        "reference_from": first.study.study_name}
    trained = sum(t.user_attrs.get("virtual_seconds", 0.0) for t in second.study.trials)
    assert second.cache["search_cost_virtual_seconds"] == pytest.approx(trained)  # BSP's reference charged once
    copied = [t for t in second.study.trials if str(t.user_attrs.get("same_as_trial", "")).startswith(
        first.study.study_name + "#")]
    assert copied and all(t.user_attrs["virtual_seconds"] == 0.0 for t in copied)
    for t in copied:
        twin = policy_trials[json.dumps(t.user_attrs["canonical_policy"], sort_keys=True)]
        assert t.values == twin.values and t.user_attrs["same_as_trial"] == f"{first.study.study_name}#{twin.number}"
    winner = first.study.user_attrs["cache"]["best_policy"]
    assert winner["policy"] == "backup"  # not BSP or ASP, which the composed tune queues anyway
    third_trial = second.study.trials[2]  # queued after compose(bsp) and compose(asp): the policy tune's winner
    assert third_trial.user_attrs["canonical_policy"] == winner and "#" in str(third_trial.user_attrs["same_as_trial"])
    longer = job.model_copy(update={"budget": job.budget.model_copy(update={"max_updates": 40})})
    fourth = tune(tune_request(longer, load_space(SPACE_DIR / "static_k.yaml", 4), n_trials=1, storage=url))
    assert fourth.study.user_attrs["bsp_reference"]["budget"]["max_updates"] == 40  # a budget of its own: trained
    other = job.model_copy(update={"target": job.target.model_copy(update={"threshold": 0.75})})
    assert other.fingerprint() != job.fingerprint()
    third = tune(tune_request(other, load_space(SPACE_DIR / "composed.yaml", 4), n_trials=1, storage=url))
    assert not any("same_as_trial" in t.user_attrs and "#" in str(t.user_attrs["same_as_trial"])
                   for t in third.study.trials)


@pytest.mark.slow
def test_a_composed_tune_tries_the_policy_tunes_winner_with_another_papers_strategy_added(tmp_path):
    """After the policy tune's winner (backup k here), the composed tune queues it with LB-BSP's batches:
    the cross-paper variant, trained since no sibling ran it."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    job = small_job(budget={"max_updates": 30})
    first = tune(tune_request(job, load_space(SPACE_DIR / "policy.yaml", 4), n_trials=3, storage=url,
                             sampler="tpe"))  # TPE's first proposals
    winner = first.study.user_attrs["cache"]["best_policy"]
    assert winner["policy"] == "backup"
    second = tune(tune_request(job, load_space(SPACE_DIR / "composed.yaml", 4), n_trials=4, storage=url))
    neighbour = second.study.trials[3].user_attrs["policy"]
    assert neighbour["policy"] == "compose"
    assert {k: neighbour["params"][k] for k in ("barrier", "k", "lr_rule", "batch")} == {
        "barrier": "backup", **winner["params"], "batch": "lbbsp"}
    assert second.study.trials[3].user_attrs["virtual_seconds"] > 0  # trained: no sibling ran it




def test_a_trial_killed_before_its_first_heartbeat_is_failed_and_retried(tmp_path):
    from autosync.search.study.trials import fail_dead_trials

    storage = open_storage(f"sqlite:///{tmp_path / 'orphans.db'}")
    storage.heartbeat_interval, storage.grace_period = 1, 1
    study = optuna.create_study(storage=storage, study_name="orphans")
    study.ask({"x": optuna.distributions.FloatDistribution(0, 1)})  # RUNNING, and no heartbeat ever written
    fail_dead_trials(study)
    assert [t.state for t in study.trials] == [optuna.trial.TrialState.RUNNING]  # too young to judge
    time.sleep(2.5)  # past autosync's grace of two heartbeat intervals
    fail_dead_trials(study)
    states = [t.state for t in study.trials]
    assert states == [optuna.trial.TrialState.FAIL, optuna.trial.TrialState.WAITING]  # failed, then re-queued


def test_a_resumed_tune_says_it_waits_for_a_trial_that_never_sent_a_heartbeat(tmp_path):
    """A process killed between claiming a trial and tagging it leaves a RUNNING trial with no heartbeat and
    no process to look up: judged dead only after the grace, it is named among the trials waited for once
    it has been silent longer than a heartbeat interval, as a trial whose heartbeats stopped is."""
    from autosync.reporting.console import resume_line
    from autosync.search.study.trials import fail_dead_trials

    storage = open_storage(f"sqlite:///{tmp_path / 'silent.db'}")
    storage.heartbeat_interval, storage.grace_period = 3, 3  # autosync's grace: 6 s
    study = optuna.create_study(storage=storage, study_name="silent")
    study.ask({"x": optuna.distributions.FloatDistribution(0, 1)})  # RUNNING, and no heartbeat ever written
    assert fail_dead_trials(study).waiting == []  # younger than an interval: a live process may not have beaten
    time.sleep(3.5)
    dead = fail_dead_trials(study)
    assert dead == [] and [t.state for t in study.trials] == [optuna.trial.TrialState.RUNNING]
    assert re.search(r"; waiting up to \d s for trial 0 of a process, which has sent no heartbeat since it "
                     r"started$", resume_line(0, dead))


def test_the_copy_of_a_trial_whose_process_is_gone_has_no_process_tag(tmp_path):
    """The re-queued copy does not carry the dead process's tag: claimed by a new process and not yet tagged
    by it, the copy would otherwise look dead again to any process checking (`process_gone`)."""
    import subprocess
    import sys

    from autosync.search.study.records import PROCESS, RETRY_OF
    from autosync.search.objective import process_tag
    from autosync.search.study.trials import fail_dead_trials

    storage = open_storage(f"sqlite:///{tmp_path / 'gone.db'}")
    storage.heartbeat_interval, storage.grace_period = 30, 60
    study = optuna.create_study(storage=storage, study_name="gone")
    trial = study.ask({"x": optuna.distributions.FloatDistribution(0, 1)})
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    trial.set_user_attr(PROCESS, process_tag(dead.pid))
    assert fail_dead_trials(study) == [0]
    failed, copy = study.trials
    assert failed.state == optuna.trial.TrialState.FAIL and copy.state == optuna.trial.TrialState.WAITING
    assert copy.user_attrs[RETRY_OF] == 0 and PROCESS not in copy.user_attrs

@pytest.mark.slow
def test_policies_that_run_alike_are_trained_once_per_study(tmp_path):
    space = load_space(_space(tmp_path, "policies: {bsp: {}, backup: {k: {type: int, low: 3, high: 4}},"
                                        " sync_switch: {switch_at: 1.0, config: none}}"), 4)
    outcome = tune(_request(tmp_path, space=space, n_trials=4, sampler="grid"))
    study = optuna.load_study(study_name=outcome.study_name, storage=open_storage(_request(tmp_path).storage))
    bsp = {"policy": "bsp", "params": {}}
    assert len({json.dumps(t.user_attrs["policy"], sort_keys=True) for t in study.trials}) == 4
    trained = [t.user_attrs["policy"] for t in study.trials if t.user_attrs["virtual_seconds"] > 0
               and "full_budget_check_of" not in t.user_attrs]  # the winner's check at full budget aside
    assert trained == [{"policy": "backup", "params": {"k": 3}}]  # BSP's three forms: scored from the reference
    for t in study.trials:
        if t.user_attrs["canonical_policy"] == bsp:
            assert t.user_attrs["same_as_trial"] == "bsp_reference"
    assert study.trials[0].user_attrs["policy"] == bsp  # queued first, once: backup k = 4 is the same run
    assert study.trials[1].user_attrs["canonical_policy"] != bsp


def test_a_live_trial_failed_as_dead_does_not_crash_its_process(tmp_path):
    from autosync.search.study import _optuna_internals as internals
    from autosync.search.study.trials import run_queued_trial, top_up

    url = f"sqlite:///{tmp_path / 'live.db'}"
    study = optuna.create_study(storage=open_storage(url), study_name="live")
    top_up(study, url, 2)

    other = optuna.load_study(study_name="live", storage=open_storage(url))  # another process's view

    def judged_dead_while_running(trial: optuna.Trial) -> float:
        storage = internals.storage_of(other)  # what another process's fail_dead_trials does to a slow trial
        storage.set_trial_user_attr(internals.trial_id(trial), "process_lost", True)
        storage.set_trial_state_values(internals.trial_id(trial), state=optuna.trial.TrialState.FAIL)
        trial.set_user_attr("virtual_seconds", 1.0)  # the objective goes on writing to it
        return 1.0

    assert run_queued_trial(study, url, judged_dead_while_running, catch=())  # no exception
    assert run_queued_trial(study, url, lambda trial: 2.0, catch=())
    assert [t.state.name for t in study.trials] == ["FAIL", "COMPLETE"]


def test_an_invalid_policy_has_no_canonical_form():
    from autosync.search.objective import canonical_policy

    assert canonical_policy({"policy": "backup", "params": {"k": 4}}, 4, 8) == {"policy": "bsp", "params": {}}
    assert canonical_policy({"policy": "backup", "params": {"k": 4, "lr_rule": "bogus"}}, 4, 8) is None
    assert canonical_policy({"policy": "split", "params": {"fractions": [-1, -1, -1, -1]}}, 4, 8) is None


def test_storage_passwords_are_masked_in_urls_and_messages():
    from autosync.search.study.storage import redact, redact_url

    assert redact_url("postgresql://u:pa/ss@h/db") == "postgresql://u:***@h/db"  # '/' may be in a password
    assert redact_url("postgresql://u@h/db?password=xyz&sslmode=require") == \
        "postgresql://u@h/db?password=***&sslmode=require"
    assert redact_url("postgresql://h:5432/db") == "postgresql://h:5432/db"  # a port is no password
    assert redact("login pa/ss refused", "postgresql://u:pa/ss@h/db") == "login *** refused"
    # a password masked as a whole word only: 'p' masked every p of the driver's message
    assert redact("(psycopg2.OperationalError) port 1 failed: password=p", "postgresql://u:p@h:1/db") == \
        "(psycopg2.OperationalError) port 1 failed: password=***"



def test_the_pace_rule_predicts_from_the_time_the_bar_took_to_the_same_metric():
    from autosync.search.strategies.pruning import pace_ratio, thinned

    bar = [[0.0, 0.1], [10.0, 0.5], [20.0, 0.8], [30.0, 0.95]]  # reached the target (0.95) at 30 s
    assert pace_ratio(bar, 40.0, 0.5, lower_is_better=False) == 4.0  # took 40 s to where the bar was at 10 s
    assert pace_ratio(bar, 15.0, 0.8, lower_is_better=False) == 0.75  # ahead of the bar
    assert pace_ratio(bar, 12.0, 0.05, lower_is_better=False) == 1.2  # below the bar's start: its first evaluation
    assert pace_ratio(bar, 20.0, 0.99, lower_is_better=False) is None  # past the bar's whole curve
    assert pace_ratio([[5.0, 2.0], [9.0, 1.0]], 18.0, 1.0, lower_is_better=True) == 2.0  # a loss
    curve = [(float(i), i / 100) for i in range(101)]
    kept = thinned(curve, 10)
    assert kept[0] == [0.0, 0.0] and kept[-1] == [100.0, 1.0] and len(kept) <= 12


def test_a_trial_still_training_when_the_timeout_passes_stops_and_takes_no_slot():
    """--timeout stops a running trial at its next evaluation (a long trial cannot overrun it), failed with
    the reason and not counted; a candidate's full-budget check is not stopped (the answer needs it)."""
    import time

    from autosync.policy_score import RunFailed, evaluate
    from autosync.search.study.records import FULL_BUDGET_OF, TIMED_OUT
    from autosync.search.study.trials import budget_used

    job = small_job(budget={"max_updates": 400})
    space = load_space(SPACE_DIR / "static_k.yaml", 4)
    reference = evaluate(job, {"policy": "bsp", "params": {}}, [job.seed])
    objective = Objective(job, space, ObjectiveSettings(), reference["final_metric"], reference)
    objective.deadline = time.monotonic()  # already passed
    study = optuna.create_study()
    study.enqueue_trial({"backup.k": 3, "backup.lr_rule": "fixed"})
    study.optimize(objective, n_trials=1, catch=(RunFailed,))
    (stopped,) = study.trials
    assert stopped.state.name == "FAIL" and stopped.user_attrs[TIMED_OUT]
    assert "--timeout passed" in stopped.user_attrs["fail_reason"]
    assert stopped.user_attrs["virtual_seconds"] <= job.workload.evaluation.every_seconds + 1e-9  # at the first
    assert budget_used(study) == (0, 0)
    study.enqueue_trial({"backup.k": 3, "backup.lr_rule": "fixed"}, user_attrs={FULL_BUDGET_OF: 0})
    study.optimize(objective, n_trials=1, catch=(RunFailed,))
    assert study.trials[-1].state.name == "COMPLETE"


@pytest.mark.slow
def test_a_search_its_timeout_ended_short_is_resumed_by_the_same_command(tmp_path):
    """A search whose --timeout ended it before its budget answers (its record says so, `timed_out_of`),
    and the same command resumes it, saying so, rather than answering from the cache.

    The timeout must pass after BSP's point is answered from its reference (no training: about 0.15 s after the
    search starts on an idle host, over 0.3 s on a loaded one) and before the budget's three counted trials
    have all ended (the next one trains about 3-3.6 s here, the one after it about 1.1 s before it is pruned),
    so it is 1.5 s: a margin of about 10x on the first and 2.5x or more on the second."""
    job = small_job(budget={"max_updates": 3000}, target={"metric": "test_accuracy", "threshold": 0.99})  # slow trials
    first = tune(_request(tmp_path, job, timeout=1.5, n_trials=3))  # BSP's point answered, then the timeout
    assert not first.cached and first.cache["timed_out_of"] == 3 and first.cache["trials"] < 3
    found = []
    resumed = tune(_request(tmp_path, job, n_trials=3), on_resume=lambda *seen: found.append(seen))
    assert not resumed.cached and resumed.cache["trials"] == 3 and "timed_out_of" not in resumed.cache
    assert found and found[0][0] == first.cache["trials"] and found[0][1].reference
    again = tune(_request(tmp_path, job, n_trials=3))
    assert again.cached and again.new_trials == 0


def test_a_timeout_of_zero_starts_no_trial(tmp_path):
    """--timeout 0: no trial starts after 0 s, as the help says (it was read as no limit, and the whole budget
    ran); the search then has no answer (`api.tune` adds that the timeout ended it)."""
    from autosync.core.errors import RuntimeFailure

    with pytest.raises(RuntimeFailure, match=r"no trial met the target"):
        tune(_request(tmp_path, timeout=0.0, n_trials=3))
    study = optuna.load_study(study_name=_request(tmp_path).study_name, storage=open_storage(_request(tmp_path).storage))
    assert counted_trials(study) == 0


@pytest.mark.parametrize("text, n, workers", [
    ("n_workers", 16, 16), ("n_workers - 1", 16, 15), ("n_workers / 2", 15, 7), ("n_workers*3/4", 16, 12),
    ("n_workers * 2", 16, 32), ("n_workers+3", 4, 7), (5, 16, 5),
])
def test_worker_expressions_are_floored_and_a_bad_one_is_refused_by_the_grammar(text, n, workers):
    from types import SimpleNamespace

    from autosync.search.space_file import resolve_workers

    assert resolve_workers(text, SimpleNamespace(context={"n_workers": n})) == workers  # floored, unclamped
    for bad in ("n_workers ** 2", "n_workers/x"):
        with pytest.raises(ValueError, match=r"must be a number or n_workers\[\*a\]\[/b\]\[\+-c\]"):
            resolve_workers(bad, SimpleNamespace(context={"n_workers": n}))


def test_a_space_names_its_continuous_dimensions_where_a_grid_cannot_list_it():
    from autosync.search.strategies.samplers import check_sampler

    space = load_space(SPACE_DIR / "batch_split.yaml", 4)
    assert space.continuous_dimensions() == ["policies.split.fractions"] and not space.is_discrete()
    with pytest.raises(UserError, match=r"batch_split.yaml has continuous dimensions: policies.split.fractions$"):
        check_sampler("grid", space, multi_objective=False)
    assert load_space(SPACE_DIR / "static_k.yaml", 4).continuous_dimensions() == []
