"""Each command's options are declared once (autosync/options.py): the command line and the API agree."""

from __future__ import annotations

import dataclasses

import pytest

from autosync import api
from autosync.core.errors import UserError
from autosync.options import (ExecutionOptions, LeaderboardOptions, ProfileOptions, RunOptions, TuneOptions,
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
    (lambda job: api.run(job, workers_per_device=0), "--workers-per-device must be >= 1, but got 0"),
    (lambda job: api.run(job, backend="nope"), "--backend must be simulator, processes or distributed"),
    (lambda job: api.leaderboard(job, n_jobs=0), "--n-jobs must be >= 1 or -1 (all cores), but got 0"),
    (lambda job: api.profile(job, backend="simulator"), "--backend must be processes or distributed for profile"),
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
