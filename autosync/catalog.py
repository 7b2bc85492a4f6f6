"""Policy names -> classes, and how a policy is spelled: `--param key=value`, `--policy` and `--policies`
specs (`split_policy_spec`, `parse_policy_spec`, `spec_of`) and the label tables show (`label_of`).

The one place where a name becomes a class and a class a name (the table is derived from
`autosync.policies.__all__`); every layer above the engine that reads or shows a policy goes through it.
"""

from __future__ import annotations

import functools
import inspect
import json
import math
import sys
from typing import Any, Callable

from autosync import policies as _policies
from autosync.core.errors import UserError
from autosync.core.loader import short_repr
from autosync.policies import Policy

__all__ = ["POLICIES", "label_of", "make_policy", "parse_param", "parse_policy_spec", "policy_from_dict",
           "policy_name", "policy_of", "policy_parameters", "spec_of", "split_policy_spec", "takes_type"]


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
    return dict(_parameters(cls))


@functools.lru_cache(maxsize=None)
def _parameters(cls: type[Policy]) -> tuple[tuple[str, Any], ...]:
    """`policy_parameters`, read from the signature once per class (`make_policy` asks on every policy made:
    a fit on the table makes tens of thousands)."""
    sig = inspect.signature(cls.__init__)
    return tuple((n, p.default) for n, p in sig.parameters.items() if n != "self")


# Values as labels print them (Python's str), read back as what they stand for.
_PYTHON_LITERALS = {"True": True, "False": False, "None": None, "inf": math.inf, "-inf": -math.inf, "nan": math.nan}


def parse_param(text: str) -> tuple[str, Any]:
    """'k=12' -> ('k', 12): values are read as JSON when they parse (True, False, None, inf and nan as
    labels print them too; a string in single quotes without them), else kept as strings."""
    key, _, raw = text.partition("=")
    if not _ or not key.strip():
        raise UserError(f"--param must look like key=value, but got {text!r}")
    raw = raw.strip()
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        quoted = len(raw) >= 2 and raw[0] == raw[-1] == "'"
        value = raw[1:-1] if quoted else _PYTHON_LITERALS.get(raw, raw)
    return key.strip(), value


def split_policy_spec(text: str, option: str = "--policy") -> tuple[str, dict[str, Any]]:
    """One policy spec -> (name, parameters), in either form the tool prints:

        backup:k=8,lr_rule=proportional                   # the --policies form (`spec_of`)
        compose(barrier=dbw, batch=lbbsp, window=5)        # the form leaderboard rows are labelled with

    A bare name has no parameters. Values are read as `parse_param` reads them; commas inside brackets
    (a list value) do not separate parameters.
    """
    if not isinstance(text, str):
        raise UserError(f"{option} must be a policy name or spec (a string), a dict {{'policy': name, 'params': "
                        f"{{...}}}} or a Policy, but got {text!r}")
    text = text.strip()
    colon, paren = text.find(":"), text.find("(")
    if paren != -1 and (colon == -1 or paren < colon):  # name(...): the label form
        if not text.endswith(")") or text[paren + 1:-1].count(")") > text[paren + 1:-1].count("("):
            raise UserError(f"{option} {text!r} must look like name(key=value, ...) or name:key=value,...")
        name, body = text[:paren], text[paren + 1:-1]
    else:
        name, _, body = text.partition(":")
    params: dict[str, Any] = {}
    for item in _top_level_items(body):
        if not item:  # 'k=2,,' or a trailing comma: a parameter left out, as likely as a typo
            raise UserError(f"{option} {text!r}: each parameter must look like key=value, but got an empty one "
                            "between commas")
        if "=" not in item or not item.partition("=")[0].strip():
            raise UserError(f"{option} {text!r}: each parameter must look like key=value, but got {item!r}")
        key, value = parse_param(item)
        if key in params:
            raise UserError(f"{option} {text!r}: each parameter may be given once, but got {key!r} twice")
        params[key] = value
    return name.strip(), params


def _top_level_items(body: str) -> list[str]:
    """'a=1, b=[1, 2]' -> ['a=1', 'b=[1, 2]']: split at the commas outside brackets and quotes ('a=1,,' ->
    ['a=1', '', '']; a blank body -> [])."""
    if not body.strip():
        return []
    items, depth, quote, current = [], 0, "", []
    for ch in body:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch in "[{(":
            depth += 1
        elif ch in "]})":
            depth -= 1
        elif ch == "," and depth == 0:
            items.append("".join(current).strip())
            current = []
            continue
        current.append(ch)
    items.append("".join(current).strip())
    return items


def make_policy(name: str, params: dict[str, Any] | None = None) -> Policy:
    """Instantiate policy `name` (a name, or a spec with its parameters: `split_policy_spec`) with `params`
    (which take precedence over the spec's), naming the policy and key in any error."""
    spec_name, spec_params = split_policy_spec(name)
    name = policy_name(spec_name)
    cls = POLICIES[name]
    params = {**spec_params, **(params or {})}
    known = policy_parameters(cls)
    for key in params:
        if key not in known:
            raise UserError(f"policy {name} has no parameter {key!r} (it takes: {', '.join(known) or 'none'})")
    for key, default in known.items():
        if key in params and default is not inspect.Parameter.empty and default is not None:
            params[key] = _coerce(name, key, params[key], type(default))
    for key, value in params.items():  # nan passes every range check (a comparison with it is False), inf most
        if isinstance(value, float) and not math.isfinite(value):
            raise UserError(f"policy {name} parameter {key} must be a finite number, but got {value!r}")
    return cls(**params)


def make_sized_policy(name: str, params: dict[str, Any] | None, n_workers: int) -> Policy:
    """`make_policy` for a job of `n_workers` workers: a parameter that the spec and `params` leave out and whose
    default depends on the job's size takes the policy's own (`sized_defaults`): a bare 'backup' waits for 3n/4."""
    spec_name, spec_params = split_policy_spec(name)
    sized = POLICIES[policy_name(spec_name)].sized_defaults(n_workers)
    return make_policy(name, {**sized, **spec_params, **(params or {})})


def policy_of(policy: "str | Policy | dict[str, Any]", params: dict[str, Any] | None = None) -> Policy:
    """A Policy itself, or one made from a name or spec and `params` (`make_policy`) or from a dict
    {"policy": name, "params": {...}} as results store it, with `params` changed."""
    _check_params(params)
    if isinstance(policy, Policy):
        return policy
    if isinstance(policy, dict):
        _check_dict(policy)  # its keys and parameters, then the policy made once, with `params` changed
        return make_policy(policy["policy"], {**(policy.get("params") or {}), **(params or {})})
    return make_policy(policy, params or {})


def policy_from_dict(data: dict[str, Any]) -> Policy:
    """Inverse of Policy.to_dict(); a dict of other keys, or whose params are no dict, is a one-line UserError."""
    _check_dict(data)
    return make_policy(data["policy"], data.get("params") or {})


def _check_dict(data: Any) -> None:
    """A policy dict has the key 'policy' and optionally 'params' (a dict); anything else is a one-line UserError."""
    if not isinstance(data, dict) or "policy" not in data or set(data) - {"policy", "params"}:
        keys = sorted(data) if isinstance(data, dict) else None
        raise UserError("a policy dict has the key 'policy' (a name) and optionally 'params' (a dict), but got "
                        f"{'keys ' + str(keys) if keys is not None else repr(data)}")
    _check_params(data.get("params"))


def _check_params(params: Any) -> None:
    """A policy's parameters are a dict {name: value} (or None: none); anything else is a one-line UserError."""
    if params is not None and not isinstance(params, dict):
        raise UserError(f"a policy's params must be a dict {{name: value}}, but got {params!r}")


def takes_type(value: Any, typ: type) -> bool:
    """Whether a parameter whose default is of type `typ` takes `value` (an int where a float is meant, too;
    a bool never counts as an int)."""
    if isinstance(value, bool) and typ in (int, float):
        return False
    return isinstance(value, typ) or (typ is float and isinstance(value, int))


def _coerce(policy: str, key: str, value: Any, typ: type) -> Any:
    if takes_type(value, typ):
        try:
            return float(value) if typ is float else value
        except OverflowError:  # an int past any float (10**400): as out of range as a wrong type
            raise UserError(f"policy {policy} parameter {key} must be a float (at most "
                            f"{sys.float_info.max:.4g}), but got {short_repr(value)}") from None
    raise UserError(f"policy {policy} parameter {key} must be {typ.__name__}, but got {value!r}")


# --------------------------------------------------------------------------- spelling policies

def checked_spec(spec: "str | dict[str, Any]", n_workers: int) -> dict[str, Any]:
    """A --policies entry as a dict {"policy", "params"}: a spec string parsed (`parse_policy_spec`), a dict (as
    the API takes) kept as it is, checked the same way (made and bound on `n_workers` workers), so that a bad one
    is one line before any run, not an error inside every run of it."""
    if not isinstance(spec, dict):
        return parse_policy_spec(spec, n_workers)
    try:
        policy_from_dict(spec).bind(n_workers, 1)
    except (UserError, ValueError) as exc:
        raise UserError(f"--policies {spec!r}: {exc}") from None
    return spec


def parse_policy_spec(text: str, n_workers: int) -> dict[str, Any]:
    """'backup:k=8,lr_rule=proportional' or 'backup(k=8, lr_rule=proportional)' -> {"policy": "backup",
    "params": {...}}, validated (`catalog.split_policy_spec`).

    A parameter left out whose default depends on the job's size takes the policy's own (`sized_defaults`):
    a bare 'backup' uses k = 3n/4, the static setting the DBW paper finds good under moderate noise.
    """
    name, params = split_policy_spec(text, "--policies")
    policy_name(name, "--policies")  # an unknown name, named as --policies'
    try:  # a value of the wrong type (k=abc) as a value out of range (k=0): each names the spec it came from
        policy = make_sized_policy(name, params, n_workers)
        policy.bind(n_workers, 1)
    except (UserError, ValueError) as exc:
        raise UserError(f"--policies {text}: {exc}") from None
    return policy.to_dict()


def label_of(policy: dict[str, Any], every: bool = False) -> str:
    """'backup(k=8)': the policy name with the parameters that differ from their defaults (and those the
    policy always labels); with `every`, all its parameters ('backup(k=8,lr_rule=fixed)')."""
    params = _shown_params(policy, every=every)
    return f"{policy['policy']}({params})" if params else policy["policy"]


def spec_of(policy: dict[str, Any]) -> str:
    """'backup:k=8': the `--policies` spec that `parse_policy_spec` reads back as `policy` (values as JSON,
    strings bare); ValueError for a list-valued parameter (split's fractions), which a spec cannot hold."""
    def value(v: Any) -> str:
        if isinstance(v, (list, dict)):
            raise ValueError(f"{policy['policy']}'s parameter value {v!r} has no --policies spec")
        return v if isinstance(v, str) else json.dumps(v)

    params = _shown_params(policy, value)
    return f"{policy['policy']}:{params}" if params else policy["policy"]


def _shown_params(policy: dict[str, Any], show: Callable[[Any], str] = str, every: bool = False) -> str:
    cls = POLICIES.get(policy["policy"])
    defaults = policy_parameters(cls) if cls is not None else {}
    shown = getattr(cls, "label_params", ())
    return ",".join(f"{k}={show(v)}" for k, v in policy["params"].items()
                    if every or k in shown or k not in defaults or defaults[k] != v)
