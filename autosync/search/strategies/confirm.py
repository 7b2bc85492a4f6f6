"""A search's winner confirmed on more seeds (`autosync tune --confirm-top K --confirm-seeds S`).

A search that scores each trial on one seed (`--repeats 1`, the default) answers with the luckiest of its
candidates: the least of several noisy scores is biased low (the winner's curse), and the more candidates
a space holds, the likelier a lucky one wins. Intensification, as SMAC runs it (Hutter, Hoos and
Leyton-Brown 2011), trusts an incumbent only once it has been run on more seeds: after the search, its
K best feasible candidates (one per canonical policy) and the winners its sibling studies answer with,
where this space holds them, train on S more seeds, and BSP with them. The search then answers with the
candidate of the best mean time to target over all its seeds (the search's own R and the S new ones)
whose mean final metric keeps the accuracy constraint against BSP's over the same seeds. Where none does
(each diverged or fell short on a new seed), it answers with BSP, the reference every candidate is held
to, rather than hand out a policy that failed the confirmation; only where BSP failed too does the
search's own pick stay.

Every run is stored in the study as it finishes (the `confirmation_runs` user attribute), so an
interrupted confirmation resumes; a run that this or a sibling study already made (same canonical policy,
seed, miss penalty and budget) is copied, not trained again: same seed, same run.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from autosync.core.job import JobSpec
from autosync.search.objective import (
    BSP, CANONICAL, SCORING, RunFailed, canonical_on, constraint, evaluate, final_pending, trial_seeds,
)
from autosync.search.study.trials import feasible_trials

if TYPE_CHECKING:
    import optuna

    from autosync.engine.backends import BackendChoice

RUNS = "confirmation_runs"  # study user attribute: {run identity: result} of every confirmation run
REFERENCE = "reference"  # the source of BSP's row where BSP is not a candidate: the constraint's reference only


@dataclass
class Candidate:
    """One policy to confirm and its score on the search's seeds (None: not scored there yet)."""

    policy: dict[str, Any]
    source: str  # "trial N" of this study, "sibling STUDY", or REFERENCE for BSP
    search_time: float | None = None
    search_final: float | None = None


@dataclass
class Confirmation:
    """Each candidate's mean over all the seeds, and the winner."""

    top: int  # K: how many of the study's best were confirmed
    seeds: list[int]  # the search's seeds, then the new ones
    rows: list[dict[str, Any]] = field(default_factory=list)  # the study's best first, the siblings' winners, BSP
    winner: dict[str, Any] | None = None  # the fastest feasible candidate over all seeds (None: none feasible)
    winner_time: float | None = None
    winner_final: float | None = None
    bsp_time: float | None = None  # BSP's mean over the same seeds (None: it failed on one)
    bsp_final: float | None = None
    trained_virtual_seconds: float = 0.0  # what the runs trained here cost (copied runs cost nothing)
    fell_back_to_bsp: bool = False  # no candidate kept the constraint (or finished) on all seeds: BSP answers

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class RunStore:
    """Confirmation runs by identity: this study's (written as they finish) and its siblings' (read only)."""

    def __init__(self, study: "optuna.Study", siblings: "list[optuna.Study]"):
        self.study = study
        self.runs: dict[str, dict[str, Any]] = {}
        for other in [*siblings, study]:  # this study's own runs last: they win a (deterministic) tie
            stored = other.user_attrs.get(RUNS)
            if isinstance(stored, dict):
                self.runs.update(stored)

    @staticmethod
    def identity(canonical: dict[str, Any], seed: int, penalty: float, job: JobSpec) -> str:
        return json.dumps({"policy": canonical, "seed": seed, "penalty": penalty,
                           "budget": job.budget.model_dump(mode="json")}, sort_keys=True)

    def get(self, key: str) -> dict[str, Any] | None:
        return self.runs.get(key)

    def put(self, key: str, result: dict[str, Any]) -> None:
        self.runs[key] = result
        mine = dict(self.study.user_attrs.get(RUNS) or {})
        mine[key] = result
        self.study.set_user_attr(RUNS, mine)


def candidates(study: "optuna.Study", top: int, job: JobSpec, scoring: dict[str, Any],
               also: list[tuple[dict[str, Any], str]] = ()) -> list[Candidate]:
    """The study's `top` best feasible trials scored as `scoring` says (`trial_scoring`), one per canonical
    policy (the first at its score), best first, then the policies of `also` ((policy, source) pairs: the
    sibling studies' winners) that none of those runs like, each with the score of a completed trial of
    this study that runs like it, if any."""
    import optuna

    completed = [t for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
                 if _scored_as(t, scoring) and t.user_attrs.get(CANONICAL) is not None and not final_pending(t)]
    by_canonical: dict[str, Any] = {}
    for t in completed:  # the first trial of each canonical policy: the others ran alike or were copied
        by_canonical.setdefault(_key(t.user_attrs[CANONICAL]), t)
    out, seen = [], set()
    for t in feasible_trials(study):
        if not _scored_as(t, scoring):
            continue
        key = _key(t.user_attrs.get(CANONICAL) or canonical_on(t.user_attrs["policy"], job))
        if key not in seen:
            seen.add(key)
            out.append(Candidate(t.user_attrs["policy"], f"trial {t.number}", t.values[0],
                                 t.user_attrs.get("final_metric")))
        if len(out) == top:
            break
    for policy, source in also:
        canonical = canonical_on(policy, job)
        key = _key(canonical)
        if canonical is None or key in seen:
            continue
        seen.add(key)
        twin = by_canonical.get(key)
        out.append(Candidate(policy, source, twin.values[0] if twin else None,
                             twin.user_attrs.get("final_metric") if twin else None))
    return out


def _scored_as(trial: "optuna.trial.FrozenTrial", scoring: dict[str, Any]) -> bool:
    """Whether the trial was scored as `scoring` says, on what it recorded: a trial of an autosync that did
    not record the budget yet (its study's name holds no budget either) is taken on its seeds and penalty."""
    recorded = trial.user_attrs.get(SCORING)
    return isinstance(recorded, dict) and all(recorded.get(key) == value for key, value in scoring.items()
                                              if key in recorded or key != "budget")


def _key(canonical: dict[str, Any] | None) -> str:
    return json.dumps(canonical, sort_keys=True)


def confirm(job: JobSpec, top: int, plan: list[Candidate], reference: dict[str, Any], runs: RunStore,
            repeats: int, extra_seeds: int, penalty: float, tolerance: float,
            backend: "BackendChoice | None" = None,
            on_run: Callable[[int, int], None] | None = None) -> Confirmation:
    """Train every candidate (and BSP) on the `extra_seeds` seeds after the search's `repeats`; where a
    candidate has no score on the search's seeds, on those too. `on_run(done, total)` follows the runs."""
    search_seeds = trial_seeds(job, repeats)
    new_seeds = [job.seed + repeats + i for i in range(extra_seeds)]
    bsp_key = _key(canonical_on(BSP, job))
    if all(_key(canonical_on(c.policy, job)) != bsp_key for c in plan):  # BSP: the constraint's reference
        plan = [*plan, Candidate(BSP, REFERENCE, reference["time_to_target"], reference["final_metric"])]
    result = Confirmation(top, search_seeds + new_seeds)
    total = sum(len(new_seeds) + (len(search_seeds) if c.search_time is None else 0) for c in plan)
    done = 0
    for c in plan:
        seeds = new_seeds if c.search_time is not None else search_seeds + new_seeds
        canonical = canonical_on(c.policy, job)
        scores = []
        for seed in seeds:
            key = RunStore.identity(canonical, seed, penalty, job)
            run = runs.get(key)
            if run is None:
                try:
                    run = evaluate(job, c.policy, [seed], penalty, backend=backend)
                except RunFailed as exc:
                    run = {"reason": str(exc)}
                runs.put(key, run)
                result.trained_virtual_seconds += run.get("virtual_seconds", 0.0)
            scores.append(run)
            done += 1
            if on_run is not None:
                on_run(done, total)
        result.rows.append(_row(c, scores, len(search_seeds)))
        if _key(canonical) == bsp_key:
            result.bsp_time, result.bsp_final = result.rows[-1]["time_to_target"], result.rows[-1]["final_metric"]
    for row in result.rows:
        row["feasible"] = row["time_to_target"] is not None and result.bsp_final is not None and \
            constraint(job, row["final_metric"], result.bsp_final, tolerance) <= 0
    contenders = [r for r in result.rows if r["feasible"] and r["source"] != REFERENCE]
    if not contenders and result.bsp_time is not None:  # every candidate failed on the new seeds: BSP holds
        contenders, result.fell_back_to_bsp = [r for r in result.rows if r["source"] == REFERENCE], True
    if contenders:
        best = min(contenders, key=lambda r: r["time_to_target"])  # the first of equals: search order
        result.winner, result.winner_time, result.winner_final = best["policy"], best["time_to_target"], best["final_metric"]
    return result


def _row(c: Candidate, runs: list[dict[str, Any]], search_runs: int) -> dict[str, Any]:
    """A candidate's means over all its seeds (the search's score weighted by its seeds); a failed run
    (divergence) leaves it without a time."""
    row = {"policy": c.policy, "source": c.source, "search_time": c.search_time, "time_to_target": None,
           "final_metric": None, "reached": sum(1 for r in runs if r.get("reached")), "runs": len(runs),
           "reason": next((r["reason"] for r in runs if "reason" in r), None)}
    if row["reason"] is not None:
        return row
    times = [r["time_to_target"] for r in runs]
    finals = [r["final_metric"] for r in runs]
    if c.search_time is not None:
        times += [c.search_time] * search_runs
        finals += [c.search_final] * search_runs
        row["runs"] += search_runs
    row["time_to_target"] = sum(times) / len(times)
    row["final_metric"] = sum(finals) / len(finals)
    return row


def with_confirmation(record: dict[str, Any], confirmation: Confirmation) -> dict[str, Any]:
    """The cache record answering with the confirmed winner (the search's own best kept beside it) and its
    mean over all the seeds; the speedup over BSP is then over the same seeds."""
    updated = dict(record)
    updated.setdefault("search_best_policy", record["best_policy"])
    updated.setdefault("search_best_value", record["best_value"])
    updated["confirmed"] = confirmation.to_dict()
    if confirmation.winner is None:
        return updated
    c = confirmation
    updated.update(best_policy=c.winner, best_value=c.winner_time, best_final_metric=c.winner_final,
                   bsp_time_to_target=c.bsp_time, bsp_final_metric=c.bsp_final,
                   speedup_vs_bsp=c.bsp_time / c.winner_time if c.winner_time > 0 else None)
    return updated
