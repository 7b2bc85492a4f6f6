"""Every use of Optuna's private API, in one place (tests/unit/search/study/test_optuna_internals.py fails loudly when it moves).

autosync fails the trials of dead processes itself, each with its reason, before Optuna's own check in
`study.optimize` would fail them without one (`autosync.search.study.trials.fail_dead_trials`). That needs the
ids of stale trials, the heartbeat table (a trial killed before its first heartbeat is never stale to
Optuna), a study's storage (and its URL, for the storage lock) and a trial's storage id. The trial budget is counted from the database
itself, past Optuna's per-process cache (`fresh_trials`, which reads whole only the trials it has not kept
finished: `RDBStorage._get_trials`, and the columns of the trials table and of its attribute, parameter and
intermediate-value tables). Studies are listed from their attribute rows
(`all_studies`), so that one damaged attribute does not hide every study. A heartbeat thread whose start
was cut short is found and stopped (`heartbeat_threads`). A queued trial can be claimed in an order other than
Optuna's oldest first (`claiming_in`), and a trial's attributes written in one statement (`set_user_attrs`, with Optuna's model and updatable check).
Nothing else of Optuna's internals is used.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import json
import threading
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterator

from autosync.search.study.interrupts import storage_call
from autosync.search.study.outage import call_waiting
from autosync.search.study.records import has_own_failure

if TYPE_CHECKING:
    import optuna


def storage_of(study: "optuna.Study") -> Any:
    """The storage object behind a study (Optuna's caching wrapper around the RDB storage)."""
    return study._storage


def storage_url(study: "optuna.Study") -> str | None:
    """The URL of the RDB storage behind a study (None for an in-memory storage: one process only)."""
    return getattr(_backend(study), "url", None)


def grace_seconds(study: "optuna.Study") -> float | None:
    """After how many seconds without a heartbeat autosync judges a RUNNING trial dead: two intervals
    (None: no heartbeats). Optuna's own check, inside `study.optimize`, is given a longer grace period
    (`autosync.search.study.storage`), so autosync always fails a dead trial first, with its reason."""
    interval = _backend(study).get_heartbeat_interval()
    return None if interval is None else 2 * interval


def trial_id(trial: "optuna.Trial | optuna.trial.FrozenTrial") -> int:
    """A trial's id in the storage (not its number within the study)."""
    return trial._trial_id


def fixed_params(trial: "optuna.Trial") -> dict[str, Any]:
    """The parameters a trial was enqueued with (`Study.enqueue_trial`; empty for a free proposal)."""
    return dict(trial._fixed_params or {})


def _backend(study: "optuna.Study") -> Any:
    return getattr(study._storage, "_backend", study._storage)


@contextlib.contextmanager
def _session(backend: Any) -> Iterator[Any]:
    """A session of the RDB storage `backend` for a query of autosync's own, a storage call Ctrl-C waits for
    (`autosync.search.study.interrupts`), removed after."""
    with storage_call():
        session = backend.scoped_session()
        try:
            yield session
        finally:
            backend.scoped_session.remove()


def fresh_trials(study: "optuna.Study", states: tuple[Any, ...] | None = None,
                 before: int | None = None) -> list["optuna.trial.FrozenTrial"]:
    """The study's trials read from the database now, past Optuna's per-process cache (`before`: only those
    numbered below it, so that a later one, the caller's own running trial, is not read whole).

    The cache re-reads only trials it saw unfinished and those newer than the last finished one it saw;
    a trial this process created (an enqueued or re-queued one) can stay WAITING in it after another
    process ran it. Budget accounting across processes must not trust that view.

    From an RDB storage, one light query lists every trial's id, number, state, completion time and row
    counts (`_listed`), and only the trials not kept (finished or waiting ones) are read whole (`_KeptTrials`):
    the race and the checks read the study several times a trial, and a whole read of every trial was most of
    a replayed tune's time.
    The objects returned are shared between calls: read them, never change them.
    """
    backend = _backend(study)
    if not hasattr(backend, "scoped_session"):  # in memory: one process, nothing to read
        trials = backend.get_all_trials(study._study_id, deepcopy=False, states=states)
        return [t for t in trials if before is None or t.number < before]
    # made again whole while a server does not answer (`outage.call_waiting`), as Optuna's own read is
    return call_waiting(storage_url(study), _KEPT.read, backend, study._study_id, states, before)


class _KeptTrials:
    """The finished and the waiting trials this process has read from each RDB storage, by study and trial id.

    A finished or waiting trial is kept with its row as the light query lists it (`_listed`): number, state,
    completion time, and how many attributes, parameters and intermediate values it has and how long its
    attributes' JSON is. Optuna refuses a write to a finished trial, but checks the state before it writes,
    outside the write's transaction (a process failing a trial it found silent, while its owner finishes
    it), so a finished trial can still gain a row: its listed row then differs and it is read again, as is a
    trial the database no longer lists so (a deleted study, or its id given again under a study made anew).
    A waiting trial is written once, when it is queued (autosync writes a trial's attributes while it runs,
    or as it fails it): claimed, it is listed RUNNING and read again. Only a trial read whole as the light
    query before it listed it is kept. One thread reads at a time.
    """

    LARGEST_ID_LIST = 500  # more unread trials than this are read as every trial past the first of them: an
    # id list as long as the study's would pass SQLite's limit on a statement's variables (999 before 3.32)

    def __init__(self) -> None:
        self._by_backend: "weakref.WeakKeyDictionary[Any, dict[int, dict[int, tuple[Any, tuple[Any, ...]]]]]" = \
            weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def read(self, backend: Any, study_id: int, states: tuple[Any, ...] | None,
             before: int | None = None) -> list["optuna.trial.FrozenTrial"]:
        """The study's trials in `states` (None: all) numbered below `before` (None: any), by id: each kept
        one from here, the others read whole (those the light query saw so, and any trial newer than it saw)."""
        with self._lock:
            kept = self._by_backend.setdefault(backend, {}).setdefault(study_id, {})
            listed = _listed(backend, study_id)
            for i in [i for i, (_, row) in kept.items() if listed.get(i) != row]:
                del kept[i]
            wanted = [i for i, row in listed.items()
                      if (states is None or row[1] in states) and (before is None or row[0] < before)]
            unread = {i for i in wanted if i not in kept}
            if len(unread) > self.LARGEST_ID_LIST:
                read = backend._get_trials(study_id, None, set(), min(unread) - 1)
            else:
                read = backend._get_trials(study_id, None, unread, max(listed)) if unread else []
            for trial in read:
                row = listed.get(trial._trial_id)
                if (trial.state.is_finished() or trial.state == trial.state.WAITING) and row is not None \
                        and row[1] == trial.state:
                    kept[trial._trial_id] = (trial, row)
            found = {i: kept[i][0] for i in wanted if i in kept} | {t._trial_id: t for t in read}
        return [found[i] for i in sorted(found)
                if (states is None or found[i].state in states) and (before is None or found[i].number < before)]


def _listed(backend: Any, study_id: int) -> dict[int, tuple[Any, ...]]:
    """Each trial of the study by id: (number, state, completion time, then the count of its user attributes
    and their JSON's length, the same of its system attributes, the count of its parameters and of its
    intermediate values), in one query; a missing study raises, as Optuna's own read does."""
    from optuna.storages._rdb import models

    with _session(backend) as session:
        rows = session.execute(_listing(), {"study_id": study_id}).all()
        if not rows:
            models.StudyModel.find_or_raise_by_id(study_id, session)
    return {row[0]: tuple(row[1:]) for row in rows}


@functools.cache
def _listing() -> Any:
    """`_listed`'s query, made once (its study a bound parameter): building it took as long as running it."""
    import sqlalchemy as sa
    from optuna.storages._rdb import models

    trials = models.TrialModel.__table__

    def per_trial(model: Any, length: bool = False) -> Any:
        table = model.__table__
        measure = sa.func.coalesce(sa.func.sum(sa.func.length(table.c.value_json)), 0) if length else sa.func.count()
        return sa.select(measure).where(table.c.trial_id == trials.c.trial_id).scalar_subquery()

    return sa.select(
        trials.c.trial_id, trials.c.number, trials.c.state, trials.c.datetime_complete,
        per_trial(models.TrialUserAttributeModel), per_trial(models.TrialUserAttributeModel, length=True),
        per_trial(models.TrialSystemAttributeModel), per_trial(models.TrialSystemAttributeModel, length=True),
        per_trial(models.TrialParamModel), per_trial(models.TrialIntermediateValueModel),
    ).where(trials.c.study_id == sa.bindparam("study_id"))


_KEPT = _KeptTrials()


@contextlib.contextmanager
def claiming_in(study: "optuna.Study", first: "list[optuna.trial.FrozenTrial] | None") -> Iterator[None]:
    """While in it, `study.optimize` claims the first of the waiting trials `first` (in that order) that no
    other process claimed first, where Optuna claims the oldest (`Study._pop_waiting_trial_id`); it asks the
    sampler for a new one only where none of them is left. `first` None: Optuna's own order."""
    import optuna
    from optuna.exceptions import UpdateFinishedTrialError

    if first is None:
        yield
        return

    def pop() -> int | None:
        for trial in first:
            try:  # False, or raised: another process claimed it (or it finished) first
                if study._storage.set_trial_state_values(trial._trial_id, state=optuna.trial.TrialState.RUNNING):
                    _known_to_cache(study, trial._trial_id)
                    return trial._trial_id
            except UpdateFinishedTrialError:
                continue
        return None

    study._pop_waiting_trial_id = pop  # the instance's, for this claim only
    try:
        yield
    finally:
        del study._pop_waiting_trial_id


def _known_to_cache(study: "optuna.Study", trial_id: int) -> None:
    """Make this process's storage cache know trial `trial_id` (one another process queued): the parameters it
    suggests are written through the cache, which fails on a trial it does not know. Optuna's own pop reads
    the waiting trials through the cache, which learns them; a read here only where needed, since the race
    claims every run this way and a read each time slowed a replayed tune by a third."""
    import optuna

    known = getattr(study._storage, "_trial_id_to_study_id_and_number", None)
    if isinstance(known, dict) and trial_id not in known:
        study._storage.get_all_trials(study._study_id, deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))


def set_user_attrs(trial: "optuna.Trial", attrs: dict[str, Any]) -> None:
    """`trial.set_user_attr(key, value)` for each of `attrs`, in one transaction of an RDB storage (one commit,
    where Optuna commits each attribute: most of a replayed trial's time in SQLite), made again whole while a
    server does not answer (`outage.call_waiting`); one by one otherwise, and where the transaction meets
    another process's row (an integrity error: the attribute Optuna's own call would skip alone)."""
    import sqlalchemy.exc

    backend = _backend(trial.study)
    if hasattr(backend, "_set_trial_attr_without_commit"):
        try:
            call_waiting(storage_url(trial.study), _write_attrs, backend, trial._trial_id, attrs)
            trial._cached_frozen_trial.user_attrs.update(attrs)
            return
        except sqlalchemy.exc.IntegrityError:
            pass
    for key, value in attrs.items():
        trial.set_user_attr(key, value)


def _write_attrs(backend: Any, trial_id: int, attrs: dict[str, Any]) -> None:
    """Write `attrs` to trial `trial_id` in one transaction: one statement for all of them where the database
    upserts (SQLite 3.24+, PostgreSQL: Optuna's own statement, given every row at once; a replayed tune wrote
    each attribute after a look-up of its trial, a quarter of its SQL), Optuna's per-attribute write elsewhere."""
    import sqlite3

    from optuna.storages._rdb import models
    from optuna.storages._rdb.storage import _create_scoped_session
    from sqlalchemy.dialects import postgresql, sqlite

    if not attrs:
        return
    model = models.TrialUserAttributeModel
    dialect = {"postgresql": postgresql, "sqlite": sqlite if sqlite3.sqlite_version_info >= (3, 24, 0) else None}
    upsert = dialect.get(backend.engine.name)
    with storage_call(), _create_scoped_session(backend.scoped_session) as session:
        if upsert is None:
            for key, value in attrs.items():
                backend._set_trial_attr_without_commit(session, model, trial_id, key, value)
            return
        backend.check_trial_is_updatable(trial_id, models.TrialModel.find_or_raise_by_id(trial_id, session).state)
        rows = upsert.insert(model).values([{"trial_id": trial_id, "key": key, "value_json": json.dumps(value)}
                                            for key, value in attrs.items()])
        session.execute(rows.on_conflict_do_update(index_elements=[model.trial_id, model.key],
                                                   set_={"value_json": rows.excluded.value_json}))


def dead_trial_ids(study: "optuna.Study") -> list[int]:
    """Storage ids of RUNNING trials whose process is gone (`_dead_trial_ids`; made again whole while a
    server storage does not answer, `autosync.search.study.outage`)."""
    return call_waiting(storage_url(study), _dead_trial_ids, study)


def _dead_trial_ids(study: "optuna.Study") -> list[int]:
    """Storage ids of RUNNING trials whose process is gone.

    Stale trials (no heartbeat within `grace_seconds`) by Optuna's own query, plus orphans: RUNNING
    trials older than the grace period with no heartbeat at all (a process killed between claiming a
    trial and its first heartbeat; a live one beats every interval).
    """
    import optuna
    from optuna.storages._rdb import models

    grace = grace_seconds(study)
    if grace is None:
        return []
    backend = _backend(study)
    optuna_grace, backend.grace_period = backend.grace_period, grace  # Optuna's query, with autosync's grace
    try:
        stale = list(backend._get_stale_trial_ids(study._study_id))
    finally:
        backend.grace_period = optuna_grace
    cutoff = dt.datetime.now() - dt.timedelta(seconds=grace)
    running = fresh_trials(study, (optuna.trial.TrialState.RUNNING,))
    old = [trial_id(t) for t in running
           if t.datetime_start is not None and t.datetime_start < cutoff and trial_id(t) not in stale]
    if not old:
        return stale
    with _session(backend) as session:
        orphans = [i for i in old if models.TrialHeartbeatModel.where_trial_id(i, session) is None]
    return stale + orphans


def heartbeat_ages(study: "optuna.Study", ids: list[int]) -> dict[int, float | None]:
    """Seconds since each trial's last heartbeat (None: it never beat), by storage id."""
    return call_waiting(storage_url(study), _heartbeat_ages, study, ids)


def _heartbeat_ages(study: "optuna.Study", ids: list[int]) -> dict[int, float | None]:
    """`heartbeat_ages` against the database's clock, as Optuna's stale-trial query reads it: a heartbeat is
    the database's timestamp (UTC on SQLite, the server's time zone on PostgreSQL), never this process's
    local time."""
    import sqlalchemy
    from optuna.storages._rdb import models

    with _session(_backend(study)) as session:
        now = session.execute(sqlalchemy.func.now()).scalar_one().replace(tzinfo=None)
        beats = {i: models.TrialHeartbeatModel.where_trial_id(i, session) for i in ids}
        return {i: None if b is None else (now - b.heartbeat).total_seconds() for i, b in beats.items()}


@dataclass
class StoredStudy:
    """A study as its rows hold it: name, id, the user attributes that decode, and those that do not
    (`damaged`: key -> why), which Optuna's own listing would fail on, for every study at once."""

    study_name: str
    study_id: int
    user_attrs: dict[str, Any]
    damaged: dict[str, str] = field(default_factory=dict)


def all_studies(storage: Any) -> list[StoredStudy]:
    """Every study of an RDB storage (or of a study's storage wrapper) with its user attributes decoded one
    by one: a damaged attribute (not JSON) is reported in `damaged` instead of failing the listing."""
    from optuna.storages._rdb import models

    backend = getattr(storage, "_storage", storage)  # a study's storage is wrapped in a cache
    backend = getattr(backend, "_backend", backend)
    with _session(backend) as session:
        studies = {row.study_id: StoredStudy(row.study_name, row.study_id, {})
                   for row in session.query(models.StudyModel).all()}
        for row in session.query(models.StudyUserAttributeModel).all():
            found = studies.get(row.study_id)
            if found is None:
                continue
            try:
                found.user_attrs[row.key] = json.loads(row.value_json)
            except (TypeError, ValueError) as exc:
                found.damaged[row.key] = f"not JSON: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
    return sorted(studies.values(), key=lambda s: s.study_id)


def heartbeat_threads() -> dict[threading.Thread, threading.Event]:
    """Optuna's heartbeat threads beating now in this process, each with the event that stops it: the
    thread `HeartbeatThread.start` made on `_record_heartbeat` with (trial id, storage, stop event). It is
    not a daemon, so one whose `HeartbeatThread` was never joined keeps the process from exiting
    (`autosync.search.study.claim`)."""
    from optuna.storages._heartbeat import HeartbeatThread

    found = {}
    for thread in threading.enumerate():
        args = getattr(thread, "_args", ())
        if getattr(thread, "_target", None) is HeartbeatThread._record_heartbeat and len(args) == 3 \
                and isinstance(args[2], threading.Event):
            found[thread] = args[2]
    return found


def brute_force_sampler(seed: int) -> "optuna.samplers.BaseSampler":
    """Optuna's BruteForceSampler (`--sampler grid`) for a study shared by processes that may be killed.

    A process killed after claiming a trial and before the trial suggested all its parameters leaves a
    failed trial with none or some of them. Optuna 5.0's sampler builds its tree of the grid from every
    trial, and such a trial's short path then fails it with "param_name mismatch: ... != None" (or "None !=
    ..."), in every later trial of the study (found by the kill storm, tests/kill_storm.py). The sampler
    here reads the study without the failed trials that hold no result of their own (killed, interrupted,
    proposed again elsewhere, stopped by the timeout: `records.has_own_failure`), whose points are not tried.
    """
    import optuna
    from optuna.samplers import _brute_force

    read = _brute_force._get_non_waiting_trials_and_current_trial_index

    def with_points(study: "optuna.Study", number: int) -> tuple[list[Any], int]:
        trials, at = read(study, number)
        current = trials[at]
        kept = [t for t in trials if t is current or t.state.name != "FAIL" or has_own_failure(t)]
        return kept, kept.index(current)

    @contextlib.contextmanager
    def points_only() -> Iterator[None]:
        _brute_force._get_non_waiting_trials_and_current_trial_index = with_points
        try:
            yield
        finally:
            _brute_force._get_non_waiting_trials_and_current_trial_index = read

    class SharedBruteForceSampler(optuna.samplers.BruteForceSampler):
        def sample_independent(self, *args: Any, **kwargs: Any) -> Any:
            with points_only():
                return super().sample_independent(*args, **kwargs)

        def after_trial(self, *args: Any, **kwargs: Any) -> None:
            with points_only():
                super().after_trial(*args, **kwargs)

    return SharedBruteForceSampler(seed=seed)
