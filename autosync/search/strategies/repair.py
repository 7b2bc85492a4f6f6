"""A candidate that failed its full-budget check, repaired: its settings one step closer to BSP.

The full-budget checks (`autosync.search.strategies.full_budget`) answer with the fastest candidate whose
final metric stays within the tolerance of BSP's. Where the fast candidates end short of it, the answer
falls back to the next candidate, often BSP itself: on six development jobs a static k under the `sqrt`
rule failed its check and BSP answered, 2.8 to 8.5 times the grid's best on held-out seeds. Yet the same
policy closer to BSP kept the rule and stayed fast (`results/answer_quality/repair_candidates.py`): the
same k at BSP's step (`fixed`) kept it on held-out seeds for 9 of the 12 failed settings under `sqrt` or
`linear` (1.57-2.51x the grid's best against BSP's 6.12-8.54x); k halfway to n under the same rule for 3
of 13, and there it was the grid's best or near it (1.00-1.01).

So after a check of a candidate fails, its policy's settings one step towards BSP (`Policy.toward_bsp`: a
parameter moved towards the setting that runs as BSP, as Sync-Switch's binary search moves the switch
point, Algorithm 1) that the space holds and the study has not tried run as trials of their own (marked
`REPAIR_OF`, outside the budget, like the checks; they race against the bar as any trial does) and stand
as candidates, checked in their turn, fastest first (`full_budget.next_to_check`).
Once per study (`MAX_REPAIR_ROUNDS`; a `--refresh` search of the study does not repair again): the round
adds a check for each repair that waits for one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from autosync.search.study import _optuna_internals as internals
from autosync.search.study.records import CANONICAL, GIVEN_UP, POLICY, REPAIR_OF, has_run
from autosync.catalog import POLICIES, policy_from_dict
from autosync.search.objective import BSP, canonical_on

if TYPE_CHECKING:
    import optuna

    from autosync.core.job import JobSpec
    from autosync.search.space import SearchSpace

MAX_REPAIR_ROUNDS = 1  # failed candidates repaired per study (each round: a run and a check per repair)


def repair_points(trials: "list[optuna.trial.FrozenTrial]", number: int, space: "SearchSpace",
                  job: "JobSpec") -> list[dict[str, Any]]:
    """The Optuna parameters of trial `number`'s repairs (`Policy.toward_bsp` of its policy on `job`) that
    `space` holds, that do not run as BSP (the reference answers that) and that no trial among `trials` ran,
    runs or waits to (the same parameters or the same canonical policy; a trial killed, given up or
    proposed again elsewhere did not run, nor one cut short: a resumed search queues it again); empty once
    `MAX_REPAIR_ROUNDS` rounds of other candidates ran (trial `number`'s own round goes on where it stopped)."""
    if repair_rounds([t for t in trials if t.user_attrs.get(REPAIR_OF) != number]) >= MAX_REPAIR_ROUNDS:
        return []
    policy = next((t.user_attrs.get(POLICY) for t in trials if t.number == number), None)
    if not policy or policy.get("policy") not in POLICIES:
        return []
    tried = [t for t in trials if has_run(t) or t.state.name == "RUNNING"
             or (t.state.name == "WAITING" and not t.user_attrs.get(GIVEN_UP))]
    tried_params = [t.params for t in tried]
    tried_canonical = [t.user_attrs[CANONICAL] for t in tried if CANONICAL in t.user_attrs]
    out = []
    for step in policy_from_dict(policy).toward_bsp(job.cluster.n_workers):
        params = space.trial_params(step.to_dict())
        canonical = canonical_on(step.to_dict(), job)
        if params is None or canonical == BSP or params in tried_params or canonical in tried_canonical:
            continue
        out.append(params)
        tried_params.append(params)
    return out


def repair_rounds(trials: "list[optuna.trial.FrozenTrial]") -> int:
    """How many failed candidates among `trials` were repaired (the distinct `REPAIR_OF` of their repairs)."""
    return len({t.user_attrs[REPAIR_OF] for t in trials if REPAIR_OF in t.user_attrs})


def queue_repairs(study: "optuna.Study", number: int, points: list[dict[str, Any]]) -> None:
    """Queue trial `number`'s repairs `points` (`repair_points`), each marked `REPAIR_OF` it."""
    for params in points:
        study.enqueue_trial(params, user_attrs={REPAIR_OF: number}, skip_if_exists=False)


def repairs_finished(study: "optuna.Study", number: int) -> bool:
    """Whether every repair of trial `number` has finished (with a result, pruned or failed)."""
    return all(t.state.is_finished() for t in internals.fresh_trials(study) if t.user_attrs.get(REPAIR_OF) == number)
