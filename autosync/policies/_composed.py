"""Composed policies: the strategy slots filled one by one from the four papers' strategies.

    compose(barrier=ssp, staleness=2, update=dana_slim)        # SSP's bound with DANA-Slim's look-ahead
    compose(barrier=bsp, schedule=sync_switch, switch_at=0.25, update=dana_slim)
                                                               # Sync-Switch whose ASP phase is DANA-Slim
    compose(barrier=bsp, batch=lbbsp, schedule=elastic)        # LB-BSP batches under Sync-Switch's elastic BSP

Slots and their choices:
- barrier: bsp, backup (k, lr_rule), dbw (window, lr_rule), bdbw (lr_rule), ssp (staleness), asp;
- batch: equal, lbbsp (mode: gpu | cpu | auto), with LB-BSP's batch-weighted aggregation (eq. 7), under any
  barrier: LB-BSP's sizing against persistent slowness with DBW's or backup's k against transient stragglers,
  or SSP's bound kept from stalling on a slow worker (under asp and ssp an update has one gradient, whose
  weight is 1 whatever its batch); under a Sync-Switch schedule it keeps re-balancing after the switch to
  ASP (before LB-BSP ran under every barrier, it froze its split there);
- update: sgd (the job's optimizer: momentum or Nesterov), nag_asgd, multi_asgd, lwp (horizon), dc_asgd
  (dc_lambda), dana_zero, dana_slim, dana_dc (dc_lambda);
- schedule: none, sync_switch (switch_at, config), greedy and elastic (Sync-Switch's online policies for
  transient stragglers, sec. IV-B2, with the same switch point).

Every slot is built by the seed policy that owns the strategy, so each named seed policy is one
composition and runs identically to it (same seed, same run; tested for every seed policy). The rules
that forbid a combination live in `check_composition`, each with the reason the papers give.
"""

from __future__ import annotations

from typing import Any

from autosync.policies._base import Policy, Strategies, UpdateRule
from autosync.policies._classic import ASP, BSP, SSP, BackupWorkers
from autosync.policies._dana import DANADC, DCASGD, LWP, NAGASGD, DANASlim, DANAZero, MultiASGD
from autosync.policies._dbw import DBW, BlindDBW
from autosync.policies._lbbsp import LBBSP
from autosync.policies._sync_switch import SyncSwitch

BARRIERS = ("bsp", "backup", "dbw", "bdbw", "ssp", "asp")
BATCHES = ("equal", "lbbsp")
UPDATES = ("sgd", "nag_asgd", "multi_asgd", "lwp", "dc_asgd", "dana_zero", "dana_slim", "dana_dc")
SCHEDULES = ("none", "sync_switch", "greedy", "elastic")
SLOTS = {"barrier": BARRIERS, "batch": BATCHES, "update": UPDATES, "schedule": SCHEDULES}

# Which slot choice each parameter belongs to: set away from its default, it needs that choice.
PARAMETER_OWNERS: dict[str, tuple[str, tuple[str, ...]]] = {
    "k": ("barrier", ("backup",)),
    "staleness": ("barrier", ("ssp",)),
    "lr_rule": ("barrier", ("backup", "dbw", "bdbw")),
    "window": ("barrier", ("dbw",)),
    "mode": ("batch", ("lbbsp",)),
    "horizon": ("update", ("lwp",)),
    "dc_lambda": ("update", ("dc_asgd", "dana_dc")),
    "switch_at": ("schedule", ("sync_switch", "greedy", "elastic")),
    "config": ("schedule", ("sync_switch", "greedy", "elastic")),
}
ONE_GRADIENT_BARRIERS = ("asp", "ssp")  # barriers that apply each gradient on its own


class Composed(Policy):
    """A composition of strategies: a barrier, a batch sizing, an update rule and a schedule.

    Args:
        barrier: which gradients an update waits for: bsp, backup, dbw, bdbw, ssp or asp.
        batch: per-worker batch sizes: equal, or lbbsp (re-balanced once every worker has finished a task:
            at every barrier under bsp; gradients weighted by batch size).
        update: the server's update rule: sgd (the job's optimizer) or one of DANA's asynchronous rules.
        schedule: none, or Sync-Switch's BSP-then-ASP switch (sync_switch), with its greedy or elastic
            straggler policy.
        k, lr_rule: backup's k; the learning-rate rule of backup, dbw and bdbw.
        window: dbw's estimator window D.
        staleness: ssp's bound.
        mode: lbbsp's algorithm (gpu, cpu, auto).
        horizon, dc_lambda: lwp's look-ahead horizon; dc_asgd's and dana_dc's delay compensation.
        switch_at, config: the schedule's switch point and configuration policy (Sync-Switch sec. IV-C).
    """

    name = "compose"
    paper_name = "Composed"
    label_params = ("barrier",)  # 'compose(update=dana_slim)' would hide that the barrier is bsp

    def __init__(self, barrier: str = "bsp", batch: str = "equal", update: str = "sgd", schedule: str = "none",
                 k: int = 12, lr_rule: str = "fixed", window: int = 20, staleness: int = 3, mode: str = "auto",
                 horizon: float | None = None, dc_lambda: float = 2.0, switch_at: float = 0.25,
                 config: str = "sync_switch") -> None:
        self.barrier = barrier
        self.batch = batch
        self.update = update
        self.schedule = schedule
        self.k = k
        self.lr_rule = lr_rule
        self.window = window
        self.staleness = staleness
        self.mode = mode
        self.horizon = horizon
        self.dc_lambda = dc_lambda
        self.switch_at = switch_at
        self.config = config

    def strategies(self, n_workers: int, batch_size: int) -> Strategies:
        check_composition(self)
        if self.schedule != "none":
            stragglers = "agnostic" if self.schedule == "sync_switch" else self.schedule
            built = SyncSwitch(switch_at=self.switch_at, config=self.config,
                               stragglers=stragglers).strategies(n_workers, batch_size)
        else:
            built = self._barrier_policy().strategies(n_workers, batch_size)
        if self.batch == "lbbsp":
            lb = LBBSP(mode=self.mode).strategies(n_workers, batch_size)
            built.aggregation, built.batching = lb.aggregation, lb.batching
        if self.update != "sgd":
            rule = self._update_rule()
            if self.schedule != "none":
                built.schedule.asp_update = rule  # type: ignore[attr-defined]  # the rule of the ASP phase
            else:
                built.update = rule
        return built

    def _barrier_policy(self) -> Policy:
        """The seed policy that owns the barrier slot's strategy."""
        makers = {"bsp": BSP, "asp": ASP, "backup": lambda: BackupWorkers(k=self.k, lr_rule=self.lr_rule),
                  "dbw": lambda: DBW(window=self.window, lr_rule=self.lr_rule),
                  "bdbw": lambda: BlindDBW(lr_rule=self.lr_rule),
                  "ssp": lambda: SSP(staleness=self.staleness)}
        return makers[self.barrier]()

    def _update_policy(self) -> Policy:
        """The seed policy (ASP with that rule) that owns the update slot's asynchronous rule."""
        makers = {"nag_asgd": NAGASGD, "multi_asgd": MultiASGD, "dana_zero": DANAZero, "dana_slim": DANASlim,
                  "lwp": lambda: LWP(horizon=self.horizon), "dc_asgd": lambda: DCASGD(dc_lambda=self.dc_lambda),
                  "dana_dc": lambda: DANADC(dc_lambda=self.dc_lambda)}
        return makers[self.update]()

    def _update_rule(self) -> UpdateRule:
        return self._update_policy().rule()  # type: ignore[attr-defined]

    def as_seed(self) -> Policy | None:
        """The named seed policy this composition is, or None when it is a new combination."""
        plain_batch, plain_update, no_schedule = self.batch == "equal", self.update == "sgd", self.schedule == "none"
        if plain_batch and plain_update and no_schedule:
            return self._barrier_policy()
        if self.barrier == "bsp" and plain_update and no_schedule:
            return LBBSP(mode=self.mode)
        if self.barrier == "asp" and plain_batch and no_schedule:
            return self._update_policy()
        if self.barrier == "bsp" and plain_batch and plain_update:
            stragglers = "agnostic" if self.schedule == "sync_switch" else self.schedule
            return SyncSwitch(switch_at=self.switch_at, config=self.config, stragglers=stragglers)
        return None

    def canonical(self, n_workers: int) -> Policy:
        """A composition that is a seed policy runs as that policy does: its canonical form."""
        seed = self.as_seed()
        return seed.canonical(n_workers) if seed is not None else self


def check_composition(policy: Composed) -> None:
    """Raise ValueError naming the rule a combination breaks (one line), or return.

    - Each slot takes one of its choices, and a parameter set away from its default needs the choice it
      belongs to (k needs barrier backup): the label then says everything that differs.
    - DANA's rules, NAG-ASGD, Multi-ASGD, DC-ASGD and LWP apply one gradient per update (DANA paper,
      Algorithms 3-10: each update is one worker's gradient, each worker's momentum its own): they need a
      barrier that applies gradients on arrival (asp, ssp), or a Sync-Switch schedule, which uses them in
      its ASP phase. The greedy policy switches back to BSP whenever stragglers go, and is refused with them.
    - LB-BSP's batch sizing runs under every barrier: it re-balances once every worker has finished a task
      (`WorkerRounds`: at each barrier under BSP; under backup and dbw the discarded stragglers' pushes are
      timed too, under asp and ssp a round spans the updates the slowest worker takes).
    - Sync-Switch's schedules start with BSP (sec. IV-A): they need barrier bsp.
    """
    for slot, choices in SLOTS.items():
        value = getattr(policy, slot)
        if value not in choices:
            raise ValueError(f"{slot} must be one of {list(choices)}, but got {slot}={value!r}")
    defaults = Composed()
    for name, (slot, owners) in PARAMETER_OWNERS.items():
        if getattr(policy, name) != getattr(defaults, name) and getattr(policy, slot) not in owners:
            raise ValueError(f"{name} is a parameter of {slot} {' or '.join(owners)}, but got {name}="
                             f"{getattr(policy, name)!r} with {slot}={getattr(policy, slot)}")
    if policy.update != "sgd":
        if policy.schedule == "greedy":
            raise ValueError(f"update {policy.update} applies one gradient per update and keeps per-worker state; "
                             "schedule greedy switches back to BSP whenever stragglers go, but got both")
        if policy.schedule == "none" and policy.barrier not in ONE_GRADIENT_BARRIERS:
            raise ValueError(f"update {policy.update} applies one gradient per update (DANA paper, Algorithms "
                             f"3-10): it needs barrier asp or ssp, or a sync_switch/elastic schedule that uses it "
                             f"after the switch to ASP, but got barrier={policy.barrier}")
    if policy.schedule != "none" and policy.barrier != "bsp":
        raise ValueError(f"schedule {policy.schedule} starts with BSP and switches to ASP (Sync-Switch sec. IV-A): "
                         f"it needs barrier bsp, but got barrier={policy.barrier}")


def composition_of(policy: Policy) -> dict[str, Any] | None:
    """The slots (as Composed's parameters) of a named seed policy, or None for one that is not a preset."""
    params = policy.params()
    simple = {"bsp": {}, "asp": {"barrier": "asp"}, "bdbw": {"barrier": "bdbw"},
              "nag_asgd": {"barrier": "asp", "update": "nag_asgd"}, "multi_asgd": {"barrier": "asp", "update": "multi_asgd"},
              "dana_zero": {"barrier": "asp", "update": "dana_zero"}, "dana_slim": {"barrier": "asp", "update": "dana_slim"}}
    if policy.name in simple:
        if policy.name == "bdbw" and params.get("solve_every", 10) != 10:
            return None
        extra = {"lr_rule": params["lr_rule"]} if policy.name == "bdbw" else {}
        return {**simple[policy.name], **extra}
    if policy.name == "backup":
        return {"barrier": "backup", "k": params["k"], "lr_rule": params["lr_rule"]}
    if policy.name == "ssp":
        return {"barrier": "ssp", "staleness": params["staleness"]}
    if policy.name == "dbw":
        rest = {k: v for k, v in params.items() if k not in ("lr_rule", "window")}
        slots = {"barrier": "dbw", "lr_rule": params["lr_rule"], "window": params["window"]}
        return slots if rest == _dbw_defaults() else None
    if policy.name == "lwp":
        return {"barrier": "asp", "update": "lwp", "horizon": params["horizon"]}
    if policy.name in ("dc_asgd", "dana_dc"):
        return {"barrier": "asp", "update": policy.name, "dc_lambda": params["dc_lambda"]}
    if policy.name == "lbbsp":
        rest = {k: v for k, v in params.items() if k != "mode"}
        return {"batch": "lbbsp", "mode": params["mode"]} if rest == _lbbsp_defaults() else None
    if policy.name == "sync_switch":
        default = SyncSwitch().params()
        free = {k: v for k, v in params.items() if k not in ("switch_at", "config", "stragglers")}
        if free != {k: default[k] for k in free}:
            return None
        schedule = "sync_switch" if params["stragglers"] == "agnostic" else params["stragglers"]
        return {"schedule": schedule, "switch_at": params["switch_at"], "config": params["config"]}
    return None


def cross_paper_neighbours(slots: dict[str, Any]) -> list[dict[str, Any]]:
    """The compositions one slot away from `slots` that add another paper's strategy to it, as the ones the
    papers combine least: LB-BSP's batch sizing where batches are equal (against persistent slowness, under
    any barrier), and DANA-Slim's look-ahead (the DANA paper's recommended rule) where the update rule is
    the job's SGD and an asynchronous rule may run (one gradient per update, or a Sync-Switch ASP phase).
    A tune over the composed space tries them right after the best single policy a sibling tune found."""
    asynchronous = slots.get("barrier", "bsp") in ONE_GRADIENT_BARRIERS \
        or slots.get("schedule", "none") in ("sync_switch", "elastic")
    out = []
    if slots.get("batch", "equal") == "equal":
        out.append({**slots, "batch": "lbbsp"})
    if slots.get("update", "sgd") == "sgd" and asynchronous:
        out.append({**slots, "update": "dana_slim"})
    return out


def _dbw_defaults() -> dict[str, Any]:
    return {k: v for k, v in DBW().params().items() if k not in ("lr_rule", "window")}


def _lbbsp_defaults() -> dict[str, Any]:
    return {k: v for k, v in LBBSP().params().items() if k != "mode"}
