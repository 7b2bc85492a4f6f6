"""DBW's gain estimator: the expected loss decrease of aggregating k gradients, eqs. (9)-(16).

After each iteration t (k_t gradients of w_t aggregated) the "+" estimators are computed from the
gradients themselves; averaging the last D of them gives the estimates used to choose k_{t+1}.

`robust=False` is the paper as printed. `robust=True` (the default) departs from it in three places, each
because the printed form breaks on noisy mini-batch losses or with momentum:

- Momentum (departure from (9)): (6)-(9) bound the decrease of plain SGD, w' = w - eta g. With heavy-ball
  momentum mu (torch's SGD, dampening 0: v = mu v + g, w' = w - eta v) the steady-state step, k held, has
  mean eta grad F / (1 - mu) and noise eta^2 V / (k (1 - mu^2)), so (9) becomes
      G_k = a eta ||grad F||^2 - (L eta^2 / 2) (a^2 ||grad F||^2 + c V / k),  a = 1/(1-mu), c = 1/(1-mu^2),
  and (12) is solved from the same expression. mu = 0 gives (9) and (12) exactly. With the plain-SGD
  model on a momentum run the observed decrease exceeds eta ||grad F||^2 and (12) gives L <= 0.
- Pooled smoothness (departure from (15)): L is the ratio of the window's sums of the numerators and
  denominators of (12), not the mean of the D ratios. The observed decreases F_{t-1} - F_t telescope in
  the sum, so the loss noise enters once rather than D times, and no single small denominator dominates.
  A pooled L <= 0 (the loss fell faster than the first-order term predicts: noise, since (6) is a lower
  bound) keeps the last positive L instead of being clipped to 0, which made (16) flat in k.
- Loss-rising test of rule (19) (`loss_rising`): the mean loss of the last D iterations against the mean
  of the D before, not two single mini-batch losses, whose noise at small k is far above beta - 1 = 1%.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


@dataclass
class IterationEstimates:
    """The '+' estimates of one iteration (eqs. 10-12) and the values they were computed from."""

    variance: float | None  # V(g_i)+ (10); None when k = 1
    grad_norm_sq: float  # ||grad F(w)||^2 + (11)
    loss: float  # F_t hat: mean local loss of the aggregated gradients
    k: int
    lr: float
    smoothness: float | None = None  # L+ (12), known one iteration later
    smoothness_num: float | None = None  # numerator of (12): 2 (a eta ||grad F||^2 - (F_t - F_{t+1}))
    smoothness_den: float | None = None  # denominator of (12): eta^2 (a^2 ||grad F||^2 + c V / k)


class GainEstimator:
    """Keeps the last D iterations' estimates and evaluates the gain G_{k,t} of eq. (16)."""

    def __init__(self, window: int = 5, robust: bool = True):
        if window < 1:
            raise ValueError(f"window must be >= 1, but got window={window}")
        self.window = window
        self.robust = robust
        self.momentum = 0.0  # mu of the server's heavy-ball update at the last iteration observed
        self.history: deque[IterationEstimates] = deque(maxlen=2 * window + 1)  # 2D: loss_rising (robust)
        self._held_smoothness: float | None = None  # last positive pooled L (robust)

    def _step_factors(self) -> tuple[float, float]:
        """(a, c): mean and noise amplification of the steady-state momentum step (1, 1 for plain SGD)."""
        mu = self.momentum if self.robust else 0.0
        return 1.0 / (1.0 - mu), 1.0 / (1.0 - mu * mu)

    def observe(self, worker_gradients: "torch.Tensor", weights: list[float], losses: list[float],
                lr: float, momentum: float = 0.0) -> IterationEstimates:
        """Record iteration t from its k per-worker gradients (rows), aggregation weights, local losses, the
        learning rate and the momentum coefficient of the update that applied them."""
        self.momentum = momentum
        g = worker_gradients.double()
        k = g.shape[0]
        w = g.new_tensor(weights)
        mean = w @ g
        mean_sq = float(mean @ mean)  # E[||g_t||^2]+ = ||g_t||^2
        variance = None
        if k > 1:  # (10): unbiased sum of per-coordinate variances
            variance = float(((g - g.mean(0)) ** 2).sum() / (k - 1))
        # (11) needs V at this iteration; (10) is undefined for k = 1, so use the window's average (13)
        # there rather than 0, which would count all the gradient noise as signal.
        v_for_norm = variance if variance is not None else (self.averages()[0] or 0.0)
        grad_norm_sq = max(mean_sq - v_for_norm / k, 0.0)  # (11)
        loss = float(sum(wi * li for wi, li in zip(weights, losses)))
        current = IterationEstimates(variance, grad_norm_sq, loss, k, lr)
        if self.history:
            previous = self.history[-1]
            a, c = self._step_factors()
            v_k1 = self.averages()[0] if self.robust else None  # for k = 1, where (10) is undefined
            previous.smoothness_num, previous.smoothness_den = _smoothness_terms(previous, loss, a, c, v_k1)
            if previous.smoothness_den is not None:
                previous.smoothness = previous.smoothness_num / previous.smoothness_den
        self.history.append(current)
        if self.robust:
            pooled = self._pooled_smoothness()
            if pooled is not None and pooled > 0:
                self._held_smoothness = pooled
        return current

    def _pooled_smoothness(self) -> float | None:
        past = [e for e in list(self.history)[-self.window:] if e.smoothness_den is not None]
        if not past:
            return None
        return sum(e.smoothness_num for e in past) / sum(e.smoothness_den for e in past)

    def averages(self) -> tuple[float | None, float | None, float | None]:
        """(V, ||grad F||^2, L) over the last D iterations that have them (eqs. 13-15; L pooled and
        held positive when robust)."""
        past = list(self.history)[-self.window:]
        variances = [e.variance for e in past if e.variance is not None]
        mean = lambda xs: sum(xs) / len(xs) if xs else None
        if self.robust:
            smoothness = self._held_smoothness
        else:
            smoothness = mean([e.smoothness for e in past if e.smoothness is not None])
        return mean(variances), mean([e.grad_norm_sq for e in past]) if past else None, smoothness

    def gains(self, lrs: list[float]) -> list[float] | None:
        """G_{k,t} for k = 1..n (eq. 16, with the momentum factors a, c when robust), with lrs[k-1] the
        learning rate used when k gradients are aggregated; None until V, ||grad F||^2 and L all have an
        estimate."""
        variance, grad_norm_sq, smoothness = self.averages()
        if variance is None or grad_norm_sq is None or smoothness is None:
            return None
        L = max(smoothness, 0.0)  # a negative curvature estimate is noise; (9) assumes L >= 0
        a, c = self._step_factors()
        return [a * lr * grad_norm_sq - (L * lr * lr / 2) * (a * a * grad_norm_sq + c * variance / k)
                for k, lr in enumerate(lrs, start=1)]

    def loss_rising(self, beta: float) -> bool:
        """The condition of rule (19) that forbids decreasing k: F_t > beta * F_{t-1} (paper), or, when
        robust and 2D iterations are known, mean(F over the last D) > beta * mean(F over the D before)."""
        h = list(self.history)
        if self.robust and len(h) >= 2 * self.window:
            d = self.window
            recent = sum(e.loss for e in h[-d:]) / d
            before = sum(e.loss for e in h[-2 * d:-d]) / d
            return recent > beta * before
        if len(h) < 2:
            return False
        return h[-1].loss > beta * h[-2].loss


def _smoothness_terms(previous: IterationEstimates, loss_now: float, a: float = 1.0, c: float = 1.0,
                      variance_k1: float | None = None) -> tuple[float | None, float | None]:
    """Numerator and denominator of L+ (eq. 12) for the previous iteration, from its estimates and the
    observed loss decrease; a = c = 1 is the paper's plain-SGD form. variance_k1 stands in for V when
    the previous iteration had k = 1 (0 when None)."""
    observed_gain = previous.loss - loss_now  # G+_{k_{t-1}, t-1} = F_{t-1} - F_t
    variance = previous.variance if previous.variance is not None else (variance_k1 or 0.0)
    denominator = previous.lr ** 2 * (a * a * previous.grad_norm_sq + c * variance / previous.k)
    if denominator <= 0:
        return None, None
    return 2 * (a * previous.lr * previous.grad_norm_sq - observed_gain), denominator
