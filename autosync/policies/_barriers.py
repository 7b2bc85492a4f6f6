"""Barriers of the classic policies: wait for the fastest k (BSP is k = n), apply on arrival, bounded staleness."""

from __future__ import annotations

import math
from typing import Sequence

from autosync.policies._base import Arrival, Barrier, ServerView

#: Learning-rate rules of the synchronous barriers: the factor on the job's eta for an update that
#: aggregates k of n workers' gradients. "fixed" (eta whatever k) and "proportional" (eta k / n: eta is the
#: full batch's rate) are the DBW paper's (sec. 4). "sqrt" and "linear" read eta as the rate of one worker's
#: batch and scale it with the batch aggregated: by its square root (Krizhevsky 2014; Hoffer et al. 2017,
#: sec. 4), or linearly (Goyal et al. 2017; Sync-Switch's n eta for BSP, sec. IV-C). They depart from the
#: papers' online policies, which train with the job's eta whatever k they choose: on a job tuned at one
#: worker's batch, BSP's n-fold batch at the same eta can be many times slower to the target.
LR_RULES = {
    "fixed": lambda k, n: 1.0,
    "proportional": lambda k, n: k / n,
    "sqrt": lambda k, n: math.sqrt(k),
    "linear": lambda k, n: float(k),
}


def lr_factor(rule: str, k: int, n: int) -> float:
    """The factor `rule` (`LR_RULES`) puts on eta for an update of k gradients out of n."""
    return LR_RULES[rule](k, n)


def rule_as_run(rule: str, k: int, n: int) -> str:
    """The rule an update of k gradients out of n runs under `rule` as: "fixed" where its factor on eta is 1
    ("sqrt" and "linear" at k = 1, "proportional" at k = n), else `rule` itself (a policy's canonical form)."""
    return "fixed" if lr_factor(rule, k, n) == 1.0 else rule


def check_lr_rule(rule: str, key: str = "lr_rule") -> None:
    """A clear error for an unknown learning-rate rule (`key`: the parameter's name where it is set)."""
    if not isinstance(rule, str) or rule not in LR_RULES:
        raise ValueError(f"{key} must be one of {list(LR_RULES)}, but got {key}={rule!r}")


class FastestK(Barrier):
    """Wait for the fastest k gradients of the current version; later ones are discarded.

    Push & wait (DBW paper sec. 2): a worker still computing on an old version finishes, its gradient
    is discarded on arrival, then it starts on the newest parameters. The learning rate is eta times the
    factor `lr_rule` gives for the gradients aggregated (`LR_RULES`; "proportional": eta * k / n, Chen et
    al. 2016, DBW sec. 4). `lr_multiplier` scales it further (Sync-Switch's configuration policy trains
    BSP with n * eta, sec. IV-C).
    """

    # may_start reads the version and the worker's own last version (ElasticBSP's excluded set changes in
    # the schedule's update hook)
    starts_change_only_at_updates = True
    discards_stale = True  # accept: only gradients of the current version

    def __init__(self, k: int | None = None, lr_rule: str = "fixed", lr_multiplier: float = 1.0):
        self.k = k
        self.lr_rule = lr_rule
        self.lr_multiplier = lr_multiplier

    def reset(self, n_workers: int, batch_size: int) -> None:
        if self.k is not None and not 1 <= self.k <= n_workers:
            raise ValueError(f"k must be between 1 and n_workers={n_workers}, but got k={self.k}")
        check_lr_rule(self.lr_rule)
        self._k = n_workers if self.k is None else self.k

    def target_count(self, server: ServerView) -> int:
        return self._k

    def accept(self, server: ServerView, arrival: Arrival) -> bool:
        return arrival.version == server.version and len(server.buffer) < self.target_count(server)

    def ready(self, server: ServerView) -> list[Arrival] | None:
        k = self.target_count(server)
        return list(server.buffer[:k]) if len(server.buffer) >= k else None

    def may_start(self, server: ServerView, worker: int) -> bool:
        return server.last_version[worker] < server.version

    def lr_scale(self, server: ServerView, n_aggregated: int) -> float:
        return lr_factor(self.lr_rule, n_aggregated, server.n_workers) * self.lr_multiplier


#: Learning-rate rules of the asynchronous barriers, which apply one gradient at a time: the factor on eta
#: for a gradient tau updates stale (tau >= 1). "fixed" (eta, the papers'); "staleness" (eta / tau: Zhang,
#: Gupta, Lian and Liu, IJCAI 2016, "Staleness-aware Async-SGD"); "sqrt_staleness" (eta / sqrt(tau)). With
#: n workers a gradient is about n - 1 updates stale, so a round of n gradients moves the model about as far
#: as one BSP update under the synchronous rule of the same name: "fixed" as BSP at n eta ("linear"),
#: "sqrt_staleness" as BSP at sqrt(n) eta ("sqrt"), "staleness" as BSP at eta ("fixed").
ASYNC_LR_RULES = {
    "fixed": lambda tau: 1.0,
    "sqrt_staleness": lambda tau: 1.0 / math.sqrt(max(1, tau)),
    "staleness": lambda tau: 1.0 / max(1, tau),
}


def check_async_lr_rule(rule: str, key: str = "lr_rule") -> None:
    """A clear error for an unknown learning-rate rule of an asynchronous barrier (`key`: the parameter)."""
    if not isinstance(rule, str) or rule not in ASYNC_LR_RULES:
        raise ValueError(f"{key} must be one of {list(ASYNC_LR_RULES)}, but got {key}={rule!r}")


class OnArrival(Barrier):
    """Apply every gradient as soon as it arrives (ASP); the worker restarts on the newest parameters.

    `lr_rule` (`ASYNC_LR_RULES`): "fixed" applies each gradient at eta, "sqrt_staleness" at eta / sqrt(tau),
    "staleness" at eta / tau (tau: the updates made since the gradient's parameters were sent).
    """

    always_applies = True

    def __init__(self, lr_rule: str = "fixed"):
        self.lr_rule = lr_rule

    def reset(self, n_workers: int, batch_size: int) -> None:
        check_async_lr_rule(self.lr_rule)

    def group_lr_scale(self, server: ServerView, group: Sequence[Arrival]) -> float:
        staleness = max(server.version - a.version for a in group)
        return ASYNC_LR_RULES[self.lr_rule](staleness) * self.lr_scale(server, len(group))

    def accept(self, server: ServerView, arrival: Arrival) -> bool:
        return True

    def ready(self, server: ServerView) -> list[Arrival] | None:
        return [server.buffer[0]] if server.buffer else None

    def may_start(self, server: ServerView, worker: int) -> bool:
        return True

    def target_count(self, server: ServerView) -> int:
        return 1


class BoundedStaleness(OnArrival):
    """Stale synchronous parallel (Ho et al. 2013): apply on arrival, but a worker may run at most
    `staleness` tasks ahead of the slowest worker; a faster one waits at the barrier."""

    def __init__(self, staleness: int = 3):
        super().__init__()
        self.staleness = staleness

    def reset(self, n_workers: int, batch_size: int) -> None:
        super().reset(n_workers, batch_size)
        if not isinstance(self.staleness, int) or self.staleness < 0:
            raise ValueError(f"staleness must be an integer >= 0, but got staleness={self.staleness!r}")

    def may_start(self, server: ServerView, worker: int) -> bool:
        return server.applied[worker] - min(server.applied) <= self.staleness
