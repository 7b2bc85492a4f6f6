"""A first round fitted on the table: auto-sklearn 2.0's greedy portfolio, judged leave-one-family-out.

A portfolio is a list of settings that a race runs first on every job. Settings must mean the same thing
on jobs of any size, so a candidate is a label that resolves on n workers (`autosync.lattice.labelled_points`);
the greedy fit keeps the labels common to every training job (a static k by its k is a label of one size
only).

The fit is Feurer et al.'s greedy portfolio construction (auto-sklearn 2.0, JMLR 2022, Algorithm 1): start
empty and add, one at a time, the candidate that most lowers the mean over the training jobs of the
portfolio's loss, the log of its best member's time over the job's best candidate time (a job is a
"dataset" there, a candidate a "pipeline"), until `size` members. Times are read on the tune's search
seeds, as a race would see them. (Scoring a portfolio against the grid's choice with the final metric in
view, a member breaking BSP's final metric counting as BSP's time, was tried on the table: its runs to the
end of the budget for every label faster than BSP on the 16 committed jobs took 1,425 core-seconds.
Leave-one-family-out it left the 4 jobs where the race answered BSP as they were, before the race's round
towards BSP, and with that round it answered worse (worst 3.05 of the grid's choice against 2.31, median
cost 5.80 BSP trainings against 5.38, table replay without the tune), so the loss stays on times alone.)

A fitted portfolio answers on a job as the grid's choice is made, but among its members only: the member
fastest on the search seeds that keeps BSP's final metric there (`portfolio_answer`), scored like a tune's
answer (`autosync.experiments.lofo`): its held-out time over the grid's choice's. Its cost is that of a
race that runs the members in order on both search seeds and stops each at the time of the fastest run so
far on that seed (no member can win past it), plus a full budget for each member whose final metric was
checked, in BSP trainings (one BSP run's full budget).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any, Collection

from autosync.catalog import policy_from_dict
from autosync.core.job import JobSpec
from autosync.experiments import lofo
from autosync.experiments.reference_grid import Scored, feasible_best, held_out_seeds
from autosync.lattice import BSP_POLICY, labelled_points
from autosync.policy_score import MISS_PENALTY
from autosync.table import Table, cell_for
from autosync.table.replay import full_budget, to_target

@dataclass(frozen=True)
class JobTimes:
    """One job's candidate times on its search seeds and on its held-out seeds, and what a race pays."""

    family: str
    job: str
    spec: JobSpec
    policies: dict[str, dict[str, Any]]  # label -> its lattice point on the job
    search: dict[str, list[float]]  # label -> penalised time per search seed
    held_out: dict[str, float]  # label -> mean penalised time over the held-out seeds
    grid_choice_time: float  # the grid's choice's held-out time (`lofo.score_job`)
    bsp_training: float  # virtual seconds of one BSP run to the end of the budget
    # label -> the virtual seconds each run to the target trained per search seed: to the target, to where it
    # diverged, or to the budget's end
    trained: dict[str, list[float]]


def job_times(table: Table, family: str, job: JobSpec, grid_choice_time: float) -> JobTimes:
    """Every candidate of `job` read from the table (cells stopped at the target)."""
    search, held_out, trained = {}, {}, {}
    policies = labelled_points(job.cluster.n_workers)
    fingerprint = job.fingerprint()
    for label, policy in policies.items():
        search[label] = lofo.table_score(table, job, policy, lofo.search_seeds(job), fingerprint).times
        held_out[label] = lofo.table_score(table, job, policy, held_out_seeds(job), fingerprint).time
        trained[label] = [float(cell_for(table, to_target(job.model_copy(update={"seed": s})),
                                         policy_from_dict(policy), fingerprint).scores["virtual_time"])
                          for s in lofo.search_seeds(job)]
    bsp = cell_for(table, full_budget(job), policy_from_dict(BSP_POLICY), fingerprint)
    return JobTimes(family, job.name, job, policies, search, held_out, grid_choice_time,
                    float(bsp.scores["virtual_time"]), trained)


def greedy_portfolio(jobs: list[JobTimes], size: int, allowed: Collection[str] | None = None) -> list[str]:
    """Feurer et al.'s greedy portfolio (Algorithm 1) of `size` labels over `jobs`, among the labels every job
    has (and `allowed` holds, where given); ties go to the label first in sorted order, so the same jobs give
    the same portfolio. A job's loss with the portfolio is the log of its best member's mean time on the search
    seeds over its best label's; each job's best member so far is kept, so a candidate's loss is one `min`."""
    common = set.intersection(*(set(j.search) for j in jobs))
    labels = sorted(common if allowed is None else common & set(allowed))
    means = [{label: statistics.fmean(t) for label, t in j.search.items()} for j in jobs]  # once per job
    bests = [min(m.values()) for m in means]
    held = [math.inf] * len(jobs)  # each job's best member's mean so far
    members: list[str] = []
    while len(members) < min(size, len(labels)):
        scored = [(statistics.fmean(math.log(min(h, m[c]) / b) for m, b, h in zip(means, bests, held)), c)
                  for c in labels if c not in members]
        added = min(scored)[1]
        members.append(added)
        held = [min(h, m[added]) for m, h in zip(means, held)]
    return members


def portfolio_answer(table: Table, job: JobTimes, members: list[str]) -> dict[str, Any]:
    """What a race of `members` answers on `job`: the member fastest on the search seeds whose final metric
    there keeps BSP's (`reference_grid.feasible_best`, the grid's choice's rule; its full-budget runs read
    from the table), its held-out time over the grid's choice's, whether it keeps the rule on the held-out
    seeds, and the race's cost in BSP trainings: members in order on each search seed, each stopped at the
    fastest time so far on that seed, plus the full-budget runs of the members checked."""
    present = [m for m in members if m in job.search]
    order = sorted(present, key=lambda m: (statistics.fmean(job.search[m]), present.index(m)))
    scores = [Scored(job.policies[m], statistics.fmean(job.search[m]),
                     [s for s, t in zip(lofo.search_seeds(job.spec), job.search[m])
                      if t >= MISS_PENALTY * job.spec.budget.max_virtual_seconds], job.search[m]) for m in order]
    checked: list[dict[str, Any]] = []
    finals = lofo.table_finals(table, job.spec, lofo.search_seeds(job.spec))

    def counted(policy: dict[str, Any]) -> list[float | None]:
        checked.append(policy)
        return finals(policy)

    picked = feasible_best(job.spec, scores, counted)
    answer = order[[s.policy for s in scores].index(picked.policy)]
    seconds = 0.0
    for seed in range(len(job.search[present[0]])):
        best = math.inf
        for m in present:
            seconds += min(job.search[m][seed], best)
            best = min(best, job.search[m][seed])
    seconds += sum(len(lofo.search_seeds(job.spec)) * job.spec.budget.max_virtual_seconds
                   for p in checked if p != BSP_POLICY)  # a check's full budget, at most
    keeps = lofo.answer_keeps(table, job.spec, job.policies[answer], held_out_seeds(job.spec))
    return {"answer": answer, "ratio": job.held_out[answer] / job.grid_choice_time, "keeps": keeps,
            "cost": seconds / job.bsp_training}


def leave_one_family_out(table: Table, jobs: list[JobTimes], size: int) -> list[dict[str, Any]]:
    """For each family: the portfolio fitted on the other families' jobs, answering on this family's."""
    rows = []
    for family in sorted({j.family for j in jobs}):
        members = greedy_portfolio([j for j in jobs if j.family != family], size)
        for job in (j for j in jobs if j.family == family):
            rows.append({"family": family, "job": job.job, "portfolio": members,
                         **portfolio_answer(table, job, members)})
    return rows
