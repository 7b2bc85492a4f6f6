"""Policy names -> classes, and parsing of `--param key=value` options: used only at the edges."""

from __future__ import annotations

import inspect
import json
from typing import Any

from autosync.errors import UserError
from autosync.policies import (
    ASP, BSP, DANADC, DBW, LBBSP, DCASGD, LWP, NAGASGD, SSP, BackupWorkers, BlindDBW, DANASlim, DANAZero, MultiASGD,
    Policy, StaticSplit, SyncSwitch,
)

POLICIES: dict[str, type[Policy]] = {cls.name: cls for cls in (
    BSP, ASP, SSP, BackupWorkers, DBW, BlindDBW,
    NAGASGD, MultiASGD, LWP, DCASGD, DANAZero, DANASlim, DANADC, SyncSwitch,
    LBBSP, StaticSplit,
)}


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
    cls = POLICIES.get(name)
    if cls is None:
        raise UserError(f"--policy must be one of {sorted(POLICIES)}, but got {name!r}")
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
