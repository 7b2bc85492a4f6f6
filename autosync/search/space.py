"""Search spaces: YAML files that map one-to-one onto Optuna distributions.

    name: static_k
    description: static backup workers, k in 1..n
    policies:                       # one policy, or several: then which policy is a categorical
      backup:
        k: {type: int, low: 1, high: n_workers}
        lr_rule: {type: categorical, choices: [fixed, proportional]}
      split:
        fractions: {type: simplex, size: n_workers}   # per-worker fractions of a fixed total batch
      bsp: {}                       # a policy without parameters
      sync_switch:
        switch_at: {type: float, low: 0.0, high: 1.0, step: 0.0625}
        config: sync_switch         # a constant: not searched

Types: int and float (low, high, optional step, optional log), categorical (choices; `null` among them is
None, for a parameter that takes it) and simplex (size).
`n_workers` (optionally `n_workers - 1` and so on) stands for the job's number of workers. Each policy's
parameters form a conditional sub-space: Optuna names them `policy.param`. Unknown keys, unknown policies
or parameters, and impossible ranges are errors naming the file and the key.
"""

from __future__ import annotations

import inspect
import itertools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator

from autosync.data import SPACE_DIR
from autosync.core.errors import SpaceFileError, UserError
from autosync.core.loader import read_yaml_file, short_repr
from autosync.search.space_file import (
    Constant, Dimension, SpaceFile, describe, problems_with_policies,
)
from autosync.search import space_bounds
from autosync.catalog import POLICIES, label_of, policy_parameters, takes_type
from autosync.policies import Composed
from autosync.policies._composed import SLOTS, check_composition

if TYPE_CHECKING:
    import optuna

__all__ = ["SearchSpace", "can_sample", "load_space", "resolve_space_path"]

POLICY_PARAM = "policy"  # name of the categorical over the space's policies


@dataclass
class SearchSpace:
    """The policies a search samples from, each with its searched dimensions and its constant parameters."""

    name: str
    description: str
    path: str
    dimensions: dict[str, dict[str, Dimension]]  # policy -> param -> dimension
    constants: dict[str, dict[str, Any]]  # policy -> param -> fixed value
    patience: int = 0  # a search stops once this many trials in a row found nothing faster (0: the whole budget)

    @property
    def policies(self) -> list[str]:
        """The policies the space samples from (each with its own sub-space)."""
        return list(self.dimensions)

    def suggest(self, trial: "optuna.Trial") -> dict[str, Any]:
        """Sample one policy, as `Policy.to_dict()`, from `trial`."""
        policies = self.policies
        policy_name = policies[0] if len(policies) == 1 else trial.suggest_categorical(POLICY_PARAM, policies)
        params = dict(self.constants[policy_name])
        for name, dim in self.dimensions[policy_name].items():
            key = f"{policy_name}.{name}"
            if not _holds(dim, params):
                continue
            d = _distribution(dim)
            if dim.type == "int":
                params[name] = trial.suggest_int(key, d.low, d.high, step=d.step, log=d.log)
            elif dim.type == "float":
                params[name] = trial.suggest_float(key, d.low, d.high, step=d.step, log=d.log)
            elif dim.type == "categorical":
                params[name] = trial.suggest_categorical(key, d.choices)
            else:  # simplex: independent uniforms mapped to a Dirichlet(1) sample by -log (exponential spacing)
                raw = [trial.suggest_float(f"{key}.{i}", d.low, d.high) for i in range(dim.size)]
                weights = [-math.log(u) for u in raw]
                params[name] = [w / sum(weights) for w in weights]
        return {"policy": policy_name, "params": params}

    def trial_params(self, policy: dict[str, Any]) -> dict[str, Any] | None:
        """The Optuna parameters that reproduce `policy` (for enqueue_trial), or None if it is outside.

        A parameter the policy leaves out takes its default (`compose(barrier=bsp)` has schedule none)."""
        policy_name = policy["policy"]
        if policy_name not in self.dimensions:
            return None
        defaults = {k: v for k, v in policy_parameters(POLICIES[policy_name]).items() if v is not inspect.Parameter.empty}
        params = {**defaults, **policy["params"]}
        out: dict[str, Any] = {} if len(self.policies) == 1 else {POLICY_PARAM: policy_name}
        for name, dim in self.dimensions[policy_name].items():
            if not _holds(dim, params):
                continue
            value = params.get(name)
            if (value is None and dim.type != "categorical") or not _admits(dim, value):
                return None  # None passes only as a categorical's choice (Sync-Switch's lr_rule: the config's)
            if dim.type == "simplex":
                out.update({f"{policy_name}.{name}.{i}": math.exp(-v) for i, v in enumerate(value)})
            else:
                out[f"{policy_name}.{name}"] = value
        return out

    def points(self) -> Iterator[dict[str, Any]]:
        """Every policy of a discrete space, as `suggest` samples them (conditions honoured): what an
        exhaustive search trains."""
        if not self.is_discrete():
            raise ValueError(f"{self.path} has continuous dimensions ({', '.join(self.continuous_dimensions())}): "
                             "its points cannot be listed")
        for policy_name, dims in self.dimensions.items():
            for params in _combinations(list(dims.items()), dict(self.constants[policy_name])):
                yield {"policy": policy_name, "params": params}

    def is_discrete(self) -> bool:
        """True when every dimension is int, categorical or stepped float (a brute-force sampler can cover it)."""
        return not self.continuous_dimensions()

    def continuous_dimensions(self) -> list[str]:
        """The dimensions that are neither int, categorical nor stepped float, as policies.NAME.PARAM."""
        return [f"policies.{policy}.{name}" for policy, dims in self.dimensions.items() for name, d in dims.items()
                if not (d.type in ("int", "categorical") or (d.type == "float" and d.step))]

    def size(self) -> int | None:
        """Number of points of a discrete space (None if continuous); conditional dimensions count only
        where their condition holds."""
        if not self.is_discrete():
            return None
        return sum(_points(list(dims.items()), dict(self.constants[policy_name]))
                   for policy_name, dims in self.dimensions.items())


def _distribution(dim: Dimension) -> "optuna.distributions.BaseDistribution":
    """The Optuna distribution `SearchSpace.suggest` samples `dim` from (a simplex: each of its uniforms)."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    if dim.type == "int":
        return IntDistribution(int(dim.low), int(dim.high), step=int(dim.step or 1), log=dim.log)
    if dim.type == "float":
        return FloatDistribution(dim.low, dim.high, step=dim.step, log=dim.log)
    if dim.type == "categorical":
        return CategoricalDistribution(dim.choices)
    return FloatDistribution(1e-6, 1.0)


def _admits(dim: Dimension, value: Any) -> bool:
    """Whether `value` is one of a categorical's choices, or inside a number's [low, high]."""
    if dim.type == "categorical":
        return value in dim.choices
    if dim.type in ("int", "float"):
        return isinstance(value, (int, float)) and dim.low <= value <= dim.high
    return True


def _holds(dim: Dimension, params: dict[str, Any]) -> bool:
    """Whether a conditional dimension is sampled given the parameters chosen before it."""
    return dim.when is None or any(all(params.get(key) in values for key, values in clause.items())
                                   for clause in dim.when)


def _points(dims: list[tuple[str, Dimension]], chosen: dict[str, Any]) -> int:
    """Points of a policy's discrete dimensions (in file order), given the values `chosen` so far: a
    dimension a later condition reads is counted value by value, any other by its number of values."""
    if not dims:
        return 1
    (name, dim), rest = dims[0], dims[1:]
    if not _holds(dim, chosen):
        return _points(rest, chosen)
    if any(name in clause for _, later in rest for clause in (later.when or [])):
        return sum(_points(rest, {**chosen, name: v}) for v in _grid(dim))
    return _grid_size(dim) * _points(rest, chosen)


def _combinations(dims: list[tuple[str, Dimension]], chosen: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every assignment of a policy's discrete dimensions (in file order) extending `chosen`."""
    if not dims:
        yield chosen
        return
    (name, dim), rest = dims[0], dims[1:]
    if not _holds(dim, chosen):
        yield from _combinations(rest, chosen)
        return
    for value in _grid(dim):
        yield from _combinations(rest, {**chosen, name: value})


def _grid(dim: Dimension) -> Iterator[Any]:
    """Every value a discrete dimension can sample, in order: a categorical's choices, or low, low + step, ...
    up to high (an int's step is 1 by default; a step that does not divide the range stops short of high)."""
    if dim.type == "categorical":
        yield from dim.choices
        return
    step = dim.step or 1
    for i in range(_grid_size(dim)):
        yield int(round(dim.low + i * step)) if dim.type == "int" else dim.low + i * step


def _grid_size(dim: Dimension) -> int:
    """How many values `_grid` gives, counted without listing them (an int range may hold 10^9)."""
    if dim.type == "categorical":
        return len(dim.choices)
    return int(math.floor((dim.high - dim.low) / (dim.step or 1) + 1e-9)) + 1


def _shipped_spaces() -> str:
    """The names of the shipped spaces, for an error that needs a space named."""
    return ", ".join(sorted(p.stem for p in SPACE_DIR.glob("*.yaml")))


def resolve_space_path(text: str | Path | None, default: str, flag: str = "--space") -> Path:
    """A path as given, or the name of a shipped space (`static_k` -> search_spaces/static_k.yaml); an empty
    name is refused naming `flag`, the option that gave it (as a path it would be the working directory)."""
    if text is None:
        text = default
    if not str(text).strip():
        raise UserError(f"{flag} must name a search-space file or a shipped space ({_shipped_spaces()}), "
                        f"but got {str(text)!r}")
    path = Path(text)
    if path.exists() or path.suffix in (".yaml", ".yml"):
        return path
    return SPACE_DIR / f"{text}.yaml"


def load_space(path: str | Path, n_workers: int, flag: str = "--space") -> SearchSpace:
    """Read and validate a search-space YAML file against the policy catalog and the job's n_workers.

    Every problem is reported at once (`SpaceFileError`, one line each), naming the file, the field,
    the rule and the value, as job files are; a missing file names `flag`, the option that gave it.
    """
    from pydantic import ValidationError

    path = Path(path)
    if not path.exists():
        raise UserError(f"{flag}: file {path} does not exist (shipped spaces: {_shipped_spaces()})")
    data = read_yaml_file(path, SpaceFileError)  # a directory, a binary file, invalid YAML: one line
    if not isinstance(data, dict):
        raise SpaceFileError(str(path), [f"must be a mapping with keys name, description, policies, but got "
                                         f"{type(data).__name__}"])
    problems = problems_with_policies(data.get("policies"))
    try:
        spec = SpaceFile.model_validate(data, context={"n_workers": n_workers})
    except ValidationError as exc:
        problems = [describe(e) for e in exc.errors()] + problems
    if problems:
        raise SpaceFileError(str(path), problems)
    dimensions = {policy_name: {name: p.dimension() for name, p in params.items() if not isinstance(p, Constant)}
                  for policy_name, params in spec.policies.items()}
    constants = {policy_name: {name: p.value for name, p in params.items() if isinstance(p, Constant)}
                 for policy_name, params in spec.policies.items()}
    problems = type_problems(dimensions, constants) or refused_compositions(dimensions, constants) \
        or space_bounds.bound_problems(dimensions, constants, n_workers,
                                       compositions=_compositions(dimensions, constants))
    if problems:
        raise SpaceFileError(str(path), problems)
    name = spec.name or path.stem
    _refuse_a_shipped_name(path, name, data, named=spec.name is not None)
    return SearchSpace(name, spec.description, str(path), dimensions, constants, spec.patience)


def _refuse_a_shipped_name(path: Path, name: str, data: dict[str, Any], named: bool = True) -> None:
    """A space file named as a shipped space but unlike it (a copy edited without renaming it) is refused: a
    study is keyed by the job and the space's name, so the shipped space's cached answer, a point perhaps
    outside the edited space, answered for it, and its trials mixed with the shipped space's."""
    shipped = SPACE_DIR / f"{name}.yaml"
    if not shipped.is_file() or path.resolve() == shipped.resolve():
        return
    if read_yaml_file(shipped, SpaceFileError) != data:
        given = f"name: {name!r}" if named else f"its file name makes it space {name!r} (it has no name:), which"
        raise SpaceFileError(str(path), [f"{given} is the shipped space {shipped.name}'s, but the file differs "
                                         "from it: a study is keyed by the space's name, so give the file a name "
                                         "of its own (name: my_space)"])


def type_problems(dimensions: dict[str, dict[str, Dimension]], constants: dict[str, dict[str, Any]]) -> list[str]:
    """Constants, choices and ranges of a type the policy's parameter does not take (the type of its default,
    as `make_policy` checks it): every trial would fail on them, so the file is refused instead."""
    problems = []
    for policy_name, params in constants.items():
        known = policy_parameters(POLICIES[policy_name])
        values = [(name, value, short_repr(value)) for name, value in params.items()]
        for name, dim in dimensions[policy_name].items():
            if dim.type == "categorical":
                values += [(name, choice, f"the choice {short_repr(choice)}") for choice in dim.choices]
            elif dim.type in ("int", "float"):  # a trial samples an int, or a float
                values.append((name, int(dim.low) if dim.type == "int" else float(dim.low), f"type {dim.type}"))
        reported = set()
        for name, value, described in values:
            default = known.get(name)
            if default is None or default is inspect.Parameter.empty or name in reported:
                continue  # no default to take a type from, or said already
            if not takes_type(value, type(default)):
                reported.add(name)
                problems.append(f"policies.{policy_name}.{name} must be {type(default).__name__} (policy {policy_name}'s "
                                f"default is {default!r}), but got {described}")
    return problems


def refused_compositions(dimensions: dict[str, dict[str, Dimension]],
                         constants: dict[str, dict[str, Any]]) -> list[str]:
    """For a `compose` policy, the first composition the space can sample that `check_composition` refuses,
    with the rule (as one problem line); none where every sample is allowed.

    `check_composition` reads the four slots' choices, and every other parameter only as its default or
    not. So each slot's every choice is tried where its `when` holds, and any other dimension takes each
    value a later condition names that it can sample, and one it can sample that none names, away from the
    default where it can.
    """
    if Composed.name not in dimensions:
        return []
    defaults = Composed().params()
    for params in _compositions(dimensions, constants):
        try:
            check_composition(Composed(**params))
        except (ValueError, TypeError) as exc:
            label = label_of({"policy": Composed.name, "params": {**defaults, **params}})
            return [f"policies.{Composed.name} can sample {label}, which is refused: {exc}"]
    return []


def _compositions(dimensions: dict[str, dict[str, Dimension]],
                  constants: dict[str, dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """The samples of a `compose` policy that `refused_compositions` tries (none without one)."""
    if Composed.name in dimensions:
        yield from _samples(list(dimensions[Composed.name].items()), dict(constants[Composed.name]),
                            Composed().params(), SLOTS)


def _samples(dims: list[tuple[str, Dimension]], chosen: dict[str, Any], defaults: dict[str, Any],
             slots: Iterable[str]):
    """Every sample of a policy's dimensions that matters to `refused_compositions` (`_points`' walk)."""
    if not dims:
        yield dict(chosen)
        return
    (name, dim), rest = dims[0], dims[1:]
    if not _holds(dim, chosen) or dim.type == "simplex":  # a simplex is no slot and owns none
        yield from _samples(rest, chosen, defaults, slots)
        return
    if dim.type == "categorical" and name in slots:
        values = list(dim.choices)
    else:
        named = [v for _, later in rest for clause in (later.when or []) for v in clause.get(name, [])]
        named = list(dict.fromkeys(v for v in named if can_sample(dim, v)))
        free = [v for v in _candidates(dim, len(named) + 2) if v not in named]
        values = (named + [next((v for v in free if v != defaults.get(name)), free[0])]) if free else named
    for value in values:
        yield from _samples(rest, {**chosen, name: value}, defaults, slots)


def _candidates(dim: Dimension, count: int) -> list[Any]:
    """Up to `count` distinct values a dimension can sample (every choice of a categorical): with
    `count` = (values named elsewhere) + 2, at least two of them are named nowhere."""
    if dim.type == "categorical":
        return list(dim.choices)
    if dim.type == "float" and not dim.step:  # a continuous float: points inside its range
        return [dim.low + (dim.high - dim.low) * i / max(count - 1, 1) for i in range(count)]
    return list(itertools.islice(_grid(dim), count))


def can_sample(dim: Dimension, value: Any) -> bool:
    """Whether a categorical or number dimension can sample `value` (a number: inside its range, on its step)."""
    if dim.type == "categorical":
        return value in dim.choices
    if isinstance(value, bool) or not _admits(dim, value):
        return False
    return not dim.step or abs((value - dim.low) / dim.step - round((value - dim.low) / dim.step)) < 1e-9
