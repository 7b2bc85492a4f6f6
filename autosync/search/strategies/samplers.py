"""The Optuna samplers `autosync tune --sampler NAME` stands for."""

from __future__ import annotations

from typing import TYPE_CHECKING

from autosync.core.errors import UserError
from autosync.search.space import SearchSpace
from autosync.search.tune_options import AUTO, RACE, SAMPLERS, SWITCH_POINT_SAMPLERS
from autosync.search.study._optuna_internals import brute_force_sampler

if TYPE_CHECKING:
    import optuna

__all__ = ["AUTO", "RACE", "SAMPLERS", "SWITCH_POINT_SAMPLERS", "check_sampler", "make_sampler", "sampler_for"]


def sampler_for(name: str, space: SearchSpace) -> str:
    """The sampler `--sampler name` runs on `space`: `auto` is the race on the policy space (`autosync.race`:
    the lattice of every policy, raced on common seeds), else TPE."""
    if name == AUTO:
        return RACE if space.name == "policy" else "tpe"
    if name not in SAMPLERS:
        raise UserError(f"--sampler must be one of {[AUTO, *SAMPLERS]}, but got {name!r}")
    return name


def check_sampler(name: str, space: SearchSpace, multi_objective: bool) -> str:
    """The sampler `--sampler name` runs on `space` (`sampler_for`), refused in one line where it cannot run:
    the race off the policy space, gp on two objectives, grid on a continuous space. What `make_sampler`
    builds; a request checks it without building it, so that a cache hit loads no Optuna."""
    name = sampler_for(name, space)
    if name == RACE and space.name != "policy":
        raise UserError(f"--sampler race races the lattice of every policy: it needs --space policy, but got "
                        f"--space {space.name}")
    if name == "gp" and multi_objective:
        raise UserError("--sampler gp handles one objective only; use tpe for --objective time,metric")
    if name == "grid" and not space.is_discrete():
        raise UserError(f"--sampler grid needs a discrete space (int, categorical or stepped float), but "
                        f"{space.path} has continuous dimensions: {', '.join(space.continuous_dimensions())}")
    return name


def make_sampler(name: str, seed: int, space: SearchSpace, multi_objective: bool,
                 n_trials: int | None = None) -> "optuna.samplers.BaseSampler":
    """The Optuna sampler `--sampler name` stands for (`n_trials`: the ladder's number of rungs), once
    `check_sampler` passed it."""
    import optuna

    name = check_sampler(name, space, multi_objective)
    if name == "ladder":
        # not at the top: optuna, which the ladder's sampler subclasses at its top and a cache hit, which
        # loads this module, never loads (benchmarks/bench_startup.py)
        from autosync.search.strategies.ladder import DEFAULT_RUNGS, LadderSampler

        return LadderSampler(rungs=DEFAULT_RUNGS[:n_trials])
    if name == RACE:
        return optuna.samplers.RandomSampler(seed=seed)  # the race queues every run itself: never asked
    if name in ("tpe", "binary"):  # binary enqueues every candidate itself: its sampler is never asked
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=5, multivariate=True, group=True)
    if name == "gp":
        return optuna.samplers.GPSampler(seed=seed, n_startup_trials=5)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    return brute_force_sampler(seed)  # (one that a trial left without parameters by a kill does not stop)
