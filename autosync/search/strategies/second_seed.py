"""A full-budget check whose verdict lies near the rule's edge, judged on a second seed.

The final-metric rule (Sync-Switch's: a policy must end within `--tolerance` of BSP's final metric) is
checked on the search's seed (`autosync.search.strategies.full_budget`). One seed's final metric is noisy:
over the 197 policies whose final metric the broad reference grids of four families (bursty, heldout,
fleet, steady) measured on two seeds, the first seed's verdict disagreed with the two seeds' mean on 16
(`results/answer_quality/seed_noise.py --verdicts`), and on three jobs of the fleet family a candidate
failed its check by less than the tolerance itself (by 0.004, 0.006 and 0.0075 against 0.01), so that BSP
answered, 1.8-22x slower than the grid's best.

So a check whose margin lies within `NEAR_EDGE` tolerances of the edge, on either side, is judged again on a
second seed (the seed the race's leaders are held on too), the way the reference grid judges: the
candidate's mean final metric over both seeds against BSP's mean over the same two. Both second-seed runs
train the whole budget and are stored in the study (`RunStore`), so the search cost counts them once and a
later check in the study, or in a sibling study, reuses BSP's.
A search that already scores each trial on several seeds (`--repeats`) keeps its verdict.
"""

from __future__ import annotations

import contextlib
import json
import statistics
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from autosync.core.job import JobSpec
from autosync.policy_score import RunFailed, constraint, evaluate
from autosync.search.objective import BSP, canonical_on
from autosync.search.study import _optuna_internals as internals
from autosync.search.study.locking import storage_lock
from autosync.search.study.records import SECOND_SEED_RUNS, VIRTUAL_SECONDS

if TYPE_CHECKING:
    import optuna

    from autosync.engine.backends import BackendChoice

NEAR_EDGE = 1.0  # a check within this many tolerances of the rule's edge, either side, is judged on two seeds


class RunStore:
    """Second-seed runs by identity: this study's (written as they finish) and its siblings' (read only)."""

    def __init__(self, study: "optuna.Study", siblings: "list[optuna.Study]"):
        self.study = study
        self.runs: dict[str, dict[str, Any]] = {}
        for other in [*siblings, study]:  # this study's own runs last: they win a (deterministic) tie
            stored = other.user_attrs.get(SECOND_SEED_RUNS)
            if isinstance(stored, dict):
                self.runs.update(stored)

    @staticmethod
    def identity(canonical: dict[str, Any], seed: int, penalty: float, job: JobSpec) -> str:
        """The key of a run of `canonical` on `seed` (the form the studies in users' storage hold)."""
        return json.dumps({"policy": canonical, "seed": seed, "penalty": penalty, "to_target": True,
                           "budget": job.budget.model_dump(mode="json")}, sort_keys=True)

    def get(self, key: str) -> dict[str, Any] | None:
        return self.runs.get(key)

    def put(self, key: str, result: dict[str, Any]) -> None:
        """Keep `result` here and in the study: the study's runs are read afresh and written back under the
        storage's lock, so processes that share the study and judge checks at once each keep theirs."""
        self.runs[key] = result
        url = internals.storage_url(self.study)
        with storage_lock(url, self.study.study_name) if url else contextlib.nullcontext():
            mine = dict(self.study.user_attrs.get(SECOND_SEED_RUNS) or {})
            mine[key] = result
            self.study.set_user_attr(SECOND_SEED_RUNS, mine)


def near_the_edge(margin: float, tolerance: float) -> bool:
    """Whether a one-seed constraint `margin` (<= 0: kept) lies closer to 0 than `NEAR_EDGE` tolerances (never
    with a tolerance of 0: a final metric no worse than BSP's is asked for, and ties on a test set are exact)."""
    return abs(margin) < NEAR_EDGE * tolerance


def full_budget_run(job: JobSpec, policy: dict[str, Any], seed: int, penalty: float, runs: "RunStore",
                    backend: "BackendChoice | None" = None) -> dict[str, Any]:
    """`policy`'s run to the end of the budget on `seed`: stored in `runs`, or trained now and stored (with
    the virtual seconds it trained, the search cost's); a run that failed (diverged) is `{"reason": ...}`."""
    key = RunStore.identity(canonical_on(policy, job), seed, penalty, job)
    stored = runs.get(f"{key}|full budget")
    if stored is not None:
        return stored
    try:
        run = evaluate(job, policy, [seed], penalty, backend=backend)
    except RunFailed as exc:
        run = {"reason": str(exc), VIRTUAL_SECONDS: 0.0}
    runs.put(f"{key}|full budget", run)
    return run


def two_seed_margin(job: JobSpec, policy: dict[str, Any], final: float, bsp_final: float, tolerance: float,
                    seed: int, penalty: float, runs: "RunStore", backend: "BackendChoice | None" = None,
                    ) -> tuple[float, dict[str, Any]]:
    """The constraint's margin (<= 0: kept) of `policy`, whose final metric on the search's seed is `final`
    against BSP's `bsp_final`, over that seed and `seed`: its mean final metric against BSP's mean; and what
    to record of the second seed. A candidate that diverges there breaks the rule; where BSP does, the
    first seed's margin stands."""
    first = constraint(job, final, bsp_final, tolerance)
    mine = full_budget_run(job, policy, seed, penalty, runs, backend)
    bsp = full_budget_run(job, BSP, seed, penalty, runs, backend)
    record = {"seed": seed, "one_seed_constraint": first, "final_metric": mine.get("final_metric"),
              "bsp_final_metric": bsp.get("final_metric")}
    if "reason" in mine:
        return max(first, 1.0), {**record, "reason": mine["reason"]}
    if "reason" in bsp:
        return first, {**record, "reason": f"BSP: {bsp['reason']}"}
    margin = constraint(job, statistics.fmean([final, mine["final_metric"]]),
                        statistics.fmean([bsp_final, bsp["final_metric"]]), tolerance)
    return margin, {**record, "constraint": margin}


@dataclass
class SecondSeedJudge:
    """The objective's `EdgeJudge`: a check whose one-seed margin lies near the rule's edge is judged over the
    search's seed and the next (`two_seed_margin`, its runs stored in the study's `RunStore`, the
    `siblings`' read too); not where the search scores on several seeds (`seeds`) or holds the rule at BSP's
    time to target (`horizon`)."""

    job: JobSpec
    reference: float  # BSP's final metric on the search's seed
    tolerance: float
    penalty: float
    seeds: list[int]  # the search's seeds
    horizon: float | None = None  # where the checks stop (--constraint-at bsp-target), None: the budget's end
    siblings: "list[optuna.Study]" = field(default_factory=list)
    backend: "BackendChoice | None" = None
    runs: "RunStore | None" = None  # the store to use, else one read from the study

    def __call__(self, study: "optuna.Study", policy: dict[str, Any], final: float,
                 margin: float) -> tuple[float, dict[str, Any] | None]:
        if len(self.seeds) != 1 or self.horizon is not None or not near_the_edge(margin, self.tolerance):
            return margin, None
        return two_seed_margin(self.job, policy, final, self.reference, self.tolerance, self.seeds[0] + 1,
                               self.penalty, self.runs or RunStore(study, self.siblings), self.backend)


def second_seed_judge(job: JobSpec, settings: Any, reference: dict[str, Any],
                      siblings: "list[optuna.Study] | None" = None, runs: "RunStore | None" = None) -> SecondSeedJudge:
    """The judge of a tune's checks: `settings` its `ObjectiveSettings`, `reference` BSP's reference score,
    `runs` a store to use (else each call reads the study's and the `siblings`')."""
    from autosync.search.objective import trial_seeds
    from autosync.search.study.records import HORIZON

    return SecondSeedJudge(job, reference["final_metric"], settings.tolerance, settings.penalty,
                           trial_seeds(job, settings.repeats), reference.get(HORIZON), list(siblings or []),
                           settings.backend, runs)
