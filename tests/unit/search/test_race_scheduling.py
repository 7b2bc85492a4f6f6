"""How the race's processes share a round (`autosync.search.race_trials`): the order each claims the waiting
runs in, BSP's reference runs queued inside the portfolio round, the rounds as `tune` prints them, and helpers
that a race never used are ended at once."""

from __future__ import annotations

import dataclasses
import signal
import threading
import types

import optuna
import pytest

from autosync.core.job import load_job
from autosync.lattice import BSP_LABEL, labelled_points
from autosync.options import TuneOptions
from autosync.race import REFERENCE, ROUNDS, RaceSettings, Run, Runs
from autosync.search import race_trials
from autosync.search.race_horizon import ProgressBoard
from autosync.search.request import TuneRequest
from autosync.search.study import _optuna_internals as internals
from autosync.search.study.records import RACE_RUN, RACE_TIME
from autosync.search.study.storage import open_storage

MEMBERS = ("a", "b", "c")


def portfolio_run(label: str) -> Run:
    return Run(label, 0, ROUNDS[0], MEMBERS)


def reference_run(seed: int) -> Run:
    return Run(BSP_LABEL, seed, REFERENCE, full=True)


@pytest.fixture
def study(tmp_path):
    return optuna.create_study(storage=open_storage(f"sqlite:///{tmp_path / 'race.db'}"), study_name="race")


def queue(study, runs):
    for run in runs:
        study.enqueue_trial({}, user_attrs={RACE_RUN: dataclasses.asdict(run)}, skip_if_exists=False)


def labels(trials):
    return [(t.user_attrs[RACE_RUN]["label"], t.user_attrs[RACE_RUN]["seed"]) for t in trials]


def test_a_process_claims_first_the_runs_that_can_start_now_and_the_planner_only_its_rounds(study):
    queue(study, [portfolio_run("a"), reference_run(0), reference_run(1), portfolio_run("b"), portfolio_run("c")])
    study.ask()  # the first member, running: the others race it, so they wait for it
    waiting = race_trials._waiting(study)
    # a helper: BSP's runs to the end of the budget first (they wait for no one), then the members, oldest first
    assert labels(race_trials._claim_order(study)(waiting)) == [("bsp", 0), ("bsp", 1), ("b", 0), ("c", 0)]
    # the process that plans the next round, beside helpers: only the runs of the round it waits on
    keys = {race_trials._key(portfolio_run(m)) for m in MEMBERS}
    assert labels(race_trials._claim_order(study, keys)(waiting)) == [("b", 0), ("c", 0)]


def test_a_run_waits_for_a_rival_queued_before_it_whether_running_or_still_waiting(study):
    queue(study, [portfolio_run("a"), portfolio_run("b"), portfolio_run("c")])
    first, second, third = race_trials._unfinished(study)
    assert not race_trials._blocked(portfolio_run("a"), first.number, [first, second, third])
    assert race_trials._blocked(portfolio_run("c"), third.number, [first, second, third])  # a and b still waiting
    assert race_trials._blocked(portfolio_run("c"), third.number, [second])
    assert not race_trials._blocked(portfolio_run("c"), third.number, [third])  # a and b done
    assert not race_trials._blocked(reference_run(0), third.number, [first, second])  # races no one


def test_a_run_that_learns_its_horizon_while_it_trains_waits_only_for_rivals_not_started_yet(study):
    queue(study, [portfolio_run("a"), portfolio_run("b"), portfolio_run("c")])
    running = study.ask()  # a, running: b and c can train beside it up to the bound its progress sets
    second, third = race_trials._waiting(study)
    unfinished = race_trials._unfinished(study)
    assert not race_trials._blocked(portfolio_run("b"), second.number, unfinished, learns=True)
    assert race_trials._blocked(portfolio_run("c"), third.number, unfinished, learns=True)  # b not started
    assert race_trials._blocked(portfolio_run("b"), second.number, unfinished)  # one waiting for its horizon
    order = race_trials._claim_order(study, learns=lambda run: True)
    assert labels(order(race_trials._waiting(study))) == [("b", 0), ("c", 0)]
    assert running.number < second.number


def test_the_claim_takes_the_first_trial_the_order_gives_not_the_oldest(study):
    queue(study, [portfolio_run("a"), portfolio_run("b")])
    newest_first = sorted(race_trials._waiting(study), key=lambda t: -t.number)
    with internals.claiming_in(study, newest_first):
        trial = study.ask()
    assert trial.user_attrs[RACE_RUN]["label"] == "b"
    assert study.ask().user_attrs[RACE_RUN]["label"] == "a"  # Optuna's own order again outside


def test_the_reference_runs_are_queued_after_the_portfolios_first_run_only_without_a_budget():
    points = labelled_points(4)
    members = [label for label in points if label != BSP_LABEL][:3]
    step = Runs(ROUNDS[0], [Run(m, 0, ROUNDS[0], tuple(members)) for m in members])
    queued = race_trials._with_reference(step, None)  # a portfolio holding BSP too: BSP's answer needs them
    assert [(r.label, r.round) for r in queued] == [(members[0], ROUNDS[0]), (BSP_LABEL, REFERENCE),
                                                     (BSP_LABEL, REFERENCE), *((m, ROUNDS[0]) for m in members[1:])]
    assert race_trials._with_reference(step, 4.0) == step.runs  # a budget runs them first
    second = Runs(ROUNDS[1], [Run(members[0], 1, ROUNDS[1], (members[0],))])
    assert race_trials._with_reference(second, None) == second.runs


def test_the_rounds_keep_the_portfolio_whole_with_the_reference_runs_queued_inside_it(study):
    queue(study, [portfolio_run("a"), reference_run(0), reference_run(1), portfolio_run("b")])
    for time in (3.0, 9.0, 10.0, 4.0):
        trial = study.ask()
        trial.set_user_attr(RACE_TIME, time)
        trial.set_user_attr("policy", {"policy": "x", "params": {}})
        study.tell(trial, time)
    rounds = race_trials.rounds(study.get_trials(), job_seed=7)
    assert [(r["round"], r["seed"], [run["label"] for run in r["runs"]]) for r in rounds] == [
        ("portfolio", 7, ["a", "b"]), ("reference", 7, ["bsp"]), ("reference", 8, ["bsp"])]


@pytest.mark.slow  # spawns a helper (an interpreter importing torch): about 1 s to start and end
def test_helpers_that_no_race_used_are_ended_without_waiting_for_their_warm_up(tmp_path):
    job = load_job(None)
    options = TuneOptions(storage=f"sqlite:///{tmp_path / 'helpers.db'}", sampler="race", n_jobs=2)
    request = TuneRequest.from_options(job, options)
    with race_trials.race_helpers(request) as helpers:
        assert len(helpers.procs) == 1 and helpers.procs[0].is_alive()
        helpers.close()  # the cache answered: ended there, not once the command is done
        assert helpers.procs[0].exitcode == -signal.SIGKILL
    with race_trials.race_helpers(request) as refused:
        pass  # refused before any race: ended on the way out
    assert refused.procs[0].exitcode == -signal.SIGKILL


def test_a_round_whose_run_failed_without_a_rerun_is_planned_again_rather_than_awaited(study):
    """A helper whose objective raised leaves its run's trial failed, with no trial waiting to run it again:
    the planning process stops waiting, and its next plan queues the run again (`_queue`)."""
    run = portfolio_run("a")
    queue(study, [run])
    trial = study.ask()
    study.tell(trial, state=optuna.trial.TrialState.FAIL)
    url = internals.storage_url(study)
    waiter = threading.Thread(target=race_trials._await_round,
                              args=(study, types.SimpleNamespace(storage=url), [run], None), daemon=True)
    waiter.start()
    waiter.join(timeout=30)
    assert not waiter.is_alive(), "still waiting for a run no process will run"
    race_trials._queue(study, [run])
    assert labels(race_trials._waiting(study)) == [("a", 0)]


def test_a_run_s_horizon_is_bounded_by_its_rivals_progress_and_known_once_they_finish(study, tmp_path):
    queue(study, [portfolio_run("a"), portfolio_run("b"), portfolio_run("c")])
    a, b, c = study.ask(), study.ask(), study.ask()  # all three training at once
    objective = race_trials.RaceObjective(load_job(None), RaceSettings(MEMBERS, 2.0), 2.0, None,
                                          f"sqlite:///{tmp_path / 'race.db'}")
    board = ProgressBoard(tmp_path)
    objective.board = board
    gate_b, gate_c = objective._gate(b, portfolio_run("b")), objective._gate(c, portfolio_run("c"))
    assert gate_b.read() == (None, 0.0)  # a has not reported yet: b may not train past its start
    board.publish(a._trial_id, 5.0)
    board.publish(b._trial_id, 3.0)
    assert gate_b.read() == (None, 10.0)  # a cannot finish before 5 s, so b's horizon is at least twice that
    assert gate_c.read() == (None, 6.0)  # the least of its rivals' progress
    a.set_user_attr(RACE_TIME, 6.0)
    study.tell(a, 6.0)
    assert gate_b.read() == (12.0, 0.0)  # every rival finished: the horizon one process would have given it
    assert gate_c.read() == (None, 6.0)  # b still running at 3 s bounds it below a's 12
