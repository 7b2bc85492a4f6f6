"""The policies a robustness report compares and the report as data: what experiments/ writes and search/
reads, kept below both so that neither imports the other (tests/unit/test_layers.py).

- The static-k grid (backup workers k = 1..n-1 under each learning-rate rule, and BSP) and the online
  policies, with the labels a report's rows carry.
- `load_report`: a robustness report read back and checked (`autosync robustness-compare`, `recommend`).
- The thresholds a report's summary is computed with (`WITHIN`, `SPREAD_FOR_BALANCE`), which its printed
  legend names too (`autosync.reporting.robustness_files`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable

from autosync.core.errors import UserError
from autosync.core.loader import short_repr
from autosync.core.record_checks import expect, expect_numbers

ONLINE_POLICIES = ("dbw", "bdbw", "lbbsp", "ssp", "sync_switch", "dana_slim")
STATIC_K_RULES = ("fixed", "proportional")  # the static-k grid's learning-rate rules unless told otherwise
REPORT_FILE = "robustness.json"  # the report as data (`autosync.reporting.robustness_files.write_robustness`)
REPORT_JOB_KEYS = ("job", "n_workers", "fingerprint", "budget", "best_static", "best_static_time", "bsp_time",
                   "static", "policies")  # what the readers of a report's jobs need
TUNED_LABEL = "tuned"  # the row of each job's own tuned policy (`autosync.experiments.robustness.Grid.tuned`)
WITHIN = 1.1  # a policy "holds up" on a job when its regret is at most this
SPREAD_FOR_BALANCE = 2.0  # jobs whose worker speeds spread at least this much are where LB-BSP should help


def static_k_policies(n_workers: int, rules: Iterable[str] = STATIC_K_RULES) -> list[dict[str, Any]]:
    """Every static k: backup k = 1..n-1 under each lr rule (`autosync.policies.LR_RULES`), and BSP; k = n
    under the rules that change the step there (sqrt, linear) too."""
    # not at the top: the catalog imports every policy (0.28 s measured with `python -c "import
    # autosync.catalog"` on the 2-core machine), which the readers of a report and the options do not need
    from autosync.catalog import make_policy

    grid = [make_policy("backup", {"k": k, "lr_rule": rule}).to_dict()
            for k in range(1, n_workers) for rule in rules]
    scaled_bsp = [make_policy("backup", {"k": n_workers, "lr_rule": rule}).to_dict()
                  for rule in rules if rule not in ("fixed", "proportional")]
    return grid + scaled_bsp + [make_policy("bsp").to_dict()]


def online_policies(names: Iterable[str] = ONLINE_POLICIES) -> list[dict[str, Any]]:
    """Each online policy with its defaults."""
    from autosync.catalog import make_policy  # not at the top: see `static_k_policies`

    return [make_policy(name).to_dict() for name in names]


BSP_LABEL = "k=n (BSP)"


def static_label(policy: dict[str, Any]) -> str:
    """'k=5 fixed', 'k=3 proportional' or 'k=n (BSP)': which static k and which lr rule."""
    if "k" not in policy["params"]:  # BSP itself, the grid's one policy without a k
        return BSP_LABEL
    return f"k={policy['params']['k']} {policy['params']['lr_rule']}"


def check_rules(rules: Iterable[str]) -> tuple[str, ...]:
    """The static-k grid's rules, each one of `LR_RULES` (a clear error otherwise)."""
    from autosync.policies._barriers import LR_RULES  # not at the top: see `static_k_policies`

    rules = tuple(rules)
    bad = [r for r in rules if r not in LR_RULES]
    if bad or not rules:
        raise UserError(f"--lr-rules must be comma-separated rules of {list(LR_RULES)}, but got {','.join(rules)!r}")
    twice = sorted({r for r in rules if rules.count(r) > 1})
    if twice:  # each would be run and reported twice
        raise UserError(f"--lr-rules must name each rule once, but got {','.join(rules)!r} ({', '.join(twice)} twice)")
    return rules


def load_report(path: Path, flag: str = "") -> tuple[Path, dict[str, Any]]:
    """(the report's folder, its data) of a robustness report: its folder, or its robustness.json; a missing
    or damaged one is a UserError naming it (`flag`: the option it was given with, for the message)."""
    where = f"{flag} {path}".strip()
    file = path / REPORT_FILE if path.is_dir() else path
    if not file.is_file():
        raise UserError(f"{where}: no robustness report here (make one with `autosync robustness FAMILY.yaml`)")
    try:
        data = json.loads(file.read_text())
        _require(data, ("family", "command", "seeds", "summary", "jobs"))
        expect(data["command"], str, "command")
        expect(data["seeds"], list, "seeds")
        expect(data["summary"], list, "summary")
        if not expect(data["jobs"], list, "jobs"):
            raise ValueError("jobs is empty: the report holds no drawn job")
        if not all(isinstance(rule, str) for rule in expect(data.get("lr_rules", []), list, "lr_rules")):
            raise TypeError(f"lr_rules must be a list of rule names, but got {short_repr(data['lr_rules'])}")
        for i, row in enumerate(data["jobs"]):
            _require(row, REPORT_JOB_KEYS)
            for key in ("job", "fingerprint"):
                expect(row[key], str, f"jobs.{i}.{key}")
            expect_numbers({key: row[key] for key in ("n_workers", "budget", "best_static_time", "bsp_time")},
                           f"jobs.{i}")
            if isinstance(row["n_workers"], float) or not (row["n_workers"] or 0) >= 1 or not (row["budget"] or 0) > 0:
                raise ValueError(f"jobs.{i}: n_workers must be a whole number >= 1 and budget a number > 0, but got "
                                 f"{short_repr(row['n_workers'])} and {short_repr(row['budget'])}")
            expect_numbers(row["static"], f"jobs.{i}.static")
            for label, cell in expect(row["policies"], dict, f"jobs.{i}.policies").items():
                where = f"jobs.{i}.policies.{label}"
                scores = {k: v for k, v in expect(cell, dict, where).items() if k in ("time", "regret", "vs_bsp")}
                expect_numbers(scores, where)
        for i, row in enumerate(data["summary"]):
            _require(row, ("policy",))
            expect_numbers({k: v for k, v in row.items() if k != "policy"}, f"summary.{i}")
    except (ValueError, KeyError, TypeError) as exc:
        raise UserError(f"{file}: not a robustness report written by `autosync robustness` "
                        f"({type(exc).__name__}: {exc})") from None
    return file.parent, data


def _require(mapping: Any, keys: Iterable[str]) -> None:
    """KeyError naming the first of `keys` that `mapping` (a dict) lacks; TypeError when it is no dict."""
    expect(mapping, dict)
    missing = [key for key in keys if key not in mapping]
    if missing:
        raise KeyError(missing[0])
