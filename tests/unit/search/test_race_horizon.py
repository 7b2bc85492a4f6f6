"""A race run that learns its horizon while it trains (`autosync.search.race_horizon`): it never trains past
a bound below the horizon, stops where the horizon known from the start would have stopped it, bit for bit,
and is judged by the horizon wherever the bound could not decide."""

from __future__ import annotations

import math

import pytest
import torch

from autosync.catalog import make_policy
from autosync.engine.simulator import Simulator
from autosync.search import race_horizon
from autosync.search.race_horizon import HorizonGate, ProgressBoard
from tests.conftest import small_job


class Rivals:
    """What a gate reads, one answer at a time (the last one repeated), and how often it read."""

    def __init__(self, *answers: tuple[float | None, float]):
        self.answers, self.reads, self.clears = list(answers), 0, 0

    def read(self) -> tuple[float | None, float]:
        self.reads += 1
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]

    def clear(self) -> None:
        self.clears += 1


@pytest.fixture(autouse=True)
def no_wait(monkeypatch):
    monkeypatch.setattr(race_horizon, "WAIT_SECONDS", 0.0)


def test_a_run_goes_on_below_the_bound_without_reading_again_and_waits_where_it_would_pass_it():
    rivals = Rivals((None, 10.0), (None, 12.0), (None, 30.0))
    gate = HorizonGate(rivals.read, rivals.clear)
    assert gate.stop_at(4.0) is None and rivals.reads == 1
    assert gate.stop_at(9.5) is None and rivals.reads == 1  # below the bound read already
    assert gate.stop_at(20.0) is None and rivals.reads == 3  # 12 was still short of it: read until past it
    assert gate.bound == 30.0 and gate.final is None


def test_once_every_rival_finished_the_run_stops_at_the_horizon_and_reads_no_more():
    rivals = Rivals((None, 5.0), (18.0, 0.0))
    gate = HorizonGate(rivals.read, rivals.clear)
    assert gate.stop_at(6.0) is None  # waited for the horizon: 18 is past the event
    assert gate.stop_at(18.0) is None  # an event at the horizon itself runs, as under stop_at_seconds
    assert gate.stop_at(18.5) == 18.0
    assert rivals.reads == 2


def test_no_rival_finished_in_time_means_no_horizon():
    gate = HorizonGate(Rivals((math.inf, 0.0)).read, lambda: None)
    assert gate.stop_at(1e9) is None


def test_a_gate_held_long_checks_for_dead_processes_trials_now_and_then():
    rivals = Rivals(*[(None, 0.0)] * (2 * race_horizon.CLEAR_EVERY), (7.0, 0.0))
    gate = HorizonGate(rivals.read, rivals.clear)
    assert gate.stop_at(8.0) == 7.0
    assert rivals.clears == 2


@pytest.mark.parametrize("time_to_target, reached, trained, waits", [
    (8.0, True, 8.0, False),  # reached the target before the bound: not eliminated whatever the horizon
    (10.0, True, 10.0, True),  # at the bound itself: the horizon may be 10, which eliminates it
    (16.0, False, 8.0, True),  # missed the target: its penalised time passes the bound
    (40.0, False, 20.0, True),
])
def test_a_run_is_judged_by_the_bound_only_where_any_horizon_above_it_judges_it_alike(
        time_to_target, reached, trained, waits):
    rivals = Rivals((None, 10.0), (25.0, 0.0))
    gate = HorizonGate(rivals.read, rivals.clear)
    gate.stop_at(5.0)
    assert gate.settle(time_to_target, reached, trained) == (25.0 if waits else 10.0)


def test_the_board_says_how_far_each_run_has_trained_and_nothing_without_a_directory(tmp_path):
    board = ProgressBoard(tmp_path)
    assert board.progress(3) == 0.0  # not started
    board.publish(3, 12.5)
    board.publish(3, 14.0)
    assert board.progress(3) == 14.0 and ProgressBoard(tmp_path).progress(3) == 14.0  # another process's view
    nowhere = ProgressBoard(None)
    nowhere.publish(3, 12.5)
    assert nowhere.progress(3) == 0.0


@pytest.mark.parametrize("name, params", [("asp", {}), ("backup", {"k": 3}), ("dana_slim", {})])
def test_a_run_stopped_where_it_learnt_its_horizon_is_the_run_given_it_from_the_start(name, params):
    job = small_job(budget__max_updates=200, workload__evaluation__every_seconds=1.0,
                    cluster__round_trip={"kind": "gamma", "v_task": 0.5, "heterogeneous": True})
    horizon = 6.3
    given = Simulator(job.model_copy(update={"budget": job.budget.model_copy(update={"stop_at_seconds": horizon})}),
                      make_policy(name, params)).run()
    # a bound rising in steps below the horizon, then the horizon itself
    rivals = Rivals(*[(None, b) for b in (0.5, 1.0, 2.5, 4.0, 6.0)], (horizon, 0.0))
    sim = Simulator(job, make_policy(name, params))
    sim.stop_at = HorizonGate(rivals.read, rivals.clear).stop_at
    learnt = sim.run()
    assert rivals.reads == 6
    assert learnt.metrics == given.metrics and learnt.status == given.status
    assert torch.equal(learnt.final_params, given.final_params)
    assert learnt.trace.arrivals == given.trace.arrivals and learnt.trace.evals == given.trace.evals


def test_a_board_whose_directory_is_gone_publishes_nothing_and_raises_nothing(tmp_path):
    board = ProgressBoard(tmp_path)
    board.directory.rmdir()
    board.publish(3, 12.5)
    assert board.progress(3) == 0.0


@pytest.mark.parametrize("margin", [1.5, 1.1])  # b reaches the target within its horizon; b is stopped there
def test_a_race_run_beside_a_rival_still_training_is_the_run_it_is_after_the_rival(tmp_path, monkeypatch, margin):
    """Trial b races trial a, queued before it. One process runs a, then b, given its horizon when it starts
    (the path the table's replays take); here b starts while a is still
    RUNNING (as in another process) and a's progress is published step by step each time b waits at its
    bound (the gate's sleep), until a finishes: b's run and record are those of the one-process race."""
    import dataclasses

    import optuna

    from autosync.core.job import job_from_dict
    from autosync.engine.forks import FORKS
    from autosync.race import ROUNDS, RaceSettings, Run
    from autosync.search.race_trials import RaceObjective
    from autosync.search.study.records import RACE_RUN, RACE_TIME
    from autosync.search.study.storage import open_storage
    from tests.conftest import TINY_JOB

    job = job_from_dict(__import__("yaml").safe_load(TINY_JOB), "tiny")
    a, b = "asp,lr_rule=sqrt_staleness", "backup:k=2,lr_rule=linear"
    runs = [Run(label, 0, ROUNDS[0], (a, b)) for label in (a, b)]

    def race(name: str):
        url = f"sqlite:///{tmp_path / name}.db"
        study = optuna.create_study(storage=open_storage(url), study_name=name)
        for run in runs:
            study.enqueue_trial({}, user_attrs={RACE_RUN: dataclasses.asdict(run)}, skip_if_exists=False)
        objective = RaceObjective(job, RaceSettings((a, b), margin), 2.0, None, url)
        (tmp_path / name).mkdir()
        board = ProgressBoard(tmp_path / name)  # a board of its own: trial ids start again in a new storage
        objective.board = board
        return study, objective, board

    def record(study, objective, trial):
        FORKS.clear()
        try:
            study.tell(trial, objective(trial))
        except optuna.TrialPruned:
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        return {k: v for k, v in study.get_trials()[trial.number].user_attrs.items() if k != "process"}

    study, objective, _ = race("one")
    objective.learns_horizon = lambda run: False  # each run given its horizon when it starts, as by the table
    first = study.ask()
    alone = [record(study, objective, first), record(study, objective, study.ask())]
    a_time = alone[0][RACE_TIME]

    study, objective, board = race("two")
    rival, trial = study.ask(), study.ask()  # a RUNNING elsewhere, b claimed here
    waits: list[float] = []

    def rival_trains(seconds: float) -> None:  # the gate's wait: a trains 1 s more, and finishes in time
        waits.append(board.progress(trial._trial_id))
        progress = float(len(waits))
        if progress < a_time:
            board.publish(rival._trial_id, progress)
        elif rival.number not in [t.number for t in study.get_trials() if t.state.is_finished()]:
            for key, value in alone[0].items():
                rival.set_user_attr(key, value)
            study.tell(rival, a_time)

    monkeypatch.setattr(race_horizon.time, "sleep", rival_trains)
    assert record(study, objective, trial) == alone[1]
    assert (RACE_TIME in alone[1] and alone[1][RACE_TIME] is None) == (margin == 1.1)  # both outcomes covered
    assert len(waits) > 2 and max(waits) > 0  # b trained while a was still training, and waited for it
