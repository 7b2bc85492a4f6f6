"""Sync-Switch at run time (Li, Mangoubi, Xu, Guo, ICDCS 2021, sec. IV).

- Protocol policy (IV-A): BSP for the first fraction s of the workload, then ASP. The reverse order
  (ASP first) is available to show why the paper rejects it.
- Configuration policy (IV-C): BSP trains with learning rate n * eta (global batch n * B, linear scaling
  rule), ASP with eta and batch B per worker; momentum unchanged, or one of the Fig. 8 variants after
  the switch to ASP: 0, 1/n, or ramped up as i/(2n) or i/n (i = epochs since the switch, capped at gamma).
- A switch costs `switch_seconds` of virtual time (checkpoint and restart: the whole cluster pauses).
- Online straggler policies (IV-B2): a worker is a straggler when its throughput over a sliding window
  is below the cluster mean minus one standard deviation for `consecutive` windows in a row.
  greedy: ASP while stragglers exist, back to BSP when they are gone, until the BSP quota s is met.
  elastic: detected stragglers are excluded from BSP until the quota is met; then all workers
  continue under ASP.

The workload is measured in epochs when the job's budget has max_epochs, else in virtual seconds (see
`autosync.policies.Progress`).
"""

from __future__ import annotations

import statistics
from typing import Any

from autosync.policies._barriers import FastestK, OnArrival, check_async_lr_rule, check_lr_rule
from autosync.policies._base import (
    Arrival, Policy, Preset, Progress, Schedule, ServerView, Strategies, UpdateRule, UpdateStats,
)
from autosync.policies._classic import BSP

ORDERS = ("bsp_asp", "asp_bsp")
CONFIGS = ("sync_switch", "none")
ASP_MOMENTUM = ("same", "zero", "one_over_n", "ramp_2n", "ramp_n")
STRAGGLER_POLICIES = ("agnostic", "greedy", "elastic")


class StragglerDetector:
    """Sync-Switch's detector: throughput per worker over windows of `window_seconds`; a straggler is
    below mean - std of the cluster for `consecutive` windows in a row (sec. IV-C)."""

    def __init__(self, n_workers: int, window_seconds: float, consecutive: int):
        self.n = n_workers
        self.window_seconds = window_seconds
        self.consecutive = consecutive
        self.window_end = window_seconds
        self.samples = [0.0] * n_workers
        self.seconds = [0.0] * n_workers
        self.below = [0] * n_workers
        self.stragglers: set[int] = set()

    def observe(self, arrivals: list[Arrival], now: float) -> bool:
        """Record completed tasks; returns True when a window closed (the straggler set may change)."""
        for a in arrivals:
            self.samples[a.worker] += a.task.batch_size
            self.seconds[a.worker] += max(a.time - a.task.start, 1e-12)
        if now < self.window_end:
            return False
        speeds = {w: self.samples[w] / self.seconds[w] for w in range(self.n) if self.seconds[w] > 0}
        if len(speeds) >= 2:
            mean, std = statistics.fmean(speeds.values()), statistics.pstdev(speeds.values())
            for w, speed in speeds.items():  # a worker with no finished task keeps its status
                self.below[w] = self.below[w] + 1 if speed < mean - std else 0
                if self.below[w] >= self.consecutive:
                    self.stragglers.add(w)
                elif self.below[w] == 0:
                    self.stragglers.discard(w)
        self.samples = [0.0] * self.n
        self.seconds = [0.0] * self.n
        while self.window_end <= now:
            self.window_end += self.window_seconds
        return True


class ElasticBSP(FastestK):
    """BSP over the workers not in `excluded`: they neither start tasks nor count toward k."""

    def reset(self, n_workers: int, batch_size: int) -> None:
        super().reset(n_workers, batch_size)
        self.excluded: set[int] = set()

    def target_count(self, server: ServerView) -> int:
        return server.n_workers - len(self.excluded)

    def accept(self, server: ServerView, arrival: Arrival) -> bool:
        return arrival.worker not in self.excluded and super().accept(server, arrival)

    def may_start(self, server: ServerView, worker: int) -> bool:
        return worker not in self.excluded and super().may_start(server, worker)


def _bsp_barrier(config: str, n_workers: int, lr_rule: str | None = None) -> ElasticBSP:
    """BSP as Sync-Switch's configuration policy sets it up: learning rate n * eta (sec. IV-C), or eta;
    or, given `lr_rule` (`LR_RULES`), the rule's step for the gradients aggregated."""
    if lr_rule is not None:
        return ElasticBSP(lr_rule=lr_rule)
    return ElasticBSP(lr_multiplier=float(n_workers) if config == "sync_switch" else 1.0)


class SwitchSchedule(Schedule):
    """The phase logic of Sync-Switch; it reads its parameters from the (validated) `SyncSwitch` policy.

    The switch point s is read only to compare it with the quota used, which never decreases: until the
    final switch, the run is the same for every s above the quota used so far (`undecided_above`), and a
    run of another switch point above it continues from here (`continue_as`). Greedy's interim switches
    and elastic's exclusions do not read s.
    """

    switch_param = "switch_at"

    def undecided_above(self) -> float | None:
        return None if self.done else self.quota_used

    def continue_as(self, other: Schedule) -> None:
        def rest(policy: SyncSwitch) -> dict[str, Any]:
            return {k: v for k, v in policy.params().items() if k != self.switch_param}

        if not isinstance(other, SwitchSchedule) or rest(other.policy) != rest(self.policy):
            raise ValueError(f"a Sync-Switch run forks only into one that differs in its switch point, "
                             f"not into {other}")
        if self.done or not other.policy.switch_at > self.quota_used:
            raise ValueError(f"this Sync-Switch run has used {self.quota_used:.4f} of its quota (switched: "
                             f"{self.done}): it is not the prefix of switch_at={other.policy.switch_at}")
        self.policy = other.policy

    def __init__(self, policy: "SyncSwitch"):
        self.policy = policy
        self.asp_update: UpdateRule | None = None  # a composed policy's update rule for the ASP phase (None: SGD)

    def reset(self, n_workers: int, batch_size: int) -> None:
        self.n = n_workers
        self.first = "bsp" if self.policy.order == "bsp_asp" else "asp"  # the protocol of the quota
        self.phase = self.first
        self.done = False  # the final phase has started
        self.quota_used = 0.0  # fraction of the workload trained in the first protocol
        self.last_fraction = 0.0
        self.switched_at_epoch: float | None = None
        self.detector = StragglerDetector(n_workers, self.policy.window_seconds, self.policy.consecutive)
        self.update_phase = self.phase
        if self.asp_update is not None:  # its parameters are refused now, not at the switch mid-run
            self.asp_update.reset(n_workers, batch_size)

    def after_update(self, server: ServerView, strategies: Strategies, stats: UpdateStats,
                     progress: Progress, update_state: dict[str, Any]) -> float | None:
        first = self.first
        self.update_phase = self.phase  # the protocol the update just applied was made under
        if not self.done and self.phase == first:
            self.quota_used += progress.fraction - self.last_fraction
        self.last_fraction = progress.fraction
        if self.done:
            self._ramp_momentum(progress, update_state, strategies)
            return None
        if self.policy.stragglers != "agnostic":
            self.detector.observe(stats.arrivals, server.time)
        if self.quota_used >= self.policy.switch_at:  # the first protocol's share is met: final phase
            self.done = True
            final = "asp" if first == "bsp" else "bsp"
            return self._switch(final, strategies, progress, update_state)
        if self.policy.stragglers == "greedy" and first == "bsp":
            wanted = "asp" if self.detector.stragglers else "bsp"
            if wanted != self.phase:
                return self._switch(wanted, strategies, progress, update_state)
        if self.policy.stragglers == "elastic" and self.phase == "bsp":
            barrier = strategies.barrier
            excluded = set(self.detector.stragglers)
            if len(excluded) >= self.n:
                excluded = set()
            if isinstance(barrier, ElasticBSP) and excluded != barrier.excluded:
                barrier.excluded = excluded
                return 0.0  # resizing the BSP group costs no restart
        return None

    def _switch(self, phase: str, strategies: Strategies, progress: Progress,
                update_state: dict[str, Any]) -> float:
        self.phase = phase
        if phase == "bsp":
            barrier = _bsp_barrier(self.policy.config, self.n, self.policy.lr_rule)
            barrier.reset(self.n, 0)
            strategies.barrier = barrier
            update_state["momentum_coefficient"] = None
        else:
            strategies.barrier = OnArrival(lr_rule=self.policy.asp_lr_rule)
            self.switched_at_epoch = progress.epoch
            if self.asp_update is not None:
                self._use_asp_update(strategies, update_state)
            self._ramp_momentum(progress, update_state, strategies)
        return self.policy.switch_seconds

    def _use_asp_update(self, strategies: Strategies, update_state: dict[str, Any]) -> None:
        """From the switch on, the composed asynchronous rule (DANA's, ...) applies each gradient, with its
        own state started afresh: its per-worker momenta begin at zero, as at the start of an ASP run."""
        rule = self.asp_update
        rule.reset(self.n, 0)
        fresh = rule.init_state(None, self.n, strategies.update.opt)
        update_state.clear()
        update_state.update(fresh)
        strategies.update = rule
        self.asp_update = None

    def _ramp_momentum(self, progress: Progress, update_state: dict[str, Any], strategies: Strategies) -> None:
        """Sync-Switch Fig. 8: the momentum used under ASP after the switch (capped at the job's gamma)."""
        if self.phase != "asp" or self.switched_at_epoch is None or self.policy.asp_momentum == "same":
            return
        gamma = strategies.update.opt.momentum
        i = progress.epoch - self.switched_at_epoch
        value = {"zero": 0.0, "one_over_n": 1.0 / self.n, "ramp_2n": i / (2 * self.n),
                 "ramp_n": i / self.n}[self.policy.asp_momentum]
        update_state["momentum_coefficient"] = min(gamma, value)

    def trace_values(self) -> dict[str, Any]:
        return {"phase_bsp": int(self.update_phase == "bsp"), "stragglers": len(self.detector.stragglers),
                "bsp_quota_used": self.quota_used}


class SyncSwitch(Policy):
    """Sync-Switch: BSP for the first fraction of the workload, then ASP, with its configuration policy.

    Args:
        switch_at: fraction s of the workload trained with the first protocol (the switch point).
        order: "bsp_asp" (the paper's) or "asp_bsp" (the order it rejects, sec. IV-A).
        config: "sync_switch": BSP with learning rate n * eta, ASP with eta (sec. IV-C); "none": eta throughout.
        lr_rule: the BSP phase's learning-rate rule (`LR_RULES`, as backup k takes), in place of the
            configuration's (`config` then changes nothing); None (the default): the configuration's.
            "linear" is the configuration's n eta except under `stragglers=elastic`, where it scales with
            the workers left in the BSP group. "sqrt" (eta sqrt(n) for BSP, eta for ASP) departs from the
            paper, whose n eta (Goyal et al.'s linear rule) is made for ImageNet-scale batches: on a job
            whose eta already suits one worker's batch, n eta stalls BSP and leaves ASP a model it cannot
            finish (results/robustness/README.md).
        asp_lr_rule: the ASP phase's (`ASYNC_LR_RULES`): "fixed" (eta, the paper's), "sqrt_staleness"
            (eta / sqrt(tau) for a gradient tau updates stale) or "staleness" (eta / tau, Zhang et al.
            IJCAI 2016). Departs from the paper: with n workers, ASP at eta moves the model about as far per
            round as BSP at n eta does, on directions up to n updates old, and on jobs unlike the paper's
            the ASP phase never reached the target; "sqrt_staleness" goes with `lr_rule` "sqrt".
        asp_momentum: momentum under ASP after the switch: "same" (the paper's choice), "zero",
            "one_over_n", "ramp_2n", "ramp_n" (Fig. 8).
        switch_seconds: virtual seconds one switch costs (checkpoint and restart).
        stragglers: online policy for transient stragglers: "agnostic", "greedy" or "elastic" (sec. IV-B2).
        window_seconds: detection window of the straggler detector.
        consecutive: windows in a row below mean - std before a worker counts as a straggler.
    """

    name = "sync_switch"
    paper_name = "Sync-Switch"
    presets = tuple(Preset("schedule", schedule, ("switch_at", "config", "bsp_lr_rule", "asp_lr_rule"),
                           fixed={"stragglers": stragglers}, renamed={"bsp_lr_rule": "lr_rule"})
                    for schedule, stragglers in (("sync_switch", "agnostic"), ("greedy", "greedy"),
                                                 ("elastic", "elastic")))

    @classmethod
    def search_baselines(cls, n_workers: int) -> list[dict[str, Any]]:
        """BSP's form (BSP for the whole workload), BSP under the configuration policy (learning rate n eta:
        the BSP runs Algorithm 1 starts from, lines 1-4) and ASP's nearest (the switch at the first update).
        Without the second, a search may never try the switch point 1 with n eta, and every earlier switch
        point can lose the final metric it keeps (quick:0 of baselines/family_quick.yaml)."""
        return [{"switch_at": 1.0, "config": "none"}, {"switch_at": 1.0, "config": "sync_switch"},
                {"switch_at": 0.0, "config": "none"}]

    def __init__(self, switch_at: float = 0.25, order: str = "bsp_asp", config: str = "sync_switch",
                 asp_momentum: str = "same", switch_seconds: float = 0.0, stragglers: str = "agnostic",
                 window_seconds: float = 5.0, consecutive: int = 2, lr_rule: str | None = None,
                 asp_lr_rule: str = "fixed") -> None:
        self.switch_at = switch_at
        self.lr_rule = lr_rule
        self.asp_lr_rule = asp_lr_rule
        self.order = order
        self.config = config
        self.asp_momentum = asp_momentum
        self.switch_seconds = switch_seconds
        self.stragglers = stragglers
        self.window_seconds = window_seconds
        self.consecutive = consecutive

    def strategies(self, n_workers: int, batch_size: int) -> Strategies:
        checks = [("order", self.order, ORDERS), ("config", self.config, CONFIGS),
                  ("asp_momentum", self.asp_momentum, ASP_MOMENTUM),
                  ("stragglers", self.stragglers, STRAGGLER_POLICIES)]
        for key, value, allowed in checks:
            if value not in allowed:
                raise ValueError(f"{key} must be one of {list(allowed)}, but got {key}={value!r}")
        if self.lr_rule is not None:
            check_lr_rule(self.lr_rule)
        check_async_lr_rule(self.asp_lr_rule, "asp_lr_rule")
        if not 0.0 <= self.switch_at <= 1.0:
            raise ValueError(f"switch_at must be between 0 and 1, but got switch_at={self.switch_at}")
        if self.switch_seconds < 0 or self.window_seconds <= 0 or self.consecutive < 1:
            raise ValueError("switch_seconds must be >= 0, window_seconds > 0 and consecutive >= 1, but got "
                             f"{self.switch_seconds}, {self.window_seconds}, {self.consecutive}")
        barrier = _bsp_barrier(self.config, n_workers, self.lr_rule) if self.order == "bsp_asp" \
            else OnArrival(lr_rule=self.asp_lr_rule)
        return Strategies(barrier=barrier, schedule=SwitchSchedule(self))

    def canonical(self, n_workers: int, optimizer: Any = None) -> Policy:
        """Without the configuration policy and the straggler policies, BSP for the whole workload is BSP.
        (switch_at = 0 is not ASP: the switch happens at the first update, after one BSP barrier.)

        Otherwise one form per run: `config` sets only the BSP phase's step, so with an explicit `lr_rule`
        it changes nothing and takes its default; where the BSP group is always all n workers (every
        straggler policy but elastic), "fixed" and "proportional" are `config=none`'s eta and "linear" is
        the configuration's n eta, so those rules become the configuration that gives the same step."""
        eta = self.lr_rule in ("fixed", "proportional") or (self.lr_rule is None and self.config == "none")
        plain = eta and self.stragglers == "agnostic" and self.order == "bsp_asp"
        free = self.switch_seconds == 0.0  # a switch at the very end still charges its pause
        if plain and free and self.switch_at == 1.0:
            return BSP()
        if self.lr_rule is None:
            return self
        as_config = {"fixed": "none", "proportional": "none", "linear": "sync_switch"}.get(self.lr_rule)
        if self.stragglers != "elastic" and as_config is not None:
            return type(self)(**{**self.params(), "lr_rule": None, "config": as_config})
        return type(self)(**{**self.params(), "config": "sync_switch"})
