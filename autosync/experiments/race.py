"""A race on common seeds, run on the table: the search procedure the search issue asks for, judged
leave-one-family-out before it replaces the shipped search.

The race on one job, with a portfolio fitted on other families (`portfolio_fit.greedy_portfolio`):

1. **Round 1.** Each member runs on the job's seed, stopped at `margin` times the fastest time so far
   (past it, it is eliminated whatever it does).
2. **Round 2.** The members within `margin` of the fastest, at most the faster half (successive halving's
   eta = 2), run on the second search seed; they are ranked by their mean over both seeds, so every
   comparison from here on is on seeds all of them ran.
3. **Local step.** The leader's neighbours on the job's own lattice (`neighbours`: one parameter
   changed, static k by one worker) run on both seeds, stopped at `margin` times the leader's time on each.
4. **Final-metric rule on the finalists.** The `FINALISTS` fastest by mean are continued to the end of the
   budget on both seeds, in order, and the first that keeps BSP's final metric (`keeps_paired`) is the
   answer; BSP if none does.

`keeps_paired` is the final-metric rule as a test on paired seeds: the candidate's mean difference to BSP
over the seeds both ran must be within the tolerance, widened to BSP's own difference between those seeds
where that is larger (a difference smaller than BSP's own seed-to-seed noise cannot be told from none).

The race's cost, in BSP trainings (one BSP run's full budget), counts every run's virtual seconds as
stopped, the finalists' continuations to the end of the budget, and BSP's two reference runs to the end of
the budget (the rule's reference). `fit` chooses the portfolio's size and the margin on the training jobs:
the pair with the lowest mean log ratio to the grid's choice among those whose median cost is within
`COST_GOAL`.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any

from autosync.experiments import lofo
from autosync.experiments.portfolio_fit import BSP_LABEL, JobTimes, greedy_portfolio
from autosync.experiments.reference_grid import BSP_POLICY, TOLERANCE, held_out_seeds
from autosync.table import Table

FINALISTS = 3  # the search issue's "at most the 2-3 finalists": the final-metric rule's runs are the costly ones
COST_GOAL = 3.0  # the search issue's median cost goal, in BSP trainings
SIZES = (4, 6, 8, 12)  # portfolio sizes `fit` tries
MARGINS = (1.1, 1.25, 1.5, 2.0)  # elimination margins `fit` tries


def neighbours(leader: dict[str, Any], policies: dict[str, dict[str, Any]]) -> list[str]:
    """The labels of the lattice points one step from `leader` on the job's own lattice (`policies`: label
    -> point): the same policy with exactly one parameter changed, static k by one worker up or down.
    A point two labels stand for is named once."""
    out, seen = [], {_key(leader)}
    for label, other in sorted(policies.items()):
        if other["policy"] != leader["policy"] or other["params"].keys() != leader["params"].keys():
            continue
        changed = [k for k in leader["params"] if leader["params"][k] != other["params"][k]]
        if len(changed) != 1 or _key(other) in seen:
            continue
        if changed[0] == "k" and abs(other["params"]["k"] - leader["params"]["k"]) != 1:
            continue  # static k moves one worker at a time
        seen.add(_key(other))
        out.append(label)
    return out


def _key(policy: dict[str, Any]) -> str:
    return repr(sorted(policy["params"].items())) + policy["policy"]


@dataclass
class _Race:
    job: JobTimes
    margin: float
    seconds: float = 0.0

    def run(self, label: str, seed: int, horizon: float = math.inf) -> float:
        """`label`'s penalised time on search seed `seed` (0 or 1), paying its run up to `horizon`; infinite
        where the run was stopped there (eliminated: the race knows only that it is slower)."""
        t = self.job.search[label][seed]
        self.seconds += min(t, horizon, self.job.spec.budget.max_virtual_seconds)
        return t if t <= horizon else math.inf


def keeps_paired(job: JobTimes, table: Table, policy: dict[str, Any], tolerance: float = TOLERANCE) -> bool:
    """The final-metric rule as a test on the search seeds (see the module's docstring)."""
    seeds = lofo.search_seeds(job.spec)
    finals = [lofo.table_final(table, job.spec, [s]) for s in seeds]
    own, bsp = [f(policy) for f in finals], [f(BSP_POLICY) for f in finals]
    if any(v is None for v in own + bsp):
        return False
    sign = -1.0 if job.spec.target.metric == "test_accuracy" else 1.0  # positive: worse than BSP (`constraint`)
    worse = statistics.fmean(sign * (o - b) for o, b in zip(own, bsp))
    return worse <= max(tolerance, max(bsp) - min(bsp))


def race(table: Table, job: JobTimes, members: list[str], margin: float) -> dict[str, Any]:
    """The race on `job` (see the module's docstring): its answer, the answer's held-out time over the grid's
    choice's, whether it keeps the rule held out, and the cost in BSP trainings."""
    r = _Race(job, margin)
    present = [m for m in members if m in job.search]
    first: dict[str, float] = {}
    for m in present:
        first[m] = r.run(m, 0, margin * min(first.values(), default=math.inf))
    best = min(first.values())
    alive = sorted((m for m in present if first[m] <= margin * best), key=lambda m: first[m])
    alive = alive[: max(1, math.ceil(len(alive) / 2))]  # successive halving: the faster half at most
    second: dict[str, float] = {}
    for m in alive:
        second[m] = r.run(m, 1, margin * min(second.values(), default=math.inf))
    mean = {m: (first[m] + second[m]) / 2 for m in alive}
    leader = min(mean, key=mean.get)
    lead = [job.search[leader][s] for s in (0, 1)]
    for n in neighbours(job.policies[leader], job.policies):
        if n not in mean and all(_key(job.policies[n]) != _key(job.policies[m]) for m in mean):
            mean[n] = (r.run(n, 0, margin * lead[0]) + r.run(n, 1, margin * lead[1])) / 2
    ranked = sorted((m for m in mean if mean[m] < math.inf), key=mean.get)
    answer = BSP_LABEL
    for m in ranked[:FINALISTS]:
        if job.policies[m] == BSP_POLICY:
            answer = m
            break
        reached = [min(job.search[m][s], job.spec.budget.max_virtual_seconds) for s in (0, 1)]
        r.seconds += sum(job.spec.budget.max_virtual_seconds - t for t in reached)  # continued to the end
        if keeps_paired(job, table, job.policies[m]):
            answer = m
            break
    r.seconds += 2 * job.bsp_training  # BSP's reference on both seeds
    keeps = lofo.answer_keeps(table, job.spec, job.policies[answer], held_out_seeds(job.spec))
    return {"answer": answer, "ratio": job.held_out[answer] / job.grid_choice_time, "keeps": keeps,
            "cost": r.seconds / job.bsp_training}


def fit(table: Table, jobs: list[JobTimes]) -> tuple[int, float]:
    """The portfolio size and margin for `jobs` (see the module's docstring)."""
    scored = []
    for size in SIZES:
        members = greedy_portfolio(jobs, size)
        for margin in MARGINS:
            rows = [race(table, j, members, margin) for j in jobs]
            cost = statistics.median(row["cost"] for row in rows)
            loss = statistics.fmean(math.log(row["ratio"]) for row in rows)
            scored.append((cost > COST_GOAL, loss, cost, size, margin))
    _, _, _, size, margin = min(scored)
    return size, margin


def leave_one_family_out(table: Table, jobs: list[JobTimes]) -> list[dict[str, Any]]:
    """For each family: the race fitted (portfolio, size, margin) on the other families, run on this one's."""
    rows = []
    for family in sorted({j.family for j in jobs}):
        train = [j for j in jobs if j.family != family]
        size, margin = fit(table, train)
        members = greedy_portfolio(train, size)
        for job in (j for j in jobs if j.family == family):
            rows.append({"family": family, "job": job.job, "size": size, "margin": margin,
                         **race(table, job, members, margin)})
    return rows
