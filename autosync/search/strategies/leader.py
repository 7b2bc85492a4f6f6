"""The race's leader held on a second seed before it sets the bar for the other families (intensification).

The portfolio race (`autosync.search.strategies.portfolio.next_family`) keeps a family in the search while its
best is within `FAMILY_MARGIN` of the best family's. That best is one seed's time, and on a straggling
cluster an asynchronous policy's time to target can vary several-fold between seeds (on a job of the decay
family, ASP with a staleness-scaled step took 7.0 s on the search's seed and 40.0, 34.1 and 5.1 s on three
more): a lucky leader ends the race of families that would win on most seeds, and the confirmation after the
search (`autosync.search.strategies.confirm`) finds the luck too late to bring them back.

SMAC's intensification (Hutter, Hoos and Leyton-Brown 2011) trusts an incumbent only as it is run on more
seeds. Here the race's leader runs once more, on the confirmation's first seed, before its time counts in the
race: its standing is then its mean over the two seeds (`held_value`). The run stops at the target, or once
that mean could no longer lead (at twice the best other family's time less its own: successive halving's
rule, the runner-up as the bar), where it counts at that bound. The run is stored as a confirmation run
(`RunStore`): the confirmation copies it instead of training it again, and the search cost counts it once.
A leader that falls behind hands the lead to the next, held in turn, `MAX_HELD` leaders at most in a search.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Callable

from autosync.search.strategies.check_families import ruled_out
from autosync.search.study.records import ANSWERED, HELD, TrialRecord, outside_budget, policy_key

if TYPE_CHECKING:
    import optuna

MAX_HELD = 4  # leaders held on a second seed at most in one search (each costs about its time to target)


def held_runs(study: "optuna.Study") -> dict[int, dict[str, Any]]:
    """{trial number: {seed, time, reached, behind}} of the leaders held so far."""
    return {int(k): v for k, v in (study.user_attrs.get(HELD) or {}).items()}


def held_by_policy(trials: "list[optuna.trial.FrozenTrial]", held: dict[int, dict[str, Any]],
                   ) -> dict[str, dict[str, Any]]:
    """{`policy_key`: its held run} of the `held` trials among `trials` (a held trial stands for its twins)."""
    return {policy_key(t): held[t.number] for t in trials if t.number in held}


def held_value(value: float, run: dict[str, Any] | None) -> float:
    """A trial's standing in the race: its time on the search's seed, or where it was held as leader, its mean
    with the second seed's (the run's time to target, a miss penalised as the search penalises one, or the
    bound it was stopped at; None where it failed there, and it cannot lead)."""
    if run is None:
        return value
    return (value + run["time"]) / 2 if run["time"] is not None else math.inf


def leader_to_hold(trials: "list[optuna.trial.FrozenTrial]", families: list[str],
                   held: dict[int, dict[str, Any]]) -> "tuple[optuna.trial.FrozenTrial, float | None] | None":
    """The race's leader if it has not been held yet, and the bound on its second seed's time past which its
    mean stops leading (None where no other family has a time yet); None where the leader is held (or no
    trial has completed). Candidates: completed trials that trained (not answered from a twin, not a
    full-budget check), with a finite time, of a family of the race, not ruled out by a failed check
    (`autosync.search.strategies.check_families.ruled_out`)."""
    import optuna

    standing: list[tuple[float, int, str, "optuna.trial.FrozenTrial"]] = []
    out = ruled_out(trials)
    for t in trials:
        family = (TrialRecord(t).policy or {}).get("policy")
        if t.state != optuna.trial.TrialState.COMPLETE or family not in families or t.user_attrs.get(ANSWERED) \
                or outside_budget(t) or not math.isfinite(t.values[0]) or out(t):
            continue
        standing.append((held_value(t.values[0], held.get(t.number)), t.number, family, t))
    if not standing:
        return None
    value, number, family, leader = min(standing, key=lambda s: (s[0], s[1]))
    if number in held:
        return None
    others = [v for v, _, f, _ in standing if f != family]
    return leader, (2 * min(others) - leader.values[0] if others else None)


def hold_leader(study: "optuna.Study", families: list[str], seed: int,
                run: Callable[[dict[str, Any], int, float | None], dict[str, Any]]) -> int:
    """Hold the race's leaders on `seed` (the confirmation's first new seed) until the leader is one already
    held (or `MAX_HELD` were); returns how many were held now. `run(policy, seed, bound)`: the policy's run to
    the target there, stopped `behind` at the bound (`autosync.search.strategies.confirm.run_to_target`,
    stored as a confirmation run)."""
    count = 0
    while True:
        held = held_runs(study)
        if len(held) >= MAX_HELD:
            return count
        found = leader_to_hold(study.get_trials(deepcopy=False), families, held)
        if found is None:
            return count
        leader, bound = found
        result = run(TrialRecord(leader).policy, seed, bound)
        if result.get("behind"):
            time = result["stopped_at"]
        elif "reason" in result:  # it failed (diverged) on the second seed: it cannot lead
            time = None
        else:
            time = result["time_to_target"]
        held[leader.number] = {"seed": seed, "time": time, "reached": bool(result.get("reached")),
                               "behind": bool(result.get("behind"))}
        study.set_user_attr(HELD, {str(k): v for k, v in held.items()})
        count += 1
