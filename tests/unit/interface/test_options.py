"""Each command's options are declared once (autosync/options.py): the command line and the API agree."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from autosync import api
from autosync.core.errors import UserError
from autosync.core.job import job_from_dict
from autosync.options import (ExecutionOptions, LeaderboardOptions, ProfileOptions, RunOptions, TuneOptions, build,
                              flag_of)


@pytest.mark.parametrize("name, cls", [("run", RunOptions), ("tune", TuneOptions),
                                       ("leaderboard", LeaderboardOptions), ("profile", ProfileOptions)])
def test_the_command_line_is_built_from_the_options(name, cls):
    import typer.main

    from autosync.cli import app

    command = typer.main.get_command(app).commands[name]
    by_flag = {opt: p for p in command.params for opt in p.opts}
    for f in dataclasses.fields(cls):
        param = by_flag[flag_of(f)]
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        assert param.default == default or (param.default in (None, ()) and default == []), f.name
        assert param.help == f.metadata["help"]
        if f.metadata["ge"] is not None:
            assert param.min == f.metadata["ge"]


def test_run_and_tune_share_the_execution_options():
    shared = {f.name for f in dataclasses.fields(ExecutionOptions)}
    assert shared <= {f.name for f in dataclasses.fields(RunOptions)}
    assert shared <= {f.name for f in dataclasses.fields(TuneOptions)}


@pytest.mark.parametrize("call, message", [
    (lambda job: api.tune(job, n_trials=0), "--n-trials must be >= 1, but got 0"),
    (lambda job: api.tune(job, sampler="nope"), "--sampler must be one of"),
    (lambda job: api.tune(job, verify_top=2), "--verify-top re-runs the simulated search's best candidates"),
    (lambda job: api.tune(job, n_trails=3), "TuneOptions has no option 'n_trails'"),
    (lambda job: api.tune(job, constraint_at="end"), "--constraint-at must be budget or bsp-target, but got 'end'"),
    (lambda job: api.tune(job, constraint_at="bsp-target", sampler="binary"),
     "--constraint-at bsp-target needs a sampler whose trials stop at the target, but --sampler binary"),
    (lambda job: api.tune(job, constraint_at="bsp-target", objective="time,metric"),
     "--constraint-at bsp-target needs --objective time"),
    (lambda job: api.tune(job, sampler="race", budget=1.5), "--budget must be >= 2 BSP trainings"),
    (lambda job: api.run(job, workers_per_device=0), "--workers-per-device must be >= 1, but got 0"),
    (lambda job: api.run(job, backend="nope"), "--backend must be simulator, processes or distributed"),
    (lambda job: api.leaderboard(job, n_jobs=0), "--n-jobs must be >= 1 or -1 (all cores), but got 0"),
    (lambda job: api.profile(job, backend="simulator"), "--backend must be processes or distributed for profile"),
    # the API's keywords are not parsed as the command line's: each of a type its option does not take
    (lambda job: api.tune(job, space="static_k", n_trials="2"), "--n-trials must be an int, but got '2'"),
    (lambda job: api.tune(job, n_trials=1.5), "--n-trials must be an int, but got 1.5"),
    (lambda job: api.run(job, seed=True), "--seed must be an int, but got True"),
    (lambda job: api.tune(job, study=5), "--study must be a string, but got 5"),
    (lambda job: api.backend("processes", workers_per_device="2"), "--workers-per-device must be an int, but got '2'"),
    (lambda job: api.replay("logs", tpe_trials=4), "--tpe-trials must be a list of ints, but got 4"),
    (lambda job: api.run(job, "bsp", on="simulator"), "on must be where to train, as backend(...) makes it"),
    # a job, a policy or its parameters of the wrong kind
    (lambda job: api.tune({"name": "x"}), "job must be a JobSpec (load_job, job_from_dict) or a job file's path, "
                                          "but got dict"),
    (lambda job: api.validate_job(job), "a job file must be a path, but got JobSpec"),
    (lambda job: api.make_policy({"name": "dbw"}), "a policy dict has the key 'policy' (a name) and optionally "
                                                  "'params' (a dict), but got keys ['name']"),
    (lambda job: api.make_policy(None), "--policy must be a policy name or spec (a string), a dict"),
    (lambda job: api.make_policy("dbw", "window=3"), "a policy's params must be a dict {name: value}, but got "
                                                     "'window=3'"),
    (lambda job: api.leaderboard(job, [{"policy": "ssp", "params": {"staleness": -3}}], seeds=1),
     "--policies {'policy': 'ssp', 'params': {'staleness': -3}}: staleness must be an integer >= 0"),
    # a bare string where a list is meant (read one character at a time, it named the policy 'b')
    (lambda job: api.leaderboard(job, "bsp"), "policies must be a list, but got 'bsp' (a list of one: ['bsp'])"),
    (lambda job: api.scaling("results/dana_n4"), "leaderboards must be a list, but got 'results/dana_n4'"),
    (lambda job: api.table("job.yaml", "out"), "files must be a list, but got 'job.yaml'"),
    # a path that is none (pathlib's TypeError from inside autosync), or empty (read as the current folder)
    (lambda job: api.family(None), "family_file must be a file or folder path, but got None"),
    (lambda job: api.table([5], "tb"), "files[0] must be a file or folder path, but got 5"),
    (lambda job: api.scaling([None]), "leaderboards[0] must be a file or folder path, but got None"),
    (lambda job: api.replay(""), "logs must be a file or folder path, but got ''"),
    (lambda job: api.load_run(5), "run_dir must be a file or folder path, but got 5"),
    (lambda job: api.rerun("r1"), "rerun needs the run load_run(RUN_DIR) returns, but got 'r1'"),
    # a parameter given twice (the last taken without a word), overrides that are no dict (a TypeError)
    (lambda job: api.run(job, "backup", params=["k=2", "k=3"]), "--param must name each parameter once, but got "
                                                                "k ['2', '3']"),
    (lambda job: api.load_job(None, overrides=5), "overrides must be a dict of top-level job fields, but got 5"),
    # a storage that is no URL: a Path (an AttributeError deep in its lock), or empty (read as the default)
    (lambda job: api.tune(job, "static_k", storage=Path("x.db")), "--storage must be a URL (text, such as "
                                                                  "sqlite:///FILE.db), but got PosixPath('x.db')"),
    (lambda job: api.tune(job, "static_k", storage=""), "--storage must not be empty, but got ''"),
    (lambda job: api.recommend(job, storage=" "), "storage must be a storage URL"),
    (lambda job: api.clear_cache(job, storage=Path("x.db")), "storage must be a storage URL"),
    # a device the engine does not know, checked as --device is
    (lambda job: api.check_workload(job, device="gpu"), "--device must be cpu or cuda (cuda:N for one GPU of "
                                                        "several), but got 'gpu'"),
    (lambda job: api.load_run("r1", device=None), "--device must be cpu or cuda (cuda:N for one GPU of several), "
                                                  "but got None"),  # an AttributeError
    # None for an option that is never None (a TypeError inside the engine's checks)
    (lambda job: api.backend("processes", time_scale=None), "--time-scale must be a number, but got None"),
    (lambda job: api.leaderboard(job, ["bsp"], seeds=None), "--seeds must be an int, but got None"),
    # a callback that is no function: a TypeError once the work had begun
    (lambda job: api.run(job, "bsp", progress=5), "progress must be a function (or None), but got 5"),
    (lambda job: api.tune(job, "static_k", on_trial="bar"), "on_trial must be a function (or None), but got 'bar'"),
    (lambda job: api.leaderboard(job, ["bsp"], on_done=1), "on_done must be a function (or None), but got 1"),
    (lambda job: api.profile(job, phase=True), "phase must be a function, but got True"),
    (lambda job: api.replay("logs", phase=None), "phase must be a function, but got None"),
    (lambda job: job_from_dict({"name": "x"}, 5), "source must be a text labelling where the job came from, but "
                                                  "got 5"),
])
def test_an_option_the_api_refuses_is_a_one_line_user_error(call, message):
    with pytest.raises(UserError) as info:
        call(api.load_job(None))
    assert message in str(info.value) and "\n" not in str(info.value)


def test_options_are_taken_whole_or_as_keywords():
    options = TuneOptions(n_trials=5, repeats=2)
    assert dataclasses.replace(options, n_trials=6).repeats == 2
    assert api.backend("processes", clock="real").processes == ExecutionOptions().workers_per_device
    assert RunOptions(params=["k=3"]).parameters() == {"k": 3} == RunOptions(params={"k": 3}).parameters()


def test_off_torchrun_the_ranks_context_leads_and_shares_nothing():
    from autosync.engine.backends import torchrun_ranks

    with torchrun_ranks(RunOptions().choice()) as ranks:
        assert ranks.leader
        ranks.share(api.load_job(None))  # no group: nothing to send


_OWN = {"job", "out", "as_json", "wide"}  # the command line's own parameters (the job file, --out, --json, --wide)


@pytest.mark.parametrize("name, functions, cls", [("tune", (api.tune, api.write_tune), TuneOptions),
                                                   ("run", (api.run, api.write_run), RunOptions)])
def test_every_command_line_flag_is_an_api_keyword_with_the_same_default(name, functions, cls):
    """`autosync tune --n-trials 5` and `api.tune(job, n_trials=5)` name one option, and left out both
    mean the same value (a flag of what is written, such as `run --plot`, is the writer's keyword)."""
    import inspect

    import typer.main

    from autosync.cli import app
    from autosync.core.declare import default_of

    command = typer.main.get_command(app).commands[name]
    function, writer = functions
    assert any(p.kind is inspect.Parameter.VAR_KEYWORD for p in inspect.signature(function).parameters.values())
    keywords = {**inspect.signature(writer).parameters, **inspect.signature(function).parameters}
    fields = {f.name for f in dataclasses.fields(cls)}
    for param in command.params:
        if param.name in _OWN:
            continue
        assert param.name in fields or param.name in keywords, f"--{param.name} is no keyword of api.{name}"
        default = default_of(cls, param.name) if param.name in fields else keywords[param.name].default
        assert param.default == default or (param.default in (None, ()) and default == []), param.name
        if param.name in fields:
            build(cls, **{param.name: default})  # the API takes the keyword


def test_the_search_and_the_engine_take_their_defaults_from_the_options():
    """One set of defaults: the search's request and scoring, and the engine's execution record, default
    to what `autosync tune` and `autosync run` default to."""
    from autosync.engine.backends import BackendChoice
    from autosync.search.objective import ObjectiveSettings
    from autosync.search.request import TuneRequest

    assert BackendChoice() == ExecutionOptions().choice() == api.backend()
    options, request = TuneOptions(), {f.name: f.default for f in dataclasses.fields(TuneRequest)}
    for name in ("n_trials", "timeout", "study", "adopt_study", "sampler", "seed", "n_jobs", "refresh", "verify_top",
                 "transfer", "patience"):
        assert request[name] == getattr(options, name), name
    settings = ObjectiveSettings()
    assert (settings.repeats, settings.tolerance, settings.constraint_at, settings.multi_objective) == (
        options.repeats, options.tolerance, options.constraint_at, options.objective != "time")


def test_a_request_made_from_options_is_the_one_the_api_tunes(monkeypatch):
    from autosync.search import tune as tune_module
    from autosync.search.request import TuneRequest

    made = []
    done = tune_module.TuneOutcome("done", "sqlite://", cached=True, new_trials=0, cache={})
    monkeypatch.setattr(tune_module, "tune", lambda request, **_: made.append(request) or done)
    job = api.load_job(None)
    assert api.tune(job, n_trials=3, repeats=2, space="static_k", storage="sqlite://").study_name == "done"
    expected = TuneRequest.from_options(job, TuneOptions(n_trials=3, repeats=2, space="static_k", storage="sqlite://"))
    fields = [f.name for f in dataclasses.fields(TuneRequest) if f.name != "space"]
    assert made[0].space.name == expected.space.name
    assert [getattr(made[0], f) for f in fields] == [getattr(expected, f) for f in fields]


def test_the_api_functions_of_a_job_take_the_job_first_and_the_storage_after_it(tmp_path):
    """`cached_studies(job, storage)` and `clear_cache(job, storage)`: one order, as `tune`, `recommend` and
    `tuned_policy` take theirs (a storage passed where the job goes would be an obscure error)."""
    import inspect

    for function in (api.cached_studies, api.clear_cache, api.recommend, api.tuned_policy, api.tune, api.run):
        assert next(iter(inspect.signature(function).parameters)) == "job", function.__name__
    for function in (api.cached_studies, api.clear_cache, api.recommend, api.tuned_policy):
        assert list(inspect.signature(function).parameters)[1] == "storage", function.__name__
    url = f"sqlite:///{tmp_path / 'none.db'}"
    job = api.load_job(None)
    assert api.cached_studies(job, url) == [] == api.cached_studies(storage=url) == api.clear_cache(job, url)
    assert not (tmp_path / "none.db").exists()  # reading creates nothing


@pytest.mark.slow
def test_the_outcome_api_tune_returns_writes_the_files_write_tune_writes(tmp_path):
    """`api.tune(...).write(dir)`: the study's plots (and, with verify_top, the verification) that
    `api.write_tune(outcome, dir)` writes, the same files; a cached answer writes none."""
    from autosync.search.tune import TuneOutcome
    from tests.conftest import small_job

    url = f"sqlite:///{tmp_path / 's.db'}"
    outcome = api.tune(small_job(), "static_k", n_trials=2, storage=url)
    assert isinstance(outcome, TuneOutcome) and not outcome.cached
    files, old = outcome.write(tmp_path / "new"), api.write_tune(outcome, tmp_path / "old")
    assert files.plots and [p.name for p in files.plots] == [p.name for p in old.plots]
    assert (files.skipped, files.verification) == (old.skipped, old.verification)
    assert sorted(p.name for p in (tmp_path / "new").iterdir()) == sorted(p.name for p in (tmp_path / "old").iterdir())
    cached = api.tune(small_job(), "static_k", n_trials=2, storage=url)
    assert cached.cached and cached.write(tmp_path / "cached").plots == []


def test_the_run_api_run_returns_writes_the_files_write_run_writes(tmp_path):
    """`api.run(...).write(dir, plot=True)`: the files `api.write_run(result, job, dir, plot=True)` writes,
    summary.json (job, execution) the same."""
    from tests.conftest import small_job

    job = small_job()
    result = api.run(job, "bsp")
    new, old = result.write(tmp_path / "new", plot=True), api.write_run(result, job, tmp_path / "old", plot=True)
    assert [p.name for p in new] == [p.name for p in old] and "plot.png" in [p.name for p in new]
    assert (tmp_path / "new" / "summary.json").read_text() == (tmp_path / "old" / "summary.json").read_text()


@pytest.mark.parametrize("spec, k", [("backup", 3), ("backup(lr_rule=sqrt)", 3), ("backup:k=2", 2)])
def test_run_of_a_bare_backup_waits_for_three_quarters_of_the_jobs_workers(spec, k):
    """`run --policy backup` on 4 workers waited for its class default k = 12 and was refused; a leaderboard's
    bare backup waits for 3n/4 (`sized_defaults`), and so does run's, where the spec leaves k out."""
    from tests.conftest import small_job

    job, policy = api.run_setup(small_job(), RunOptions(policy=spec))
    assert policy.name == "backup" and policy.k == k
    with pytest.raises(UserError, match="k must be between 1 and n_workers=4, but got k=9"):
        api.run_setup(small_job(), RunOptions(policy="backup", params=["k=9"]))


def test_results_written_to_a_path_that_is_a_file_are_one_line(tmp_path):
    """`Run.write`, `Leaderboard.write` and `leaderboard(keep_runs_in=...)` where a file stands: one line naming
    it (a FileExistsError from deep in the writers before), the leaderboard's before any run."""
    from autosync.reporting.results import Leaderboard
    from tests.conftest import small_job

    job = small_job()
    taken = tmp_path / "taken"
    taken.write_text("")
    with pytest.raises(UserError, match=f"^keep_runs_in: {taken} is a file, but an output directory is needed$"):
        api.leaderboard(job, ["bsp"], seeds=1, keep_runs_in=taken, on_done=lambda run: pytest.fail("a run started"))
    with pytest.raises(UserError, match=f"^directory: {taken} is a file, but an output directory is needed$"):
        Leaderboard(job, [0], [], []).write(taken)
    with pytest.raises(UserError, match=f"^directory: {taken} is a file, but an output directory is needed$"):
        api.run(job, "bsp").write(taken)


def test_numpy_numbers_are_taken_where_python_numbers_are():
    """The type checks of the API's keywords take numpy's ints, floats and bools (a script's arange, a
    config read by numpy), as they were taken before those checks."""
    import numpy as np

    from autosync.options import ReplayOptions

    assert TuneOptions(n_trials=np.int64(2), tolerance=np.float32(0.02), refresh=np.bool_(False)).n_trials == 2
    assert ReplayOptions(tpe_trials=np.array([4, 8])).tpe_trials is not None
    with pytest.raises(UserError, match=r"--n-trials must be an int, but got np.float64\(2.5\)"):
        TuneOptions(n_trials=np.float64(2.5))


def test_the_tuned_policy_is_named_in_any_case_as_policy_names_are():
    """`--policy TUNED` was refused as an unknown policy, where `--policy BSP` is BSP."""
    assert RunOptions(policy=" TUNED ").tuned and RunOptions(policy="tuned").tuned
    assert not RunOptions(policy="bsp").tuned and not RunOptions(policy={"policy": "tuned"}).tuned


def test_a_call_with_arguments_a_function_does_not_take_keeps_python_s_message_naming_it():
    """The API's callback check binds the arguments first; one it cannot bind is Python's own TypeError, which
    names the function (the check's bind said only 'too many positional arguments')."""
    with pytest.raises(TypeError, match=r"run\(\) takes from 1 to 3 positional arguments but 4 were given"):
        api.run(None, "bsp", None, 4)
