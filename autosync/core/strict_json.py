"""JSON that strict parsers accept: no NaN or Infinity anywhere autosync writes or prints JSON.

A non-finite number becomes null (a time-to-target that was never reached, a speedup with nothing to
divide by); readers treat null as "no value". `json.dumps(..., allow_nan=False)` then guarantees it.
"""

from __future__ import annotations

import json
import math
import numbers
from typing import Any, Callable


def finite(value: Any) -> Any:
    """`value` with every non-finite float (at any depth) replaced by None and numpy scalars made plain."""
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        x = float(value)
        return x if math.isfinite(x) else None
    return value


def dumps(value: Any, default: Callable[[Any], Any] | None = None, **kwargs: Any) -> str:
    """`json.dumps` of `finite(value)` that refuses NaN and Infinity (`allow_nan=False`); what `default`
    converts (arrays, tensors) is made finite too."""
    strict_default = None if default is None else (lambda obj: finite(default(obj)))
    return json.dumps(finite(value), allow_nan=False, default=strict_default, **kwargs)
