"""The search-space file format, validated by pydantic as job files are: unknown keys are errors, and every
problem is reported at once naming the field, the rule and the value.

    name: static_k                  # letters, digits, '_', '-', '.' (default: the file's stem)
    description: ...
    patience: 5                     # stop once 5 trials in a row found nothing faster (default 0: the whole budget)
    policies:                       # policy name -> parameter -> dimension (a mapping) or constant
      backup:
        k: {type: int, low: 1, high: n_workers}
        lr_rule: {type: categorical, choices: [fixed, proportional]}

`n_workers` (optionally `n_workers - 1`, `n_workers * 2`, `n_workers / 2`, `n_workers*3/4 - 1`: the grammar
n_workers[*a][/b][+-c]) stands for the job's number of workers; it is resolved through the validation
context `{"n_workers": n}`, floored.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, Optional, Union

from pydantic import (
    BaseModel, BeforeValidator, ConfigDict, Discriminator, Field, Tag, ValidationInfo, field_validator, model_validator,
)

from autosync.core.loader import TYPE_RULES, plain_key, short_repr
from autosync.catalog import POLICIES, policy_parameters


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
    when: list[dict[str, list[Any]]] | None = None  # sampled only where one clause holds (earlier params' values)


_WORKERS_EXPRESSION = re.compile(r"n_workers(?:\*(\d+))?(?:/(\d+))?(?:([-+])(\d+))?")


def _worker_expression(value: Any) -> tuple[int, int, int] | None:
    """'n_workers[*a][/b][+-c]' (spaces allowed) as (a, b, +-c); None for anything that does not start with
    n_workers. The grammar of the worker expressions that `resolve_workers` finishes."""
    if not isinstance(value, str) or not value.replace(" ", "").startswith("n_workers"):
        return None
    match = _WORKERS_EXPRESSION.fullmatch(value.replace(" ", ""))
    if match is None:
        raise ValueError(f"must be a number or n_workers[*a][/b][+-c], but got {value!r}")
    times, over, sign, offset = match.groups()
    if over is not None and int(over) == 0:
        raise ValueError(f"divides by zero: n_workers[*a][/b][+-c] takes b >= 1, but got {value!r}")
    return int(times or 1), int(over or 1), (-1 if sign == "-" else 1) * int(offset or 0)


def resolve_workers(value: Any, info: ValidationInfo) -> Any:
    """Replace the symbol n_workers (also 'n_workers - 1', 'n_workers / 2', floored) by the job's value."""
    parsed = _worker_expression(value)
    if parsed is None:
        return value
    times, over, offset = parsed
    return (info.context or {}).get("n_workers", 1) * times // over + offset


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class _Conditional(_Strict):
    """A dimension that may be conditional: `when: {barrier: [backup]}` samples it only where the policy's
    earlier parameter `barrier` took one of those values (a conditional sub-space, as Optuna's define-by-run
    spaces are); a list of such mappings holds where any one of them does. Where it does not hold, the
    parameter keeps the policy's default."""

    when: Optional[list[dict[str, list[Any]]]] = None

    @field_validator("when", mode="before")
    @classmethod
    def _clauses(cls, when: Any) -> Any:
        """One mapping, or a list of them, each from a parameter to a list of its values: as a list of clauses
        (one line for a shape that is neither, where the union of both read it twice in pydantic's type names)."""
        clauses = [when] if isinstance(when, dict) else when
        if when is not None and not (isinstance(clauses, list) and clauses and all(
                isinstance(c, dict) and all(isinstance(v, list) for v in c.values()) for c in clauses)):
            raise ValueError("must be a mapping from parameters to lists of their values ({barrier: [backup]}), or "
                             f"a non-empty list of such mappings, but got {short_repr(when)}")
        return clauses

    @property
    def clauses(self) -> list[dict[str, list[Any]]] | None:
        """`when` as alternatives, each a mapping that holds where every parameter takes one of its values."""
        return None if self.when is None else list(self.when)


class _Range(_Conditional):
    """An int or float range: low <= high, an optional step, an optional log scale."""

    low: float  # smallest value (a number or an n_workers expression)
    high: float  # largest value
    step: Optional[float] = Field(None, gt=0)  # grid spacing (None: continuous for floats, 1 for ints)
    log: bool = False  # sample on a log scale (needs low > 0 and no step)

    _resolve = field_validator("low", "high", mode="before")(resolve_workers)

    @field_validator("high")
    @classmethod
    def _high_at_least_low(cls, high: float, info: ValidationInfo) -> float:
        low = info.data.get("low")
        if low is not None and high < low:
            raise ValueError(f"must be >= low={_plain(low)}, but got {_plain(high)}")
        return high

    @model_validator(mode="after")
    def _log_scale(self) -> "_Range":
        if self.log and (self.low <= 0 or self.step is not None):
            raise ValueError(f"log needs low > 0 and no step, but got low={_plain(self.low)}, step={self.step}")
        return self

    @model_validator(mode="after")
    def _step_within_range(self) -> "_Range":
        """A step longer than the range leaves only its low end: most likely a typo, and a trial would
        never sample the high end the file names."""
        if self.step is not None and self.high > self.low and self.step > self.high - self.low:
            raise ValueError(f"step must be at most high - low = {_plain(self.high - self.low)}, "
                             f"but got step={_plain(self.step)}")
        if self.step is not None and not math.isfinite((self.high - self.low) / self.step):  # 1 / 2e-311
            raise ValueError(f"step must leave a countable grid between low and high, but got step={self.step!r}")
        return self


class IntRange(_Range):
    type: Literal["int"]

    @field_validator("low", "high", "step")
    @classmethod
    def _whole(cls, value: float | None) -> float | None:
        if value is not None and value != int(value):
            raise ValueError(f"must be an integer for type int, but got {value!r}")
        return value

    def dimension(self) -> Dimension:
        return Dimension("int", low=int(self.low), high=int(self.high), step=self.step, log=self.log, when=self.clauses)


class FloatRange(_Range):
    type: Literal["float"]

    def dimension(self) -> Dimension:
        return Dimension("float", low=self.low, high=self.high, step=self.step, log=self.log, when=self.clauses)


class Categorical(_Conditional):
    type: Literal["categorical"]
    choices: list[Any] = Field(min_length=1)  # the values to choose from (n_workers expressions allowed)

    @field_validator("choices", mode="before")
    @classmethod
    def _resolve_choices(cls, choices: Any, info: ValidationInfo) -> Any:
        if not isinstance(choices, list):
            return choices
        for choice in choices:  # Optuna's categorical choices: None, bool, int, float or str
            if not (choice is None or isinstance(choice, (bool, int, float, str))):
                raise ValueError(f"must hold numbers, strings, booleans or null, but got {short_repr(choice)}")
            _check_finite(choice)
        return [resolve_workers(c, info) for c in choices]

    def dimension(self) -> Dimension:
        return Dimension("categorical", choices=list(self.choices), when=self.clauses)


class Simplex(_Conditional):
    type: Literal["simplex"]
    size: int = Field("n_workers", ge=2, validate_default=True)  # how many fractions (one per worker)

    _resolve = field_validator("size", mode="before")(resolve_workers)

    def dimension(self) -> Dimension:
        return Dimension("simplex", size=self.size, when=self.clauses)


DimensionSpec = Annotated[Union[IntRange, FloatRange, Categorical, Simplex], Field(discriminator="type")]


class Constant(BaseModel):
    """A parameter fixed for every trial (not searched)."""

    value: Any

    @field_validator("value")
    @classmethod
    def _finite(cls, value: Any) -> Any:
        _check_finite(value)
        return value


def _check_finite(value: Any) -> None:
    """Refuse NaN and infinity anywhere in a value (a constant may be a list or a mapping)."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"must be a finite number (not NaN or infinity), but got {value!r}")
    for item in value.values() if isinstance(value, dict) else value if isinstance(value, list) else ():
        _check_finite(item)


def _param_kind(value: Any) -> str:
    return "dimension" if isinstance(value, (dict, BaseModel)) and not isinstance(value, Constant) else "constant"


def _as_constant(value: Any, info: ValidationInfo) -> Any:
    """A constant's value as Constant's fields, validated there (so an error names the parameter)."""
    return value if isinstance(value, Constant) else {"value": resolve_workers(value, info)}


Parameter = Annotated[Union[Annotated[DimensionSpec, Tag("dimension")],
                            Annotated[Constant, BeforeValidator(_as_constant), Tag("constant")]],
                      Discriminator(_param_kind)]


class SpaceFile(_Strict):
    """A search-space file."""

    name: Optional[str] = Field(None, pattern=r"^[A-Za-z0-9_.-]+$")  # the study name's suffix (default: file stem)
    description: str = ""  # what the space searches, for people
    patience: int = Field(0, ge=0)  # a search stops once this many trials in a row found nothing faster (0: off)
    policies: dict[str, Optional[dict[str, Parameter]]] = Field(min_length=1)  # policy -> parameter -> spec

    @field_validator("policies", mode="before")
    @classmethod
    def _a_mapping(cls, policies: Any) -> Any:
        if not isinstance(policies, dict) or not policies:
            raise ValueError(f"must be a non-empty mapping of policy name to parameters, but got "
                             f"{short_repr(policies)}")
        return policies

    @field_validator("policies")
    @classmethod
    def _empty_policies(cls, policies: dict[str, Any]) -> dict[str, Any]:
        return {policy_name: params or {} for policy_name, params in policies.items()}


def _values_of(spec: Any) -> list[Any] | None:
    """The values a space's parameter can take as a `when` clause reads them: a categorical's choices, a
    constant itself; None for a range (or a spec the structure's own check refuses)."""
    if not isinstance(spec, dict):
        return [spec]
    if spec.get("type") == "categorical" and isinstance(spec.get("choices"), list):
        return spec["choices"]
    return None


def problems_with_policies(policies: Any) -> list[str]:
    """Unknown policies and parameters of a file's `policies` mapping, checked against the catalog, every one."""
    problems: list[str] = []
    if not isinstance(policies, dict):
        return problems  # the structure's own error says so
    for policy_name, params in policies.items():
        if policy_name not in POLICIES:
            problems.append(f"policies.{plain_key(policy_name)}: unknown policy {short_repr(policy_name)} "
                            f"(known: {', '.join(sorted(POLICIES))})")
            continue
        known = policy_parameters(POLICIES[policy_name])
        earlier: dict[str, list[Any] | None] = {}  # each parameter listed so far -> its values (None: a range)
        for name, spec in (params.items() if isinstance(params, dict) else ()):
            if name not in known:
                problems.append(f"policies.{policy_name}.{plain_key(name)}: policy {policy_name} has no parameter "
                                f"{short_repr(name)} (it takes: {', '.join(known) or 'none'})")
            when = spec.get("when") if isinstance(spec, dict) else None
            clauses = [when] if isinstance(when, dict) else when if isinstance(when, list) else []
            for clause in (c for c in clauses if isinstance(c, dict)):
                for key, values in clause.items():
                    if key not in earlier:
                        problems.append(f"policies.{policy_name}.{name}.when: must name parameters listed before "
                                        f"{name} (the condition is decided first), but got {key!r}")
                        continue
                    never = [v for v in values if v not in earlier[key]] \
                        if isinstance(values, list) and earlier[key] is not None else []
                    if never:  # a typo: the clause never holds, and the parameter is never sampled
                        problems.append(f"policies.{policy_name}.{name}.when.{plain_key(key)}: {short_repr(never[0])} "
                                        f"is none of {key}'s values {earlier[key]}, so the clause could never hold")
            earlier[name] = _values_of(spec)
    return problems


# keys a space file may no longer hold -> why, and what to do (a key of the format's past, named as such)
REMOVED_KEYS = {
    "equivalence_check": "was removed with the proxy equivalence check it turned off (it found no equivalent on the "
                         "benchmarks and cost wall time; the listed equivalences still apply): delete the line",
}


def describe(err: dict[str, Any]) -> str:
    """One pydantic error as 'field rule, but got value' (the field path without union tags)."""
    tags = {"dimension", "constant", "int", "float", "categorical", "simplex"}
    parts = list(err["loc"])
    if parts[-2:] == ["constant", "value"]:  # a constant's own value: the parameter names it
        parts = parts[:-1]

    def path(ps: list[Any]) -> list[str]:
        return [plain_key(p) for p in ps if not (isinstance(p, str) and p in tags)]

    loc = path(parts)
    where, typ, ctx, value = ".".join(loc) or "(top level)", err["type"], err.get("ctx", {}), err.get("input")
    if typ == "value_error":
        return f"{where} {ctx.get('error', err['msg'])}"
    if typ == "extra_forbidden" and len(parts) == 1 and parts[0] in REMOVED_KEYS:
        return f"{parts[0]} {REMOVED_KEYS[parts[0]]}"
    if typ == "extra_forbidden":
        parent = ".".join(path(parts[:-1])) or "(top level)"
        return f"{parent}: unknown key {short_repr(parts[-1], 40)} (unknown keys are errors)"
    if typ == "union_tag_invalid":
        return f"{where}.type must be one of [{ctx.get('expected_tags')}], but got {ctx.get('tag')!r}"
    if typ == "union_tag_not_found":
        return f"{where} needs the key 'type' (int, float, categorical or simplex)"
    if typ == "missing":
        return f"{where} is required"
    rule = {"greater_than": lambda: f"must be > {ctx.get('gt')}",
            "greater_than_equal": lambda: f"must be >= {ctx.get('ge')}",
            "too_short": lambda: "must not be empty",
            "finite_number": lambda: "must be a finite number (not NaN or infinity)",
            "string_pattern_mismatch": lambda: "may hold only letters, digits, '_', '-' or '.'",
            }.get(typ, lambda: TYPE_RULES.get(typ) or err["msg"][0].lower() + err["msg"][1:])()
    return f"{where} {rule}, but got {short_repr(value)}"


def _plain(x: float) -> Any:
    return int(x) if float(x).is_integer() else x
