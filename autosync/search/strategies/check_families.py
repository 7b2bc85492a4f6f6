"""Which candidates a failed full-budget check speaks for: the checks' families, and the candidates ruled out.

A full-budget check (`autosync.search.strategies.full_budget`) re-runs a candidate that stopped at the
target to the end of the budget, for the final-metric rule. A check that breaks the rule says something of
its neighbours too: how a run ends, noisier or not, follows its step-size rule, and a policy that applies
stale gradients at a full step to the end of its run ends noisier however fast it reached the target
(Sync-Switch's premise: asynchronous training leads early and can end lower). Those candidates form one
family (`check_family`), and after a failed check the checks go to the families none of whose checks failed
first.

In the search (`pruning`), a candidate whose own policy broke the rule at full budget, or that applies stale
gradients to the end in a family whose check broke it, is ruled out (`ruled_out`): it sets no bar. Else
such a candidate, fastest to the target and never to be answered with, holds the bar low enough to prune
the candidates that can keep the rule. A synchronous
candidate is ruled out by its own check only: backup k = 11 under `linear` ending above BSP's loss says
little of k = 4 under `linear`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from autosync.search.study.records import (
    CONSTRAINT, FULL_BUDGET_OF, POLICY, constraint_of, diverged_check, final_pending, policy_key,
)

if TYPE_CHECKING:
    import optuna

STALE = "stale gradients"  # the check family of the policies that apply stale gradients at a full step to the end
SCALED_STEPS = ("staleness", "sqrt_staleness")  # ASP's rules that shrink a stale gradient's step


def check_family(trial: "optuna.trial.FrozenTrial") -> str | None:
    """A check's family: the policy, with its step-size rule where it has one (how a run ends, noisier or
    not, follows the rule: backup k = 5 under `linear` ending above BSP's loss says little of k = 4 under
    `sqrt`); every policy that applies stale gradients to the end of its run at a full step
    (`autosync.policies.stale_step_rule`) is one family, `STALE` (SSP, the DANA family, ASP with a fixed
    step: their checks fail together, while a static k that would keep the rule waits), and ASP under a
    staleness-scaled step is `STALE` and its rule (one such rule can diverge where another keeps it)."""
    policy = trial.user_attrs.get(POLICY) or {}
    stale = stale_rule(policy)
    if stale is not None:
        return f"{STALE}:{stale}" if stale in SCALED_STEPS else STALE
    rule = (policy.get("params") or {}).get("lr_rule")
    return policy.get("policy") if rule is None else f"{policy.get('policy')}:{rule}"


def stale_rule(policy: dict) -> str | None:
    """`autosync.policies.stale_step_rule` of a policy as a trial records it (None for a name the catalog
    does not hold)."""
    from autosync.catalog import POLICIES, policy_from_dict
    from autosync.policies import stale_step_rule

    return stale_step_rule(policy_from_dict(policy)) if policy.get("policy") in POLICIES else None


def failed_check(trial: "optuna.trial.FrozenTrial") -> bool:
    """Whether `trial` is a full-budget check that broke the constraint, or diverged before the budget's end
    (`diverged_check`; on a job of the tiers family, SSP and ASP reached the target at the first evaluation
    and diverged later: the three checks went to SSP, ASP and SSP again while a diverged check did not count
    as failed)."""
    import optuna

    return diverged_check(trial) or (FULL_BUDGET_OF in trial.user_attrs
                                     and trial.state == optuna.trial.TrialState.COMPLETE and constraint_of(trial) > 0)


def failed_families(trials: "list[optuna.trial.FrozenTrial]") -> set[str]:
    """The families (`check_family`) with a full-budget check among `trials` that failed (`failed_check`)."""
    return {check_family(t) for t in trials if failed_check(t)}


class RuledOut:
    """Whether a trial among the trials it was built from is ruled out of the race (call it on the trial): its
    policy (`policy_key`) broke the final-metric rule at full budget (a check, or a trial trained to the end),
    or it applies stale gradients to the end (`stale_rule`) in a family (`check_family`) whose check failed,
    and its own policy has not kept the rule at full budget (with --verify-top 2, a DANA-DC whose check
    passed before ASP's failed stays in)."""

    def __init__(self, trials: "list[optuna.trial.FrozenTrial]"):
        import optuna

        def known(t: "optuna.trial.FrozenTrial") -> bool:  # a final metric at full budget, the rule read on it
            return t.state == optuna.trial.TrialState.COMPLETE and not final_pending(t) and CONSTRAINT in t.constraints

        self.broke = {policy_key(t) for t in trials if failed_check(t) or (known(t) and constraint_of(t) > 0)}
        self.kept = {policy_key(t) for t in trials if known(t) and constraint_of(t) <= 0} - self.broke
        self.stale_failed = {family for family in failed_families(trials)
                             if family is not None and family.startswith(STALE)}

    def __call__(self, trial: "optuna.trial.FrozenTrial") -> bool:
        return policy_key(trial) in self.broke or self.by_family(trial)

    def by_family(self, trial: "optuna.trial.FrozenTrial") -> bool:
        """Ruled out by its stale family's failed check alone: its own policy has no full-budget result (the
        output names such candidates when faster than the answer: an inference, not a measurement)."""
        key = policy_key(trial)
        return check_family(trial) in self.stale_failed and key not in self.kept and key not in self.broke


def ruled_out(trials: "list[optuna.trial.FrozenTrial]") -> RuledOut:
    """`RuledOut` of `trials`: call it on a trial to know whether the race leaves it out."""
    return RuledOut(trials)
