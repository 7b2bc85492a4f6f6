"""Trial accounting for a study shared by many processes: an exact global budget, and dead trials re-run.

The budget is a queue: `top_up` enqueues WAITING trials, never past finished + queued + running trials
equal to the budget and never more than `LOOKAHEAD` free ones at a time (the queue is topped up again as
processes take them, so the storage never holds a row per trial not yet run, whatever the budget), and
a process only ever runs a trial it takes from that queue (`run_queued_trial`, under
the storage lock, so two processes never race one queued trial into a fresh one). However many processes
work on a study, and however often they are killed, it ends with exactly the budget of counted trials. A trial whose
process died (no heartbeat for the grace period, or none ever) is failed with that reason and re-queued
by `RetryKilledTrial`; it does not count, its re-run does.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import warnings
from typing import TYPE_CHECKING, Any, Callable, Sequence

from autosync.search.study import _optuna_internals as internals
from autosync.search.study.claim import optimize_one, process_gone
from autosync.search.study.records import (
    ANSWERED, BSP_REFERENCE, FAIL_REASON, GIVEN_UP_PLACES, KILLED, PROCESS, RETRY_OF, ROLE, ROLES, constraint_of,
    has_run, outside_budget, role_of,
)
from autosync.search.study.locking import storage_lock

if TYPE_CHECKING:
    import optuna

#: Free (unfixed) trials queued ahead at most: enough for the processes that share a study to each take
#: one without waiting for the next top-up, which every process does (under the lock) once none is queued.
LOOKAHEAD = 8


def _states(*names: str) -> tuple[Any, ...]:
    import optuna

    return tuple(getattr(optuna.trial.TrialState, n) for n in names)


def counted_trials(study: "optuna.Study") -> int:
    """Trials that used the budget: completed, pruned, or failed with a reason of their own (not killed), and
    not answered untrained from a point already tried (`ANSWERED`)."""
    return budget_used(study)[0]


def budget_used(study: "optuna.Study") -> tuple[int, int]:
    """(counted, pending) from one read of the database: two reads could miss a trial that finished between
    them (running at the first, no longer pending at the second) and so queue one beyond the budget."""
    counted = pending = 0
    for t in internals.fresh_trials(study):
        if outside_budget(t):  # a check at full budget, or a repair: the search's, not the budget's
            continue
        if t.user_attrs.get(ANSWERED) and t.state.is_finished():  # a point already answered takes no slot
            continue
        if t.state.name in ("WAITING", "RUNNING"):
            pending += 1
        elif has_run(t):
            counted += 1
    return counted, pending


def roles(study: "optuna.Study") -> dict[str, int]:
    """How many finished trials of each `ROLE` the study holds, in `ROLES` order (none: left out); "budget" is
    what --n-trials counts, the rest are the search's own (read from each trial's attributes, so a study of an
    older autosync, whose trials carry no role, is counted alike)."""
    found: dict[str, int] = {}
    for t in internals.fresh_trials(study):
        if t.state.is_finished():
            role = role_of(t)
            found[role] = found.get(role, 0) + 1
    return {role: found[role] for role in ROLES if role in found}


def trials_run_by(study: "optuna.Study", processes: set[str]) -> list["optuna.trial.FrozenTrial"]:
    """The counted trials (see `budget_used`: full-budget checks and repairs are not) that the processes tagged
    `processes` ran."""
    return [t for t in internals.fresh_trials(study) if t.user_attrs.get(PROCESS) in processes
            and not outside_budget(t) and not t.user_attrs.get(ANSWERED)
            and has_run(t)]


def feasible_trials(study: "optuna.Study") -> list["optuna.trial.FrozenTrial"]:
    """Completed trials meeting the accuracy constraint, best (fastest) first."""
    done = study.get_trials(deepcopy=False, states=_states("COMPLETE"))
    ok = [t for t in done if constraint_of(t) <= 0]
    return sorted(ok, key=lambda t: (t.values[0], t.number))


def top_up(study: "optuna.Study", url: str, budget: int, first: Sequence[dict[str, Any]] = (),
           fresh_only: bool = True) -> int:
    """Queue trials towards counted + queued + running trials reaching `budget`; returns how many were queued.

    `first` are fixed parameter sets (BSP and ASP, or the cached best) queued ahead of free ones: only
    when the study has no trial yet if `fresh_only`, else always. Free trials are queued up to `LOOKAHEAD`
    waiting at a time; a caller whose queue ran dry calls it again. Nothing is queued once the search gave
    up the rest of this budget (`--patience`). Runs under the storage lock, so processes starting together
    never queue past the budget.
    """
    with storage_lock(url, study.study_name):
        fail_dead_trials(study)  # a dead trial is pending until failed and re-queued: settle it first
        requeue_cut_short(study)
        given_up = study.user_attrs.get(GIVEN_UP_PLACES)
        if isinstance(given_up, dict) and given_up.get("budget") == budget:
            return 0
        ahead = list({json.dumps(p, sort_keys=True): p for p in first}.values())  # equal sets queued once
        ahead = ahead if not fresh_only or not internals.fresh_trials(study) else []
        missing = budget - sum(budget_used(study))
        waiting = len(internals.fresh_trials(study, _states("WAITING")))
        free = max(0, min(missing - len(ahead), LOOKAHEAD - waiting))
        queue = (ahead + [{}] * free)[:max(0, missing)]
        for params in queue:
            study.enqueue_trial(params, skip_if_exists=False)
        return len(queue)


def requeue_cut_short(study: "optuna.Study") -> list[int]:
    """Queue again, once, each trial of the budget's queue cut short by Ctrl-C or `--timeout` (role
    "interrupted" or "timed_out") that was queued with fixed parameters (BSP, ASP, a baseline, a transferred
    winner): the numbers of those queued. A free proposal's place is taken by a new proposal as the budget is
    topped up, but a fixed one was queued only when the study was fresh (`top_up`'s `first`), so without
    this the point was never run (an early Ctrl-C on a new study left its ASP failed for good). The copy
    carries `RETRY_OF`, so `retries_in_place` runs it where the trial it re-runs stood. Call it under the
    study's storage lock."""
    trials = internals.fresh_trials(study)
    retried = {t.user_attrs.get(RETRY_OF) for t in trials}
    queued = []
    for t in trials:
        fixed = t.system_attrs.get("fixed_params")
        if t.state.name == "FAIL" and fixed and t.number not in retried and not outside_budget(t) \
                and role_of(t) in ("interrupted", "timed_out"):
            study.enqueue_trial(fixed, user_attrs={RETRY_OF: t.number}, skip_if_exists=False)
            queued.append(t.number)
    return queued


def retries_in_place(waiting: list["optuna.trial.FrozenTrial"]) -> list["optuna.trial.FrozenTrial"]:
    """The waiting trials in the order a search that was never stopped would have run them: a re-run
    (`RETRY_OF`) where the trial it re-runs stood, the others oldest first."""
    return sorted(waiting, key=lambda t: (t.user_attrs.get(RETRY_OF, t.number), t.number))


def run_queued_trial(study: "optuna.Study", url: str, objective: Callable[["optuna.Trial"], Any],
                     catch: tuple[type[Exception], ...],
                     order: Callable[[list[Any]], list[Any]] | None = None) -> bool:
    """Run one queued trial of the budget in `study.optimize`; False (and nothing run) when none is queued
    (with `order`, a function of the waiting trials giving those this process may claim, first first: none
    it leaves; `claim.optimize_one`).

    The storage lock is held from the check for a queued trial until the objective starts, so the
    `ask` inside `optimize` pops that trial: no process ever creates a trial beyond the budget. Dead
    trials are failed (with their reason) and re-queued first, under the same lock. A trial
    failed meanwhile as dead (a heartbeat missed under heavy load) keeps that state: its re-run is queued.
    Ctrl-C between the ask and the process tag waits for the tag (`claim.optimize_one`).
    """
    import optuna

    with contextlib.ExitStack() as held:
        held.enter_context(storage_lock(url, study.study_name))
        fail_dead_trials(study)  # before Optuna's own check in `optimize` fails them without a reason
        waiting = internals.fresh_trials(study, _states("WAITING"))  # the database's view, not this process's cache
        claimable = waiting if order is None else order(waiting)
        if not claimable:
            return False

        ours: list[int] = []

        def claimed(trial: "optuna.Trial") -> None:
            held.close()  # the queued trial is ours now: let other processes claim theirs
            ours.append(trial.number)

        try:
            # claimed in the order read here, under the lock (without one, Optuna's); tagged before it runs
            optimize_one(study, objective, catch, on_claim=claimed, claim_first=None if order is None else claimable)
        except Exception:
            if not (ours and _failed_as_dead(study, ours[0])):
                raise
            # failed as dead by another process while it ran (a heartbeat missed under load): Optuna then
            # cannot tell it, whatever it raises; its re-run is already queued, so this process goes on
    return True


def _failed_as_dead(study: "optuna.Study", number: int) -> bool:
    # from the database: this process's cache still holds its own trial as RUNNING when another process failed it
    trial = next(t for t in internals.fresh_trials(study) if t.number == number)
    return trial.state == _states("FAIL")[0] and bool(trial.user_attrs.get(KILLED))


def kept_line(study: "optuna.Study") -> str:
    """What an interrupted search keeps, in words: its finished trials of the budget (`counted_trials`; the
    search's own trials, checks and answered points, are not of the budget) and BSP's reference runs."""
    kept = counted_trials(study)
    words = f"{kept} finished trial{'' if kept == 1 else 's'} of the budget"
    return f"{words} and BSP's reference runs" if BSP_REFERENCE in study.user_attrs else words


class DeadTrials(list):
    """The numbers of the trials `fail_dead_trials` failed and re-queued, and (`waiting`) one line per
    RUNNING trial not known dead that has gone silent but is not yet past the grace: 'up to N s for
    trial K of host:pid, which ...' (`_silent`); a resuming tune sets `reference`: the study holds BSP's
    reference runs already."""

    waiting: list[str]
    reference: bool = False


def fail_dead_trials(study: "optuna.Study") -> DeadTrials:
    """Fail the RUNNING trials whose process died, each with its reason, and re-queue them; their numbers.

    A trial's process is dead when it sent no heartbeat for the grace period (or none ever), or at once
    when it ran on this machine and is gone (`process_gone`). Its re-run is queued before it is failed, once
    (a trial already re-queued is not queued again). Call it under the study's storage lock, so that no
    other process queues or fails it meanwhile.
    """
    import optuna

    storage = internals.storage_of(study)
    grace = internals.grace_seconds(study)
    running = internals.fresh_trials(study, _states("RUNNING")) if grace is not None else []
    gone = {internals.trial_id(t): t.user_attrs[PROCESS] for t in running if process_gone(t.user_attrs.get(PROCESS))}
    # (no trial running, none is dead: the queries for stale heartbeats are skipped)
    dead = list(dict.fromkeys([*gone, *internals.dead_trial_ids(study)])) if running else []
    retry = storage.get_heartbeat_stale_trial_callback()
    requeued = {t.user_attrs.get(RETRY_OF) for t in internals.fresh_trials(study)} if dead else set()
    numbers = DeadTrials()
    for tid in dead:
        reason = (f"its process {gone[tid]} is gone (killed)" if tid in gone else
                  f"its process stopped: no heartbeat for over {grace} s (killed or hung)")
        frozen = storage.get_trial(tid)
        try:
            # its re-run queued first: a process killed between that and the failure leaves the trial running
            # and re-queued, which the next call fails without queueing it again (the other order left a trial
            # failed and never re-run: found by the kill storm, tests/kill_storm.py)
            if retry is not None and frozen.number not in requeued:
                retry(study, frozen)
            if fail_marked(study, tid, KILLED, "killed", f"{reason}; the trial is re-run"):
                numbers.append(frozen.number)
        except optuna.exceptions.UpdateFinishedTrialError:  # another process got there first, or it finished
            if not storage.get_trial(tid).user_attrs.get(KILLED):  # after all: then its re-run is not needed
                _drop_reruns(study, frozen.number)
    numbers.waiting = _silent(study, [t for t in running if internals.trial_id(t) not in gone], grace)
    return numbers


def fail_marked(study: "optuna.Study", trial_id: int, mark: str, role: str, reason: str, value: Any = True) -> bool:
    """Fail the trial of storage id `trial_id` with attribute `mark` (= `value`) written first, then its `role` and
    `reason`: should it finish between the writes, a reason without its mark would count as a failure of its own
    (and twins copy it). True once failed (Optuna's state write); raises Optuna's UpdateFinishedTrialError
    where the trial finished before a write."""
    import optuna

    storage = internals.storage_of(study)
    for key, written in ((mark, value), (ROLE, role), (FAIL_REASON, reason)):
        storage.set_trial_user_attr(trial_id, key, written)
    return storage.set_trial_state_values(trial_id, state=optuna.trial.TrialState.FAIL)


def _drop_reruns(study: "optuna.Study", number: int) -> None:
    """Fail the queued re-runs of trial `number`, which finished after all (not counted: no result)."""
    import optuna

    for t in internals.fresh_trials(study, _states("WAITING")):
        if t.user_attrs.get(RETRY_OF) == number:
            tid = internals.trial_id(t)
            try:
                fail_marked(study, tid, KILLED, "killed", f"not run: trial {number} finished after all")
            except optuna.exceptions.UpdateFinishedTrialError:  # taken by a process meanwhile: it runs
                continue


def _silent(study: "optuna.Study", running: list["optuna.trial.FrozenTrial"], grace: float | None) -> list[str]:
    """'up to N s for trial K of host:pid, which stopped sending heartbeats' for each of `running` (not
    known dead) silent for longer than the heartbeat interval (half the grace): a live process would have
    beaten since. A trial that never beat (its process killed between claiming it and the objective, before
    it was tagged) is silent since it started, and is waited for the same way."""
    if grace is None or not running:
        return []
    ages = internals.heartbeat_ages(study, [internals.trial_id(t) for t in running])
    now = dt.datetime.now()  # the clock of Optuna's datetime_start
    lines = []
    for t in running:
        age, why = ages[internals.trial_id(t)], "which stopped sending heartbeats"
        if age is None and t.datetime_start is not None:
            age, why = (now - t.datetime_start).total_seconds(), "which has sent no heartbeat since it started"
        if age is not None and grace / 2 < age < grace:
            lines.append(f"up to {max(0.0, grace - age):.0f} s for trial {t.number} of "
                         f"{t.user_attrs.get(PROCESS, 'a process')}, {why}")
    return lines


class RetryKilledTrial:
    """Re-queue a trial whose process died, marking the copy with the trial it re-runs (`retry_of`).

    Wraps Optuna's `RetryHeartbeatStaleTrialCallback` (same parameters, same retry history); the copy
    does not inherit the dead trial's failure attributes or its process tag.
    """

    def __init__(self, max_retry: int | None = 3):
        import optuna

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # marked experimental since Optuna 2.8; we rely on it knowingly
            self._retry = optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=max_retry)

    def __call__(self, study: "optuna.Study", trial: "optuna.trial.FrozenTrial") -> None:
        import copy

        frozen = copy.deepcopy(trial)
        # nor the dead process's tag: while the copy is claimed and not yet tagged by its own process, another
        # process's `fail_dead_trials` would find that process gone and fail the copy too
        for key in (FAIL_REASON, KILLED, PROCESS, ROLE):
            frozen.user_attrs.pop(key, None)
        frozen.set_user_attr(RETRY_OF, trial.number)
        self._retry(study, frozen)
