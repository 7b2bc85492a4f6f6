"""LB-BSP: semi-dynamic load balancing of per-worker batch sizes at every BSP barrier (Chen et al., SoCC 2020).

- Weighted gradient aggregation, eq. (7): each worker's gradient weighs |B_i| / sum_j |B_j|, so the update
  is the gradient of the union batch whatever the split.
- GPU clusters, Algorithm 2 (`IterativeBalancer`): after each iteration the leader (fastest worker whose
  memory stays <= 95% full) takes Delta samples from the straggler (slowest) when it finished first in each
  of the last D iterations; a fast-approach phase (Delta = 5, D = 5) becomes a fine-tune phase
  (Delta = 1, D = 20) on oscillation, i.e. when a former leader is now the straggler or vice versa (sec.
  3.3.2). The total batch n * B never changes.
- CPU clusters, Algorithm 1 (`ProportionalBalancer`): batch sizes proportional to each worker's predicted
  sample-processing speed (last value, EMA or NARX, `_speed_predictors`), rounded to integers with the
  same total.
- Under another barrier (a composition, `autosync.policies.Composed`) both algorithms re-balance once every
  worker has finished a task since the last time (`WorkerRounds`), which under BSP is every barrier.
"""

from __future__ import annotations

import math
import warnings
from typing import Any, Sequence

import numpy as np

from autosync.policies._barriers import FastestK, rule_as_run
from autosync.policies._base import (
    Aggregation, Arrival, Batching, Policy, Preset, ServerView, Strategies, UpdateStats,
)
from autosync.policies._classic import BSP
from autosync.policies._speed_predictors import EMA, NARX, LastValue

MODES = ("auto", "gpu", "cpu")
PREDICTORS = ("last", "ema", "narx")


class BatchWeighted(Aggregation):
    """LB-BSP eq. (7): g = sum_i |B_i| g_i / sum_j |B_j|."""

    def weights(self, arrivals: Sequence[Arrival]) -> list[float]:
        total = sum(a.task.batch_size for a in arrivals)
        return [a.task.batch_size / total for a in arrivals]


class WorkerRounds:
    """Each worker's latest task time and batch size, taken a round at a time.

    A round is complete once every worker has finished a task started since the last round was taken
    (a task started before it ran on the batch sizes of before, and is not counted). Under BSP that is one
    iteration (every worker's gradient joins each update), so Algorithms 1-2 re-balance at every barrier
    as the paper has it. Under a barrier that discards gradients (backup, DBW: the stragglers' pushes still
    arrive, and are timed) or applies them one at a time (SSP, ASP) a round spans the updates it takes the
    slowest worker to finish, and each worker's newest time counts.
    """

    def __init__(self, n_workers: int):
        self.n = n_workers
        self.times: list[float | None] = [None] * n_workers
        self.sizes = [0] * n_workers
        self.since = 0  # the server version of the last round taken: older tasks ran on older sizes

    def observe(self, arrival: Arrival) -> None:
        if arrival.version < self.since:
            return
        self.times[arrival.worker] = arrival.time - arrival.task.start
        self.sizes[arrival.worker] = arrival.task.batch_size

    def take(self, server: ServerView) -> tuple[list[float], list[int]] | None:
        """(time, batch size) of every worker's newest task when the round is complete, else None."""
        if any(t is None for t in self.times):
            return None
        times, sizes = self.times, list(self.sizes)
        self.times = [None] * self.n
        self.since = server.version  # the tasks that start now run on the sizes decided now
        return times, sizes  # type: ignore[return-value]


def proportional_split(weights: Sequence[float], total: int, caps: Sequence[int | None] | None = None) -> list[int]:
    """Integers proportional to `weights`, each >= 1, summing to `total` (largest remainder; Alg. 1 line 6);
    with `caps`, none above its worker's cap (None: no cap): a worker whose share passes its cap gets the
    cap, and the rest is split again among the others (water-filling), so a fast worker's memory bounds its
    batch as Algorithm 2's threshold does. Where the caps hold less than `total`, each worker gets its cap."""
    if caps is not None and any(cap is not None for cap in caps):
        return _capped_split(list(weights), total, list(caps))
    return _split(weights, total)


def _capped_split(weights: list[float], total: int, caps: list[int | None]) -> list[int]:
    """`proportional_split` under `caps`: the workers over their cap are pinned to it, one round at a time."""
    sizes: list[int | None] = [None] * len(weights)
    free, left = list(range(len(weights))), total
    while free:
        split = _split([weights[w] for w in free], left) if left >= len(free) else [1] * len(free)
        over = [w for w, size in zip(free, split) if caps[w] is not None and size > caps[w]]
        if not over:
            for w, size in zip(free, split):
                sizes[w] = size
            break
        for w in over:
            sizes[w], left = caps[w], left - caps[w]
            free.remove(w)
    return [int(size) for size in sizes]


def _split(weights: Sequence[float], total: int) -> list[int]:
    """Integers proportional to `weights`, each >= 1, summing to `total` (largest remainder)."""
    n = len(weights)
    w = np.maximum(np.asarray(weights, dtype=float), 0.0)
    w = np.full(n, 1.0 / n) if w.sum() <= 0 or not np.isfinite(w).all() else w / w.sum()
    spare = total - n  # one sample each is reserved: no worker is starved to zero
    raw = w * spare
    sizes = np.floor(raw).astype(int)
    remainder = spare - sizes.sum()
    order = np.argsort(-(raw - sizes), kind="stable")
    sizes[order[:remainder]] += 1
    return [int(s) + 1 for s in sizes]


class IterativeBalancer(Batching):
    """LB-BSP Algorithm 2 (GPU clusters): move Delta samples from the straggler to the leader."""

    def __init__(self, delta: int = 5, window: int = 5, fine_delta: int = 1, fine_window: int = 20,
                 memory_threshold: float = 0.95):
        self.delta = delta
        self.window = window
        self.fine_delta = fine_delta
        self.fine_window = fine_window
        self.memory_threshold = memory_threshold

    def validate(self) -> None:
        """Raise ValueError naming the first parameter out of its range."""
        for key in ("delta", "window", "fine_delta", "fine_window"):
            if getattr(self, key) < 1:
                raise ValueError(f"{key} must be >= 1, but got {key}={getattr(self, key)}")
        if not 0 < self.memory_threshold <= 1:
            raise ValueError(f"memory_threshold must be in (0, 1], but got {self.memory_threshold}")

    def reset(self, n_workers: int, batch_size: int) -> None:
        self.validate()
        self.n = n_workers
        self.sizes = [batch_size] * n_workers
        self.history: list[list[float]] = []
        self.fine = False
        self._delta, self._window = self.delta, self.window
        self.former_leaders: set[int] = set()
        self.former_stragglers: set[int] = set()
        self.warned = False
        self.rounds = WorkerRounds(n_workers)

    def batch_size(self, server: ServerView, worker: int) -> int:
        return self.sizes[worker]

    def on_arrival(self, server: ServerView, arrival: Arrival) -> None:
        self.rounds.observe(arrival)

    def after_update(self, server: ServerView, stats: UpdateStats) -> None:
        round_ = self.rounds.take(server)
        if round_ is None:
            return
        times = round_[0]
        self.history.append(times)
        del self.history[:-max(self.window, self.fine_window)]  # only the last window is ever read
        caps = server.memory_caps
        delta = self._delta
        fits = [w for w in range(self.n)
                if caps[w] is None or self.sizes[w] + delta <= self.memory_threshold * caps[w]]
        if not fits:
            return
        leader = min(fits, key=lambda w: times[w])
        straggler = max(range(self.n), key=lambda w: times[w])
        if leader == straggler:
            return
        if leader in self.former_stragglers or straggler in self.former_leaders:
            if not self.fine:  # oscillation around the equilibrium: fine-tune
                self.fine = True
                self._delta, self._window = self.fine_delta, self.fine_window
                delta = self._delta
        self.former_leaders.add(leader)
        self.former_stragglers.add(straggler)
        if self.sizes[straggler] <= delta:
            if not self.warned:
                warnings.warn(f"LB-BSP: worker {straggler}'s batch would fall to {delta} or below; "
                              "training without that worker would be faster", stacklevel=2)
                self.warned = True
            return
        recent = self.history[-self._window:]
        if len(recent) == self._window and all(h[leader] < h[straggler] for h in recent):
            self.sizes[leader] += delta
            self.sizes[straggler] -= delta

    def trace_values(self) -> dict[str, Any]:
        return {"lb_fine_tune": int(self.fine), "lb_warning": int(self.warned)}


class ProportionalBalancer(Batching):
    """LB-BSP Algorithm 1 (CPU clusters): x_i = v_i / sum_j v_j * X with predicted speeds v_i.

    `predictor` sets the batch sizes. The two cheap predictors (last value, EMA) always run beside it so
    their prediction RMSE can be compared with NARX's (Fig. 10); NARX, whose online training is the
    expensive part, runs only when it is the chosen one.
    """

    def __init__(self, predictor: str = "narx", warmup: int = 50, ema_alpha: float = 0.2, hidden: int = 8):
        self.predictor = predictor
        self.warmup = warmup
        self.ema_alpha = ema_alpha
        self.hidden = hidden

    def validate(self) -> None:
        """Raise ValueError naming the first parameter out of its range."""
        if self.predictor not in PREDICTORS:
            raise ValueError(f"predictor must be one of {list(PREDICTORS)}, but got predictor={self.predictor!r}")
        if self.warmup < 3:
            raise ValueError(f"warmup must be >= 3, but got warmup={self.warmup}")
        if not 0 < self.ema_alpha <= 1:
            raise ValueError(f"ema_alpha must be in (0, 1], but got ema_alpha={self.ema_alpha}")
        if self.hidden < 1:
            raise ValueError(f"hidden must be >= 1, but got hidden={self.hidden}")

    def reset(self, n_workers: int, batch_size: int) -> None:
        self.validate()
        self.n = n_workers
        self.total = n_workers * batch_size
        self.sizes = [batch_size] * n_workers
        self.models = {"last": LastValue(n_workers), "ema": EMA(n_workers, self.ema_alpha)}
        if self.predictor == "narx":
            self.models["narx"] = NARX(n_workers, warmup=self.warmup, hidden=self.hidden, ema_alpha=self.ema_alpha)
        self.predictions: dict[str, np.ndarray | None] = {name: None for name in self.models}
        self.squared_error = {name: 0.0 for name in self.models}
        self.scored = 0
        self.iterations = 0
        self._resources_before: tuple[np.ndarray, np.ndarray] | None = None
        self.rounds = WorkerRounds(n_workers)

    def batch_size(self, server: ServerView, worker: int) -> int:
        return self.sizes[worker]

    def on_arrival(self, server: ServerView, arrival: Arrival) -> None:
        self.rounds.observe(arrival)

    def after_update(self, server: ServerView, stats: UpdateStats) -> None:
        round_ = self.rounds.take(server)
        if round_ is None:
            return
        times, sizes = round_
        self.iterations += 1
        speeds = np.array(sizes, dtype=float) / np.maximum(times, 1e-12)  # Alg. 1 line 2
        resources = np.array([server.resources(w) for w in range(self.n)])
        cpu, memory = resources[:, 0], resources[:, 1]
        if self.iterations > self.warmup:  # score every predictor on the same iterations
            for name, predicted in self.predictions.items():
                if predicted is not None:
                    self.squared_error[name] += float(np.mean((predicted - speeds) ** 2))
            self.scored += 1
        ran_with = self._resources_before if self._resources_before is not None else (cpu, memory)
        for name, model in self.models.items():  # the speeds came from the resources the iteration started with
            model.observe(speeds, *ran_with)
            self.predictions[name] = model.predict(cpu, memory)
        self._resources_before = (cpu, memory)
        chosen = self.predictions[self.predictor]
        if chosen is not None:
            self.sizes = proportional_split(chosen, self.total, server.memory_caps)  # Alg. 1 lines 3-6

    def rmse(self) -> dict[str, float | None]:
        """Root-mean-square prediction error of each predictor after the warm-up (samples per second)."""
        return {name: math.sqrt(e / self.scored) if self.scored else None for name, e in self.squared_error.items()}

    def trace_values(self) -> dict[str, Any]:
        return {f"rmse_{name}": value for name, value in self.rmse().items()}


class LBBSP(Policy):
    """LB-BSP: BSP with per-worker batch sizes re-balanced at every barrier, gradients weighted by batch size.

    Args:
        mode: "gpu" (Algorithm 2, iterative), "cpu" (Algorithm 1, speed prediction), or "auto" (the
            default): gpu where the job's compute model is gpu, cpu where it is linear.
        delta, window: Algorithm 2's fast-approach step size and observation window.
        fine_delta, fine_window: the same in the fine-tune phase.
        memory_threshold: a leader's memory use must stay at or below this fraction of its cap.
        predictor: Algorithm 1's speed predictor: "last", "ema" or "narx".
        warmup: iterations before NARX predicts (EMA until then).
        ema_alpha: weight of the newest speed in the EMA.
        hidden: NARX hidden-layer width.
        lr_rule: the learning rate for the n workers' batches aggregated (`LR_RULES`): "fixed" (the
            paper's: the job's eta) or, departing from it, "sqrt" and "linear" (eta * sqrt(n), eta * n:
            eta is one worker's rate); "proportional" is eta too, all n workers being aggregated.
    """

    name = "lbbsp"
    paper_name = "LB-BSP"
    presets = (Preset("batch", "lbbsp", ("mode",)),)
    standalone_params = ("lr_rule",)

    def __init__(self, mode: str = "auto", delta: int = 5, window: int = 5, fine_delta: int = 1,
                 fine_window: int = 20, memory_threshold: float = 0.95, predictor: str = "narx",
                 warmup: int = 50, ema_alpha: float = 0.2, hidden: int = 8, lr_rule: str = "fixed") -> None:
        self.mode = mode
        self.delta = delta
        self.window = window
        self.fine_delta = fine_delta
        self.fine_window = fine_window
        self.memory_threshold = memory_threshold
        self.predictor = predictor
        self.warmup = warmup
        self.ema_alpha = ema_alpha
        self.hidden = hidden
        self.lr_rule = lr_rule

    def strategies(self, n_workers: int, batch_size: int) -> Strategies:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {list(MODES)}, but got mode={self.mode!r}")
        iterative = IterativeBalancer(self.delta, self.window, self.fine_delta, self.fine_window,
                                      self.memory_threshold)
        proportional = ProportionalBalancer(self.predictor, self.warmup, self.ema_alpha, self.hidden)
        for balancer in (iterative, proportional):  # a bad parameter of the other mode is refused too
            balancer.validate()
        batching: Batching = {"gpu": iterative, "cpu": proportional}.get(self.mode) \
            or ModeByCompute(iterative, proportional)
        return Strategies(barrier=FastestK(k=None, lr_rule=self.lr_rule), aggregation=BatchWeighted(),
                          batching=batching)

    def canonical(self, n_workers: int, optimizer: Any = None) -> Policy:
        """Every update aggregates all n workers, so the rule runs as at k = n (`rule_as_run`: "proportional",
        eta * n / n, is "fixed")."""
        rule = rule_as_run(self.lr_rule, n_workers, n_workers)
        return self if rule == self.lr_rule else type(self)(**{**self.params(), "lr_rule": rule})


class ModeByCompute(Batching):
    """LB-BSP's `mode=auto`: Algorithm 2 where compute time is flat below saturation (the GPU model of
    sec. 3.3.1), Algorithm 1 where it grows with the batch (the CPU model of sec. 3.2), read from the
    cluster at the first batch-size decision."""

    def __init__(self, iterative: IterativeBalancer, proportional: ProportionalBalancer):
        self.iterative = iterative
        self.proportional = proportional

    def reset(self, n_workers: int, batch_size: int) -> None:
        self.args = (n_workers, batch_size)
        self.chosen: Batching | None = None

    def _delegate(self, server: ServerView) -> Batching:
        if self.chosen is None:
            self.chosen = self.iterative if server.compute_model == "gpu" else self.proportional
            self.chosen.reset(*self.args)
        return self.chosen

    def batch_size(self, server: ServerView, worker: int) -> int:
        return self._delegate(server).batch_size(server, worker)

    def on_arrival(self, server: ServerView, arrival: Arrival) -> None:
        self._delegate(server).on_arrival(server, arrival)

    def after_update(self, server: ServerView, stats: UpdateStats) -> None:
        self._delegate(server).after_update(server, stats)

    def trace_values(self) -> dict[str, Any]:
        return self.chosen.trace_values() if self.chosen is not None else {}


class FixedSplit(Batching):
    """Per-worker batch sizes fixed for the whole run: `fractions` of the total n * B."""

    def __init__(self, fractions: list[float] | None = None):
        self.fractions = fractions

    def reset(self, n_workers: int, batch_size: int) -> None:
        fractions = self.fractions if self.fractions is not None else [1.0] * n_workers
        if not isinstance(fractions, (list, tuple)) or len(fractions) != n_workers or any(not isinstance(f, (int, float)) or f < 0 for f in fractions):
            raise ValueError(f"fractions must be {n_workers} non-negative numbers (one per worker), "
                             f"but got fractions={self.fractions!r}")
        self.sizes = proportional_split(fractions, n_workers * batch_size)

    def batch_size(self, server: ServerView, worker: int) -> int:
        return self.sizes[worker]


class StaticSplit(Policy):
    """BSP with a static per-worker split of the total batch n * B, gradients weighted by batch size (eq. 7).

    The offline counterpart of LB-BSP: `autosync tune --space batch_split` searches the fractions.

    Args:
        fractions: relative share of each worker (normalised; None: equal shares, i.e. BSP).
    """

    name = "split"
    paper_name = "Static-Split"

    @classmethod
    def search_baselines(cls, n_workers: int) -> list[dict[str, Any]]:
        return [{"fractions": [1.0 / n_workers] * n_workers}]  # BSP's form

    def __init__(self, fractions: list[float] | None = None) -> None:
        self.fractions = fractions

    def strategies(self, n_workers: int, batch_size: int) -> Strategies:
        return Strategies(barrier=FastestK(k=None), aggregation=BatchWeighted(), batching=FixedSplit(self.fractions))

    def canonical(self, n_workers: int, optimizer: Any = None) -> Policy:
        """Equal shares are BSP's batches, and weighting equal batches is BSP's mean."""
        equal = self.fractions is None or (len(self.fractions) == n_workers and len(set(self.fractions)) == 1)
        return BSP() if equal else self
