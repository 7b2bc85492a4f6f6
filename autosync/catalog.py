"""Policy names -> classes, and parsing of `--param key=value` options: used only at the edges."""

from __future__ import annotations

import inspect
import json
from typing import Any

from autosync import policies as _policies
from autosync.errors import UserError
from autosync.policies import Policy


def _registry() -> dict[str, type[Policy]]:
    """Every concrete policy the policies package exports in `__all__`, by its `name`: the one list."""
    classes = (getattr(_policies, n) for n in _policies.__all__)
    return {cls.name: cls for cls in classes
            if isinstance(cls, type) and issubclass(cls, Policy) and getattr(cls, "name", None)}


POLICIES: dict[str, type[Policy]] = _registry()


def _spelling(text: str) -> str:
    """Case, hyphens, underscores and spaces folded: 'DANA-Slim', 'dana_slim' and 'dana slim' are one."""
    return "".join(ch for ch in text.lower() if ch not in "-_ ")


_SPELLINGS: dict[str, str] = {**{_spelling(cls.paper_name): name for name, cls in POLICIES.items()},
                              **{_spelling(name): name for name in POLICIES}}


def policy_name(text: str, option: str = "--policy") -> str:
    """The policy name `text` stands for, in any of the papers' spellings (B-DBW, LB-BSP, DANA-Slim...)."""
    name = _SPELLINGS.get(_spelling(text))
    if name is None:
        raise UserError(f"{option} must be one of {sorted(POLICIES)} (or the papers' spellings, e.g. DANA-Slim, "
                        f"B-DBW, LB-BSP, Sync-Switch), but got {text!r}")
    return name


def policy_parameters(cls: type[Policy]) -> dict[str, Any]:
    """Each constructor parameter of a policy class with its default (inspect.Parameter.empty if none)."""
    sig = inspect.signature(cls.__init__)
    return {n: p.default for n, p in sig.parameters.items() if n != "self"}


def parse_param(text: str) -> tuple[str, Any]:
    """'k=12' -> ('k', 12): values are read as JSON when they parse, else kept as strings."""
    if "=" not in text:
        raise UserError(f"--param must look like key=value, but got {text!r}")
    key, raw = text.split("=", 1)
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    return key.strip(), value


def make_policy(name: str, params: dict[str, Any] | None = None) -> Policy:
    """Instantiate policy `name` with `params`, naming the policy and key in any error."""
    name = policy_name(name)
    cls = POLICIES[name]
    params = dict(params or {})
    known = policy_parameters(cls)
    for key in params:
        if key not in known:
            raise UserError(f"policy {name} has no parameter {key!r} (it takes: {', '.join(known) or 'none'})")
    for key, default in known.items():
        if key in params and default is not inspect.Parameter.empty and default is not None:
            params[key] = _coerce(name, key, params[key], type(default))
    return cls(**params)


def policy_from_dict(data: dict[str, Any]) -> Policy:
    """Inverse of Policy.to_dict()."""
    return make_policy(data["policy"], data.get("params", {}))


def _coerce(policy: str, key: str, value: Any, typ: type) -> Any:
    if isinstance(value, typ) and not (typ is int and isinstance(value, bool)):
        return value
    if typ is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    raise UserError(f"policy {policy} parameter {key} must be {typ.__name__}, but got {value!r}")
