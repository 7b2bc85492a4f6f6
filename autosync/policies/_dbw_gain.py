"""DBW's gain estimator: the expected loss decrease of aggregating k gradients, eqs. (9)-(16).

After each iteration t (k_t gradients of w_t aggregated) the "+" estimators are computed from the
gradients themselves; averaging the last D of them gives the estimates used to choose k_{t+1}.
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


class GainEstimator:
    """Keeps the last D iterations' estimates and evaluates the gain G_{k,t} of eq. (16)."""

    def __init__(self, window: int = 5):
        if window < 1:
            raise ValueError(f"window must be >= 1, but got window={window}")
        self.window = window
        self.history: deque[IterationEstimates] = deque(maxlen=window + 1)

    def observe(self, worker_gradients: "torch.Tensor", weights: list[float], losses: list[float],
                lr: float) -> IterationEstimates:
        """Record iteration t from its k per-worker gradients (rows), aggregation weights and local losses."""
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
            previous.smoothness = _smoothness(previous, loss)
        self.history.append(current)
        return current

    def averages(self) -> tuple[float | None, float | None, float | None]:
        """(V, ||grad F||^2, L) averaged over the last D iterations that have them (eqs. 13-15)."""
        past = list(self.history)[-self.window:]
        variances = [e.variance for e in past if e.variance is not None]
        smooth = [e.smoothness for e in past if e.smoothness is not None]
        mean = lambda xs: sum(xs) / len(xs) if xs else None
        return mean(variances), mean([e.grad_norm_sq for e in past]) if past else None, mean(smooth)

    def gains(self, lrs: list[float]) -> list[float] | None:
        """G_{k,t} for k = 1..n (eq. 16), with lrs[k-1] the learning rate used when k gradients are
        aggregated; None until V, ||grad F||^2 and L all have an estimate."""
        variance, grad_norm_sq, smoothness = self.averages()
        if variance is None or grad_norm_sq is None or smoothness is None:
            return None
        L = max(smoothness, 0.0)  # a negative curvature estimate is noise; (9) assumes L >= 0
        return [(lr - L * lr * lr / 2) * grad_norm_sq - (L * lr * lr / 2) * variance / k
                for k, lr in enumerate(lrs, start=1)]

    def loss_rising(self, beta: float) -> bool:
        """F_t > beta * F_{t-1}: the condition of rule (19) that forbids decreasing k."""
        if len(self.history) < 2:
            return False
        return self.history[-1].loss > beta * self.history[-2].loss


def _smoothness(previous: IterationEstimates, loss_now: float) -> float | None:
    """L+ of eq. (12) for the previous iteration, from its estimates and the observed loss decrease."""
    observed_gain = previous.loss - loss_now  # G+_{k_{t-1}, t-1} = F_{t-1} - F_t
    variance = previous.variance if previous.variance is not None else 0.0
    denominator = previous.lr ** 2 * (previous.grad_norm_sq + variance / previous.k)
    if denominator <= 0:
        return None
    return 2 * (previous.lr * previous.grad_norm_sq - observed_gain) / denominator
