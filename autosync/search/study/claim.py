"""One trial run through Optuna's `study.optimize`, claimed whole: Ctrl-C never lands between Optuna making
the trial RUNNING and autosync tagging it with its process.

Optuna's trial loop asks for the trial (RUNNING from then on), starts its heartbeat thread, and only then
calls the objective, which is where autosync wrote the process tag. A KeyboardInterrupt in that gap left
the trial RUNNING with no tag and no heartbeat: nothing failed it on the way out, and the resumed command
waited two heartbeat intervals (60 s) before judging it dead. One raised inside the heartbeat thread's
start left that thread (not a daemon) beating after Optuna gave up on the trial, and the command never
exited. So Ctrl-C is held (`interrupts.storage_call`) from before the ask until the trial is tagged, then
raised in the objective, where Optuna fails the trial as it does any trial cut short; and the trial's
heartbeat thread is stopped whatever way `optimize` ends.
"""

from __future__ import annotations

import contextlib
import os
import socket
from typing import TYPE_CHECKING, Any, Callable, Sequence

from autosync.search.study import _optuna_internals as internals
from autosync.search.study.interrupts import storage_call
from autosync.search.study.records import PROCESS

if TYPE_CHECKING:
    import optuna


def process_tag(pid: int | None = None) -> str:
    """host:pid of a process on this machine (this one by default): a trial's PROCESS attribute."""
    return f"{socket.gethostname()}:{os.getpid() if pid is None else pid}"


def process_gone(tag: Any) -> bool:
    """Whether `tag` (a trial's PROCESS attribute, host:pid) names a process of this machine that no longer
    exists: such a trial is dead at once, without waiting out the heartbeat grace. A process of another
    machine, or one that exists (whoever owns it), is not known to be gone."""
    host, _, pid = str(tag).rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except OSError:  # it exists, as another user's process
        return False
    return False


def tag(trial: "optuna.Trial") -> None:
    """Tag `trial` with this process (`PROCESS`) unless it is already (`optimize_one` tags before the
    objective; an objective that Optuna runs directly, as unit tests do, tags its trial itself)."""
    if trial.user_attrs.get(PROCESS) != process_tag():
        trial.set_user_attr(PROCESS, process_tag())


def optimize_one(study: "optuna.Study", objective: Callable[["optuna.Trial"], Any],
                 catch: tuple[type[Exception], ...], callbacks: Sequence[Callable[..., None]] = (),
                 on_claim: Callable[["optuna.Trial"], None] | None = None,
                 claim_first: list[Any] | None = None) -> None:
    """`study.optimize` for one trial, tagged with this process (`PROCESS`) before `objective` runs;
    `on_claim(trial)` runs first, still under the hold (the caller lets go of its storage lock there). The
    queued trial claimed is the first of `claim_first` not claimed elsewhere (`_optuna_internals.claiming_in`;
    None: the oldest).

    A Ctrl-C from the ask to the tag is raised as the objective would start: the trial is then FAIL and
    tagged, as one cut short mid-run. Outside `interrupts.storage_calls_finish_first` (a program with its
    own SIGINT handler) nothing is held. While held, Ctrl-C also waits for the sampler's proposal."""
    beating = internals.heartbeat_threads()  # another thread's trial (a library caller's) keeps its own
    with contextlib.ExitStack() as hold:
        hold.enter_context(storage_call())
        hold.enter_context(internals.claiming_in(study, claim_first))

        def tagged(trial: "optuna.Trial") -> Any:
            try:
                if on_claim is not None:
                    on_claim(trial)
                trial.set_user_attr(PROCESS, process_tag())
            finally:
                hold.close()  # a Ctrl-C held since the ask is raised here, inside the trial
            return objective(trial)

        try:
            # none rather than an empty list: Optuna reads the finished trial again for any list it is given
            study.optimize(tagged, n_trials=1, catch=catch, gc_after_trial=False, callbacks=list(callbacks) or None)
        finally:  # Optuna joins the trial's heartbeat thread itself unless an exception cut its start short
            for thread, stop in internals.heartbeat_threads().items():
                if thread not in beating:
                    stop.set()  # it ends after the beat in progress, if any: the command can exit
