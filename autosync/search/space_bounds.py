"""A search space's ends checked against the policies: a range whose low or high end, a choice, or a constant
that the policy refuses for the job's workers (k from 0, k up to 99 on 4 workers, an lr_rule it does not
know, a default the space leaves out that the job's workers do not allow) would fail every trial that
samples it, found only once the search trains; the file is refused instead.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Iterator

from autosync.core.loader import short_repr
from autosync.catalog import POLICIES, make_policy
from autosync.core.errors import UserError
from autosync.policies import Composed

NOMINAL_BATCH = 32  # the batch size policies are bound with when the job's is not known here


def bound_problems(dimensions: dict[str, dict[str, Any]], constants: dict[str, dict[str, Any]],
                   n_workers: int, batch_size: int = NOMINAL_BATCH,
                   compositions: Iterable[dict[str, Any]] = ()) -> list[str]:
    """One line per dimension end (or choice) that its policy refuses on `n_workers` workers, with the rule.

    Each value is tried with the policy's constants and every other dimension at a value the policy takes
    (its first such end or choice), so a refusal is the value's own. A policy that takes no combination at
    all is refused by its constants (`_refused_constants`). A composed policy's slots are checked by
    `refused_compositions`; its ranges here, each on the first of `compositions` (the samples that walk
    tries) where the range is sampled (`composed_bound_problems`)."""
    def refusal(policy: str, params: dict[str, Any]) -> str | None:
        try:
            make_policy(policy, params).bind(n_workers, batch_size)
        except (UserError, ValueError, TypeError) as exc:
            return str(exc)
        return None

    problems = []
    for policy, dims in dimensions.items():
        if policy == Composed.name:
            problems += composed_bound_problems(dims, compositions, n_workers, refusal)
            continue
        fixed = constants.get(policy, {})
        base = dict(fixed)
        for name, dim in dims.items():  # a value of each dimension the policy takes, where one exists
            base[name] = next((v for v in _ends(dim) if refusal(policy, {**base, name: v}) is None), None)
            if base[name] is None:
                base.pop(name)
        why = refusal(policy, base)
        if why is not None:  # no dimension's end rescues the constants: every trial would be refused
            problems += _refused_constants(policy, fixed, why, n_workers, refusal)
            continue
        for name, dim in dims.items():
            for value in _ends(dim):
                why = refusal(policy, {**base, name: value})
                if why is not None and refusal(policy, base) is None:
                    problems.append(f"policies.{policy}.{name} can sample {short_repr(value)}, which policy {policy} "
                                    f"refuses on n_workers={n_workers}: {why}")
                    break
    return problems


def composed_bound_problems(dims: dict[str, Any], compositions: Iterable[dict[str, Any]], n_workers: int,
                            refusal: Callable[[str, dict[str, Any]], str | None]) -> list[str]:
    """One line per range of a composed policy whose low or high end the composition refuses on `n_workers`
    workers (backup's k up to 2n), each end tried on the first of `compositions` that holds the range (its
    `when` met) and that the policy takes as it is, so a refusal is the end's own."""
    ranges = {name: dim for name, dim in dims.items() if dim.type in ("int", "float")}
    problems = []
    for sample in compositions:
        held = [name for name in ranges if name in sample]
        if not held or refusal(Composed.name, sample) is not None:
            continue
        for name in held:
            why = next((why for value in _ends(ranges.pop(name))
                        if (why := refusal(Composed.name, {**sample, name: value})) is not None), None)
            if why is not None:
                value = next(v for v in _ends(dims[name]) if refusal(Composed.name, {**sample, name: v}))
                problems.append(f"policies.{Composed.name}.{name} can sample {short_repr(value)}, which policy "
                                f"{Composed.name} refuses on n_workers={n_workers}: {why}")
        if not ranges:
            break
    return problems


def _refused_constants(policy: str, fixed: dict[str, Any], why: str, n_workers: int,
                       refusal: Callable[[str, dict[str, Any]], str | None]) -> list[str]:
    """The lines for a policy whose constants (with its dimensions at any end) it refuses: each constant it
    refuses on its own (the policy's other parameters at their defaults for `n_workers`), else one line for
    them all, with `why`, the refusal of the whole."""
    sized = POLICIES[policy].sized_defaults(n_workers)
    lines = []
    for name, value in fixed.items():
        alone = refusal(policy, {**sized, name: value})
        if alone is not None:
            lines.append(f"policies.{policy}.{name} is {short_repr(value)}, which policy {policy} refuses on "
                         f"n_workers={n_workers}: {alone}")
    held = ", ".join(f"{name}={short_repr(value, 40)}" for name, value in fixed.items()) or "none"
    return lines or [f"policies.{policy}: policy {policy} refuses every sample on n_workers={n_workers} (constants: "
                     f"{held}; a parameter the space leaves out takes its default): {why}"]


def _ends(dim: Any) -> Iterator[Any]:
    """The values of a search space's dimension that bound what it samples: a range's low and high, each
    choice, a simplex's equal fractions (of its size: a split of the wrong length is refused whatever they are)."""
    if dim.type == "simplex":
        yield [1.0 / dim.size] * dim.size if dim.size else []
    elif dim.type == "categorical":
        yield from dim.choices
    elif dim.type in ("int", "float"):
        yield int(dim.low) if dim.type == "int" else float(dim.low)
        yield int(dim.high) if dim.type == "int" else float(dim.high)
