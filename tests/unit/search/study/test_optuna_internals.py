"""The private Optuna API autosync relies on, in one place: this fails loudly when an Optuna release moves it.

If a test here fails after upgrading Optuna, mend autosync/search/study/_optuna_internals.py (and only it).
"""

from __future__ import annotations

import time

import optuna
import pytest

from autosync.search.study import _optuna_internals as internals
from autosync.search.study.storage import open_storage

MOVED = "Optuna changed private API that autosync/search/study/_optuna_internals.py uses: "


@pytest.fixture
def study(tmp_path):
    storage = open_storage(f"sqlite:///{tmp_path / 'internals.db'}")
    storage.heartbeat_interval, storage.grace_period = 1, 1
    return optuna.create_study(storage=storage, study_name="internals")


def test_the_private_names_still_exist(study):
    from optuna.storages._rdb import models

    for owner, name in [(study, "_storage"), (study, "_study_id"), (study, "_pop_waiting_trial_id"),
                        (study._storage, "_get_stale_trial_ids"),
                        (internals._backend(study), "_set_trial_attr_without_commit"),
                        (internals._backend(study), "_get_trials"), (internals._backend(study), "check_trial_is_updatable"),
                        (models.TrialModel.__table__.c, "datetime_complete"),
                        (models.TrialHeartbeatModel, "where_trial_id")]:
        assert hasattr(owner, name), MOVED + f"{type(owner).__name__}.{name} is gone"
    trial = study.ask()
    assert isinstance(internals.trial_id(trial), int), MOVED + "Trial._trial_id"
    assert internals.grace_seconds(study) == 2, MOVED + "heartbeat interval / the caching wrapper's _backend"
    assert internals._backend(study).grace_period == 1, MOVED + "RDBStorage.grace_period"
    assert internals.storage_url(study).startswith("sqlite:///"), MOVED + "RDBStorage.url"


@pytest.mark.slow  # waits out two heartbeat intervals of 1 s (Optuna's shortest): about 3.3 s
def test_a_stale_trial_and_an_orphan_are_dead_and_a_live_one_is_not(study):
    distribution = {"x": optuna.distributions.FloatDistribution(0, 1)}
    stale, orphan, live = (study.ask(distribution) for _ in range(3))
    storage = internals.storage_of(study)
    storage.record_heartbeat(internals.trial_id(stale))  # beat once, then never again
    assert internals.dead_trial_ids(study) == [], MOVED + "a trial younger than the grace period was judged dead"
    time.sleep(3.2)  # past two intervals; the storage compares whole seconds
    storage.record_heartbeat(internals.trial_id(live))
    dead = set(internals.dead_trial_ids(study))
    assert dead == {internals.trial_id(stale), internals.trial_id(orphan)}, MOVED + f"dead trials {dead}"


@pytest.mark.parametrize("zone", ["UTC", "Asia/Tokyo", "America/New_York"])
def test_a_fresh_heartbeat_is_seconds_old_in_any_time_zone(study, monkeypatch, zone):
    """SQLite stamps a heartbeat in UTC: its age is read against the database's clock, not this process's
    local time (which put a fresh heartbeat 9 hours old in Tokyo and 5 hours in the future in New York)."""
    monkeypatch.setenv("TZ", zone)
    time.tzset()
    try:
        beating, silent = study.ask(), study.ask()
        internals.storage_of(study).record_heartbeat(internals.trial_id(beating))
        ages = internals.heartbeat_ages(study, [internals.trial_id(beating), internals.trial_id(silent)])
    finally:
        monkeypatch.undo()
        time.tzset()
    assert 0 <= ages[internals.trial_id(beating)] < 5, ages
    assert ages[internals.trial_id(silent)] is None


def test_optunas_heartbeat_thread_is_found_with_the_event_that_stops_it(study):
    """A heartbeat thread whose `HeartbeatThread` was never joined (its start cut short) is stopped through
    the event Optuna gave it (`autosync.search.study.claim.optimize_one`)."""
    from optuna.storages._heartbeat import get_heartbeat_thread

    before = internals.heartbeat_threads()
    beating = get_heartbeat_thread(internals.trial_id(study.ask()), study._storage)
    beating.start()
    (thread, stop), = [(t, e) for t, e in internals.heartbeat_threads().items() if t not in before]
    assert not thread.daemon, "Optuna's heartbeat thread is a daemon now: autosync need not stop it"
    stop.set()
    thread.join(timeout=10)
    assert not thread.is_alive(), MOVED + "HeartbeatThread's thread args (trial id, storage, stop event)"


def test_a_trials_attributes_are_written_together_and_read_back_as_optuna_writes_them(study, tmp_path):
    trial = study.ask()
    internals.set_user_attrs(trial, {"a": 1, "b": [2.5, None], "c": float("inf")})
    assert trial.user_attrs == {"a": 1, "b": [2.5, None], "c": float("inf")}, MOVED + "Trial._cached_frozen_trial"
    (stored,) = internals.fresh_trials(study)
    assert stored.user_attrs == trial.user_attrs, MOVED + "RDBStorage._set_trial_attr_without_commit"
    internals.set_user_attrs(trial, {"a": 3})  # written again: replaced, as set_user_attr replaces it
    assert internals.fresh_trials(study)[0].user_attrs["a"] == 3
    study.tell(trial, 1.0)
    with pytest.raises(optuna.exceptions.UpdateFinishedTrialError):  # refused once finished, as Optuna's own
        internals.set_user_attrs(trial, {"a": 4, "d": 5})
    assert internals.fresh_trials(study)[0].user_attrs == {"a": 3, "b": [2.5, None], "c": float("inf")}
    in_memory = optuna.create_study()  # no database: one attribute at a time, through Optuna's own call
    other = in_memory.ask()
    internals.set_user_attrs(other, {"a": 1, "b": 2})
    assert in_memory.trials[0].user_attrs == {"a": 1, "b": 2}


def _seen(trials):
    return [(t.number, t.state, t.params, t.values, t.user_attrs) for t in trials]


def test_fresh_trials_read_as_optunas_own_read_while_another_process_changes_the_study(tmp_path):
    """The finished and waiting trials kept between reads (`_KeptTrials`) give what a whole read of the database gives,
    for every state asked (and those numbered below a trial alone), while another storage object (another process) claims, finishes and adds trials;
    and a study deleted and made again under the same id is read anew."""
    url = f"sqlite:///{tmp_path / 'fresh.db'}"
    ours = optuna.create_study(storage=open_storage(url), study_name="fresh")
    theirs = optuna.load_study(storage=open_storage(url), study_name="fresh")
    states = [None, (optuna.trial.TrialState.WAITING,), (optuna.trial.TrialState.RUNNING,),
              (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)]

    def agrees():
        for wanted in states:
            whole = internals._backend(ours).get_all_trials(ours._study_id, deepcopy=False, states=wanted)
            assert _seen(internals.fresh_trials(ours, wanted)) == _seen(whole), wanted
            for before in (0, 1, 2, 99):  # those queued before a trial alone, read without the later ones
                assert _seen(internals.fresh_trials(ours, wanted, before=before)) == _seen(
                    [t for t in whole if t.number < before]), (wanted, before)

    for x in range(3):
        ours.enqueue_trial({"x": x}, user_attrs={"queued": x})
    agrees()
    first = theirs.ask()  # claimed elsewhere: RUNNING, then given attributes and finished
    agrees()
    internals.set_user_attrs(first, {"score": 1.5})
    agrees()
    theirs.tell(first, 2.0)
    agrees()
    second = ours.ask()
    ours.tell(second, state=optuna.trial.TrialState.PRUNED)
    theirs.ask()
    theirs.add_trial(optuna.trial.create_trial(params={"x": 9}, distributions={
        "x": optuna.distributions.IntDistribution(0, 9)}, value=0.5))
    agrees()
    old_id = ours._study_id
    optuna.delete_study(study_name="fresh", storage=url)
    again = optuna.create_study(storage=ours._storage, study_name="fresh")
    if again._study_id == old_id:  # SQLite hands the ids out again: nothing kept of the deleted study is read
        time.sleep(0.01)  # a finished trial under a finished trial's id and number, completed later
        again.add_trial(optuna.trial.create_trial(params={"x": 9}, distributions={
            "x": optuna.distributions.IntDistribution(0, 9)}, value=7.0))
        again.enqueue_trial({"x": 5})
        assert _seen(internals.fresh_trials(again)) == _seen(
            internals._backend(again).get_all_trials(again._study_id, deepcopy=False))
    with pytest.raises(KeyError):
        internals.fresh_trials(ours if again._study_id != old_id else optuna.Study("gone", ours._storage))


def test_a_finished_trial_that_gains_a_row_is_read_again_and_a_long_list_of_unread_trials_is_read_whole(
        tmp_path, monkeypatch):
    """Optuna checks a trial's state before it writes, outside the write's transaction, so a trial can finish
    between another process's check and its write: the row the write adds is read, not the copy kept."""
    from optuna.storages._rdb import models
    from optuna.storages._rdb.storage import _create_scoped_session

    study = optuna.create_study(storage=open_storage(f"sqlite:///{tmp_path / 'late.db'}"), study_name="late")
    for x in range(4):
        study.enqueue_trial({"x": x})
    trial = study.ask()
    study.tell(trial, 1.0)
    assert internals.fresh_trials(study)[0].user_attrs == {}  # read whole and kept
    backend = internals._backend(study)
    with _create_scoped_session(backend.scoped_session) as session:  # the write whose check came first
        session.add(models.TrialUserAttributeModel(trial_id=internals.trial_id(trial), key="killed",
                                                   value_json="true"))
    assert internals.fresh_trials(study)[0].user_attrs == {"killed": True}
    monkeypatch.setattr(internals._KeptTrials, "LARGEST_ID_LIST", 1)
    internals._KEPT._by_backend.clear()
    whole = backend.get_all_trials(study._study_id, deepcopy=False)
    assert _seen(internals.fresh_trials(study)) == _seen(whole)
    assert _seen(internals.fresh_trials(study, (optuna.trial.TrialState.WAITING,))) == _seen(whole[1:])
