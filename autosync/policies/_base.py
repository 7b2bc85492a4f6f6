"""The policy interface: a policy is a composition of small strategies, each with one job.

- Barrier: which arriving gradients are used and when the server updates (BSP, backup k, ASP, SSP...).
- LocalSteps: how many local SGD steps a worker's next task takes on its own copy (1: one gradient).
- Aggregation: how the gradients of one update combine (mean, or weighted by batch size).
- UpdateRule: how the server applies the aggregate and which parameters it sends each worker.
- Batching: the batch size of each worker's next task.
- Schedule: phase changes during training (hyper-parameter or barrier changes mid-run).

Every strategy has a do-nothing default except the barrier. Strategies see the server through the
read-only `ServerView` protocol and never know whether the clock is virtual or real.
"""

from __future__ import annotations

import copy
import functools
import inspect
import json
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, Sequence

if TYPE_CHECKING:
    import torch

    from autosync.core.job import OptimizerSpec


@dataclass
class Task:
    """One gradient computation (or `steps` local steps): `worker`'s task starting at its `index`-th step,
    on parameters of `version`.

    A worker's indices count its steps: a task of H local steps takes indices index .. index + H - 1 (each
    step's mini-batch and compute-time draw), so with one step per task `index` counts the worker's tasks.
    A task of several steps sends its change (`autosync.engine.local`) where one step sends its gradient.
    """

    worker: int
    index: int
    version: int
    batch_size: int
    start: float
    params: Any = field(default=None, repr=False)  # the tensor the worker received
    gradient: Any = field(default=None, repr=False)  # filled lazily by the driver
    loss: float | None = None  # the worker's local mini-batch loss, filled with the gradient
    buffers: Any = field(default=None, repr=False)  # the server's model buffers it received (None: the model has none)
    buffer_delta: Any = field(default=None, repr=False)  # how its forward pass changed them, filled with the gradient
    steps: int = 1  # local SGD steps on the worker's own copy before it sends (1: it sends its gradient)
    local_lr: float = 0.0  # the learning rate of its local steps (the job's at dispatch; unused for one step)


@dataclass
class Arrival:
    """A gradient reaching the server at virtual time `time`."""

    task: Task
    time: float

    @property
    def worker(self) -> int:
        return self.task.worker

    @property
    def version(self) -> int:
        return self.task.version


class ServerView(Protocol):
    """What strategies may read of the server's state."""

    n_workers: int
    version: int  # number of updates applied so far
    buffer: list[Arrival]  # accepted gradients waiting for the next update
    last_version: list[int]  # version of each worker's most recent task (-1 before the first)
    applied: list[int]  # gradients applied per worker (the SSP clock)
    time: float  # virtual time of the event being processed
    memory_caps: list[int | None]  # largest batch each worker's memory holds (None: no limit known)
    compute_model: str  # the cluster's compute-time model: "linear" (CPU-like) or "gpu" (flat, then linear)

    def resources(self, worker: int) -> tuple[float, float]:
        """(CPU, memory) availability of `worker` now, each in (0, 1] (LB-BSP's driving resources)."""
        ...


@dataclass
class UpdateStats:
    """What the engine tells strategies after it applied an update."""

    arrivals: list[Arrival]
    weights: list[float]
    # Both valid during the update's hooks only: the engine reuses their memory (a driver's gradient row,
    # the stacked rows' buffer) for the next update, so a strategy copies what it keeps.
    aggregate: Any  # flat aggregate gradient (torch tensor)
    worker_gradients: Any | None  # [k, d] per-worker gradients when a strategy asked for them
    losses: list[float]  # local losses of the aggregated gradients
    lr: float
    time: float
    momentum: float = 0.0  # heavy-ball coefficient in force: the job's unless a schedule changed it


class Strategy:
    """Stores its constructor's keyword arguments unchanged; they are its plain-data parameters."""

    def params(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in _init_parameters(type(self))}

    def reset(self, n_workers: int, batch_size: int) -> None:
        """Called once at the start of a run; validates parameters against the job."""

    #: True when the strategy needs each worker's gradient separately (not only their aggregate).
    needs_worker_gradients: ClassVar[bool] = False

    def trace_values(self) -> dict[str, Any]:
        """Estimates to record in the run trace after each update (what the papers plot)."""
        return {}


class Barrier(Strategy, ABC):
    """Decides which arriving gradients the server accepts and when it updates."""

    #: True when every gradient is eventually applied: the driver may compute gradients early, batched.
    always_applies: ClassVar[bool] = False
    #: True when `may_start(server, w)` can change only with an update or with w's own arrival (it reads
    #: server.version, w's own counters and state the strategies change in their update hooks): between
    #: updates the server then asks about the arriving worker alone, not all n (which made BSP's update
    #: cost grow as n^2: 13 million calls for 100 updates at n = 512).
    starts_change_only_at_updates: ClassVar[bool] = False
    #: True when a gradient computed on parameters older than the newest version is always discarded
    #: (`accept` is False for it whatever happens next): once an update is applied, the server gives up on
    #: the tasks still computing on older parameters, and worker processes that share several workers
    #: skip those they have not started (push & wait, DBW paper sec. 2, without the wasted computation).
    discards_stale: ClassVar[bool] = False

    @abstractmethod
    def accept(self, server: ServerView, arrival: Arrival) -> bool:
        """Keep this gradient for an update (True) or discard it (False)."""

    @abstractmethod
    def ready(self, server: ServerView) -> list[Arrival] | None:
        """The buffered gradients to aggregate now, or None to keep waiting."""

    @abstractmethod
    def may_start(self, server: ServerView, worker: int) -> bool:
        """Whether an idle worker starts a new task now on the newest parameters."""

    def lr_scale(self, server: ServerView, n_aggregated: int) -> float:
        """Multiplier of the learning rate for an update of `n_aggregated` gradients."""
        return 1.0

    def group_lr_scale(self, server: ServerView, group: Sequence[Arrival]) -> float:
        """Multiplier of the learning rate for the update that aggregates `group` now (server.version is
        the version it makes new); `lr_scale` unless the barrier reads more than the group's size."""
        return self.lr_scale(server, len(group))

    def target_count(self, server: ServerView) -> int | None:
        """How many gradients the current iteration waits for (k_t), for the trace."""
        return None

    def after_update(self, server: ServerView, stats: UpdateStats) -> None:
        """Hook after each update (DBW picks k_t here)."""


@dataclass
class Progress:
    """How far training is, for schedules: epochs done and the fraction of the job's budget spent.

    `fraction` is measured in epochs when the budget has max_epochs (samples processed, the
    Sync-Switch paper's "workload"), else in virtual seconds, else in updates.
    """

    epoch: float
    fraction: float
    updates: int
    time: float


class Aggregation(Strategy):
    """Weights of the gradients combined in one update: the plain mean by default (DBW eq. 4)."""

    def weights(self, arrivals: Sequence[Arrival]) -> list[float]:
        k = len(arrivals)
        return [1.0 / k] * k


class UpdateRule(Strategy):
    """How the server applies an aggregate gradient: SGD with momentum / Nesterov and weight decay.

    Follows torch.optim.SGD (dampening 0): v = mu * v + g; step = g + mu * v (Nesterov) or v.
    """

    def init_state(self, params: "torch.Tensor", n_workers: int, opt: "OptimizerSpec") -> dict[str, Any]:
        self.opt = opt
        return {"momentum": None, "momentum_coefficient": None}

    def apply(self, params: "torch.Tensor", state: dict[str, Any], grad: "torch.Tensor", lr: float,
              arrivals: Sequence[Arrival]) -> "torch.Tensor":
        """Return the new parameters (a new tensor: older versions stay valid for stale workers)."""
        opt = self.opt
        if opt.weight_decay:
            grad = grad + opt.weight_decay * params
        mu = momentum_of(state, opt)
        if mu or state["momentum"] is not None:
            buf = state["momentum"]
            buf = grad.clone() if buf is None else buf.mul_(mu).add_(grad)
            state["momentum"] = buf
            grad = grad + mu * buf if opt.nesterov else buf
        return params - lr * grad

    def params_for(self, worker: int, params: "torch.Tensor", state: dict[str, Any]) -> "torch.Tensor":
        """The parameters sent to `worker` for its next task (DANA sends a look-ahead here)."""
        return params


@functools.lru_cache(maxsize=None)
def _init_parameters(cls: type) -> tuple[str, ...]:
    """The names of `cls.__init__`'s parameters, read from its signature once per class (`Policy.params`
    runs on every key and label of a policy: a fit on the table asks tens of thousands of times)."""
    return tuple(n for n in inspect.signature(cls.__init__).parameters if n != "self")


def momentum_of(state: dict[str, Any], opt: "OptimizerSpec") -> float:
    """The momentum coefficient in force: the job's, unless a schedule overrode it (Sync-Switch Fig. 8)."""
    override = state.get("momentum_coefficient")
    return opt.momentum if override is None else override


class Batching(Strategy):
    """Per-worker batch size of the next task: the job's B for everyone by default."""

    def reset(self, n_workers: int, batch_size: int) -> None:
        self._batch_size = batch_size

    def batch_size(self, server: ServerView, worker: int) -> int:
        return self._batch_size

    def on_arrival(self, server: ServerView, arrival: Arrival) -> None:
        """Hook on every gradient that reaches the server, used or discarded (each worker's task time)."""

    def after_update(self, server: ServerView, stats: UpdateStats) -> None:
        """Hook after each update (LB-BSP re-balances the batch sizes here, at the BSP barrier)."""


class LocalSteps(Strategy):
    """How many local steps a worker's next task takes before it sends its change: 1 by default (it sends
    one gradient, as every policy without local updates does)."""

    def steps(self, server: ServerView, worker: int) -> int:
        return 1

    def on_arrival(self, server: ServerView, arrival: Arrival) -> None:
        """Hook on every task that reaches the server, used or discarded (each worker's step time)."""

    def after_update(self, server: ServerView, stats: UpdateStats) -> None:
        """Hook after each update (an adaptive period changes here)."""


class Schedule(Strategy):
    """Phase changes during training; by default there is one phase.

    A schedule with a switch point (Sync-Switch's `switch_at`) names that parameter in `switch_param`: until
    the switch is decided, a run is the same for every switch point above `undecided_above()`, so a run
    of another switch point may fork from it (`continue_as`, `Simulator.continue_as`).
    """

    #: The policy parameter that is this schedule's switch point (None: it has none).
    switch_param: ClassVar[str | None] = None

    def undecided_above(self) -> float | None:
        """The switch point s0 such that this run, up to now, is the run of every switch point above s0;
        None once the switch is decided (or for a schedule without one)."""
        return None

    def continue_as(self, other: "Schedule") -> None:
        """Go on as `other` (the schedule of the same policy with another switch point, above
        `undecided_above()`), keeping this run's state. Raises ValueError where this run is not `other`'s."""
        raise ValueError(f"{type(self).__name__} has no switch point to fork at")

    def after_update(self, server: ServerView, strategies: "Strategies", stats: UpdateStats,
                     progress: Progress, update_state: dict[str, Any]) -> float | None:
        """May swap strategies in place (and override the momentum in `update_state`).

        Returns None when nothing changed, else the virtual seconds the change costs (0.0 for free):
        the engine then pauses the cluster for that long. Idle workers start under the new rules.
        """
        return None


@dataclass
class Strategies:
    """The mutable set of strategies a running policy is made of."""

    barrier: Barrier
    aggregation: Aggregation = field(default_factory=Aggregation)
    update: UpdateRule = field(default_factory=UpdateRule)
    batching: Batching = field(default_factory=Batching)
    schedule: Schedule = field(default_factory=Schedule)
    local: LocalSteps = field(default_factory=LocalSteps)

    def all(self) -> list[Strategy]:
        return [self.barrier, self.aggregation, self.update, self.batching, self.schedule, self.local]

    @property
    def needs_worker_gradients(self) -> bool:
        return any(s.needs_worker_gradients for s in self.all())


@dataclass(frozen=True)
class Preset:
    """How a named policy is one composition of slots (`Composed`), as the policy declares it.

    The policy's own strategy fills `slot` with the choice named `choice` there; `params` are the
    constructor parameters that go with that choice (the ones a composition carries and the shipped search
    spaces search; any other parameter must keep its default for the policy to be this composition);
    `implies` are the other slots' choices the policy comes with (DANA's rules run under barrier asp);
    `fixed` are the constructor values this preset stands for (Sync-Switch with stragglers='greedy' is
    schedule greedy); `renamed` maps a composition's name of a parameter to the policy's own where they
    differ (the composition's `asp_lr_rule` is ASP's `lr_rule`). A policy with several presets
    (Sync-Switch) is whichever its values select.
    """

    slot: str
    choice: str
    params: tuple[str, ...] = ()
    implies: dict[str, str] = field(default_factory=dict)
    fixed: dict[str, Any] = field(default_factory=dict)
    renamed: dict[str, str] = field(default_factory=dict)

    def own_name(self, param: str) -> str:
        """The policy's constructor name of the composition's parameter `param`."""
        return self.renamed.get(param, param)

    def slots(self) -> dict[str, str]:
        """Every slot this preset fills, with its choice."""
        return {**self.implies, self.slot: self.choice}


class Policy(ABC):
    """A named synchronization policy whose constructor keywords are its parameters (plain data).

    A policy describes itself: its `presets` (which composition slots it fills, with which parameters),
    `search_baselines` (what a search queues first where its space holds it) and `sized_defaults` (defaults
    that depend on the job's size). The composed policy, its checks, the canonical forms and the search's
    first trials are derived from these declarations (`autosync.policies._composed`)."""

    #: Name used on the command line and in results.
    name: ClassVar[str]
    #: The papers' spelling (DANA-Slim, B-DBW, LB-BSP); accepted wherever a name is, shown by `autosync policies`.
    paper_name: ClassVar[str]
    #: Parameters every label shows, even at their default (labels otherwise show only the changed ones).
    label_params: ClassVar[tuple[str, ...]] = ()
    #: The compositions this policy is (`Preset`); empty for a policy that is not one (a static split).
    presets: ClassVar[tuple[Preset, ...]] = ()
    #: Parameters the shipped `policy` space searches that no composition carries (LB-BSP's learning-rate
    #: rule, whose barrier is BSP's own in a composition). Set away from their defaults, the policy is no
    #: composition (`composition_of` returns None), so the `composed` space does not hold those points.
    standalone_params: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def search_baselines(cls, n_workers: int) -> list[dict[str, Any]]:
        """Parameter sets (as `to_dict()["params"]`) a search queues first where its space holds them: this
        policy's forms of BSP and ASP, and the static settings the papers start from."""
        return []

    @classmethod
    def sized_defaults(cls, n_workers: int) -> dict[str, Any]:
        """Defaults that depend on the job's size, for a policy named bare (`--policies backup`)."""
        return {}

    def __init__(self) -> None:
        """A policy without parameters; subclasses list theirs as explicit keyword arguments."""

    def params(self) -> dict[str, Any]:
        return {n: getattr(self, n) for n in _init_parameters(type(self))}

    def to_dict(self) -> dict[str, Any]:
        return {"policy": self.name, "params": self.params()}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @abstractmethod
    def strategies(self, n_workers: int, batch_size: int) -> Strategies:
        """Fresh strategies for one run (raise ValueError for parameters the job cannot take)."""

    def toward_bsp(self, n_workers: int) -> "tuple[Policy, ...]":
        """Settings of this policy one step closer to BSP, for when this one ended short of BSP's final metric
        (`autosync.search.strategies.repair`): each keeps the policy and moves one parameter towards the
        setting that runs as BSP. Empty by default: a policy without such a parameter has no repair."""
        return ()

    def canonical(self, n_workers: int, optimizer: "OptimizerSpec | None" = None) -> "Policy":
        """The simplest policy that runs exactly like this one on `n_workers` (same seed, same run): a search
        trains each such class once. Subclasses return e.g. BSP for backup workers with k = n; where an
        equivalence holds only under some of the job's optimizer settings (the DANA family without
        momentum), `optimizer` says which (None: not known, so none of those is made)."""
        return self

    def bind(self, n_workers: int, batch_size: int) -> Strategies:
        """Strategies for one run, reset and validated; the policy object itself is never mutated."""
        strategies = copy.deepcopy(self.strategies(n_workers, batch_size))
        for s in strategies.all():
            s.reset(n_workers, batch_size)
        return strategies

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.params().items())
        return f"{type(self).__name__}({args})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Policy) and self.to_dict() == other.to_dict()

    def __hash__(self) -> int:
        return hash(self.to_json())
