"""Stopping a search that has stopped improving (`autosync tune --patience N`).

A search whose last N counted trials, in the order they were numbered, found nothing faster than the
best before them stops: the queued trials it would still have run are failed, each with that reason
(`GIVEN_UP`), so they count against the budget and a resumed command does not run them. It is the
patience rule of early stopping in training (Prechelt, "Early stopping - but when?", 1998), applied to
the search's trials.

A search space declares its own default (`patience:` in its file; `--patience` overrides it). Measured
(benchmarks/README.md, bench_tune_cost): with N = 5 a `static_k` search kept its answer on every job tried, new
or started from tuned neighbours, at about 0.8x the cost, so the shipped `static_k` says 5; a `policy`
search, over ten policies' sub-spaces, often finds its answer late, and stopped so its answers were a
median 1.5-3x slower, so it and the other shipped spaces say nothing (0: the whole budget).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from autosync.search.study.records import GIVEN_UP, GIVEN_UP_PLACES, has_run, outside_budget
from autosync.search.study import _optuna_internals as internals
from autosync.search.study.trials import budget_used, fail_marked

if TYPE_CHECKING:
    import optuna

    from autosync.search.space import SearchSpace


def patience_of(asked: int | None, sampler: str, space: "SearchSpace") -> int:
    """The patience a search runs with: `--patience` where given, else the space's, except that a grid
    (`--sampler grid`) asks for every point."""
    if asked is not None:
        return asked
    return 0 if sampler == "grid" else space.patience


def trials_without_improvement(study: "optuna.Study") -> int:
    """How many counted trials in a row, by number, have found nothing faster than every trial before them
    (a pruned or failed trial never does; full-budget checks, repairs and trials given up are not the search's)."""
    best, since = float("inf"), 0
    for trial in study.get_trials(deepcopy=False):
        if outside_budget(trial) or trial.user_attrs.get(GIVEN_UP):
            continue
        if trial.state.name == "COMPLETE" and trial.values and trial.values[0] < best:
            best, since = trial.values[0], 0
        elif has_run(trial):
            since += 1
    return since


def give_up_queued(study: "optuna.Study", patience: int, budget: int) -> int:
    """Fail every queued trial with the patience's reason, and record on the study how many of its trials were
    not queued yet (`GIVEN_UP_PLACES`: one attribute, not a row per trial, whatever the budget), so that no
    process queues them afterwards; how many trials were given up in all. Call it under the study's storage
    lock (`autosync.search.study.locking`), so no process takes or queues one meanwhile."""
    import optuna

    reason = (f"not run: the search stopped after {patience} trial{'' if patience == 1 else 's'} in a row found "
              "nothing faster (--patience)")
    given_up = 0
    for trial in internals.fresh_trials(study, (optuna.trial.TrialState.WAITING,)):
        if outside_budget(trial):  # a check or a repair is the search's, not the budget's: its process runs it
            continue
        tid = internals.trial_id(trial)
        try:
            given_up += fail_marked(study, tid, GIVEN_UP, "given_up", reason, value=patience)
        except optuna.exceptions.UpdateFinishedTrialError:
            continue  # another process took it after all
    missing = max(0, budget - sum(budget_used(study)))
    study.set_user_attr(GIVEN_UP_PLACES, {"budget": budget, "places": missing, "patience": patience})
    return given_up + missing
