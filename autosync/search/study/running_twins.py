"""Processes sharing a study never train the same point twice.

Several `autosync tune` processes seeded alike draw the same random start-up points, and any sampler
may propose a point another process is training or has trained. A proposal that runs exactly like
another process's trial (same parameters or same canonical policy, scored alike; running, or finished
with a result) is found under the storage lock, where each trial also claims its own point, so two
processes can never both miss each other. The newcomer is then proposed again in a fresh trial
(`Resampled`: that trial does not count against the budget), up to `MAX_RESAMPLES` times in a row; past
that (the space holds no other untried point) it is answered from the twin, waiting while it runs.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Callable

from autosync.search.study import _optuna_internals as internals
from autosync.search.study.locking import storage_lock

if TYPE_CHECKING:
    import optuna

MAX_RESAMPLES = 8  # proposals in a row equal to running trials before a process waits for one instead
WAIT_POLL_SECONDS = 0.5  # how often a waiting trial reads its running twin's state


class Resampled(Exception):
    """The trial proposed a point another process is training: it fails with no reason of its own (so it
    does not count against the budget, `autosync.search.study.trials`) and the next trial is proposed afresh.
    A study's `optimize` must catch it (as `autosync.search.tune.run_trials` does)."""


def claim_point(trial: "optuna.Trial", url: str, attrs: dict[str, Any],
                same: Callable[["optuna.trial.FrozenTrial"], bool]) -> "optuna.trial.FrozenTrial | None":
    """Under the storage lock: a trial that `same(other)` says runs exactly like `trial`, if any; else
    `trial` claims its point by storing `attrs` (its canonical policy and scoring) where the other
    processes' checks read them, and None is returned."""
    study = trial.study
    with storage_lock(url, study.study_name):
        for other in internals.fresh_trials(study):
            if other.number != trial.number and same(other):
                return other
        for key, value in attrs.items():
            trial.set_user_attr(key, value)
    return None


def wait_for(study: "optuna.Study", number: int) -> "optuna.trial.FrozenTrial":
    """Trial `number` once it has left the RUNNING state (finished, failed, or failed as dead)."""
    import optuna

    while True:
        trial = next(t for t in internals.fresh_trials(study) if t.number == number)
        if trial.state != optuna.trial.TrialState.RUNNING:
            return trial
        time.sleep(WAIT_POLL_SECONDS)
