"""DBW: the iteration-time estimator (17), the gain estimators (10)-(16) and rule (19)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from autosync.engine import simulate
from autosync.policies import DBW, BlindDBW
from autosync.policies.dbw._gain import GainEstimator
from autosync.policies.dbw._time import IterationTimeEstimator
from tests.conftest import small_job


def test_time_estimate_is_the_empirical_mean_when_no_constraint_binds():
    est = IterationTimeEstimator(3)
    truth = np.array([[1.0, 2.0, 3.2], [0.9, 1.9, 3.1], [0.8, 1.8, 3.0]])
    for h in range(3):
        for i in range(3):
            for noise in (-0.05, 0.05):
                est.add(h + 1, i + 1, truth[h, i] + noise)
    assert np.allclose(est.solve(), truth, atol=1e-4)


def test_time_estimate_satisfies_the_three_monotonicity_families():
    est = IterationTimeEstimator(5)
    rng = np.random.default_rng(1)
    for _ in range(40):
        h = int(rng.integers(1, 6))
        for i, t in enumerate(np.sort(rng.exponential(size=5))[::-1]):  # deliberately mis-ordered data
            est.add(h, i + 1, float(t))
    x = est.solve()
    tol = 1e-5
    assert (x[:, :-1] <= x[:, 1:] + tol).all()
    assert (x[1:, :] <= x[:-1, :] + tol).all()
    assert (np.diag(x)[:-1] <= np.diag(x)[1:] + tol).all()


def test_unsampled_pairs_borrow_from_their_neighbours():
    est = IterationTimeEstimator(4)
    for i, t in enumerate([1.0, 2.0, 3.0, 4.0]):  # only h = n sampled, as at the start of DBW
        est.add(4, i + 1, t)
    times = est.times()
    # T_k = x[k,k] >= x[n,k] (more idle workers are faster) and <= x[n,n] (diagonal order)
    assert all(t_k >= lower - 1e-4 for t_k, lower in zip(times, [1, 2, 3, 4]))
    assert times[-1] == pytest.approx(4.0, abs=1e-4) and np.all(np.diff(times) >= -1e-5)


def test_failed_solve_keeps_the_last_estimate():
    est = IterationTimeEstimator(2, solver="NO_SUCH_SOLVER")
    est.add(2, 1, 1.0)
    est.add(2, 2, 2.0)
    x = est.solve()  # no solution yet: falls back to ordered targets
    assert est.failures == 1 and x[1, 1] == pytest.approx(2.0)


def test_variance_and_gradient_norm_estimators_10_11():
    g = torch.randn(6, 20, dtype=torch.float64)
    est = GainEstimator(window=5).observe(g, [1 / 6] * 6, [1.0] * 6, lr=0.1)
    variance = float(g.var(dim=0, unbiased=True).sum())
    assert est.variance == pytest.approx(variance)
    assert est.grad_norm_sq == pytest.approx(max(float(g.mean(0).norm() ** 2) - variance / 6, 0.0))


def test_smoothness_estimate_12_is_exact_on_a_noiseless_quadratic():
    L, lr, w = 3.0, 0.1, torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)
    gain = GainEstimator(window=5)
    for _ in range(3):
        grad = L * w
        loss = float(L / 2 * w @ w)
        gain.observe(torch.stack([grad, grad]), [0.5, 0.5], [loss, loss], lr)
        w = w - lr * grad
    variance, grad_norm_sq, smoothness = gain.averages()
    assert variance == pytest.approx(0.0) and smoothness == pytest.approx(L)


def test_gains_follow_eq_16_and_rule_19_picks_n_when_all_gains_are_negative():
    gain = GainEstimator(window=2)
    g = torch.randn(4, 10, dtype=torch.float64) * 10  # very noisy gradients
    gain.observe(g, [0.25] * 4, [1.0] * 4, 0.5)
    gain.observe(g, [0.25] * 4, [2.0] * 4, 0.5)  # loss rose: L estimate is large
    variance, grad_norm_sq, L = gain.averages()
    gains = gain.gains([0.5] * 4)
    expected = [(0.5 - L * 0.25 / 2) * grad_norm_sq - L * 0.25 / 2 * variance / k for k in range(1, 5)]
    assert gains == pytest.approx(expected)
    assert gain.loss_rising(1.01)


def test_dbw_records_its_estimates_and_varies_k():
    job = small_job(cluster__n_workers=8, budget={"max_updates": 60})
    result = simulate(job, DBW())
    extras = result.trace.extras
    for key in ("k", "gains", "times", "variance", "grad_norm_sq", "smoothness"):
        assert len(extras[key]) == 60
    ks = result.trace.column("updates", "n_aggregated")
    assert ks[0] == 8 and len(set(ks)) > 1
    assert [v for _, v in extras["k"]][:-1] == ks[1:]  # the k chosen after update t is used at t+1


def test_blind_dbw_needs_no_per_worker_gradients_and_picks_k_over_t():
    job = small_job(cluster__n_workers=8, cluster__round_trip={"kind": "deterministic"},
                    cluster__speed_factors=[1, 1, 1, 1, 1, 1, 1, 0.1], budget={"max_updates": 30})
    result = simulate(job, BlindDBW())
    # one worker is 10x slower: waiting for 7 is much faster and k/T_k is maximal at k = 7
    assert result.trace.column("updates", "n_aggregated")[-10:] == [7] * 10


def test_dbw_reacts_to_half_the_workers_slowing_down():
    job = small_job(cluster__n_workers=8, cluster__round_trip={"kind": "shifted_exponential", "alpha": 0.2},
                    cluster__slowdowns=[{"at": 0.0, "factor": 5.0, "workers": [4, 5, 6, 7]}],
                    budget={"max_updates": 80})
    ks = simulate(job, BlindDBW()).trace.column("updates", "n_aggregated")
    assert np.mean(ks[-30:]) == pytest.approx(4, abs=0.6)


def test_equal_ratios_up_to_solver_noise_go_to_the_largest_k():
    """Flat gains (L <= 0) and equal round trips: T_k differing by the solver's 1e-6 must not pick k = 1."""
    barrier = DBW().strategies(4, 16).barrier
    barrier.reset(4, 16)
    barrier._t_estimates = [1.0 - 3e-6, 1.0 - 1e-6, 1.0 + 1e-6, 1.0 + 3e-6]
    assert barrier._choose([0.002] * 4, k_prev=4) == 4
    barrier._t_estimates = [0.5, 0.8, 1.0, 1.0 + 3e-6]  # real differences still decide
    assert barrier._choose([0.002] * 4, k_prev=4) == 1
    assert barrier._choose([0.001, 0.0016, 0.002, 0.002], k_prev=4) == 4


def test_dbw_waits_for_every_worker_when_round_trips_are_equal():
    """DBW paper sec. 4.3 before its slowdown: deterministic, equal round trips make k_t = n optimal."""
    job = small_job(cluster__n_workers=8, cluster__round_trip={"kind": "deterministic"}, budget={"max_updates": 40})
    ks = simulate(job, DBW()).trace.column("updates", "n_aggregated")
    assert ks == [8] * 40


# ---------------------------------------------------------------- robust DBW (the default) against the paper's


def _barrier(robust: bool, n: int = 4):
    barrier = DBW(robust=robust).strategies(n, 16).barrier
    barrier.reset(n, 16)
    return barrier


def test_every_gain_negative_keeps_k_when_robust_and_gives_n_as_printed():
    for robust, expected in ((True, 2), (False, 4)):
        barrier = _barrier(robust)
        barrier._t_estimates = [0.5, 0.7, 1.0, 3.0]
        assert barrier._choose([-0.3, -0.2, -0.1, -0.05], k_prev=2) == expected


def test_before_any_gain_estimate_robust_dbw_maximises_k_over_t_with_k_at_least_2():
    for robust, expected in ((True, 2), (False, 4)):
        barrier = _barrier(robust)
        barrier._t_estimates = [0.2, 0.3, 0.5, 4.0]  # k / T_k: 5 (k = 1 gives no variance), 6.7, 6, 1
        assert barrier._choose(None, k_prev=4) == expected


def _quadratic_then_a_drop(robust: bool) -> tuple[float | None, GainEstimator]:
    """Four steps on F = L/2 |w|^2 (L = 3, two workers' gradients +-e around the true one), then a loss
    drop far beyond the first-order term (noise in the mini-batch losses): L before the drop, and the
    estimator after it."""
    L, lr, w = 3.0, 0.1, torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)
    e = torch.tensor([0.3, 0.1, -0.2], dtype=torch.float64)
    gain = GainEstimator(window=5, robust=robust)
    for _ in range(4):
        grad = L * w
        loss = float(L / 2 * w @ w)
        gain.observe(torch.stack([grad + e, grad - e]), [0.5, 0.5], [loss, loss], lr)
        w = w - lr * grad
    before = gain.averages()[2]
    gain.observe(torch.stack([L * w + e, L * w - e]), [0.5, 0.5], [-50.0, -50.0], lr)
    return before, gain


def test_smoothness_is_pooled_over_the_window_and_held_positive():
    before, held = _quadratic_then_a_drop(robust=True)
    assert before > 0 and held.averages()[2] == before  # the last positive pooled L, not a clipped 0
    gains = held.gains([0.1] * 4)
    assert gains[0] < gains[1] < gains[2] < gains[3]  # so G_k still grows with k
    _, printed = _quadratic_then_a_drop(robust=False)
    assert printed.averages()[2] < 0  # the mean of the ratios (15)
    flat = printed.gains([0.1] * 4)
    assert max(flat) - min(flat) < 1e-12  # clipped to 0: every k the same gain, which picks k = 1


def test_the_gain_of_a_momentum_step_reduces_to_eq_16_without_momentum():
    g = torch.randn(4, 10, dtype=torch.float64, generator=torch.Generator().manual_seed(0)) * 0.3 + 1.0
    for mu in (0.0, 0.9):
        gain = GainEstimator(window=2)
        gain.observe(g, [0.25] * 4, [1.0] * 4, 0.1, momentum=mu)
        gain.observe(g * 0.9, [0.25] * 4, [0.99] * 4, 0.1, momentum=mu)
        variance, grad_norm_sq, L = gain.averages()
        a, c = 1 / (1 - mu), 1 / (1 - mu * mu)  # steady-state mean and noise of the heavy-ball step
        expected = [a * 0.1 * grad_norm_sq - L * 0.01 / 2 * (a * a * grad_norm_sq + c * variance / k)
                    for k in range(1, 5)]
        assert gain.gains([0.1] * 4) == pytest.approx(expected)
        if mu == 0.0:  # eq. (16) as printed
            assert expected == pytest.approx([(0.1 - L * 0.01 / 2) * grad_norm_sq - L * 0.01 / 2 * variance / k
                                              for k in range(1, 5)])


def test_loss_rising_compares_window_means_when_robust_and_single_losses_as_printed():
    g = torch.randn(2, 5, dtype=torch.float64)
    robust, printed = GainEstimator(window=4, robust=True), GainEstimator(window=4, robust=False)
    fired = {True: 0, False: 0}
    for t in range(16):  # mini-batch noise around a flat loss: every other loss is 5% higher
        loss = 1.05 if t % 2 else 1.0
        for gain in (robust, printed):
            gain.observe(g, [0.5, 0.5], [loss, loss], 0.1)
        if t >= 8:
            fired[True] += robust.loss_rising(1.01)
            fired[False] += printed.loss_rising(1.01)
    assert fired == {True: 0, False: 4}


# ---------------------------------------------------------------- step_growth (departs from rule 19)


def _growth_barrier(lr_rule: str, step_growth: float, n: int = 8):
    barrier = DBW(lr_rule=lr_rule, step_growth=step_growth).strategies(n, 16).barrier
    barrier.reset(n, 16)
    return barrier


def test_step_growth_bounds_how_fast_the_linear_step_grows_and_lets_it_shrink():
    from autosync.policies._barriers import lr_factor

    lrs = [0.1 * lr_factor("linear", k, 8) for k in range(1, 9)]
    barrier = _growth_barrier("linear", 2.0)
    assert barrier._grown(8, 1, lrs) == 2  # 1 -> 8 would be an 8-fold step: at most 2-fold
    assert barrier._grown(8, 3, lrs) == 6
    assert barrier._grown(5, 3, lrs) == 5
    assert barrier._grown(1, 7, lrs) == 1  # shrinking is never limited
    sqrt_lrs = [0.1 * lr_factor("sqrt", k, 8) for k in range(1, 9)]
    assert _growth_barrier("sqrt", 2.0)._grown(8, 1, sqrt_lrs) == 4  # sqrt(4) = 2


def test_step_growth_off_by_default_and_never_binding_under_the_fixed_rule():
    lrs = [0.1] * 8
    assert _growth_barrier("fixed", 2.0)._grown(8, 1, lrs) == 8
    assert DBW().step_growth == 0.0
    linear = [0.1 * k for k in range(1, 9)]
    assert _growth_barrier("linear", 0.0)._grown(8, 1, linear) == 8
    with pytest.raises(ValueError, match="step_growth"):
        _growth_barrier("linear", 0.5)


def test_step_growth_limits_the_runs_k_increases():
    job = small_job(cluster__n_workers=8, budget={"max_updates": 60})
    ks = simulate(job, DBW(lr_rule="linear", step_growth=1.5)).trace.column("updates", "n_aggregated")
    assert all(b <= max(a, int(1.5 * a)) for a, b in zip(ks, ks[1:]))



def test_a_run_that_blows_up_ends_as_diverged_before_dbw_reads_its_non_finite_gains():
    """quarry-000 at seed 100 under DBW with the `linear` rule: the loss goes 0.23, 9.7, 1e6, 1e18, inf, and
    the gain estimates (9)-(16) of that update are all NaN, where rule (19) has no k to choose (the grid
    crashed with 'max() arg is an empty sequence'). The run ends as diverged, a failure of the policy."""
    from autosync.core.family import load_family
    from autosync.data import DATA_DIR
    from autosync.policy_score import RunFailed, evaluate

    job = load_family(DATA_DIR / "baselines" / "family_quarry.yaml").jobs(1)[0]
    with pytest.raises(RunFailed, match="diverged at update") as info:
        evaluate(job, {"policy": "dbw", "params": {"window": 2, "lr_rule": "linear"}}, [job.seed + 100])
    assert info.value.diverged and info.value.spent > 0  # the race counts what it trained (`race_trials`)


def test_non_finite_gains_are_no_candidates_for_rule_19():
    """Where some gain estimates are NaN or infinite, rule (19) chooses among the finite ones; where none is
    finite and positive, it keeps k_{t-1} (robust), as when every gain is negative."""
    barrier = DBW(window=2).bind(4, 16).barrier
    barrier._t_estimates = [1.0, 1.1, 1.2, 5.0]
    assert barrier._choose([float("nan"), 0.5, float("nan"), float("inf")], k_prev=3) == 2
    assert barrier._choose([float("nan")] * 4, k_prev=3) == 3
