"""Local-update policies: workers take H local steps on their own copy, the server folds in their changes.

The engine runs a task of H steps and sends its change u in units of a gradient (`autosync.engine.local`:
x_0 - eta (u + lambda x_0) is the worker's copy after its H steps), so the strategies here choose only how
many steps each task takes (the `local` slot) and how the server applies the changes (the `update` slot):

- Local SGD (Stich 2019, Algorithm 1; Lin et al. 2020): H local steps, then the server averages the
  workers' models, which the job's SGD applied to the mean change is (under any barrier: BSP averages all
  n, backup workers the fastest k).
- Local steps from each worker's speed (Liu et al. 2024: a worker does as many steps as its speed
  allows in the time the fastest takes for H).
- AdaComm (Wang & Joshi 2019): the period tau_l = ceil(sqrt(F(x_l) / F(x_0)) tau_0), recomputed every
  interval from the training loss.
- DiLoCo (Douillard et al. 2023, Algorithm 1): the outer step is Nesterov momentum on the averaged change.
- Asynchronous local SGD (Liu et al. 2024, the "delayed Nesterov" update): each change is applied on
  arrival; the momentum is updated only once every N changes (N = n workers), with their mean, and in
  between each change moves the model by c = 1/N of its own outer step.
- EASGD (Zhang, Choromanska and LeCun 2015, Algorithm 1 (asynchronous) and eqs. 5-6 (synchronous)): every
  worker keeps its own copy x_i; at each exchange the elastic force alpha (x_i - x~) pulls x_i toward the
  center x~ and the center toward x_i.

Departures from the papers (docs/concepts/policies.md, "Local-update policies"): the local optimizer is SGD
at the job's learning rate with its weight decay (no local momentum; DiLoCo uses AdamW inside); the job's
momentum, where the update rule is the job's SGD, acts on the averaged change (a global momentum, as in
SlowMo) rather than inside each worker.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Sequence

from autosync.policies._barriers import FastestK, OnArrival
from autosync.policies._classic import BSP
from autosync.policies._base import Arrival, LocalSteps, Policy, Preset, ServerView, Strategies, UpdateRule, \
    UpdateStats

if TYPE_CHECKING:
    import torch

    from autosync.core.job import OptimizerSpec

#: How a worker's number of local steps is chosen (`LocalSGD.steps`).
STEP_RULES = ("fixed", "speed")


def check_period(value: Any, key: str = "period") -> None:
    """A one-line error unless `value` is an integer >= 1 (the local steps of one task)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{key} must be an integer >= 1 (local steps per exchange), but got {key}={value!r}")


def check_number(value: Any, key: str, low: float, high: float, low_open: bool, high_open: bool) -> None:
    """A one-line error unless `value` is a finite number in the interval from low to high (open where said)."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) \
        and (value > low if low_open else value >= low) and (value < high if high_open else value <= high)
    if not ok:
        interval = f"{'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
        raise ValueError(f"{key} must be a finite number in {interval}, but got {key}={value!r}")


# ---------------------------------------------------------------------- the local slot: steps per task
class FixedPeriod(LocalSteps):
    """Every task is `period` local steps (local SGD's H, EASGD's tau, DiLoCo's H)."""

    def __init__(self, period: int = 8):
        self.period = period

    def reset(self, n_workers: int, batch_size: int) -> None:
        check_period(self.period)

    def steps(self, server: ServerView, worker: int) -> int:
        return self.period


class SpeedPeriod(LocalSteps):
    """Local steps from each worker's speed (Liu et al. 2024): the fastest worker takes `period`
    steps, worker i takes max(1, round(period * s_i / s_max)) with s the steps per second of its last task
    (arrival time minus start, over its steps: compute and communication). `period` before a worker's
    first task is back."""

    def __init__(self, period: int = 8):
        self.period = period

    def reset(self, n_workers: int, batch_size: int) -> None:
        check_period(self.period)
        self._speed: list[float | None] = [None] * n_workers

    def on_arrival(self, server: ServerView, arrival: Arrival) -> None:
        seconds = arrival.time - arrival.task.start
        if seconds > 0:
            self._speed[arrival.worker] = arrival.task.steps / seconds

    def steps(self, server: ServerView, worker: int) -> int:
        mine = self._speed[worker]
        known = [s for s in self._speed if s is not None]
        if mine is None or not known:
            return self.period
        return max(1, round(self.period * mine / max(known)))


class AdaCommPeriod(LocalSteps):
    """AdaComm's adaptive period (Wang & Joshi 2019): every `interval_seconds` of virtual time the period
    becomes tau_l = ceil(sqrt(F_l / F_0) tau_0), with F_0 the training loss of the first update and F_l the
    mean loss of the updates in the interval just ended (the workers' mini-batch losses at the parameters
    they received, which is the paper's F(x) at the synchronized model, estimated on the batches)."""

    def __init__(self, period: int = 8, interval_seconds: float = 20.0):
        self.period = period
        self.interval_seconds = interval_seconds

    def reset(self, n_workers: int, batch_size: int) -> None:
        check_period(self.period)
        check_number(self.interval_seconds, "interval_seconds", 0.0, math.inf, True, True)
        self._tau = self.period
        self._first_loss: float | None = None
        self._losses: list[float] = []
        self._next = self.interval_seconds

    def steps(self, server: ServerView, worker: int) -> int:
        return self._tau

    def after_update(self, server: ServerView, stats: UpdateStats) -> None:
        loss = sum(w * l for w, l in zip(stats.weights, stats.losses))
        if self._first_loss is None:
            self._first_loss = loss
        self._losses.append(loss)
        if stats.time < self._next:
            return
        self._next = (math.floor(stats.time / self.interval_seconds) + 1) * self.interval_seconds
        mean = sum(self._losses) / len(self._losses)
        self._losses = []
        if self._first_loss > 0 and math.isfinite(mean) and mean >= 0:
            self._tau = max(1, math.ceil(math.sqrt(mean / self._first_loss) * self.period))

    def trace_values(self) -> dict[str, Any]:
        return {"period": self._tau}


# ---------------------------------------------------------------------- the update slot: outer steps
class _OuterStep(UpdateRule):
    """An outer optimizer over the workers' changes, with its learning rate and momentum (checked as the
    policy is bound)."""

    def __init__(self, outer_lr: float = 0.7, outer_momentum: float = 0.9):
        self.outer_lr = outer_lr
        self.outer_momentum = outer_momentum

    def reset(self, n_workers: int, batch_size: int) -> None:
        check_outer(self.outer_lr, self.outer_momentum)

    def _change(self, params: "torch.Tensor", grad: "torch.Tensor", lr: float) -> "torch.Tensor":
        """Delta = eta (u + lambda x): a change sent in units of a gradient, in parameter units
        (`init_state` keeps the job's optimizer as self.opt)."""
        return lr * (grad + self.opt.weight_decay * params if self.opt.weight_decay else grad)


class OuterNesterov(_OuterStep):
    """DiLoCo's outer step (Douillard et al. 2023, Algorithm 1, lines 9-10): Delta = eta (u + lambda x), the
    mean change in parameter units; m <- mu m + Delta; x <- x - outer_lr (Delta + mu m) (Nesterov, as
    torch.optim.SGD with dampening 0). outer_lr = 1, mu = 0 is plain averaging."""

    def init_state(self, params: "torch.Tensor", n_workers: int, opt: "OptimizerSpec") -> dict[str, Any]:
        self.opt = opt
        return {"outer_momentum": None}

    def apply(self, params: "torch.Tensor", state: dict[str, Any], grad: "torch.Tensor", lr: float,
              arrivals: Sequence[Arrival]) -> "torch.Tensor":
        delta = self._change(params, grad, lr)
        mu = self.outer_momentum
        m = state["outer_momentum"]
        m = state["outer_momentum"] = delta.clone() if m is None else m.mul_(mu).add_(delta)
        return params - self.outer_lr * (delta + mu * m)


class DelayedNesterov(_OuterStep):
    """Asynchronous local SGD's outer step (Liu et al. 2024, the delayed Nesterov update): each change
    Delta_t = eta (u + lambda x) is added to a buffer; at every N-th (N = n workers) the momentum becomes
    m <- mu m + buffer / N and x <- x - outer_lr (Delta_t + mu m), and the buffer empties; in between,
    x <- x - outer_lr c Delta_t with c = 1/N. Under a barrier that aggregates, Delta_t is the mean change."""

    def init_state(self, params: "torch.Tensor", n_workers: int, opt: "OptimizerSpec") -> dict[str, Any]:
        self.opt = opt
        # the vectors start with the first change: a Sync-Switch schedule starts this rule at its switch
        return {"outer_momentum": None, "changes": None, "count": 0, "delay": n_workers}

    def apply(self, params: "torch.Tensor", state: dict[str, Any], grad: "torch.Tensor", lr: float,
              arrivals: Sequence[Arrival]) -> "torch.Tensor":
        delta = self._change(params, grad, lr)
        if state["changes"] is None:
            state["outer_momentum"], state["changes"] = params.new_zeros(params.shape), params.new_zeros(params.shape)
        state["changes"].add_(delta)
        state["count"] += 1
        n = state["delay"]
        if state["count"] % n:
            return params - (self.outer_lr / n) * delta
        mu = self.outer_momentum
        m = state["outer_momentum"].mul_(mu).add_(state["changes"], alpha=1.0 / n)
        state["changes"].zero_()
        return params - self.outer_lr * (delta + mu * m)


class ElasticAveraging(UpdateRule):
    """EASGD (Zhang et al. 2015): every worker computes from its own copy x_i (`params_for`); at each
    exchange its copy after the local steps, x_i' = x_i - eta (u + lambda x_i), and the center x~ (the
    server's parameters, which are evaluated) move toward each other: d = alpha (x_i' - x~); x_i <- x_i' - d;
    x~ <- x~ + d (Algorithm 1). The changes of one update all pull toward the same x~ (eqs. 5-6: the
    synchronous form, x~ <- x~ + alpha sum_i (x_i' - x~))."""

    needs_worker_gradients = True  # it reads each change (`task.gradient`): no fused pass over the workers

    def __init__(self, elastic_alpha: float = 0.1):
        self.elastic_alpha = elastic_alpha

    def reset(self, n_workers: int, batch_size: int) -> None:
        check_number(self.elastic_alpha, "elastic_alpha", 0.0, 1.0, True, False)

    def init_state(self, params: "torch.Tensor", n_workers: int, opt: "OptimizerSpec") -> dict[str, Any]:
        self.opt = opt
        return {"copies": [None] * n_workers}  # None: the worker starts from the center (its first task)

    def apply(self, params: "torch.Tensor", state: dict[str, Any], grad: "torch.Tensor", lr: float,
              arrivals: Sequence[Arrival]) -> "torch.Tensor":
        center = params.clone()
        wd = self.opt.weight_decay
        for a in arrivals:
            start, u = a.task.params, a.task.gradient
            moved = start - lr * (u + wd * start if wd else u)
            pull = self.elastic_alpha * (moved - params)
            state["copies"][a.worker] = moved - pull
            center.add_(pull)
        return center

    def params_for(self, worker: int, params: "torch.Tensor", state: dict[str, Any]) -> "torch.Tensor":
        copy = state["copies"][worker]
        return params if copy is None else copy


def check_outer(outer_lr: Any, outer_momentum: Any) -> None:
    """One-line errors for an outer learning rate that is not a finite number > 0 and a momentum not in [0, 1)."""
    check_number(outer_lr, "outer_lr", 0.0, math.inf, True, True)
    check_number(outer_momentum, "outer_momentum", 0.0, 1.0, False, True)


# ---------------------------------------------------------------------- the named policies
class LocalSGD(Policy):
    """Local SGD (Stich 2019; Lin et al. 2020): every worker takes `period` local steps, then the server
    averages the models of all n (BSP's barrier; `compose(barrier=backup, local=period)` averages the fastest
    k).

    Args:
        period: H, the local steps between two exchanges (1: BSP, bit for bit).
        steps: "fixed" (H for every worker) or "speed" (the fastest worker H, each other in proportion to
            its speed: Liu et al. 2024).
    """

    name = "local_sgd"
    paper_name = "Local-SGD"
    label_params = ("period",)
    presets = (Preset("local", "period", ("period",), fixed={"steps": "fixed"}),
               Preset("local", "speed", ("period",), fixed={"steps": "speed"}))

    def __init__(self, period: int = 8, steps: str = "fixed") -> None:
        self.period = period
        self.steps = steps

    def strategies(self, n_workers: int, batch_size: int) -> Strategies:
        if self.steps not in STEP_RULES:
            raise ValueError(f"steps must be one of {list(STEP_RULES)}, but got steps={self.steps!r}")
        local = FixedPeriod(self.period) if self.steps == "fixed" else SpeedPeriod(self.period)
        return Strategies(barrier=FastestK(k=None), local=local)

    def canonical(self, n_workers: int, optimizer: Any = None) -> Policy:
        """One step per exchange is BSP (a task of one step sends its gradient), whatever the step rule."""
        return BSP() if self.period == 1 else self


class AdaComm(Policy):
    """AdaComm (Wang & Joshi 2019): local SGD whose period starts at tau_0 = `period` and shrinks with the
    training loss, tau_l = ceil(sqrt(F_l / F_0) tau_0), recomputed every `interval_seconds`."""

    name = "adacomm"
    paper_name = "AdaComm"
    label_params = ("period",)
    presets = (Preset("local", "adacomm", ("period",)),)

    def __init__(self, period: int = 8, interval_seconds: float = 20.0) -> None:
        self.period = period
        self.interval_seconds = interval_seconds

    def strategies(self, n_workers: int, batch_size: int) -> Strategies:
        return Strategies(barrier=FastestK(k=None), local=AdaCommPeriod(self.period, self.interval_seconds))


class DiLoCo(Policy):
    """DiLoCo (Douillard et al. 2023, Algorithm 1): `period` local steps, then Nesterov momentum on the
    averaged change with `outer_lr` and `outer_momentum` (the paper's 0.7 and 0.9)."""

    name = "diloco"
    paper_name = "DiLoCo"
    label_params = ("period",)
    presets = (Preset("update", "outer_nesterov", ("period", "outer_lr", "outer_momentum"),
                      implies={"local": "period"}),)

    def __init__(self, period: int = 8, outer_lr: float = 0.7, outer_momentum: float = 0.9) -> None:
        self.period = period
        self.outer_lr = outer_lr
        self.outer_momentum = outer_momentum

    def rule(self) -> UpdateRule:
        return OuterNesterov(self.outer_lr, self.outer_momentum)

    def strategies(self, n_workers: int, batch_size: int) -> Strategies:
        return Strategies(barrier=FastestK(k=None), update=self.rule(), local=FixedPeriod(self.period))


class AsyncLocalSGD(Policy):
    """Asynchronous local SGD (Liu et al. 2024): each worker takes local steps in proportion to its speed
    (the fastest `period`), its change is applied on arrival by the delayed Nesterov outer step."""

    name = "async_local_sgd"
    paper_name = "Async-Local-SGD"
    label_params = ("period",)
    presets = (Preset("update", "delayed_nesterov", ("period", "outer_lr", "outer_momentum"),
                      implies={"barrier": "asp", "local": "speed"}),)

    def __init__(self, period: int = 8, outer_lr: float = 0.7, outer_momentum: float = 0.9) -> None:
        self.period = period
        self.outer_lr = outer_lr
        self.outer_momentum = outer_momentum

    def rule(self) -> UpdateRule:
        return DelayedNesterov(self.outer_lr, self.outer_momentum)

    def strategies(self, n_workers: int, batch_size: int) -> Strategies:
        return Strategies(barrier=OnArrival(), update=self.rule(), local=SpeedPeriod(self.period))


class EASGD(Policy):
    """Asynchronous EASGD (Zhang et al. 2015, Algorithm 1): each worker takes `period` (tau) local steps on
    its own copy, then it and the center pull toward each other with the elastic force `elastic_alpha`."""

    name = "easgd"
    paper_name = "EASGD"
    label_params = ("period",)
    presets = (Preset("update", "easgd", ("period", "elastic_alpha"), implies={"barrier": "asp", "local": "period"}),)

    def __init__(self, period: int = 8, elastic_alpha: float = 0.1) -> None:
        self.period = period
        self.elastic_alpha = elastic_alpha

    def rule(self) -> UpdateRule:
        return ElasticAveraging(self.elastic_alpha)

    def strategies(self, n_workers: int, batch_size: int) -> Strategies:
        return Strategies(barrier=OnArrival(), update=self.rule(), local=FixedPeriod(self.period))
