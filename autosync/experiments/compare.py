"""Online policies on several job families side by side, read from robustness reports already written.

A change to an online policy is developed on one family and reported on another (`autosync robustness`
writes each family's report): `autosync robustness-compare` puts the two (or more) reports' summaries in
one table, a row per policy run on every family, so a reader sees at once whether what held on the family a
change was developed on holds on one it was not. Nothing is trained again.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autosync.core.errors import UserError
from autosync.policy_grid import REPORT_FILE, STATIC_K_RULES, load_report

# (key of a report's summary row, header) of each family's columns in the comparison
FAMILY_COLUMNS = (("median_regret", "median"), ("worst_regret", "worst"), ("slower_than_bsp", "> BSP"),
                  ("missed_runs", "missed"))


@dataclass
class FamilyReport:
    """One family's robustness report: its name, where it was read, its command and its summary rows."""

    family: str
    path: Path
    command: str
    jobs: int
    seeds: list[int]
    summary: dict[str, dict[str, Any]]  # policy label -> summary row
    lr_rules: list[str]  # the static-k grid's learning-rate rules, which the regrets are against


@dataclass
class Comparison:
    """The reports compared, the family changes were developed on (None: not said), and the policies run on
    every family (in the first report's order) and those run on some only."""

    reports: list[FamilyReport]
    developed_on: str | None
    common: list[str]
    partial: list[str]

    def grids_differ(self) -> str | None:
        """A sentence naming each family's static-k rules when they differ (the regrets' references differ
        then: a best static k over more rules is a harder one to match), else None."""
        grids = {r.family: r.lr_rules for r in self.reports}
        if len({tuple(g) for g in grids.values()}) == 1:
            return None
        return "The static-k grids differ, so do the references of the regrets: " + "; ".join(
            f"{family} best over {', '.join(rules)}" for family, rules in grids.items()) + "."

    def rows(self) -> list[tuple[str, list[Any]]]:
        """(policy, the FAMILY_COLUMNS values of each family in turn) for the policies run on every family."""
        return [(label, [r.summary[label].get(key) for r in self.reports for key, _ in FAMILY_COLUMNS])
                for label in self.common]


def family_report(path: Path) -> FamilyReport:
    """A robustness report (its folder or its robustness.json); a missing or damaged one is a UserError."""
    folder, data = load_report(path)
    return FamilyReport(str(data["family"]), folder / REPORT_FILE,
                        str(data["command"]), len(data["jobs"]), list(data["seeds"]),
                        {str(row["policy"]): row for row in data["summary"]},
                        list(data.get("lr_rules", STATIC_K_RULES)))


def compare(paths: list[Path], developed_on: str | None = None) -> Comparison:
    """The reports at `paths` side by side; `developed_on` must name one of their families."""
    if len(paths) < 2:
        raise UserError(f"robustness-compare needs at least two reports, but got {len(paths)}")
    reports = [family_report(p) for p in paths]
    families = [r.family for r in reports]
    if len(set(families)) < len(families):
        raise UserError(f"robustness-compare: the reports must be of different families, but got {families}")
    if developed_on is not None and developed_on not in families:
        raise UserError(f"--developed-on must name one of the reports' families {families}, "
                        f"but got --developed-on {developed_on!r}")
    common = [label for label in reports[0].summary if all(label in r.summary for r in reports[1:])]
    every = dict.fromkeys(label for r in reports for label in r.summary)
    return Comparison(reports, developed_on, common, [label for label in every if label not in common])
