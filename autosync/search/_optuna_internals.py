"""Every use of Optuna's private API, in one place (tests/test_optuna_internals.py fails loudly when it moves).

autosync fails the trials of dead processes itself, each with its reason, before Optuna's own check in
`study.optimize` would fail them without one (`autosync.search.trials.fail_dead_trials`). That needs the
ids of stale trials, the heartbeat table (a trial killed before its first heartbeat is never stale to
Optuna), a study's storage and a trial's storage id. Nothing else of Optuna's internals is used.
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
    """After how many seconds without a heartbeat a RUNNING trial counts as dead (None: no heartbeats)."""
    backend = getattr(study._storage, "_backend", study._storage)
    interval = backend.get_heartbeat_interval()
    if interval is None:
        return None
    return backend.grace_period or 2 * interval


def trial_id(trial: "optuna.Trial | optuna.trial.FrozenTrial") -> int:
    """A trial's id in the storage (not its number within the study)."""
    return trial._trial_id


def dead_trial_ids(study: "optuna.Study") -> list[int]:
    """Storage ids of RUNNING trials whose process is gone.

    Stale trials (no heartbeat within the grace period) as Optuna judges them, plus orphans: RUNNING
    trials older than the grace period with no heartbeat at all (a process killed between claiming a
    trial and its first heartbeat; a live one beats every interval).
    """
    import optuna
    from optuna.storages._rdb import models

    storage = storage_of(study)
    grace = grace_seconds(study)
    if grace is None:
        return []
    stale = list(storage._get_stale_trial_ids(study._study_id))
    backend = getattr(storage, "_backend", storage)
    cutoff = dt.datetime.now() - dt.timedelta(seconds=grace)
    running = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))
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
