"""Composed policies: the strategy slots filled one by one from the four papers' strategies.

    compose(barrier=ssp, staleness=2, update=dana_slim)        # SSP's bound with DANA-Slim's look-ahead
    compose(barrier=bsp, schedule=sync_switch, switch_at=0.25, update=dana_slim)
                                                               # Sync-Switch whose ASP phase is DANA-Slim
    compose(barrier=bsp, batch=lbbsp, schedule=elastic)        # LB-BSP batches under Sync-Switch's elastic BSP

Slots and their choices:
- barrier: bsp, backup (k, lr_rule), dbw (window, lr_rule), bdbw (lr_rule), ssp (staleness), asp (asp_lr_rule);
- batch: equal, lbbsp (mode: gpu | cpu | auto), with LB-BSP's batch-weighted aggregation (eq. 7), under any
  barrier: LB-BSP's sizing against persistent slowness with DBW's or backup's k against transient stragglers,
  or SSP's bound kept from stalling on a slow worker (under asp and ssp an update has one gradient, whose
  weight is 1 whatever its batch); under a Sync-Switch schedule it keeps re-balancing after the switch to
  ASP (before LB-BSP ran under every barrier, it froze its split there);
- update: sgd (the job's optimizer: momentum or Nesterov), nag_asgd, multi_asgd, lwp (horizon), dc_asgd
  (dc_lambda), dana_zero, dana_slim, dana_dc (dc_lambda);
- schedule: none, sync_switch (switch_at, config, bsp_lr_rule, asp_lr_rule), greedy and elastic
  (Sync-Switch's online policies for transient stragglers, sec. IV-B2, with the same switch point);
- local: none (a task is one gradient), period (period: H local steps), speed (the fastest worker H, the
  others by their speed) or adacomm (AdaComm's shrinking period from tau_0 = period); with update
  outer_nesterov (DiLoCo: outer_lr, outer_momentum), delayed_nesterov (asynchronous local SGD) or easgd
  (elastic_alpha) as the outer step, or the job's sgd (the average of the workers' models).

`asp_lr_rule` is the asynchronous learning-rate rule (`ASYNC_LR_RULES`): ASP's under barrier asp, the ASP
phase's under a Sync-Switch schedule, whichever update rule applies the gradient. `bsp_lr_rule` is the
BSP phase's (Sync-Switch's `lr_rule`; None, the default, is the configuration's).

Every slot is built by the seed policy that owns the strategy, so each named seed policy is one
composition and runs identically to it (same seed, same run; tested for every seed policy). Which policy
owns which choice, and which parameters go with it, each seed policy declares itself (`Policy.presets`):
the slots' choices, the parameters' owners, `as_seed` and `composition_of` are derived from those
declarations. The rules that forbid a combination live in `check_composition`, each with the reason the
papers give.
"""

from __future__ import annotations

from typing import Any

from autosync.policies._barriers import check_async_lr_rule, check_lr_rule
from autosync.policies._base import Policy, Preset, Strategies, UpdateRule
from autosync.policies._classic import ASP, BSP, SSP, BackupWorkers
from autosync.policies._dana import DANADC, DCASGD, LWP, NAGASGD, DANASlim, DANAZero, MultiASGD
from autosync.policies.dbw import DBW, BlindDBW
from autosync.policies._lbbsp import LBBSP, StaticSplit
from autosync.policies._local import EASGD, AdaComm, AsyncLocalSGD, DiLoCo, LocalSGD
from autosync.policies._sync_switch import SyncSwitch

# The named policies of the four papers and the classic ones, in the order a search queues their baselines
# (BSP's and ASP's forms first) and the slots list their choices.
SEED_POLICIES: tuple[type[Policy], ...] = (
    BSP, ASP, SSP, BackupWorkers, DBW, BlindDBW, SyncSwitch, StaticSplit, LBBSP,
    NAGASGD, MultiASGD, LWP, DCASGD, DANAZero, DANASlim, DANADC,
    LocalSGD, AdaComm, DiLoCo, AsyncLocalSGD, EASGD,
)
# Each slot's choice that adds no strategy of its own: the job's plain BSP, equal batches, its optimizer,
# no schedule. (BSP's barrier is owned by BSP; the others by no policy.)
PLAIN = {"barrier": "bsp", "batch": "equal", "update": "sgd", "schedule": "none", "local": "none"}
PRESETS: tuple[tuple[type[Policy], Preset], ...] = tuple(
    (cls, preset) for cls in SEED_POLICIES for preset in cls.presets)


def _slot_choices(slot: str) -> tuple[str, ...]:
    owned = [preset.choice for _, preset in PRESETS if preset.slot == slot and preset.choice != PLAIN[slot]]
    return (PLAIN[slot], *dict.fromkeys(owned))


SLOTS = {slot: _slot_choices(slot) for slot in PLAIN}


def _parameter_owners() -> dict[str, dict[str, tuple[str, ...]]]:
    owners: dict[str, dict[str, tuple[str, ...]]] = {}
    for _, preset in PRESETS:
        for name in preset.params:
            slots = owners.setdefault(name, {})
            slots[preset.slot] = tuple(dict.fromkeys((*slots.get(preset.slot, ()), preset.choice)))
    return owners


# Which slot choices each parameter belongs to, slot by slot: set away from its default, it needs one of them.
PARAMETER_OWNERS: dict[str, dict[str, tuple[str, ...]]] = _parameter_owners()
ONE_GRADIENT_BARRIERS = ("asp", "ssp")  # barriers that apply each gradient on its own
OUTER_UPDATES = ("outer_nesterov", "delayed_nesterov", "easgd")  # the local-update papers' outer steps: any barrier


def owner(slot: str, choice: str) -> tuple[type[Policy], Preset]:
    """The seed policy (and its preset) whose strategy fills `slot` with `choice`."""
    return next((cls, preset) for cls, preset in PRESETS if preset.slot == slot and preset.choice == choice)


def _non_plain(slots: dict[str, str]) -> dict[str, str]:
    return {slot: choice for slot, choice in slots.items() if choice != PLAIN[slot]}


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
        asp_lr_rule: the asynchronous learning-rate rule of barrier asp or of the schedule's ASP phase:
            fixed (eta, the papers'), sqrt_staleness or staleness (`ASYNC_LR_RULES`).
        bsp_lr_rule: the schedule's BSP-phase rule (`LR_RULES`), or None (the configuration's).
        local: none, period, speed or adacomm: the local steps of a task (`autosync.policies._local`).
        period: H, the local steps per exchange (the fastest worker's under speed; tau_0 under adacomm).
        outer_lr, outer_momentum: the outer step of outer_nesterov and delayed_nesterov.
        elastic_alpha: easgd's elastic force.
    """

    name = "compose"
    paper_name = "Composed"
    label_params = ("barrier",)  # 'compose(update=dana_slim)' would hide that the barrier is bsp

    @classmethod
    def search_baselines(cls, n_workers: int) -> list[dict[str, Any]]:
        return [{"barrier": "bsp"}, {"barrier": "asp"}]

    def __init__(self, barrier: str = "bsp", batch: str = "equal", update: str = "sgd", schedule: str = "none",
                 k: int = 12, lr_rule: str = "fixed", window: int = 20, staleness: int = 3, mode: str = "auto",
                 horizon: float | None = None, dc_lambda: float = 2.0, switch_at: float = 0.25,
                 config: str = "sync_switch", asp_lr_rule: str = "fixed",
                 bsp_lr_rule: str | None = None, local: str = "none", period: int = 8, outer_lr: float = 0.7,
                 outer_momentum: float = 0.9, elastic_alpha: float = 0.1) -> None:
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
        self.asp_lr_rule = asp_lr_rule
        self.bsp_lr_rule = bsp_lr_rule
        self.local = local
        self.period = period
        self.outer_lr = outer_lr
        self.outer_momentum = outer_momentum
        self.elastic_alpha = elastic_alpha

    def strategies(self, n_workers: int, batch_size: int) -> Strategies:
        check_composition(self)
        if self.schedule != PLAIN["schedule"]:  # the schedule's policy runs the barrier (Sync-Switch's BSP)
            built = self._part("schedule").strategies(n_workers, batch_size)
        else:
            built = self._part("barrier").strategies(n_workers, batch_size)
        if self.batch != PLAIN["batch"]:
            sized = self._part("batch").strategies(n_workers, batch_size)
            built.aggregation, built.batching = sized.aggregation, sized.batching
        if self.update != PLAIN["update"]:
            rule = self._update_rule()
            if self.schedule != PLAIN["schedule"]:
                built.schedule.asp_update = rule  # type: ignore[attr-defined]  # the rule of the ASP phase
            else:
                built.update = rule
        if self.local != PLAIN["local"]:
            built.local = self._part("local").strategies(n_workers, batch_size).local
        return built

    def _part(self, slot: str) -> Policy:
        """The seed policy that owns this composition's choice in `slot`, with this composition's values of
        its parameters (`Policy.presets`)."""
        return self._as_preset(*owner(slot, getattr(self, slot)))

    def _as_preset(self, cls: type[Policy], preset: Preset) -> Policy:
        """`cls` with this composition's values of the preset's parameters and the values it stands for."""
        return cls(**{preset.own_name(name): getattr(self, name) for name in preset.params}, **preset.fixed)

    def _update_rule(self) -> UpdateRule:
        return self._part("update").rule()  # type: ignore[attr-defined]

    def as_seed(self) -> Policy | None:
        """The named seed policy this composition is (the one whose preset fills exactly the slots this
        composition sets away from plain and carries every parameter it sets away from its default), or
        None when it is a new combination (DANA-Slim under an asynchronous rule other than fixed)."""
        chosen = _non_plain({slot: getattr(self, slot) for slot in SLOTS})
        defaults = Composed().params()
        changed = {name for name, value in self.params().items() if name not in SLOTS and value != defaults[name]}
        for cls, preset in PRESETS:
            if _non_plain(preset.slots()) == chosen and changed <= set(preset.params):
                return self._as_preset(cls, preset)
        return None

    def canonical(self, n_workers: int, optimizer: Any = None) -> Policy:
        """A composition that is a seed policy runs as that policy does: its canonical form."""
        seed = self.as_seed()
        return seed.canonical(n_workers, optimizer) if seed is not None else self


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
    check_async_lr_rule(policy.asp_lr_rule, "asp_lr_rule")  # their owners would name them lr_rule
    if policy.bsp_lr_rule is not None:
        check_lr_rule(policy.bsp_lr_rule, "bsp_lr_rule")
    defaults = Composed()
    for name, owners in PARAMETER_OWNERS.items():
        if getattr(policy, name) != getattr(defaults, name) \
                and not any(getattr(policy, slot) in choices for slot, choices in owners.items()):
            belongs = " or ".join(f"{slot} {' or '.join(choices)}" for slot, choices in owners.items())
            got = ", ".join(f"{slot}={getattr(policy, slot)}" for slot in owners)
            raise ValueError(f"{name} is a parameter of {belongs}, but got {name}={getattr(policy, name)!r} with {got}")
    if policy.local == PLAIN["local"] and policy.period != defaults.period:
        raise ValueError(f"period is a parameter of local period or speed or adacomm, but got "
                         f"period={policy.period!r} with local={policy.local}")
    if policy.local != PLAIN["local"] and policy.schedule != PLAIN["schedule"]:
        raise ValueError(f"local {policy.local} takes local steps under one barrier and update rule; schedule "
                         f"{policy.schedule} swaps them mid-run (Sync-Switch sec. IV-A), but got both")
    if policy.update != "sgd" and policy.update not in OUTER_UPDATES:
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


def reads_parameter(policy: Policy, name: str) -> bool:
    """Whether `policy` reads its parameter `name`: a composition only where a slot takes a choice that owns
    it (`PARAMETER_OWNERS`: k under barrier backup; under another barrier k keeps its default, unused; period
    under a local step); any other policy every parameter it has."""
    if name not in policy.params():
        return False
    if not isinstance(policy, Composed):
        return True
    if name == "period":  # the local step's, read under every local choice but none (`check_composition`)
        return policy.local != PLAIN["local"]
    owners = PARAMETER_OWNERS.get(name)
    return owners is None or any(getattr(policy, slot) in choices for slot, choices in owners.items())


def composition_of(policy: Policy) -> dict[str, Any] | None:
    """The slots (as Composed's parameters) of a named seed policy, or None for one that is not a preset:
    the preset its values select (`Preset.fixed`), provided every parameter the preset does not carry keeps
    its default (a DBW with another beta is no composition)."""
    params, defaults = policy.params(), type(policy)().params()
    for preset in type(policy).presets:
        if any(params[name] != value for name, value in preset.fixed.items()):
            continue
        carried = {preset.own_name(name) for name in preset.params} | set(preset.fixed)
        if any(params[name] != defaults[name] for name in params if name not in carried):
            return None
        return {**_non_plain(preset.slots()), **{name: params[preset.own_name(name)] for name in preset.params}}
    return None


def cross_paper_variants(slots: dict[str, Any]) -> list[dict[str, Any]]:
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
