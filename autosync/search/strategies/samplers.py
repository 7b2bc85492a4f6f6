"""The Optuna samplers `autosync tune --sampler NAME` stands for."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from autosync.core.errors import UserError
from autosync.policies import SyncSwitch
from autosync.search.space import SearchSpace
from autosync.search.tune_options import AUTO, RACE, SAMPLERS, SWITCH_POINT_SAMPLERS
from autosync.search.study._optuna_internals import brute_force_sampler

if TYPE_CHECKING:
    import optuna

__all__ = ["AUTO", "RACE", "SAMPLERS", "SWITCH_POINT_SAMPLERS", "check_sampler", "fixed_dimensions", "make_sampler",
           "refuse_without_a_switch_point", "sampler_for"]


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
    the race off the policy space, gp on two objectives, grid on a continuous space, a switch-point search on a
    space without one (`fixed_dimensions`). What `make_sampler` builds; a request checks it without building it,
    so that a cache hit loads no Optuna."""
    name = sampler_for(name, space)
    if name == RACE and space.name != "policy":
        raise UserError(f"--sampler race races the lattice of every policy: it needs --space policy, but got "
                        f"--space {space.name}")
    if name == "gp" and multi_objective:
        raise UserError("--sampler gp handles one objective only; use tpe for --objective time,metric")
    if name == "grid" and not space.is_discrete():
        raise UserError(f"--sampler grid needs a discrete space (int, categorical or stepped float), but "
                        f"{space.path} has continuous dimensions: {', '.join(space.continuous_dimensions())}")
    if name in SWITCH_POINT_SAMPLERS:
        fixed_dimensions(space, name)
    if name == "ladder":  # refused with the request, before a study storage is opened
        ladder_rungs(space)
    return name


def ladder_rungs(space: SearchSpace, n_trials: int | None = None) -> tuple[float, ...]:
    """The ladder's first `n_trials` rungs that the space's switch_at holds (`ladder.rungs_within`); one line
    where it holds none."""
    # not at the top: optuna, which the ladder's sampler subclasses at its top and a cache hit, which loads
    # this module, never loads (benchmarks/bench_startup.py)
    from autosync.search.strategies.ladder import DEFAULT_RUNGS, rungs_within

    rungs = rungs_within(space.dimensions[SyncSwitch.name]["switch_at"])
    if not rungs:
        raise UserError(f"--sampler ladder: {space.path}: sync_switch.switch_at holds none of the ladder's rungs "
                        f"({', '.join(f'{r:g}' for r in DEFAULT_RUNGS)}); use --sampler binary or tpe there")
    return rungs[:n_trials]


def refuse_without_a_switch_point(space: SearchSpace, who: str) -> dict[str, Any]:
    """The space's Sync-Switch dimensions, refused in one line naming `who` unless it searches Sync-Switch alone
    with a switch_at dimension: what a switch-point search (Algorithm 1, the ladder) moves."""
    dims = space.dimensions.get(SyncSwitch.name, {})
    if space.policies != [SyncSwitch.name] or "switch_at" not in dims:
        raise UserError(f"{who} searches the switch point: the space must have one policy sync_switch with a "
                        f"switch_at dimension, but {space.path} has {space.policies}")
    return dims


def fixed_dimensions(space: SearchSpace, sampler: str) -> dict[str, Any]:
    """The Optuna parameters a switch-point search (`--sampler sampler`) holds fixed beside switch_at: each
    other Sync-Switch dimension at its first choice; a space it cannot search is one line (the request checks
    it before any storage is opened)."""
    dims = refuse_without_a_switch_point(space, f"--sampler {sampler}")
    others: dict[str, Any] = {}
    for name, dim in dims.items():
        if name == "switch_at":
            continue
        if dim.type != "categorical":
            raise UserError(f"--sampler {sampler}: {space.path}: sync_switch.{name} must be a categorical "
                            "(its first choice is used), or a constant")
        others[f"sync_switch.{name}"] = dim.choices[0]
    return others


def make_sampler(name: str, seed: int, space: SearchSpace, multi_objective: bool,
                 n_trials: int | None = None) -> "optuna.samplers.BaseSampler":
    """The Optuna sampler `--sampler name` stands for (`n_trials`: the ladder's number of rungs), once
    `check_sampler` passed it."""
    import optuna

    name = check_sampler(name, space, multi_objective)
    if name == "ladder":
        from autosync.search.strategies.ladder import LadderSampler  # not at the top: as in ladder_rungs

        return LadderSampler(rungs=ladder_rungs(space, n_trials))
    if name == RACE:
        return optuna.samplers.RandomSampler(seed=seed)  # the race queues every run itself: never asked
    if name in ("tpe", "binary"):  # binary enqueues every candidate itself: its sampler is never asked
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=5, multivariate=True, group=True)
    if name == "gp":
        return optuna.samplers.GPSampler(seed=seed, n_startup_trials=5)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    return brute_force_sampler(seed)  # (one that a trial left without parameters by a kill does not stop)
