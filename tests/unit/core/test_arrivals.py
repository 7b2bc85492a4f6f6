"""The PS's wait for k of n gradients read from the cluster model, and the fast workers read from it."""

import numpy as np

from autosync.core.arrivals import FAST_WITHIN, collect_times, fast_workers
from tests.conftest import small_job


def _cluster(**changes):
    return small_job(**{f"cluster__{k}": v for k, v in changes.items()}).cluster


def test_the_wait_for_k_gradients_grows_with_k_and_is_the_kth_speed_on_a_deterministic_cluster():
    speeds = [1.0, 1.0, 0.5, 0.25]  # round trips of 1, 1, 2 and 4 times the unit's
    cluster = _cluster(n_workers=4, round_trip={"kind": "deterministic"}, speed_factors=speeds)
    times = collect_times(cluster, 16, seed=0)
    assert np.allclose(times / times[0], [1.0, 1.0, 2.0, 4.0])
    noisy = collect_times(_cluster(n_workers=8), 16, seed=0)
    assert np.all(np.diff(noisy) >= 0)


def test_the_fast_workers_are_the_few_fast_ones_of_a_slow_cluster_and_all_of_an_even_one():
    slow_most = _cluster(n_workers=12, round_trip={"kind": "deterministic"}, speed_factors=[1.0] * 3 + [0.4] * 9)
    assert fast_workers(slow_most, 16, seed=0) == 3
    even = _cluster(n_workers=12, round_trip={"kind": "deterministic"})
    assert fast_workers(even, 16, seed=0) == 12
    just_inside = _cluster(n_workers=4, round_trip={"kind": "deterministic"},
                           speed_factors=[1.0, 1.0 / (FAST_WITHIN - 0.01), 1.0 / (FAST_WITHIN + 0.01), 0.5])
    assert fast_workers(just_inside, 16, seed=0) == 2


def test_a_slowdown_episode_counts_for_the_rounds_it_lasts_under_each_barrier():
    """Workers 2 and 3 are 10x slower for the first 3 s: the rounds that start then wait longer for all four
    (k = 4), never for the fast two (k = 2)."""
    slowed = {"at": 0.0, "duration": 3.0, "factor": 10.0, "workers": [2, 3]}
    cluster = _cluster(n_workers=4, round_trip={"kind": "deterministic"}, slowdowns=[slowed])
    times = collect_times(cluster, 16, seed=0, rounds=32)
    plain = collect_times(_cluster(n_workers=4, round_trip={"kind": "deterministic"}), 16, seed=0, rounds=32)
    assert np.isclose(times[1], plain[1]) and times[3] > times[1]


def test_the_same_seed_gives_the_same_fast_workers():
    cluster = _cluster(n_workers=16, round_trip={"kind": "pareto", "shape": 2.0, "scale": 0.5})
    assert fast_workers(cluster, 16, seed=5) == fast_workers(cluster, 16, seed=5)


def test_workers_sharing_one_compute_unit_queue_for_it_and_only_the_first_is_fast():
    """Eight workers on one unit: their gradients come out one after another (1, 2, ..., 8 batch times)."""
    units = {"count": 1, "compute": {"model": "linear", "seconds_per_sample": 1.0 / 16}}
    cluster = _cluster(n_workers=8, round_trip={"kind": "deterministic"}, compute_units=units)
    times = collect_times(cluster, 16, seed=0)
    assert np.allclose(times / times[0], range(1, 9))
    assert fast_workers(cluster, 16, seed=0) == 1
