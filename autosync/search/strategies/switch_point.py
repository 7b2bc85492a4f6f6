"""Switch-point search strategies that choose their own candidates: Sync-Switch's binary search and the ladder."""

from __future__ import annotations

import dataclasses
import math
import time
from typing import TYPE_CHECKING, Any, Callable

from autosync.core.errors import RuntimeFailure
from autosync.policy_score import RunFailed
from autosync.search.objective import Objective
from autosync.search.study import _optuna_internals as internals
from autosync.search.study.claim import optimize_one
from autosync.search.study.records import TrialRecord
from autosync.search.study.trials import counted_trials
from autosync.policies import SyncSwitch
from autosync.search.strategies.binary import binary_search
from autosync.search.strategies.samplers import fixed_dimensions
from autosync.search.strategies.ladder import ladder_finished, next_rung

RUNS_PER_CANDIDATE = 3  # Sync-Switch's binary search: R runs per candidate, recorded as R seeds per trial

if TYPE_CHECKING:
    import optuna

    from autosync.search.request import TuneRequest


class _OutOfTime(Exception):
    """--timeout passed during a switch-point search: stop before the next candidate."""


def grid_levels(dim: Any) -> int:
    """How many bisections of [0, 1] keep their midpoints on the switch_at dimension's grid (log2 of its range
    over its step: 5 for the shipped step of 1/32); a continuous dimension has no such limit. Past them the
    midpoints fell between the space's points, points outside the space (Optuna warned of each)."""
    if not dim.step:
        return 1 << 30
    return max(1, int(math.floor(math.log2((dim.high - dim.low) / dim.step) + 1e-9)))


def run_switch_point_search(study: "optuna.Study", request: "TuneRequest", reference: dict[str, Any],
                            deadline: float | None = None, on_trial: Callable[[int, int], None] | None = None,
                            ) -> None:
    """Sync-Switch's Algorithm 1 (`binary`) or the cost-ordered ladder (`ladder`) as a search strategy.

    Each candidate is one trial of the same study, averaging R seeds (`RUNS_PER_CANDIDATE`).
    Binary search enqueues each candidate it chooses; the ladder is the study's sampler (`LadderSampler`)
    and runs in `study.optimize` until a rung holds.
    """
    import optuna

    others = fixed_dimensions(request.space, request.sampler)
    # every candidate's final metric decides the search (Sync-Switch's binary search compares them)
    settings = dataclasses.replace(request.settings, repeats=RUNS_PER_CANDIDATE, prune=False,
                                   stop_at_target=False)
    objective = Objective(request.job, request.space, settings, reference["final_metric"])
    if request.sampler == "ladder":  # one trial at a time while a rung is free and none has held
        rungs = study.sampler.rungs  # the LadderSampler of load_study: the first --n-trials rungs
        while not ladder_finished(study, rungs) and next_rung(study, rungs) is not None:
            if deadline is not None and time.monotonic() >= deadline:
                return
            optimize_one(study, objective, catch=(RunFailed,))
            if on_trial is not None:
                on_trial(counted_trials(study), len(rungs))
        return
    metric_sign = 1.0 if request.job.target.metric == "test_accuracy" else -1.0
    done = [0]

    def run(s: float) -> float:
        if deadline is not None and time.monotonic() >= deadline:
            raise _OutOfTime
        study.enqueue_trial({"sync_switch.switch_at": s, **others}, skip_if_exists=False)
        queued = len(internals.fresh_trials(study, (optuna.trial.TrialState.WAITING,)))  # not a process's cache
        finished: list[Any] = []  # this process's trials, whatever other processes add to the study
        for _ in range(queued):  # the queue is first in, first out: trials queued earlier (a killed trial's
            optimize_one(study, objective, catch=(RunFailed,),  # re-run) go first
                         callbacks=[lambda _, trial: finished.append(trial)])
            if finished[-1].params.get("sync_switch.switch_at") == s:
                break
        else:
            raise RuntimeFailure(f"--sampler binary: another process ran the candidate switch_at={s} of this "
                                 "search; run one binary search per study at a time")
        done[0] += 1
        if on_trial is not None:
            on_trial(done[0], request.n_trials)
        final = TrialRecord(finished[-1]).final_metric
        return metric_sign * (-math.inf * metric_sign if final is None else final)

    target = metric_sign * reference["final_metric"]
    try:
        levels = grid_levels(request.space.dimensions[SyncSwitch.name]["switch_at"])
        binary_search(run, threshold=request.settings.tolerance, runs_per_candidate=1,
                      max_settings=min(request.n_trials, levels), target_accuracy=target)
    except _OutOfTime:
        pass  # the candidates tried so far are trials of the study; the cache picks the best of them
