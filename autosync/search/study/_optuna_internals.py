"""Every use of Optuna's private API, in one place (tests/test_optuna_internals.py fails loudly when it moves).

autosync fails the trials of dead processes itself, each with its reason, before Optuna's own check in
`study.optimize` would fail them without one (`autosync.search.study.trials.fail_dead_trials`). That needs the
ids of stale trials, the heartbeat table (a trial killed before its first heartbeat is never stale to
Optuna), a study's storage and a trial's storage id. The trial budget is counted from the database
itself, past Optuna's per-process cache (`fresh_trials`). Nothing else of Optuna's internals is used.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import optuna


def storage_of(study: "optuna.Study") -> Any:
    """The storage object behind a study (Optuna's caching wrapper around the RDB storage)."""
    return study._storage


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


def fresh_trials(study: "optuna.Study", states: tuple[Any, ...] | None = None) -> list["optuna.trial.FrozenTrial"]:
    """The study's trials read from the database now, past Optuna's per-process cache.

    The cache re-reads only trials it saw unfinished and those newer than the last finished one it saw;
    a trial this process created (an enqueued or re-queued one) can stay WAITING in it after another
    process ran it. Budget accounting across processes must not trust that view.
    """
    return _backend(study).get_all_trials(study._study_id, deepcopy=False, states=states)


def dead_trial_ids(study: "optuna.Study") -> list[int]:
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
    session = backend.scoped_session()
    try:
        orphans = [i for i in old if models.TrialHeartbeatModel.where_trial_id(i, session) is None]
    finally:
        backend.scoped_session.remove()
    return stale + orphans
