"""How long the parameter server waits for k of n gradients, read from the cluster model alone (no training).

DBW (sec. 3) writes T_k for the time between an update and the PS's reception of its k-th new gradient;
the policy estimates it online, from the arrivals it sees. Here it is measured on the job's own cluster
model before anything trains (`collect_times`): rounds in which every worker starts a task at once, the
k-th arrival ending the round for a barrier on k (with compute units, a worker's gradient also waits for
its place in its unit's queue). The rounds start at evenly spaced times over the stretch that many
rounds of a typical round trip cover, so that a slowdown or a speed-up episode there weighs as the share
of that time it lasts; one set of rounds gives T_k for every k at once (32 rounds of n round trips).

`fast_workers` reads from it the workers the PS can wait for without waiting on a straggler: the largest k
whose T_k is within `FAST_WITHIN` of T_1. It is where a static k under the `linear` step rule does best
most often: within 1.3x of the job's best static k on 30 of 53 development jobs, against 21 for the best
share of n (n / 4) and 16 for n / 3 + 2 (`python results/portfolio/static_k.py`, the `fast_workers`
rows). With most
of the cluster slow it is the few fast workers (2-5 of 27 on the inverse family); on an even cluster, most
of it.
"""

from __future__ import annotations

import numpy as np

from autosync.core.cluster import RoundTripModel, started_at_once
from autosync.core.job import ClusterSpec

__all__ = ["FAST_WITHIN", "ROUNDS", "collect_times", "fast_workers"]

FAST_WITHIN = 1.35  # a worker is fast while the PS's wait for it is within this factor of the first arrival's
ROUNDS = 32  # rounds: enough to average a round trip's random multiplier (the fast count moves by one at most)


def collect_times(cluster: ClusterSpec, batch_size: int, seed: int, rounds: int = ROUNDS) -> np.ndarray:
    """T_k for k = 1..n (index k - 1): the mean, over `rounds` rounds, of the k-th arrival among the n workers
    that all start a task of `batch_size` at the round's start (tasks 0, 1, ...: the round trips the job's
    first rounds draw on `seed`). Round r starts at r times the workers' mean round trip at time 0."""
    model = RoundTripModel(cluster, seed)
    n = cluster.n_workers
    step = float(np.mean([model.compute_seconds(w, batch_size, 0.0) for w in range(n)])) \
        + cluster.communication_seconds
    arrivals = np.empty((rounds, n))
    for task in range(rounds):
        trips = [model.round_trip(w, task, batch_size, task * step) for w in range(n)]
        arrivals[task] = np.sort(started_at_once(cluster.compute_units, trips, batch_size))
    return arrivals.mean(axis=0)


def fast_workers(cluster: ClusterSpec, batch_size: int, seed: int, within: float = FAST_WITHIN) -> int:
    """The largest k whose wait T_k (`collect_times`) is within `within` times T_1 (1 at least)."""
    times = collect_times(cluster, batch_size, seed)
    return int(np.searchsorted(times, within * times[0], side="right"))
