"""DANA and the asynchronous momentum methods it is compared with (Hakimi et al., DANA paper, sec. 2-4, app. A).

Every method here runs under ASP (a gradient is applied as soon as it arrives) and differs only in the
master's update rule and in the parameters each worker is sent:

- NAG-ASGD (Algorithm 8 with footnote 1): one Nesterov optimizer shared by all workers.
- Multi-ASGD (Algorithm 9): one momentum vector v^i per worker, theta <- theta - eta v^i.
- LWP (Algorithm 3): one momentum; the worker gets theta - tau eta v, tau the expected lag (eq. 9).
- DC-ASGD (Algorithm 10, eq. 17): g + lambda g * g * (theta_master - theta_worker), per-worker momentum.
- DANA-Zero (Algorithm 4, eqs. 10-11): per-worker momentum; the worker gets the look-ahead
  theta - eta gamma sum_j v^j, with the sum kept in O(d) per update (appendix A.2).
- DANA-Slim (Algorithm 6, eqs. 13-16): the worker keeps its own momentum and sends gamma v^i + g; the master
  is plain ASGD. It is DANA-Zero up to the parameter change Theta = theta - eta gamma sum_j v^j (eq. 15).
- DANA-DC (Algorithm 7): DANA-Zero's look-ahead with DC-ASGD's delay compensation.

gamma is the job's momentum. Weight decay is added to a gradient at the parameters it was computed on,
as torch.optim.SGD does. Every applied gradient's gap G = ||theta_master - theta_worker|| / sqrt(d)
(sec. 2) and lag tau (updates applied since the worker's parameters were sent) go into the trace.
"""

from __future__ import annotations

import math
from abc import abstractmethod
from typing import TYPE_CHECKING, Any, Sequence

from autosync.policies._barriers import OnArrival
from autosync.policies._base import Arrival, Policy, Preset, Strategies, UpdateRule
from autosync.policies._classic import ASP

if TYPE_CHECKING:
    import torch

    from autosync.core.job import OptimizerSpec


class AsyncMomentumRule(UpdateRule):
    """Base of the asynchronous rules: one gradient per update, gap and lag recorded.

    Subclasses implement `step(params, state, g, lr, worker, sent)` returning the new master parameters,
    and may override `params_for` to send a look-ahead.
    """

    def init_state(self, params: "torch.Tensor", n_workers: int, opt: "OptimizerSpec") -> dict[str, Any]:
        self.opt = opt
        self.gamma = opt.momentum
        self._gap = self._lag = 0.0
        return {"updates": 0, "lr": opt.lr, "n": n_workers}

    def apply(self, params: "torch.Tensor", state: dict[str, Any], grad: "torch.Tensor", lr: float,
              arrivals: Sequence[Arrival]) -> "torch.Tensor":
        if len(arrivals) != 1:
            raise ValueError(f"{type(self).__name__} applies one gradient per update, but got {len(arrivals)}")
        task = arrivals[0].task
        sent = task.params
        self._gap = float((params - sent).norm()) / math.sqrt(params.numel())
        self._lag = float(state["updates"] - task.version)
        if self.opt.weight_decay:
            grad = grad + self.opt.weight_decay * sent
        state["lr"] = lr
        new = self.step(params, state, grad, lr, task.worker, sent)
        state["updates"] += 1
        return new

    def step(self, params: "torch.Tensor", state: dict[str, Any], g: "torch.Tensor", lr: float, worker: int,
             sent: "torch.Tensor") -> "torch.Tensor":
        raise NotImplementedError

    def trace_values(self) -> dict[str, Any]:
        return {"gap": self._gap, "lag": self._lag}

    def _shared_momentum(self, state: dict[str, Any], g: "torch.Tensor") -> "torch.Tensor":
        """The one momentum vector of NAG-ASGD and LWP: v <- gamma v + g (v = g at the first gradient)."""
        v = state.get("v")
        v = state["v"] = g.clone() if v is None else v.mul_(self.gamma).add_(g)
        return v

    @staticmethod
    def _per_worker(state: dict[str, Any], key: str, worker: int, like: "torch.Tensor") -> "torch.Tensor":
        """The per-worker vector `key` of `worker` (zeros before its first gradient)."""
        vectors = state.setdefault(key, {})
        if worker not in vectors:
            vectors[worker] = like.new_zeros(like.shape)
        return vectors[worker]


def _compensated(g: "torch.Tensor", lam: float, master: "torch.Tensor", sent: "torch.Tensor") -> "torch.Tensor":
    """Delay compensation of DC-ASGD, eq. (17): g + lambda g (.) g (.) (theta_master - theta_worker)."""
    return g + lam * g * g * (master - sent)


class NesterovShared(AsyncMomentumRule):
    """NAG-ASGD (Algorithm 8): v <- gamma v + g; theta <- theta - eta (g + gamma v) (Nesterov, footnote 1)."""

    def step(self, params, state, g, lr, worker, sent):
        v = self._shared_momentum(state, g)
        return params - lr * (g + self.gamma * v)


class LinearWeightPrediction(AsyncMomentumRule):
    """LWP (Algorithm 3): shared momentum; workers get theta - tau eta v (eq. 9).

    Args:
        horizon: tau; None uses the mean lag observed so far (n - 1 before the first gradient).
    """

    def __init__(self, horizon: float | None = None):
        self.horizon = horizon

    def reset(self, n_workers: int, batch_size: int) -> None:
        if self.horizon is not None and not _non_negative_number(self.horizon):
            raise ValueError(f"horizon must be None (the mean lag) or a number >= 0, but got horizon={self.horizon!r}")

    def step(self, params, state, g, lr, worker, sent):
        v = self._shared_momentum(state, g)
        state["lag_sum"] = state.get("lag_sum", 0.0) + self._lag
        return params - lr * v

    def params_for(self, worker, params, state):
        v = state.get("v")
        if v is None:
            return params
        tau = self.horizon
        if tau is None:
            tau = state["lag_sum"] / state["updates"] if state["updates"] else state["n"] - 1
        return params - tau * state["lr"] * v


class PerWorkerMomentum(AsyncMomentumRule):
    """Multi-ASGD (Algorithm 9), DC-ASGD (Algorithm 10, dc_lambda > 0) and, with the look-ahead,
    DANA-Zero (Algorithm 4) and DANA-DC (Algorithm 7).

    Args:
        look_ahead: send theta - eta gamma sum_j v^j (eq. 11) instead of theta.
        dc_lambda: lambda of the delay compensation (eq. 17); 0 disables it.
    """

    def __init__(self, look_ahead: bool = False, dc_lambda: float = 0.0):
        self.look_ahead = look_ahead
        self.dc_lambda = dc_lambda

    def reset(self, n_workers: int, batch_size: int) -> None:
        if not _non_negative_number(self.dc_lambda):
            raise ValueError(f"dc_lambda must be a number >= 0, but got dc_lambda={self.dc_lambda!r}")

    def step(self, params, state, g, lr, worker, sent):
        if self.dc_lambda:
            g = _compensated(g, self.dc_lambda, params, sent)
        v = self._per_worker(state, "v", worker, g)
        if self.look_ahead:  # appendix A.2: v0 = sum_j v^j, updated in O(d)
            v0 = state.get("v0")
            v0 = state["v0"] = g.new_zeros(g.shape) if v0 is None else v0
            v0.sub_(v)
        v.mul_(self.gamma).add_(g)
        if self.look_ahead:
            state["v0"].add_(v)
        return params - lr * v

    def params_for(self, worker, params, state):
        v0 = state.get("v0")
        if not self.look_ahead or v0 is None:
            return params
        return params - state["lr"] * self.gamma * v0


class WorkerSideMomentum(AsyncMomentumRule):
    """DANA-Slim (Algorithm 6): worker i keeps v^i <- gamma v^i + g and sends gamma v^i + g; the master
    applies it as plain ASGD (Algorithm 2). v^i is worker state; the simulator keeps it here, by worker."""

    def step(self, params, state, g, lr, worker, sent):
        v = self._per_worker(state, "worker_v", worker, g)
        v.mul_(self.gamma).add_(g)
        return params - lr * (self.gamma * v + g)


class _AsyncPolicy(Policy):
    """An ASP barrier with one of the update rules above."""

    @abstractmethod
    def rule(self) -> UpdateRule:
        """The master's update rule (and what it sends each worker)."""

    def canonical(self, n_workers: int, optimizer: "OptimizerSpec | None" = None) -> Policy:
        """Without momentum (gamma = 0, the job's optimizer) a momentum rule keeps only what its
        `without_momentum` says, and that policy's own canonical form applies (tested bit-identical)."""
        if optimizer is None or optimizer.momentum != 0.0:
            return self
        plain = self.without_momentum(optimizer)
        return self if plain is self else plain.canonical(n_workers, optimizer)

    def without_momentum(self, optimizer: "OptimizerSpec") -> Policy:
        """The policy this one runs as at gamma = 0 (itself where the momentum is not all that sets it apart)."""
        return self

    def strategies(self, n_workers: int, batch_size: int) -> Strategies:
        return Strategies(barrier=OnArrival(), update=self.rule())


class NAGASGD(_AsyncPolicy):
    """NAG-ASGD: asynchronous SGD with one shared Nesterov momentum (DANA paper, Algorithm 8)."""

    name = "nag_asgd"
    paper_name = "NAG-ASGD"
    presets = (Preset("update", "nag_asgd", implies={"barrier": "asp"}),)

    def rule(self) -> UpdateRule:
        return NesterovShared()

    def without_momentum(self, optimizer: "OptimizerSpec") -> Policy:
        """v = g and theta - eta (g + gamma v) = theta - eta g: Multi-ASGD's step at gamma = 0."""
        return MultiASGD()


class MultiASGD(_AsyncPolicy):
    """Multi-ASGD: asynchronous SGD with one momentum vector per worker (DANA paper, Algorithm 9)."""

    name = "multi_asgd"
    paper_name = "Multi-ASGD"
    presets = (Preset("update", "multi_asgd", implies={"barrier": "asp"}),)

    def rule(self) -> UpdateRule:
        return PerWorkerMomentum()

    def without_momentum(self, optimizer: "OptimizerSpec") -> Policy:
        """theta - eta g for each gradient: ASP, where no weight decay is added (this rule adds it at the
        parameters the worker was sent, ASP's optimizer at the master's)."""
        return ASP() if optimizer.weight_decay == 0.0 else self


class LWP(_AsyncPolicy):
    """LWP: workers compute on the linearly predicted future parameters (DANA paper, Algorithm 3, eq. 9)."""

    name = "lwp"
    paper_name = "LWP"
    presets = (Preset("update", "lwp", ("horizon",), implies={"barrier": "asp"}),)

    def __init__(self, horizon: float | None = None) -> None:
        self.horizon = horizon

    def rule(self) -> UpdateRule:
        return LinearWeightPrediction(horizon=self.horizon)


class DCASGD(_AsyncPolicy):
    """DC-ASGD: delay-compensated asynchronous SGD (DANA paper, Algorithm 10, eq. 17)."""

    name = "dc_asgd"
    paper_name = "DC-ASGD"
    presets = (Preset("update", "dc_asgd", ("dc_lambda",), implies={"barrier": "asp"}),)

    def __init__(self, dc_lambda: float = 2.0) -> None:
        self.dc_lambda = dc_lambda

    def rule(self) -> UpdateRule:
        return PerWorkerMomentum(dc_lambda=self.dc_lambda)


class DANAZero(_AsyncPolicy):
    """DANA-Zero: per-worker momentum, workers get the look-ahead of eq. (11) (DANA paper, Algorithm 4)."""

    name = "dana_zero"
    paper_name = "DANA-Zero"
    presets = (Preset("update", "dana_zero", implies={"barrier": "asp"}),)

    def rule(self) -> UpdateRule:
        return PerWorkerMomentum(look_ahead=True)

    def without_momentum(self, optimizer: "OptimizerSpec") -> Policy:
        """The look-ahead theta - eta gamma sum(v) is theta: Multi-ASGD."""
        return MultiASGD()


class DANASlim(_AsyncPolicy):
    """DANA-Slim: DANA-Zero's look-ahead with worker-side momentum, plain ASGD master (Algorithm 6)."""

    name = "dana_slim"
    paper_name = "DANA-Slim"
    presets = (Preset("update", "dana_slim", implies={"barrier": "asp"}),)

    def rule(self) -> UpdateRule:
        return WorkerSideMomentum()

    def without_momentum(self, optimizer: "OptimizerSpec") -> Policy:
        """The worker sends gamma v + g = g and the master steps theta - eta g: Multi-ASGD."""
        return MultiASGD()


class DANADC(DCASGD):
    """DANA-DC: DANA-Zero's look-ahead plus DC-ASGD's delay compensation (DANA paper, Algorithm 7)."""

    name = "dana_dc"
    paper_name = "DANA-DC"
    presets = (Preset("update", "dana_dc", ("dc_lambda",), implies={"barrier": "asp"}),)

    def rule(self) -> UpdateRule:
        return PerWorkerMomentum(look_ahead=True, dc_lambda=self.dc_lambda)

    def without_momentum(self, optimizer: "OptimizerSpec") -> Policy:
        """The look-ahead is theta: DC-ASGD with the same lambda."""
        return DCASGD(dc_lambda=self.dc_lambda)


def _non_negative_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0
