"""Cluster models: purity of the draws, the distributions' means, slowdowns and compute models."""

from __future__ import annotations

import numpy as np
import pytest

from autosync.core.cluster import RoundTripModel
from autosync.core.job import ClusterSpec


def model(**spec) -> RoundTripModel:
    return RoundTripModel(ClusterSpec.model_validate({"n_workers": 4, **spec}), seed=7)


def test_draws_are_a_pure_function_of_seed_worker_task():
    m = model()
    forward = [m.round_trip(w, t, 32, 0.0) for w in range(4) for t in range(20)]
    backward = [model().round_trip(w, t, 32, 0.0) for w in reversed(range(4)) for t in reversed(range(20))]
    assert forward == list(reversed(backward))
    assert m.round_trip(0, 0, 32, 0.0) != RoundTripModel(m.spec, seed=8).round_trip(0, 0, 32, 0.0)


@pytest.mark.parametrize("round_trip", [
    {"kind": "shifted_exponential", "alpha": 0.7},
    {"kind": "uniform", "low": 0.5, "high": 1.5},
    {"kind": "pareto", "shape": 3.0, "scale": 2 / 3},
])
def test_built_in_distributions_have_mean_one(round_trip):
    m = model(round_trip=round_trip, compute={"model": "linear", "seconds_per_sample": 1 / 32})
    draws = np.array([m.noise(w, t) for w in range(4) for t in range(5000)])
    tol = 0.06 if round_trip["kind"] == "pareto" else 0.03
    assert abs(draws.mean() - 1.0) < tol


def test_homogeneous_gamma_has_one_job_mean_and_the_given_variation():
    # Algorithm 11: one task mean q ~ G(1/V_task^2) per job (mean 1 over jobs), times ~ G with CV V_mach.
    spec = ClusterSpec.model_validate({"n_workers": 4, "round_trip": {"kind": "gamma"}})
    qs = [RoundTripModel(spec, seed=s)._gamma_means[0] for s in range(300)]
    assert abs(np.mean(qs) - 1.0) < 0.03
    m = model(round_trip={"kind": "gamma", "v_task": 0.1, "v_mach": 0.2})
    draws = np.array([m.noise(w, t) for w in range(4) for t in range(3000)])
    assert draws.mean() == pytest.approx(m._gamma_means[0], rel=0.02)
    assert draws.std() / draws.mean() == pytest.approx(0.2, rel=0.05)


def test_shifted_exponential_minimum_is_the_shift():
    m = model(round_trip={"kind": "shifted_exponential", "alpha": 0.7})
    assert min(m.noise(0, t) for t in range(2000)) >= 0.3


def test_heterogeneous_gamma_gives_each_worker_its_own_speed():
    m = model(round_trip={"kind": "gamma", "heterogeneous": True, "v_task": 0.1, "v_mach": 0.6})
    means = [np.mean([m.noise(w, t) for t in range(400)]) for w in range(4)]
    assert np.std(means) > 0.1  # V_mach = 0.6 spreads machine means widely


def test_slowdown_applies_only_inside_its_window_and_to_its_workers():
    m = model(round_trip={"kind": "deterministic"},
              slowdowns=[{"at": 10.0, "duration": 5.0, "factor": 5.0, "workers": [1, 2]}])
    base = m.round_trip(1, 0, 32, 0.0)
    assert m.round_trip(1, 0, 32, 12.0) == pytest.approx(5 * base)
    assert m.round_trip(0, 0, 32, 12.0) == pytest.approx(base)
    assert m.round_trip(1, 0, 32, 15.0) == pytest.approx(base)


def test_gpu_compute_is_flat_below_saturation_then_linear():
    m = model(round_trip={"kind": "deterministic"},
              compute={"model": "gpu", "launch_overhead": 0.2, "saturation_batch": 32,
                       "seconds_per_sample": 0.01, "memory_cap_batch": 256})
    assert m.base_compute_seconds(1) == m.base_compute_seconds(32) == pytest.approx(0.2)
    assert m.base_compute_seconds(132) == pytest.approx(1.2)
    assert m.memory_cap(0) == 256


def test_speed_factors_divide_compute_time():
    m = model(round_trip={"kind": "deterministic"}, speed_factors=[8, 4, 2, 1])
    times = [m.round_trip(w, 0, 32, 0.0) for w in range(4)]
    assert times == pytest.approx([0.125, 0.25, 0.5, 1.0])


def test_resources_stay_in_bounds_and_slow_workers_down():
    m = model(round_trip={"kind": "deterministic"},
              resources={"period_seconds": 1.0, "cpu_min": 0.3, "memory_min": 0.5})
    values = np.array([m.resources(w, float(t)) for w in range(4) for t in range(200)])
    assert values[:, 0].min() >= 0.3 and values.max() <= 1.0 and values[:, 1].min() >= 0.5
    assert len(set(values[:, 0].round(6))) > 50  # availability really varies over time
    assert all(m.round_trip(w, 0, 32, 3.0) >= 1.0 for w in range(4))


def test_trace_replay_and_sample(tmp_path):
    path = tmp_path / "rtt.csv"
    path.write_text("seconds\n1\n2\n3\n")
    replay = model(round_trip={"kind": "trace", "path": str(path), "column": "seconds", "mode": "replay",
                               "normalize": False}, compute={"model": "linear", "seconds_per_sample": 1 / 32})
    assert [replay.noise(w, 0) for w in range(3)] == [1.0, 2.0, 3.0]
    sample = model(round_trip={"kind": "trace", "path": str(path), "normalize": True})
    assert {round(sample.noise(0, t), 6) for t in range(50)} == {0.5, 1.0, 1.5}


def test_bad_trace_file_is_a_user_error(tmp_path):
    from autosync.core.errors import UserError

    path = tmp_path / "rtt.csv"
    path.write_text("1\nfast\n")
    with pytest.raises(UserError, match="line 2 must hold a number, but got 'fast'"):
        model(round_trip={"kind": "trace", "path": str(path)})
