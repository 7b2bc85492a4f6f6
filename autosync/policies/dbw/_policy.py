"""DBW: dynamic backup workers (Xu, Neglia, Sebastianelli 2020), and its blind variant B-DBW.

After each update of w_t the server picks k_t, the number of gradients of w_t it waits for, to maximise
the estimated loss decrease per unit time, rule (19):

    k_t = max( argmax_k G_{k,t} / T_{k,t},  (k_{t-1} + 1) * 1{F_{t-1} > beta F_{t-2}, k_{t-1} < n} )

with G from eqs. (9)-(16) (`_gain`) and T from problem (17) (`_time`); k_t = n while no
estimate exists or when every gain is negative. B-DBW uses the gain G_k = k (sec. 4).

DBW(robust=True), the default, departs from the printed algorithm where it breaks off the paper's jobs
(heavy-tailed round trips, slow workers, momentum 0.9; measured with `autosync robustness`): a
momentum-aware gain (9)/(12), L pooled over the window and held positive instead of (15) clipped at 0, a
windowed loss-rising test in (19) (all in `_gain`); B-DBW's k / T_k instead of k = n while no gain
estimate exists; k_t = k_{t-1} instead of n when every gain is negative; and a window of D = 20 iterations
instead of 5. `dbw:robust=false,window=5` is the paper as printed.

`step_growth` (off by default: the paper) bounds how fast the step may grow from one iteration to the next
under a learning-rate rule that scales eta with k (`DynamicK._grown`); under lr_rule=fixed it changes nothing.
"""

from __future__ import annotations

import math
from typing import Any

from autosync.policies._barriers import FastestK
from autosync.policies._base import Arrival, Policy, Preset, ServerView, Strategies, UpdateStats
from autosync.policies.dbw._gain import GainEstimator
from autosync.policies.dbw._time import STRUCTURED, IterationTimeEstimator

RATIO_TIE = 1e-4  # relative: G_k / T_k within this of the best counts as the best (solver noise is ~1e-6)


class DynamicK(FastestK):
    """FastestK whose k is re-chosen after every update by rule (19) (or k / T_k when blind)."""

    def __init__(self, window: int = 5, beta: float = 1.01, lr_rule: str = "fixed",
                 blind: bool = False, solve_every: int = 10, solver: str = STRUCTURED, robust: bool = True,
                 step_growth: float = 0.0):
        super().__init__(k=None, lr_rule=lr_rule)
        self.step_growth = step_growth
        self.robust = robust
        self.window = window
        self.beta = beta
        self.blind = blind
        self.solve_every = solve_every
        self.solver = solver

    @property  # type: ignore[override]
    def needs_worker_gradients(self) -> bool:  # the variance (10) needs each gradient
        return not self.blind

    def reset(self, n_workers: int, batch_size: int) -> None:
        super().reset(n_workers, batch_size)
        if self.beta < 1:
            raise ValueError(f"beta must be >= 1, but got beta={self.beta}")
        if self.solve_every < 1:
            raise ValueError(f"solve_every must be >= 1, but got solve_every={self.solve_every}")
        if not (self.step_growth == 0 or self.step_growth >= 1):
            raise ValueError(f"step_growth must be 0 (no limit) or >= 1, but got step_growth={self.step_growth}")
        self.n = n_workers
        self.gain = GainEstimator(self.window, robust=self.robust)
        self.times = IterationTimeEstimator(n_workers, solver=self.solver)
        self._k = n_workers  # k_0 = n: no estimate exists yet
        self._k_of_version = {0: n_workers}  # h for samples of version v: k of the iteration that made v
        self._published = {0: 0.0}  # virtual time each version was published
        self._arrived: dict[int, int] = {}  # arrivals counted per version (the rank i)
        self._iteration = 0
        self._t_estimates: list[float] | None = None
        self.last: dict[str, Any] = {}

    def accept(self, server: ServerView, arrival: Arrival) -> bool:
        v = arrival.version
        if v in self._published:  # every arrival, late ones too, is a sample of T_{h,i} (sec. 3.2)
            rank = self._arrived.get(v, 0) + 1
            self._arrived[v] = rank
            self.times.add(self._k_of_version[v], rank, arrival.time - self._published[v])
        return super().accept(server, arrival)

    def after_update(self, server: ServerView, stats: UpdateStats) -> None:
        k_prev = self._k
        if not self.blind:
            self.gain.observe(stats.worker_gradients, stats.weights, stats.losses, stats.lr, stats.momentum)
        self._iteration += 1
        if self._t_estimates is None or self._iteration % self.solve_every == 0 or self._iteration <= self.window:
            self._t_estimates = list(self.times.times())
        base_lr = stats.lr / self.lr_scale(server, len(stats.arrivals))
        lrs = [base_lr * self.lr_scale(server, k) for k in range(1, self.n + 1)]
        gains = list(range(1, self.n + 1)) if self.blind else self.gain.gains(lrs)
        k = self._grown(self._choose(gains, k_prev), k_prev, lrs)
        self._k = k
        version = server.version
        self._k_of_version[version] = k_prev
        self._published[version] = stats.time
        for old in [v for v in self._published if v < version - 2 * self.n]:  # bounded memory
            del self._published[old], self._k_of_version[old]
            self._arrived.pop(old, None)
        self.last = {"k": k, "gains": gains, "times": self._t_estimates, "rule19_forced": self._forced}
        if not self.blind:
            variance, grad_norm_sq, smoothness = self.gain.averages()
            self.last.update(variance=variance, grad_norm_sq=grad_norm_sq, smoothness=smoothness)

    def _choose(self, gains: list[float] | None, k_prev: int) -> int:
        self._forced = False
        times = self._t_estimates
        if gains is None:
            if not self.robust:
                return self.n
            # Robust: no gain estimate exists for the first D iterations. The paper waits for all n there,
            # the slowest choice under heavy tails or slow workers (D = 20 BSP iterations can cost more than
            # the whole run at the best static k); B-DBW's k / T_k needs only the time estimates, and
            # k >= 2 gives the variance (10) its samples.
            return max(range(2, self.n + 1), key=lambda k: k / max(times[k - 1], 1e-12), default=self.n)
        if all(g < 0 or not math.isfinite(g) for g in gains):
            # Sec. 3.3: k_t = n. Robust: keep k_{t-1}. Every G_k < 0 means the lower bound (6) predicts no
            # decrease for any k, not that n is best per unit time; under heavy-tailed round trips T_n is
            # many times T_{n-1}, and the loss-rising clause of (19) still raises k if the loss really rises.
            return k_prev if self.robust else self.n
        # a gain the estimates could not give (NaN or infinite: statistics of a run blowing up) is no candidate
        ratios = [g / max(t, 1e-12) if math.isfinite(g) else -math.inf for g, t in zip(gains, times)]
        top = max(ratios)
        # Ratios equal up to the precision of the estimates are a tie, and a tie goes to the larger k (as
        # many updates per second, less noise): with flat gains (L <= 0 makes (16) independent of k) and
        # equal round trips, T_k differ only by the solver's tolerance, which must not pick k.
        best = max(i for i in range(self.n) if ratios[i] >= top - RATIO_TIE * abs(top)) + 1
        if not self.blind and k_prev < self.n and self.gain.loss_rising(self.beta):
            if k_prev + 1 > best:
                self._forced = True
            return max(best, k_prev + 1)
        return best

    def _grown(self, k: int, k_prev: int, lrs: list[float]) -> int:
        """k, or the largest k' in [k_{t-1}, k] whose learning rate is at most step_growth times k_{t-1}'s
        (step_growth = 0: k, the paper's rule (19)).

        Departs from rule (19), which lets k jump from one iteration to the next, and with it the step under
        a rule that scales eta with k: under `linear` on a job of 32 workers with momentum 0.9, DBW went from
        k = 1 to k = 26, a 26-fold step applied to a momentum buffer built at the small one; the loss went
        from 0.4 to 64 and the model never trained again (and the loss-rising clause of (19) then raises k,
        so the step, further). The gain (9) rests on the curvature L estimated (12) at
        the steps actually taken, and a step many times larger lies outside where that bound was checked;
        as a trust region grows only by a bounded factor once its model held, the step may grow by at most
        `step_growth` per iteration (Goyal et al. 2017 reach the linearly scaled rate by a gradual warm-up
        for the same reason). The step may shrink at once, and k may still reach n in log_growth(n)
        iterations. Under lr_rule=fixed every k has the same rate and the limit never binds.
        """
        if self.step_growth <= 0 or k <= k_prev:
            return k
        limit = self.step_growth * lrs[k_prev - 1] * (1 + 1e-9)
        return max(j for j in range(k_prev, k + 1) if lrs[j - 1] <= limit)

    def trace_values(self) -> dict[str, Any]:
        return self.last


class DBW(Policy):
    """Dynamic backup workers: k_t maximises estimated loss decrease per unit time (DBW rule 19).

    Args:
        window: D, iterations averaged by the estimators (13)-(15); the paper's 5 is too noisy for small k
            and momentum (on the DBW paper's own alpha = 1 job, 3 seeds, the median time over the best
            static k's was 2.05 at D = 5 and 1.14 at D = 20).
        beta: loss-increase threshold of rule (19).
        lr_rule: "fixed" (the job's eta whatever k_t is: the paper runs DBW and B-DBW with the largest
            rate of the static settings, sec. 4.1, "they dynamically increase k_t up to n when they
            detect that the loss is increasing"), "proportional" (eta * k_t / n), or, departing from the
            paper, "sqrt" and "linear" (eta * sqrt(k_t), eta * k_t: eta is one worker's rate; `LR_RULES`).
            The gain estimate G_k of (9)-(16) uses the step the rule gives at each k.
        solve_every: re-solve problem (17) every this many iterations (always during the first D).
        robust: True (default): the departures listed in the module docstring; False: estimators (13)-(16)
            and rule (19) exactly as printed.
        step_growth: 0 (default, the paper): k_t as rule (19) gives it; g >= 1: the learning rate of k_t is
            at most g times that of k_{t-1} (`DynamicK._grown`; departs from the paper; binds only under a
            rule that scales eta with k: proportional, sqrt, linear).
    """

    name = "dbw"
    paper_name = "DBW"
    presets = (Preset("barrier", "dbw", ("lr_rule", "window")),)

    def __init__(self, window: int = 20, beta: float = 1.01, lr_rule: str = "fixed",
                 solve_every: int = 10, robust: bool = True, step_growth: float = 0.0) -> None:
        self.window = window
        self.beta = beta
        self.lr_rule = lr_rule
        self.solve_every = solve_every
        self.robust = robust
        self.step_growth = step_growth

    def strategies(self, n_workers: int, batch_size: int) -> Strategies:
        barrier = DynamicK(self.window, self.beta, self.lr_rule, blind=False, solve_every=self.solve_every,
                           robust=self.robust, step_growth=self.step_growth)
        return Strategies(barrier=barrier)


class BlindDBW(Policy):
    """B-DBW: k_t maximises k / T_k, blind to the state of training (DBW paper sec. 4, after [44])."""

    name = "bdbw"
    paper_name = "B-DBW"
    presets = (Preset("barrier", "bdbw", ("lr_rule",)),)

    def __init__(self, lr_rule: str = "fixed", solve_every: int = 10) -> None:
        self.lr_rule = lr_rule
        self.solve_every = solve_every

    def strategies(self, n_workers: int, batch_size: int) -> Strategies:
        return Strategies(barrier=DynamicK(lr_rule=self.lr_rule, blind=True, solve_every=self.solve_every))
