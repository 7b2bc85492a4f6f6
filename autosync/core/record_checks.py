"""Checks of the records autosync reads back from its own files (a leaderboard's runs, a table's cells, a
cache record, a robustness report, a run's log): each may have been edited or damaged since it was written,
and a field of another type is a TypeError naming it, which the reader turns into its one-line error."""

from __future__ import annotations

from typing import Any

from autosync.core.loader import short_repr

__all__ = ["expect", "expect_numbers", "is_number", "is_whole"]

# how a record's types are named in an error line (JSON's words, not Python's)
KIND_NAMES = {dict: "an object", list: "a list", str: "text", int: "a whole number", bool: "true or false"}


def is_number(value: Any) -> bool:
    """Whether `value` is a JSON number (an int or a float; true and false are not)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_whole(value: Any) -> bool:
    """Whether `value` is a JSON whole number (an int; true and false are not)."""
    return isinstance(value, int) and not isinstance(value, bool)


def expect(value: Any, kind: type, where: str = "") -> Any:
    """`value`, where it is a `kind`; else a TypeError "WHERE must be KIND, but got VALUE"."""
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        name = KIND_NAMES.get(kind, f"a {kind.__name__}")
        raise TypeError(f"{where + ' ' if where else ''}must be {name}, but got {short_repr(value, 60)}")
    return value


def expect_numbers(values: Any, where: str, required: tuple[str, ...] = (), flags: bool = False) -> None:
    """A TypeError "WHERE.KEY must be a number, but got VALUE" for the first value of `values` (an object) that
    is not a number or null (nor, with `flags`, true or false), or a `required` one that is not a number."""
    expect(values, dict, where)
    for key in required:
        if not is_number(values.get(key)):
            raise TypeError(f"{where}.{key} must be a number, but got {short_repr(values.get(key))}")
    for key, value in values.items():
        if not (value is None or is_number(value) or (flags and isinstance(value, bool))):
            raise TypeError(f"{where}.{key} must be a number, but got {short_repr(value)}")
