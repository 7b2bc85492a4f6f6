"""Declaring an option once: a dataclass field with its default, its `--help` text and its range.

typer builds the command line from such fields (`autosync.cli`), the API takes them as keywords (`build`),
and the layers below read their defaults (`default_of`), so an option has one declaration and one default
wherever it is used: the command line, the API and the engine's execution record.
"""

from __future__ import annotations

import dataclasses
import numbers
import os
from typing import Any

from autosync.core.errors import UserError


def option(default: Any, help: str, *, flag: str | None = None, short: str | None = None, ge: float | None = None,
           le: float | None = None, cli_type: Any = None) -> Any:
    """A field of an options class: its default, its `--help` text and its range (`ge`/`le`, inclusive).

    Args:
        flag: the command-line name (default: `--` and the field's name with hyphens).
        short: a one-letter alias ("-p").
        cli_type: the type typer parses when the field's own type also admits Python values it cannot
            (a Policy instance, a dict of parameters).
    """
    metadata = {"help": help, "flag": flag, "short": short, "ge": ge, "le": le, "cli_type": cli_type}
    if isinstance(default, list):
        return dataclasses.field(default_factory=lambda: list(default), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def flag_of(field: dataclasses.Field) -> str:
    """`--n-trials` for the field n_trials (or the flag the field names)."""
    return field.metadata.get("flag") or "--" + field.name.replace("_", "-")


def default_of(cls: type, name: str) -> Any:
    """The declared default of option `name` of the options class `cls` (a fresh list for a list)."""
    found = next((f for f in dataclasses.fields(cls) if f.name == name), None)
    if found is None:
        raise AttributeError(f"{cls.__name__} declares no option {name!r}")
    return found.default if found.default is not dataclasses.MISSING else found.default_factory()  # type: ignore[misc]


#: What a value of a field declared with each of these types must be (`Optional[...]`: that, or None), and the
#: words for it. A string field takes a path too; a list field's items are not checked, but for list[int]'s (a
#: list of policies also takes their dicts).
Url = str  # an option holding a URL (a study storage): text, where a path option takes a Path too

_KINDS: dict[str, tuple[Any, str]] = {  # numpy's numbers too: they are `numbers`' Integral and Real
    "int": (lambda v: isinstance(v, numbers.Integral) and not _is_bool(v), "an int"),
    "float": (lambda v: isinstance(v, numbers.Real) and not _is_bool(v), "a number"),
    "bool": (lambda v: _is_bool(v), "true or false"),
    "str": (lambda v: isinstance(v, (str, os.PathLike)), "a string"),
    "Url": (lambda v: isinstance(v, str), "a URL (text, such as sqlite:///FILE.db)"),
    "list[str]": (lambda v: _is_list(v), "a list (of strings)"),
    "list[int]": (lambda v: _is_list(v) and all(_KINDS["int"][0](x) for x in v), "a list of ints"),
}


def _is_bool(value: Any) -> bool:
    # numpy's bool is no Python bool (and this module loads no numpy: --help does not)
    return isinstance(value, bool) or (type(value).__module__ == "numpy" and type(value).__name__ in ("bool", "bool_"))


def _is_list(value: Any) -> bool:
    """A list, tuple or array of items; a string (read one character at a time) or a mapping is none."""
    return hasattr(value, "__iter__") and not isinstance(value, (str, bytes, os.PathLike, dict))


def check_ranges(options: Any) -> None:
    """Every field's type (where declared as one of `_KINDS`: the API's keywords are not parsed as the command
    line's are, and a string '2' for --n-trials failed deep in the search) and its `ge`/`le` rule, as a
    one-line UserError naming the option, the rule and the value."""
    for f in dataclasses.fields(options):
        value, ge, le = getattr(options, f.name), f.metadata.get("ge"), f.metadata.get("le")
        declared = str(f.type).removeprefix("Optional[").removesuffix("]") if str(f.type).startswith("Optional[") \
            else str(f.type)
        kind = _KINDS.get(declared)
        optional = str(f.type).startswith("Optional[")  # None: the option's default where it is Optional alone
        if kind is not None and (value is not None or not optional) and not kind[0](value):
            raise UserError(f"{flag_of(f)} must be {kind[1]}, but got {value!r}")
        if declared in ("str", "Url") and isinstance(value, str) and not value.strip():  # as the command line refuses ''
            raise UserError(f"{flag_of(f)} must not be empty, but got {value!r} (leave it out for its default)")
        if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if ge is not None and not value >= ge:
            raise UserError(f"{flag_of(f)} must be >= {ge}, but got {value}")
        if le is not None and not value <= le:
            raise UserError(f"{flag_of(f)} must be <= {le}, but got {value}")


def build(cls: type, options: Any = None, **fields: Any) -> Any:
    """`cls(**fields)`, or `options` (an instance of `cls`) with `fields` changed; a field `cls` does not
    have is a one-line UserError rather than a TypeError."""
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(fields) - names)
    if unknown:
        raise UserError(f"{cls.__name__} has no option {unknown[0]!r} (it has {', '.join(sorted(names))})")
    if options is None:
        return cls(**fields)
    if not isinstance(options, cls):
        raise UserError(f"options must be a {cls.__name__}, but got {type(options).__name__}")
    return dataclasses.replace(options, **fields) if fields else options
