"""Search spaces: YAML files that map one-to-one onto Optuna distributions.

    name: static_k
    description: static backup workers, k in 1..n
    policies:                       # one policy family, or several: then the family is a categorical
      backup:
        k: {type: int, low: 1, high: n_workers}
        lr_rule: {type: categorical, choices: [fixed, proportional]}
      split:
        fractions: {type: simplex, size: n_workers}   # per-worker fractions of a fixed total batch
      bsp: {}                       # a family without parameters
      sync_switch:
        switch_at: {type: float, low: 0.0, high: 1.0, step: 0.0625}
        config: sync_switch         # a constant: not searched

Types: int and float (low, high, optional step, optional log), categorical (choices) and simplex (size).
`n_workers` (optionally `n_workers - 1` and so on) stands for the job's number of workers. Each family's
parameters form a conditional sub-space: Optuna names them `family.param`. Unknown keys, unknown policies
or parameters, and impossible ranges are errors naming the file and the key.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from autosync.errors import UserError

if TYPE_CHECKING:
    import optuna

SPACE_DIR = Path(__file__).resolve().parents[2] / "search_spaces"
KEYS = {"int": {"type", "low", "high", "step", "log"}, "float": {"type", "low", "high", "step", "log"},
        "categorical": {"type", "choices"}, "simplex": {"type", "size"}}
FAMILY_PARAM = "policy"  # name of the categorical over families


@dataclass
class Dimension:
    """One searched parameter: its Optuna distribution arguments, or a simplex of `size` fractions."""

    type: str
    low: float | None = None
    high: float | None = None
    step: float | None = None
    log: bool = False
    choices: list[Any] = field(default_factory=list)
    size: int = 0


@dataclass
class SearchSpace:
    """Policy families, each with its searched dimensions and its constant parameters."""

    name: str
    description: str
    path: str
    dimensions: dict[str, dict[str, Dimension]]  # family -> param -> dimension
    constants: dict[str, dict[str, Any]]  # family -> param -> fixed value

    @property
    def families(self) -> list[str]:
        return list(self.dimensions)

    def suggest(self, trial: "optuna.Trial") -> dict[str, Any]:
        """Sample one policy, as `Policy.to_dict()`, from `trial`."""
        families = self.families
        family = families[0] if len(families) == 1 else trial.suggest_categorical(FAMILY_PARAM, families)
        params = dict(self.constants[family])
        for name, dim in self.dimensions[family].items():
            key = f"{family}.{name}"
            if dim.type == "int":
                params[name] = trial.suggest_int(key, int(dim.low), int(dim.high), step=int(dim.step or 1), log=dim.log)
            elif dim.type == "float":
                params[name] = trial.suggest_float(key, dim.low, dim.high, step=dim.step, log=dim.log)
            elif dim.type == "categorical":
                params[name] = trial.suggest_categorical(key, dim.choices)
            else:  # simplex: independent uniforms mapped to a Dirichlet(1) sample by -log (exponential spacing)
                raw = [trial.suggest_float(f"{key}.{i}", 1e-6, 1.0) for i in range(dim.size)]
                weights = [-math.log(u) for u in raw]
                params[name] = [w / sum(weights) for w in weights]
        return {"policy": family, "params": params}

    def trial_params(self, policy: dict[str, Any]) -> dict[str, Any] | None:
        """The Optuna parameters that reproduce `policy` (for enqueue_trial), or None if it is outside."""
        family = policy["policy"]
        if family not in self.dimensions:
            return None
        out: dict[str, Any] = {} if len(self.families) == 1 else {FAMILY_PARAM: family}
        for name, dim in self.dimensions[family].items():
            value = policy["params"].get(name)
            if value is None:
                return None
            if dim.type == "simplex":
                out.update({f"{family}.{name}.{i}": math.exp(-v) for i, v in enumerate(value)})
            else:
                out[f"{family}.{name}"] = value
        return out

    def is_discrete(self) -> bool:
        """True when every dimension is int, categorical or stepped float (a brute-force sampler can cover it)."""
        return all(d.type in ("int", "categorical") or (d.type == "float" and d.step)
                   for dims in self.dimensions.values() for d in dims.values())

    def size(self) -> int | None:
        """Number of points of a discrete space (None if continuous)."""
        if not self.is_discrete():
            return None
        total = 0
        for dims in self.dimensions.values():
            points = 1
            for d in dims.values():
                points *= len(d.choices) if d.type == "categorical" else int(round((d.high - d.low) / (d.step or 1))) + 1
            total += points
        return total


def resolve_space_path(text: str | Path | None, default: str) -> Path:
    """A path as given, or the name of a shipped space (`static_k` -> search_spaces/static_k.yaml)."""
    if text is None:
        text = default
    path = Path(text)
    if path.exists() or path.suffix in (".yaml", ".yml"):
        return path
    return SPACE_DIR / f"{text}.yaml"


def load_space(path: str | Path, n_workers: int) -> SearchSpace:
    """Read and validate a search-space YAML file against the policy catalog and the job's n_workers."""
    from autosync.catalog import POLICIES, policy_parameters

    path = Path(path)
    if not path.exists():
        shipped = ", ".join(sorted(p.stem for p in SPACE_DIR.glob("*.yaml")))
        raise UserError(f"--space: file {path} does not exist (shipped spaces: {shipped})")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise UserError(f"{path}: not valid YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: must be a mapping with keys name, description, policies, but got {type(data).__name__}")
    unknown = set(data) - {"name", "description", "policies"}
    if unknown:
        raise UserError(f"{path}: unknown key {sorted(unknown)[0]!r} (allowed: name, description, policies)")
    families = data.get("policies")
    if not isinstance(families, dict) or not families:
        raise UserError(f"{path}: policies must be a non-empty mapping of policy name to parameters, but got {families!r}")
    dimensions: dict[str, dict[str, Dimension]] = {}
    constants: dict[str, dict[str, Any]] = {}
    for family, params in families.items():
        where = f"{path}: policies.{family}"
        if family not in POLICIES:
            raise UserError(f"{where}: unknown policy {family!r} (known: {', '.join(sorted(POLICIES))})")
        params = params or {}
        if not isinstance(params, dict):
            raise UserError(f"{where} must be a mapping of parameter to dimension or constant, but got {params!r}")
        known = policy_parameters(POLICIES[family])
        dimensions[family], constants[family] = {}, {}
        for name, spec in params.items():
            if name not in known:
                raise UserError(f"{where}.{name}: policy {family} has no parameter {name!r} "
                                f"(it takes: {', '.join(known) or 'none'})")
            if isinstance(spec, dict):
                dimensions[family][name] = _dimension(spec, f"{where}.{name}", n_workers)
            else:
                constants[family][name] = _resolve(spec, f"{where}.{name}", n_workers)
    name = data.get("name", path.stem)
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
        raise UserError(f"{path}: name must be letters, digits, '_', '-' or '.', but got {name!r}")
    return SearchSpace(name, str(data.get("description", "")), str(path), dimensions, constants)


def _resolve(value: Any, where: str, n_workers: int) -> Any:
    """Replace the symbol n_workers (also 'n_workers - 1', 'n_workers / 2') by the job's value."""
    if isinstance(value, str) and value.replace(" ", "").startswith("n_workers"):
        match = re.fullmatch(r"n_workers(?:([-+*/])(\d+))?", value.replace(" ", ""))
        if not match:
            raise UserError(f"{where} must be a number or n_workers [+-*/ integer], but got {value!r}")
        op, operand = match.groups()
        if op is None:
            return n_workers
        result = {"+": n_workers + int(operand), "-": n_workers - int(operand), "*": n_workers * int(operand),
                  "/": n_workers // max(int(operand), 1)}[op]
        return result
    return value


def _dimension(spec: dict[str, Any], where: str, n_workers: int) -> Dimension:
    kind = spec.get("type")
    if kind not in KEYS:
        raise UserError(f"{where}.type must be one of {sorted(KEYS)}, but got {kind!r}")
    unknown = set(spec) - KEYS[kind]
    if unknown:
        raise UserError(f"{where}: unknown key {sorted(unknown)[0]!r} for type {kind} "
                        f"(allowed: {', '.join(sorted(KEYS[kind]))})")
    if kind == "categorical":
        choices = spec.get("choices")
        if not isinstance(choices, list) or not choices:
            raise UserError(f"{where}.choices must be a non-empty list, but got {choices!r}")
        return Dimension("categorical", choices=[_resolve(c, where, n_workers) for c in choices])
    if kind == "simplex":
        size = _resolve(spec.get("size", "n_workers"), f"{where}.size", n_workers)
        if not isinstance(size, int) or size < 2:
            raise UserError(f"{where}.size must be an integer >= 2, but got {size!r}")
        return Dimension("simplex", size=size)
    values = {}
    for key in ("low", "high"):
        if key not in spec:
            raise UserError(f"{where}.{key} is required for type {kind}")
        value = _resolve(spec[key], f"{where}.{key}", n_workers)
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise UserError(f"{where}.{key} must be a number, but got {value!r}")
        if kind == "int" and value != int(value):
            raise UserError(f"{where}.{key} must be an integer for type int, but got {value!r}")
        values[key] = value
    low, high = values["low"], values["high"]
    if high < low:
        raise UserError(f"{where}.high must be >= low={low}, but got {high}")
    step, log = spec.get("step"), bool(spec.get("log", False))
    if step is not None and (not isinstance(step, (int, float)) or step <= 0):
        raise UserError(f"{where}.step must be a positive number, but got {step!r}")
    if log and (low <= 0 or step is not None):
        raise UserError(f"{where}.log needs low > 0 and no step, but got low={low}, step={step}")
    return Dimension(kind, low=low, high=high, step=step, log=log)
