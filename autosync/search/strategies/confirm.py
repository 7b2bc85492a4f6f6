"""A search's answer held on seeds it did not search on (`autosync tune`, on by default: `--confirm-top K`).

A search that scores each trial on one seed (`--repeats 1`, the default) answers with the luckiest of its
candidates: the least of several noisy scores is biased low (the winner's curse), and the more candidates
a space holds, the likelier a lucky one wins. Intensification, as SMAC runs it (Hutter, Hoos and
Leyton-Brown 2011), trusts an incumbent only once it has been run on more seeds: after the search, its
K best feasible candidates (one per canonical policy; their final metric already checked at full budget on
the search's seeds) and the winners its sibling studies answer with, where this space holds them, train on
`--confirm-seeds` more seeds, each run stopping at the target (the time to target is what is compared;
the rest of the budget would only repeat the final-metric check). BSP, the speedup's reference, keeps its
reference run: it was not chosen among candidates, so its one run carries no winner's curse, and a run on
each new seed cost a median 0.5 BSP trainings a tune (0.25-1.0 on 24 jobs of four families: BSP is the
slowest policy there is, and a run that misses the target trains the whole budget).

- A candidate that misses the target on a new seed loses, however fast it was on the search's seed.
- Candidates whose mean times are closer than the spread between seeds (the larger standard deviation of
  the two candidates' per-seed times) or than `INDIFFERENT` of the faster mean are reported as tied; the
  faster mean answers.
  No more seeds are run to tell them apart (`--confirm-seeds S` gives every candidate S new seeds): at
  the spreads seen, a 5% gap takes about 2 (1.64 sigma / 5%)^2, some 18 seeds each, to resolve (the
  indifference-zone count of Bechhofer's ranking and selection), and the extra seeds run before (up to 3
  new ones for leaders closer than their spread) chased noise: on 13 confirmations of the development
  families that ran them, they changed 3 answers, and on the held-out seeds one change was within 1% and
  two were slower (by 23% and 33%), at 0.5-1.1 BSP trainings a tune.
- The answer is the candidate of the best mean over all its seeds; the speedup is BSP's reference time
  over that mean. Where no candidate reached the target on every seed, BSP answers (`fell_back_to_bsp`).

Every run is stored in the study as it finishes (the `confirmation_runs` user attribute), so an
interrupted confirmation resumes; a run that this or a sibling study already made (same canonical policy,
seed, miss penalty and budget) is copied, not trained again: same seed, same run.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from autosync.core.job import JobSpec
from autosync.policy_score import RunFailed, evaluate
from autosync.search.objective import BSP, canonical_on, trial_seeds
from autosync.search.strategies.check_families import ruled_out
from autosync.search.study import _optuna_internals as internals
from autosync.search.study.locking import storage_lock
from autosync.search.study.records import (
    CANONICAL, CONFIRMATION_RUNS as RUNS, SCORING, UNCHECKED, VIRTUAL_SECONDS, TrialRecord, constraint_of,
    final_pending, may_be_feasible,
)

if TYPE_CHECKING:
    import optuna

    from autosync.engine.backends import BackendChoice

INDIFFERENT = 0.05  # candidates closer than this share of the faster mean are tied whatever their spread
DEFAULT_TOP = 2  # candidates `autosync tune` confirms unless told (`confirm_top_for`)


def confirm_top_for(asked: int | None, sampler: str, objective: str = "time") -> int:
    """How many candidates a tune confirms: `asked`, or by default `DEFAULT_TOP` where the search ranks one
    objective with trials of one seed each, and none for the switch-point strategies (which train every
    candidate on Sync-Switch's R seeds), the race (which compares on two seeds) or a Pareto front."""
    from autosync.search.strategies.samplers import RACE, SWITCH_POINT_SAMPLERS

    if asked is not None:
        return asked
    return 0 if sampler in (*SWITCH_POINT_SAMPLERS, RACE) or objective != "time" else DEFAULT_TOP
REFERENCE = "reference"  # the source of BSP's row where BSP is not a candidate: the constraint's reference only


@dataclass
class Candidate:
    """One policy to confirm and its score on the search's seeds (None: not scored there yet)."""

    policy: dict[str, Any]
    source: str  # "trial N" of this study, "sibling STUDY", or REFERENCE for BSP
    search_time: float | None = None
    search_final: float | None = None
    checked: bool = True  # its final metric is known to keep the constraint (else checked before it answers)


@dataclass
class Confirmation:
    """Each candidate's mean over all the seeds, and the winner."""

    top: int  # K: how many of the study's best were confirmed
    seeds: list[int]  # the search's seeds, then the new ones
    rows: list[dict[str, Any]] = field(default_factory=list)  # the study's best first, the siblings' winners, BSP
    winner: dict[str, Any] | None = None  # the fastest feasible candidate over all seeds (None: none feasible)
    winner_time: float | None = None
    winner_final: float | None = None
    bsp_time: float | None = None  # BSP's reference time (its mean over new seeds too where it was a candidate)
    bsp_final: float | None = None
    trained_virtual_seconds: float = 0.0  # what the runs trained here cost (copied runs cost nothing)
    fell_back_to_bsp: bool = False  # no candidate reached the target on every seed: BSP answers
    search_best: dict[str, Any] | None = None  # the search's own answer (its best on the search's seeds)
    tied: list[dict[str, Any]] = field(default_factory=list)  # policies closer to the winner than the spread
    spread: float | None = None  # the winner's spread between seeds, or the largest of the tied rows' (s)


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
        """A run to the target of `canonical` on `seed` (runs of older versions trained the whole budget and
        are keyed without `to_target`)."""
        return json.dumps({"policy": canonical, "seed": seed, "penalty": penalty, "to_target": True,
                           "budget": job.budget.model_dump(mode="json")}, sort_keys=True)

    def get(self, key: str) -> dict[str, Any] | None:
        return self.runs.get(key)

    def put(self, key: str, result: dict[str, Any]) -> None:
        """Keep `result` here and in the study: the study's runs are read afresh and written back under the
        storage's lock, so processes that share the study and store runs at once (confirming, holding
        leaders, judging checks on a second seed) each keep theirs."""
        self.runs[key] = result
        url = internals.storage_url(self.study)
        with storage_lock(url, self.study.study_name) if url else contextlib.nullcontext():
            mine = dict(self.study.user_attrs.get(RUNS) or {})
            mine[key] = result
            self.study.set_user_attr(RUNS, mine)


def candidates(study: "optuna.Study", top: int, job: JobSpec, scoring: dict[str, Any],
               also: list[tuple[dict[str, Any], str]] = ()) -> list[Candidate]:
    """The study's `top` fastest completed trials scored as `scoring` says (`trial_scoring`) that keep the
    final-metric constraint or may (stopped at the target, unchecked: `checked` False; not ruled out by a
    failed check of its stale family, `autosync.search.strategies.check_families.ruled_out`), one per canonical
    policy (the first at its score), best first, then the policies of `also` ((policy, source) pairs: the
    sibling studies' winners) that none of those runs like, each with the score of a completed trial of
    this study that runs like it, if any."""
    import optuna

    every = study.get_trials(deepcopy=False)  # one read for all that follows
    completed = [t for t in every if t.state == optuna.trial.TrialState.COMPLETE
                 and _scored_as(t, scoring) and t.user_attrs.get(CANONICAL) is not None and not final_pending(t)]
    by_canonical: dict[str, Any] = {}
    for t in completed:  # the first trial of each canonical policy: the others ran alike or were copied
        by_canonical.setdefault(_key(t.user_attrs[CANONICAL]), t)
    ranked = sorted((t for t in every if t.state == optuna.trial.TrialState.COMPLETE
                     and may_be_feasible(t) and _scored_as(t, scoring)),
                    key=lambda t: (t.values[0], final_pending(t), t.number))
    out, seen = [], set()
    keys = {t.number: _key(t.user_attrs.get(CANONICAL) or canonical_on(TrialRecord(t).policy, job)) for t in ranked}
    unchecked = {row["trial"] for row in study.user_attrs.get(UNCHECKED) or []}
    left = {keys[number] for number in unchecked if number in keys}
    out_of_race = ruled_out(every)
    for t in ranked:
        key = keys[t.number]
        if final_pending(t) and out_of_race(t):
            continue  # stopped at the target in the search, and its (stale family's) full-budget check failed
        if final_pending(t) and key in left:
            continue  # left unchecked by the bounded checks (`full_budget.MAX_CHECKS`): not answerable
        if key not in seen:
            seen.add(key)
            checked = not final_pending(t) or (key in by_canonical and constraint_of(by_canonical[key]) <= 0)
            out.append(Candidate(TrialRecord(t).policy, f"trial {t.number}", t.values[0],
                                 TrialRecord(t).final_metric, checked))
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
                             TrialRecord(twin).final_metric if twin else None))
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
            on_run: Callable[[int, int], None] | None = None,
            keeps_constraint: Callable[[dict[str, Any]], bool] | None = None) -> Confirmation:
    """Train every candidate (BSP keeps its reference run) to the target on the `extra_seeds` seeds after the
    search's `repeats` (where a candidate has no score on the search's seeds, on those too); leaders closer
    than their spread are reported tied (`Confirmation.tied`). `on_run(done, total)` follows the runs.
    A winner whose final metric was not checked yet (it stopped at the target in the search) answers only
    once `keeps_constraint(policy)` says it keeps the final-metric constraint; else the next one is taken.
    `tolerance` is kept for the callers: the final metric is checked on the search's seeds."""
    search_seeds = trial_seeds(job, repeats)
    bsp_key = _key(canonical_on(BSP, job))
    is_bsp = [_key(canonical_on(c.policy, job)) == bsp_key for c in plan]
    if not any(is_bsp):  # BSP: the speedup's reference
        plan, is_bsp = [*plan, Candidate(BSP, REFERENCE, reference["time_to_target"], reference["final_metric"])], \
            [*is_bsp, True]
    result = Confirmation(top, list(search_seeds), search_best=plan[0].policy if plan else None)
    times: dict[int, list[dict[str, Any]]] = {i: [] for i in range(len(plan))}  # each candidate's new runs
    new_seeds = [job.seed + repeats + i for i in range(extra_seeds)]
    result.seeds += new_seeds
    todo = {i: (search_seeds if c.search_time is None else []) + new_seeds
            for i, c in enumerate(plan) if c.source != REFERENCE}  # BSP keeps its reference run
    done, total = 0, sum(len(seeds) for seeds in todo.values())
    for i, seeds in todo.items():  # the search's best first: the others race its mean
        c = plan[i]
        for j, seed in enumerate(seeds):
            bound = None if is_bsp[i] else _bound(c, times[i], len(search_seeds), times, plan, len(seeds) - j - 1)
            times[i].append(_run(job, c.policy, seed, penalty, runs, backend, result, bound))
            behind = bool(times[i][-1].get("behind"))  # it cannot beat the leader's mean any more
            done, total = done + 1, total - (len(seeds) - len(times[i]) if behind else 0)
            if on_run is not None:
                on_run(done, total)
            if behind:
                break
    rows = [_row(c, times[i], len(search_seeds)) for i, c in enumerate(plan)]
    result.rows = rows
    bsp_row = next(row for row, bsp in zip(rows, is_bsp) if bsp)  # a candidate (raced by none) or the reference
    result.bsp_time, result.bsp_final = bsp_row["time_to_target"], bsp_row["final_metric"]
    if result.bsp_time is None:  # BSP, a candidate here, failed on a new seed: the speedup reads its reference
        result.bsp_time, result.bsp_final = reference["time_to_target"], reference["final_metric"]
    bsp_rows = [r for r, bsp in zip(rows, is_bsp) if bsp and r["time_to_target"] is not None]
    contenders = [r for r in rows if r["feasible"] and r["source"] != REFERENCE]
    if not contenders and bsp_rows:  # every candidate missed on a new seed: BSP, the reference, answers
        contenders, result.fell_back_to_bsp = bsp_rows, True
    unchecked = {json.dumps(c.policy, sort_keys=True) for c in plan if not c.checked}
    contenders = sorted(contenders, key=lambda r: r["time_to_target"])  # stable: the first of equals, search order
    while contenders and json.dumps(contenders[0]["policy"], sort_keys=True) in unchecked \
            and keeps_constraint is not None and not keeps_constraint(contenders[0]["policy"]):
        contenders[0]["feasible"] = False  # ends below the tolerance of BSP's final metric at full budget
        contenders.pop(0)
        if not contenders and bsp_rows:
            contenders, result.fell_back_to_bsp = bsp_rows, True
    if contenders:
        best = contenders[0]
        result.winner, result.winner_time, result.winner_final = best["policy"], best["time_to_target"], best["final_metric"]
        tied = _tied(contenders, best)
        result.tied = [r["policy"] for r in tied]
        result.spread = max(_spread(r) or 0.0 for r in [best, *tied]) if tied else _spread(best)
    return result


def _run(job: JobSpec, policy: dict[str, Any], seed: int, penalty: float, runs: RunStore,
         backend: "BackendChoice | None", result: Confirmation, bound: float | None = None) -> dict[str, Any]:
    """`run_to_target`, its training counted in `result`."""
    run, trained = run_to_target(job, policy, seed, penalty, runs, backend, bound)
    result.trained_virtual_seconds += trained
    return run


def run_to_target(job: JobSpec, policy: dict[str, Any], seed: int, penalty: float, runs: RunStore,
                  backend: "BackendChoice | None" = None, bound: float | None = None) -> tuple[dict[str, Any], float]:
    """`policy`'s run to the target on `seed`: stored, or trained now (and stored), and the virtual seconds
    trained now. With `bound`, a run that has not reached the target by then stops there, `behind`: it cannot
    beat the leader (stored under its bound, so that a resumed confirmation, which computes the same bound,
    copies it)."""
    key = RunStore.identity(canonical_on(policy, job), seed, penalty, job)
    behind_key = f"{key}|behind at {bound!r}"
    run = runs.get(key) or (runs.get(behind_key) if bound is not None else None)
    if run is None and bound is not None and bound <= 0:
        return {"behind": True, "stopped_at": 0.0, "seed": seed}, 0.0
    trained = 0.0
    if run is None:
        try:
            run = evaluate(job, policy, [seed], penalty, backend=backend, stop_at_target=True, horizon=bound)
        except RunFailed as exc:
            run = {"reason": str(exc)}
        trained = run.get(VIRTUAL_SECONDS, 0.0)
        if bound is not None and "reason" not in run and not run.get("reached"):
            run = {"behind": True, "stopped_at": bound, VIRTUAL_SECONDS: run.get(VIRTUAL_SECONDS, 0.0)}
            runs.put(behind_key, run)
        else:
            runs.put(key, run)
    return {**run, "seed": seed}, trained


def _bound(c: Candidate, own: list[dict[str, Any]], search_runs: int, times: dict[int, list[dict[str, Any]]],
           plan: list[Candidate], later: int = 0) -> float | None:
    """The time to target on its next seed past which `c` cannot beat the fastest mean of the candidates
    confirmed so far that reached the target on every seed (None while there is none), `later` seeds still
    to run after it, however fast those are: successive halving's rule with the leader as the bar."""
    leaders = [r["time_to_target"] for i, p in enumerate(plan) if times[i] and p is not c and p.source != REFERENCE
               and (r := _row(p, times[i], search_runs))["feasible"]]
    if not leaders:
        return None
    known = ([c.search_time] * search_runs if c.search_time is not None else []) \
        + [r["time_to_target"] for r in own if "time_to_target" in r]
    return min(leaders) * (len(known) + 1 + later) - sum(known)


def _spread(row: dict[str, Any]) -> float | None:
    """The standard deviation of a row's per-seed times (None with fewer than two)."""
    import statistics

    times = row.get("seed_times") or []
    return statistics.stdev(times) if len(times) >= 2 else None


def _tied(contenders: list[dict[str, Any]], best: dict[str, Any]) -> list[dict[str, Any]]:
    """The rows of `contenders` other than `best` whose mean is closer to its mean than the spread between
    seeds (the larger of the two rows' standard deviations), or than `INDIFFERENT` of its mean."""
    def margin(r: dict[str, Any]) -> float:
        return max(_spread(best) or 0.0, _spread(r) or 0.0, INDIFFERENT * best["time_to_target"])

    return [r for r in contenders if r is not best and r["time_to_target"] - best["time_to_target"] < margin(r)]


def _row(c: Candidate, runs: list[dict[str, Any]], search_runs: int) -> dict[str, Any]:
    """A candidate's mean over all its seeds (the search's score counted once per search seed); a failed run
    (divergence) or one stopped behind the leader leaves it without a time; `feasible`: it reached the target
    on every seed."""
    row = {"policy": c.policy, "source": c.source, "search_time": c.search_time, "time_to_target": None,
           "final_metric": None, "reached": sum(1 for r in runs if r.get("reached")), "runs": len(runs),
           "reason": next((r["reason"] for r in runs if "reason" in r), None), "seed_times": [],
           "missed_seeds": [r["seed"] for r in runs if "reason" not in r and not r.get("behind")
                            and not r.get("reached")],
           "behind_at": next((r["stopped_at"] for r in runs if r.get("behind")), None), "feasible": False}
    if row["reason"] is not None or row["behind_at"] is not None:
        return row
    times = [r["time_to_target"] for r in runs]
    finals = [r["final_metric"] for r in runs]
    if c.search_time is not None:
        times = [c.search_time] * search_runs + times
        finals = [c.search_final] * search_runs + finals
        row["runs"] += search_runs
        row["reached"] += search_runs
    row["seed_times"] = times
    row["time_to_target"] = sum(times) / len(times)
    row["final_metric"] = sum(finals) / len(finals) if None not in finals else None
    row["feasible"] = not row["missed_seeds"]
    return row


def how_it_held(confirmed: dict[str, Any], label: Callable[[dict[str, Any]], str] = json.dumps) -> str:
    """One line on how the search's answer held on the seeds it did not search on (a stored confirmation,
    `Confirmation.to_dict()`); `label` names a policy."""
    rows = confirmed.get("rows") or []
    best = confirmed.get("search_best")
    row = next((r for r in rows if r["policy"] == best), None)
    winner = confirmed.get("winner")
    seeds = f"seed{'s' if len(confirmed.get('seeds', [])) > 1 else ''} {', '.join(map(str, confirmed.get('seeds', [])))}"
    if winner is None:
        return "BSP failed on a new seed, so no candidate can be held to it: the search's best is kept"
    if confirmed.get("fell_back_to_bsp"):
        return f"no candidate reached the target on every one of {seeds}: the answer is BSP"
    tied = confirmed.get("tied") or []
    tie = (f"; tied with {', '.join(label(p) for p in tied)} (closer than the spread between seeds, "
           f"{confirmed.get('spread') or 0:.1f} s, or {INDIFFERENT:.0%} of the mean)") if tied else ""
    mean = f"{confirmed['winner_time']:.1f} s mean over {seeds}"
    if winner == best:
        return f"the answer held: {label(winner)} {mean}{tie}"
    if row is None or row.get("time_to_target") is None and not row.get("missed_seeds"):
        why = f"failed on a new seed ({row['reason']})" if row and row.get("reason") else "was not confirmed"
    elif row.get("missed_seeds"):
        why = f"missed the target on seed {', '.join(map(str, row['missed_seeds']))}"
    else:
        why = f"was slower over the seeds ({row['time_to_target']:.1f} s mean)"
    return f"the answer was replaced: the search's best {label(best)} {why}; {label(winner)} {mean}{tie}"


def with_confirmation(record: dict[str, Any], confirmation: Confirmation) -> dict[str, Any]:
    """The cache record answering with the confirmed winner (the search's own best kept beside it) and its
    mean over all the seeds; the speedup is BSP's reference time over that mean."""
    updated = dict(record)
    updated.setdefault("search_best_policy", record["best_policy"])
    updated.setdefault("search_best_value", record["best_value"])
    updated["confirmed"] = confirmation.to_dict()
    if confirmation.winner is None:
        return updated
    c = confirmation
    updated.update(best_policy=c.winner, best_value=c.winner_time, best_final_metric=c.winner_final,
                   bsp_time_to_target=c.bsp_time, bsp_final_metric=c.bsp_final,
                   speedup_vs_bsp=c.bsp_time / c.winner_time if c.winner_time > 0 and c.bsp_time is not None else None)
    return updated
