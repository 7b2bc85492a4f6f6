"""The classic policies: BSP, ASP, SSP and static backup workers."""

from __future__ import annotations

import math
from typing import Any

from autosync.policies._barriers import BoundedStaleness, FastestK, OnArrival, rule_as_run
from autosync.policies._base import Policy, Preset, Strategies


class BSP(Policy):
    """Bulk synchronous parallel: every iteration waits for all n gradients."""

    name = "bsp"
    paper_name = "BSP"
    presets = (Preset("barrier", "bsp"),)

    @classmethod
    def search_baselines(cls, n_workers: int) -> list[dict[str, Any]]:
        return [{}]

    def strategies(self, n_workers: int, batch_size: int) -> Strategies:
        return Strategies(barrier=FastestK(k=None))


class ASP(Policy):
    """Asynchronous parallel: every gradient is applied on arrival, whatever its staleness.

    Args:
        lr_rule: "fixed" (eta for every gradient, the default), "sqrt_staleness" (eta / sqrt(tau) for a
            gradient tau updates stale) or "staleness" (eta / tau: Zhang et al., IJCAI 2016), `ASYNC_LR_RULES`.
    """

    name = "asp"
    paper_name = "ASP"
    presets = (Preset("barrier", "asp", ("asp_lr_rule",), renamed={"asp_lr_rule": "lr_rule"}),)

    @classmethod
    def search_baselines(cls, n_workers: int) -> list[dict[str, Any]]:
        return [{}]

    def __init__(self, lr_rule: str = "fixed") -> None:
        self.lr_rule = lr_rule

    def strategies(self, n_workers: int, batch_size: int) -> Strategies:
        return Strategies(barrier=OnArrival(lr_rule=self.lr_rule))  # its reset refuses an unknown rule


class SSP(Policy):
    """Stale synchronous parallel with staleness bound s (s = 0 keeps workers in lock step)."""

    name = "ssp"
    paper_name = "SSP"
    presets = (Preset("barrier", "ssp", ("staleness",)),)

    def __init__(self, staleness: int = 3) -> None:
        self.staleness = staleness

    def strategies(self, n_workers: int, batch_size: int) -> Strategies:
        return Strategies(barrier=BoundedStaleness(staleness=self.staleness))


class BackupWorkers(Policy):
    """Static backup workers (Chen et al. 2016): wait for the fastest k of n gradients.

    Args:
        k: gradients aggregated per iteration, 1 <= k <= n.
        lr_rule: "fixed" keeps eta; "proportional" uses eta * k / n (DBW sec. 4); "sqrt" and "linear" scale
            eta, one worker's rate, by sqrt(k) and k (`LR_RULES`).
    """

    name = "backup"
    paper_name = "Backup-Workers"
    label_params = ("k",)  # 'backup(lr_rule=proportional)' would hide which k it is
    presets = (Preset("barrier", "backup", ("k", "lr_rule")),)

    @classmethod
    def search_baselines(cls, n_workers: int) -> list[dict[str, Any]]:
        """BSP's form (k = n), then the static k = 3n/4 with eta * k / n that the DBW paper starts from."""
        return [{"k": n_workers, "lr_rule": "fixed"},
                {"k": cls.sized_defaults(n_workers)["k"], "lr_rule": "proportional"}]

    @classmethod
    def sized_defaults(cls, n_workers: int) -> dict[str, Any]:
        """k = 3n/4, the static setting the DBW paper finds good under moderate noise."""
        return {"k": max(1, 3 * n_workers // 4)}

    def __init__(self, k: int = 12, lr_rule: str = "fixed") -> None:
        self.k = k
        self.lr_rule = lr_rule

    def strategies(self, n_workers: int, batch_size: int) -> Strategies:
        return Strategies(barrier=FastestK(k=self.k, lr_rule=self.lr_rule))

    def toward_bsp(self, n_workers: int) -> tuple[Policy, ...]:
        """The same k at BSP's step, where the rule raises it (a final metric's noise floor goes with the step
        over the batch aggregated: eta sqrt(k) / k and eta k / k against eta / k at "fixed" and BSP's eta / n),
        then k halfway to n under the same rule (Sync-Switch's bisection towards BSP, Algorithm 1): the two
        ways a static k that ended short of BSP's final metric gets closer to it."""
        steps: list[Policy] = []
        if self.lr_rule in ("sqrt", "linear"):
            steps.append(BackupWorkers(k=self.k, lr_rule="fixed"))
        if self.k < n_workers:
            steps.append(BackupWorkers(k=self.k + math.ceil((n_workers - self.k) / 2), lr_rule=self.lr_rule))
        return tuple(steps)

    def canonical(self, n_workers: int, optimizer: Any = None) -> Policy:
        """A rule whose factor on eta is 1 at this k runs as "fixed" (`rule_as_run`: "sqrt" and "linear" at
        k = 1, "proportional" at k = n); and k = n at "fixed" waits for everyone at eta: BSP."""
        rule = rule_as_run(self.lr_rule, self.k, n_workers)
        if self.k == n_workers and rule == "fixed":
            return BSP()
        return self if rule == self.lr_rule else BackupWorkers(k=self.k, lr_rule=rule)
