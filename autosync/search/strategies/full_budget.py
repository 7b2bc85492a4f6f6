"""The final-metric constraint, checked at full budget only for the candidates that can still win.

A search's trials stop once their runs reach the target (`ObjectiveSettings.stop_at_target`): the time to
target, the objective, is then known exactly, and the rest of the budget would only tell the final
metric that the accuracy constraint holds against BSP's. That final metric matters for one trial alone,
the one the cache answers with. So after the search, the fastest candidate whose final metric is not known
is re-run at full budget (a check: a trial of its own, queued with the same parameters and marked
`FULL_BUDGET_OF`, which the budget does not count); if it keeps the constraint it is the answer, else the
next fastest is checked, and so on. Sync-Switch's premise, that a policy fast to the target may end less
accurate, is kept: no policy is answered with before its full-budget run keeps the constraint.

The checks are bounded: at most `MAX_CHECKS`, after which the answer is the fastest candidate known to keep
the constraint (BSP at worst), and the faster candidates left unchecked are recorded (`UNCHECKED`) so that the
output says so. A check's cost is most of a training (the rest of the budget).

The candidates are checked fastest first, a candidate whose time is known (it reached the target) before one
pruned at a lower bound: a pruned trial only had not reached the target when it stopped, and its check, a
training's cost, often finds it slower than the known one. A failed check rules out its own policy only:
ordering the checks by families of policies, and ruling a failed check's stale relatives out with it, made
the answers no better (`benchmarks/ablation_static_k_checks.md`: -1.8% [-5.5, +0.1] without them, for
+0.00 BSP trainings), so the search has neither.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from autosync.search.study import _optuna_internals as internals
from autosync.search.study.records import (
    FULL_BUDGET_OF, POLICY, UNCHECKED, broke_the_rule, constraint_of, failed_check, final_pending, has_run, policy_key,
)

if TYPE_CHECKING:
    import optuna

MAX_CHECKS = 3  # full-budget checks a search runs at most (each costs most of a training)


def next_to_check(study: "optuna.Study", wanted: int = 1) -> "optuna.trial.FrozenTrial | None":
    """The trial to check next among `waiting(study, wanted)`: the fastest that reached the target, else the
    fastest pruned; None once the `wanted` fastest candidates are known feasible (or none is left)."""
    import optuna

    candidates = waiting(study, wanted)
    return min(candidates, key=lambda t: t.state == optuna.trial.TrialState.PRUNED) if candidates else None


def waiting(study: "optuna.Study", wanted: int = 1) -> "list[optuna.trial.FrozenTrial]":
    """The trials whose final metric is not known and that could still be among the `wanted` fastest
    feasible policies (the answer, or the K candidates that --verify-top re-runs), one per policy, fastest
    first: fewer than `wanted` policies as fast are known feasible, and its policy has no full-budget result
    yet. Such a trial stopped at the target, or was pruned (`autosync.search.strategies.pruning`) against a
    candidate that may since have failed its check: it counts at the bound it was pruned at, a lower bound on
    its time. Empty once the `wanted` fastest candidates are known feasible."""
    trials = internals.fresh_trials(study)
    checked = {t.user_attrs[FULL_BUDGET_OF] for t in trials if FULL_BUDGET_OF in t.user_attrs and has_run(t)}
    broke = broke_the_rule(trials)

    # at equal times a full-budget result comes first: a check ties with the trial it checks, and policies
    # that run alike to the target (tied to the last digit) need one feasible check between them, not one each
    done = sorted((t for t in trials if _time(t) is not None), key=lambda t: (_time(t), _pending(t), t.number))
    known = {policy_key(t) for t in done if not _pending(t)}  # policies whose full-budget result is in
    feasible: set[str] = set()
    out, queued = [], set()
    for t in done:
        if policy_key(t) in feasible:
            continue
        if not _pending(t):
            if constraint_of(t) <= 0:
                feasible.add(policy_key(t))
                if len(feasible) >= wanted:
                    break
            continue
        # a check that failed leaves its policy unanswerable; a policy's fastest trial stands for its twins
        if policy_key(t) not in known and t.number not in checked and policy_key(t) not in queued:
            if policy_key(t) not in broke:
                out.append(t)
            queued.add(policy_key(t))
    return out


def _time(trial: "optuna.trial.FrozenTrial") -> float | None:
    """A completed trial's time-to-target; a pruned one's bound when it was pruned; else None."""
    import optuna

    if trial.state == optuna.trial.TrialState.COMPLETE:
        return trial.values[0]
    if trial.state == optuna.trial.TrialState.PRUNED and trial.last_step is not None:
        return trial.intermediate_values[trial.last_step]
    return None


def _pending(trial: "optuna.trial.FrozenTrial") -> bool:
    """Whether the trial's final metric is unknown: stopped at the target, or pruned."""
    import optuna

    return final_pending(trial) or trial.state == optuna.trial.TrialState.PRUNED


def check_candidates(study: "optuna.Study", run_check: Callable[[int], None], wanted: int = 1,
                     limit: int = MAX_CHECKS, repair: Callable[[int], int] | None = None) -> int:
    """Check the candidates that can still be among the `wanted` fastest feasible ones (`next_to_check`'s
    order), until those are known feasible or `limit` checks have run; `run_check(number)` queues and runs
    the check of trial `number`. Before each check, `repair(number)` is asked once for each candidate whose
    check failed (`failed_candidates`): it runs the candidate's repairs where it has any left
    (`autosync.search.strategies.repair`) and says how many now wait for a check, each one more check. The
    candidates the limit left unchecked that could still be the answer are recorded on the study
    (`UNCHECKED`: their trial numbers and policies, fastest first; empty when none). Returns how many checks ran."""
    checks, asked = 0, set()
    while True:
        if repair is not None:  # each failed candidate once, a check before this call's included (a resumed tune)
            for number in [n for n in failed_candidates(study) if n not in asked]:
                asked.add(number)
                limit += repair(number)
        if checks >= limit or (candidate := next_to_check(study, wanted)) is None:
            break
        run_check(candidate.number)
        checks += 1
    # those that could still be the answer (with --verify-top K, those waiting for a later place are slower)
    study.set_user_attr(UNCHECKED, [_row(t) for t in waiting(study, 1)])
    return checks


def _row(trial: "optuna.trial.FrozenTrial") -> dict:
    """A candidate as the study records it for the output: its trial, policy and time."""
    return {"trial": trial.number, POLICY: trial.user_attrs.get(POLICY), "time_to_target": _time(trial)}


def queue_check(study: "optuna.Study", number: int) -> None:
    """Queue the full-budget check of trial `number` (its parameters; `FULL_BUDGET_OF` marks it)."""
    trial = next(t for t in internals.fresh_trials(study) if t.number == number)
    study.enqueue_trial(trial.params, user_attrs={FULL_BUDGET_OF: number}, skip_if_exists=False)


def failed_candidates(study: "optuna.Study") -> list[int]:
    """The trials whose full-budget check broke the final-metric rule or diverged (`failed_check`), in the
    order their checks ran, each once."""
    return list(dict.fromkeys(t.user_attrs[FULL_BUDGET_OF] for t in internals.fresh_trials(study) if failed_check(t)))


def check_finished(study: "optuna.Study", number: int) -> bool:
    """Whether a full-budget check of trial `number` has run to its end (a result, or a failure of its own):
    one cut short by Ctrl-C, --timeout or its process's death did not, and its candidate is checked again (it
    was counted as checked, and a resumed search went on to slower candidates, answering another policy)."""
    return any(t.user_attrs.get(FULL_BUDGET_OF) == number and has_run(t) for t in internals.fresh_trials(study))
