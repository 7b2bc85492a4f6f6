"""Tuned jobs near a new one: same workload and target, another cluster.

Two jobs are neighbours when they train the same thing (`workload_key`: the workload and the target, the
fingerprint's other half) on clusters that may differ. How far apart their clusters are is measured on
what decides which synchronization policy wins (`cluster_features`), each feature a log ratio so that
"twice as many workers" or "a tail twice as long" weigh the same whatever the scale:
- log n, the number of workers;
- the straggler tail: the mean of the slowest of n round trips over the mean round trip (what BSP waits
  for; its harmonic-number growth under exponential round trips is DBW's argument), and the same at the
  median worker (what a backup-worker policy with k = n / 2 waits for), both by Monte Carlo over the
  cluster model with a fixed seed (so a job's features are the same every time);
- the mean round trip itself (the time unit: a job on a twice slower cluster is twice as long);
- the spread of the workers' mean speeds (slowest over fastest), and the slowdowns (DBW Fig. 9): the
  log of each slowed worker's largest factor, summed over the workers and divided by n.
The distance is the Euclidean distance between feature vectors. A search over a job starts from its
nearest tuned neighbours' winners (`autosync.search.tune`); `autosync recommend` answers from them alone.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from autosync.search.study import _optuna_internals as internals
from autosync.core.job import JobSpec
from autosync.core.loader import short_repr
from autosync.core.record_checks import is_number
from autosync.search.study.records import FEATURES, WORKLOAD_KEY, StudyRecord, damaged
from autosync.core.cluster import RoundTripModel, started_at_once

if TYPE_CHECKING:
    import optuna

FEATURE_NAMES = ("log n", "log tail (slowest / mean)", "log median (median / mean)", "log mean round trip",
                 "log speed spread", "slowdowns (mean log factor)")
ROUNDS = 200  # Monte Carlo rounds of the features
WORKLOAD_PENALTY = 1.0  # distance added for a job that trains something else (recommend only)


def workload_key(job: JobSpec) -> str:
    """A hash of what the job trains and what it aims at (workload, target): the same for jobs that differ
    only in their cluster."""
    blob = json.dumps({"workload": job.workload.model_dump(mode="json"), "target": job.target.model_dump(mode="json")},
                      sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _check_features(study: str, features: Any) -> None:
    """A study's stored features, refused in one line naming it unless they are `FEATURE_NAMES`' finite
    numbers (text, another length or NaN was a numpy traceback where `recommend` measured its distance)."""
    if not (isinstance(features, list) and len(features) == len(FEATURE_NAMES)
            and all(is_number(f) and math.isfinite(f) for f in features)):
        raise damaged(study, f"{FEATURES}: must be {len(FEATURE_NAMES)} numbers, but got {short_repr(features)}")


def cluster_features(job: JobSpec) -> list[float]:
    """The job's cluster as `FEATURE_NAMES` (see the module docstring)."""
    cluster, b = job.cluster, job.workload.batch_size
    model = RoundTripModel(cluster, seed=0)
    n = cluster.n_workers
    trips = np.array([started_at_once(cluster.compute_units, [model.round_trip(w, task, b, 0.0) for w in range(n)], b)
                      for task in range(ROUNDS)])
    mean = float(trips.mean())
    ordered = np.sort(trips, axis=1)
    tail = float(ordered[:, -1].mean()) / mean
    median = float(ordered[:, (n - 1) // 2].mean()) / mean
    speeds = trips.mean(axis=0)
    spread = float(speeds.max() / speeds.min())
    factors: dict[int, float] = {}  # each slowed worker's largest slowdown factor
    for slowdown in cluster.slowdowns:
        for w in slowdown.workers:
            factors[w] = max(factors.get(w, 1.0), slowdown.factor)
    slowed = sum(math.log(f) for f in factors.values()) / n
    return [math.log(n), math.log(tail), math.log(median), math.log(mean), math.log(spread), slowed]


def distance(a: list[float], b: list[float]) -> float:
    return float(np.linalg.norm(np.asarray(a) - np.asarray(b)))


@dataclass(frozen=True)
class Neighbour:
    """A tuned study of a job like this one, and how far its cluster is."""

    study_name: str
    job_name: str
    distance: float
    record: dict[str, Any]  # its cache record (best_policy, best_value, speedup_vs_bsp, ...)
    features: list[float]
    same_workload: bool = True  # whether it trains what this job trains (else WORKLOAD_PENALTY further away)
    fingerprint: str | None = None  # its job's fingerprint (one vote per job, wherever it was found)

    @property
    def n_workers(self) -> int:
        """Its number of workers (the first feature is log n)."""
        return round(math.exp(self.features[0]))


def describe(study: "optuna.Study", job: JobSpec) -> None:
    """Store the job's workload key and cluster features on its study (where other jobs look for neighbours)."""
    if study.user_attrs.get(WORKLOAD_KEY) != workload_key(job):
        study.set_user_attr(WORKLOAD_KEY, workload_key(job))
    if FEATURES not in study.user_attrs:
        study.set_user_attr(FEATURES, cluster_features(job))


def neighbours(storage: "optuna.storages.BaseStorage", job: JobSpec, execution: str | None = None,
               count: int = 3, other_workloads: bool = False, features: list[float] | None = None,
               ) -> list[Neighbour]:
    """The `count` nearest finished studies of other jobs with this job's workload and target (and, when
    given, the same execution), nearest first, one per job (its fastest study); read from the studies'
    attributes alone. With `other_workloads`, jobs that train something else count too, WORKLOAD_PENALTY
    further away (`Neighbour.same_workload` says which). `features`: the job's `cluster_features`, where its
    study already holds them (`describe`); else computed once a study qualifies (most storages hold none)."""
    key, fingerprint = workload_key(job), job.fingerprint()
    mine = features
    best: dict[str, Neighbour] = {}
    for frozen in internals.all_studies(storage):
        study = StudyRecord(frozen.user_attrs)
        record = study.cache
        same = study.workload_key == key
        if not (same or other_workloads) or study.fingerprint == fingerprint or not isinstance(record, dict) \
                or study.features is None or (execution is not None and study.execution != execution):
            continue
        _check_features(frozen.study_name, study.features)
        mine = mine if mine is not None else cluster_features(job)
        far = distance(mine, study.features) + (0.0 if same else WORKLOAD_PENALTY)
        found = Neighbour(frozen.study_name, study.job_name, far, record, study.features, same, study.fingerprint)
        owner = study.fingerprint or frozen.study_name
        kept = best.get(owner)
        if kept is None or record.get("best_value", math.inf) < kept.record.get("best_value", math.inf):
            best[owner] = found
    return sorted(best.values(), key=lambda nb: (nb.distance, nb.study_name))[:count]
