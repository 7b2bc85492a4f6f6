"""`autosync recommend`: a policy for a job without training, from the nearest tuned jobs in the storage
(and the drawn jobs of robustness reports, `--grid`: `autosync.search.recommend.grid`).

The neighbours (`autosync.search.recommend.neighbours`) vote: each proposes its winner, adapted to this job's n (a
backup worker count k scales with n; anything that does not fit this job is dropped), weighted by
1 / (distance + 0.1); the policy with the most weight is the answer. Its predicted time comes from the
nearest neighbour that proposed it and trains the same workload: that neighbour's BSP time to target
scaled by how much longer this cluster's BSP rounds are (the mean slowest round trip, both clusters'
features), divided by the neighbour's speedup over BSP. A neighbour that trains something else predicts
the speedup alone.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

from autosync.catalog import policy_from_dict
from autosync.core.errors import UserError
from autosync.core.job import JobSpec
from autosync.search.recommend.neighbours import FEATURE_NAMES, Neighbour, cluster_features, neighbours
from autosync.policies import reads_parameter
from autosync.search.objective import canonical_on
from autosync.search.recommend.grid import grid_neighbours
from autosync.search.study import _optuna_internals as internals
from autosync.search.study.cache import refuse_damaged
from autosync.search.study.records import StudyRecord
from autosync.search.study.storage import existing_storage, quiet_optuna, redact_url

__all__ = ["Recommendation", "adapt", "recommend", "recommend_from"]

COUNT = 5  # neighbours that vote


@dataclass
class Recommendation:
    policy: dict[str, Any]
    predicted_speedup: float | None  # over BSP
    predicted_time: float | None  # time to target (virtual s), None without a neighbour of the same workload
    predicted_bsp_time: float | None
    neighbours: list[dict[str, Any]] = field(default_factory=list)  # job, study, distance, policy, weight, same_workload

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def adapt(policy: dict[str, Any], n_from: int, job: JobSpec) -> dict[str, Any] | None:
    """`policy` (a winner on n_from workers) for `job`: a backup count k scaled to this n where its barrier
    waits for k workers (backup workers, alone or as a composition's barrier: a composition under another
    barrier carries k at its default, unused, and a k scaled away from it was refused); None when it does not
    fit this job."""
    n = job.cluster.n_workers
    params = dict(policy.get("params", {}))
    try:
        reads_k = reads_parameter(policy_from_dict(policy), "k")
    except (ValueError, KeyError, TypeError):  # a winner no policy of this autosync makes: none fits
        return None
    if reads_k and isinstance(params.get("k"), int) and n_from != n:
        params["k"] = min(n, max(1, round(params["k"] * n / n_from)))
    adapted = {"policy": policy["policy"], "params": params}
    return adapted if canonical_on(adapted, job) is not None else None


def recommend_from(url: str, job: JobSpec, grids: Sequence[Path] = ()) -> Recommendation:
    """`recommend` from the storage at `url` (opened only if it exists: reading creates and changes nothing)
    and the robustness reports `grids`; a storage that does not exist with no report is a one-line UserError."""
    quiet_optuna()
    with existing_storage(url) as opened:
        if opened is None and not grids:
            raise UserError(f"{job.source}: no tuned job in {redact_url(url)} to recommend from (the storage does "
                            "not exist): tune this job (autosync tune) or point --storage at a storage of tuned "
                            "jobs (or --grid at a robustness report)")
        if opened is not None:  # a damaged record among the tuned jobs is refused, as every read-only command does
            refuse_damaged(opened)
        return recommend(opened, job, redact_url(url), grids)


def _tuned_itself(storage: Any, job: JobSpec) -> bool:
    """Whether `storage` holds a finished study of `job` itself (which `neighbours` leaves out)."""
    return any(StudyRecord(s.user_attrs).fingerprint == job.fingerprint() and StudyRecord(s.user_attrs).cache
               for s in internals.all_studies(storage))


def _bsp_timed(record: dict[str, Any]) -> bool:
    """Whether a neighbour's BSP time is a time to the target: BSP reached it on every seed (a miss's is a
    score, `MISS_PENALTY` times what it ran, and predicts no time)."""
    return record.get("bsp_time_to_target") is not None and record.get("bsp_reached") in (None, record.get("bsp_runs"))


def recommend(storage: Any, job: JobSpec, where: str, grids: Sequence[Path] = ()) -> Recommendation:
    """The recommendation for `job` from the tuned jobs in `storage` (None: none; named `where` in errors)
    and the drawn jobs of the robustness reports in `grids` (`autosync.search.recommend.grid`), the nearest COUNT of all."""
    mine = cluster_features(job)
    near = neighbours(storage, job, count=COUNT, other_workloads=True, features=mine) if storage is not None else []
    for grid in grids:
        near += grid_neighbours(grid, job, mine, lambda policy, n: adapt(policy, n, job) is not None)
    one_each: dict[str, Neighbour] = {}  # a job tuned in the storage and drawn in a report (or a report given
    for nb in sorted(near, key=lambda nb: (nb.distance, nb.study_name, nb.job_name)):  # twice) votes once
        one_each.setdefault(nb.fingerprint or f"{nb.study_name}/{nb.job_name}", nb)
    near = list(one_each.values())[:COUNT]
    if not near:
        place = where + "".join(f" or the report {g}" for g in grids)
        if storage is not None and _tuned_itself(storage, job):  # its own cached policy is the better answer
            raise UserError(f"{job.source}: this job is tuned in {where} already, and no other job there "
                            "is: its own cached policy answers it (autosync run JOB.yaml --policy tuned, or "
                            "autosync cache show JOB.yaml)")
        raise UserError(f"{job.source}: no tuned job in {place} to recommend from: tune this job (autosync tune) "
                        "or point --storage at a storage of tuned jobs (or --grid at a robustness report)")
    votes: dict[str, float] = {}
    proposals: list[tuple[Neighbour, dict[str, Any] | None, float]] = []
    for nb in near:
        policy = adapt(nb.record["best_policy"], nb.n_workers, job)
        weight = 1.0 / (nb.distance + 0.1)
        proposals.append((nb, policy, weight))
        if policy is not None:
            key = json.dumps(policy, sort_keys=True)
            votes[key] = votes.get(key, 0.0) + weight
    if not votes:
        raise UserError(f"{job.source}: none of the {len(near)} nearest tuned jobs' winners fits this job "
                        f"({job.cluster.n_workers} workers)")
    chosen = max(votes, key=lambda key: (votes[key], key))
    policy = json.loads(chosen)
    backers = [nb for nb, p, _ in proposals if p is not None and json.dumps(p, sort_keys=True) == chosen]
    same = [nb for nb in backers if nb.same_workload and _bsp_timed(nb.record)]
    # the speedup of the nearest backer that trains this workload (its BSP time is scaled to this cluster)
    speedup = (same or backers)[0].record.get("speedup_vs_bsp")
    predicted_bsp = predicted = None
    if same:
        nb = same[0]
        tail = FEATURE_NAMES.index("log tail (slowest / mean)")
        unit = FEATURE_NAMES.index("log mean round trip")
        scale = math.exp((mine[tail] + mine[unit]) - (nb.features[tail] + nb.features[unit]))
        predicted_bsp = nb.record["bsp_time_to_target"] * scale
        predicted = predicted_bsp / speedup if speedup else None
    rows = [{"job": nb.job_name, "study": nb.study_name, "distance": round(nb.distance, 4),
             "policy": p, "weight": round(w, 4), "same_workload": nb.same_workload} for nb, p, w in proposals]
    return Recommendation(policy, speedup, predicted, predicted_bsp, rows)
