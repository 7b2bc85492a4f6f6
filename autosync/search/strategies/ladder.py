"""A cost-ordered search for the switch point, as an Optuna sampler: the cheapest candidates first.

Sync-Switch's binary search (Algorithm 1) starts at 50% BSP, then 25%, ...: its first candidates are the
most expensive to train, because BSP is the slow protocol (6.6x ASP's time per epoch in the paper's
setup 1) and the switch points it ends up choosing are small (6.25% and 12.5% in sec. VI). The ladder
walks a geometric ladder of BSP shares upwards instead (1/32, 1/16, ..., 1/2 by default), one trial of
R runs per rung, and stops at the first rung whose mean accuracy is within the tolerance of BSP's (an
Optuna constraint; BSP, s = 1, when none is). Because accuracy grows with the BSP share (the paper's
premise for bisection), the first rung that holds is the cheapest one on the ladder that holds.

`LadderSampler` proposes the rungs and `ladder_finished` says when to stop, so the ladder runs in
`study.optimize` (and `ask`/`tell`) like any other Optuna sampler: its trials share the study's storage,
are resumed after a kill, and can be spread over processes sharing the study (each new trial takes the
next free rung). `autosync tune --sampler ladder` and `autosync replay` both run it this way.
"""

from __future__ import annotations

from typing import Any, Sequence

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution

from autosync.search.space import can_sample
from autosync.search.study.records import constraint_of

DEFAULT_RUNGS = (1 / 32, 1 / 16, 1 / 8, 1 / 4, 1 / 2)
SWITCH_PARAM = "sync_switch.switch_at"  # the Optuna parameter of the shipped switch_point space


class LadderSampler(optuna.samplers.BaseSampler):
    """Each new trial gets the cheapest rung of `param` no trial of the study has taken yet (1.0, BSP,
    once every rung is taken); any other parameter must be categorical and gets its first choice."""

    def __init__(self, param: str = SWITCH_PARAM, rungs: Sequence[float] = DEFAULT_RUNGS):
        if not rungs or any(not 0.0 < s < 1.0 for s in rungs):
            raise ValueError(f"the ladder needs rungs in (0, 1), but got {tuple(rungs)}")
        self.param = param
        self.rungs = tuple(sorted(rungs))

    def infer_relative_search_space(self, study: optuna.Study, trial: optuna.trial.FrozenTrial,
                                    ) -> dict[str, BaseDistribution]:
        return {}

    def sample_relative(self, study: optuna.Study, trial: optuna.trial.FrozenTrial,
                        search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        return {}

    def sample_independent(self, study: optuna.Study, trial: optuna.trial.FrozenTrial, param_name: str,
                           param_distribution: BaseDistribution) -> Any:
        if param_name == self.param:
            rung = next_rung(study, self.rungs, self.param, ignore=trial.number)
            return 1.0 if rung is None else rung
        if isinstance(param_distribution, CategoricalDistribution):
            return param_distribution.choices[0]
        raise ValueError(f"the ladder searches {self.param} only; {param_name} must be categorical "
                         "(its first choice is used) or a constant")


def rungs_within(dimension: Any, rungs: Sequence[float] = DEFAULT_RUNGS) -> tuple[float, ...]:
    """The `rungs` a space's switch_at `dimension` holds: among its choices, or within its low..high (on its
    step, where it has one). The ladder walked its own rungs whatever the space said: a space of switch_at from
    0.6 to 0.9 answered 0.03125."""
    return tuple(r for r in sorted(rungs) if can_sample(dimension, r))


def next_rung(study: optuna.Study, rungs: Sequence[float] = DEFAULT_RUNGS, param: str = SWITCH_PARAM,
              ignore: int | None = None) -> float | None:
    """The cheapest rung no trial of the study (but trial number `ignore`) has taken, or None."""
    taken = {t.params.get(param) for t in study.get_trials(deepcopy=False) if t.number != ignore}
    return next((s for s in sorted(rungs) if s not in taken), None)


def ladder_finished(study: optuna.Study, rungs: Sequence[float] = DEFAULT_RUNGS, param: str = SWITCH_PARAM) -> bool:
    """A rung's trial met the constraint (the search is over), or every rung has a finished trial
    (completed, or failed: a diverged run is an answer too)."""
    states = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.FAIL, optuna.trial.TrialState.PRUNED)
    done = [t for t in study.get_trials(deepcopy=False, states=states) if param in t.params]
    feasible = any(t.state == optuna.trial.TrialState.COMPLETE and constraint_of(t) <= 0 for t in done)
    return feasible or {t.params[param] for t in done} >= set(rungs)
