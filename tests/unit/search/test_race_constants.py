"""The race's constants are counted and explained (docs/contributing/race-constants.md): every module-level
number of the modules that run or fit the race is named there with its value, and the constants that decide
the answer or the cost are at most ten."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from autosync import race

REPO = Path(__file__).resolve().parents[3]
PAGE = REPO / "docs" / "contributing" / "race-constants.md"
# the modules that run or fit the race, and the one that scores a missed target
MODULES = ("autosync/race.py", "autosync/experiments/race_fit.py", "autosync/experiments/portfolio_fit.py",
           "autosync/search/race_trials.py", "autosync/search/race_horizon.py", "autosync/search/tune_options.py",
           "autosync/policy_score.py")
MOST_DECISIONS = 10  # the search issue's goal: at most ten decision constants


def _numeric_constants(path: Path) -> dict[str, object]:
    """The module-level names of `path` bound to a number or a tuple of numbers (an expression of them and
    of earlier such names included), with their values."""
    found: dict[str, object] = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name, value = node.targets[0].id, node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            name, value = node.target.id, node.value
        else:
            continue
        try:
            evaluated = eval(compile(ast.Expression(value), str(path), "eval"), {"__builtins__": {}}, dict(found))
        except Exception:  # not made of numbers alone (a call, a string's method, another module's name)
            continue
        numbers = evaluated if isinstance(evaluated, tuple) else (evaluated,)
        if numbers and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in numbers):
            found[name] = evaluated
    return found


def _tables() -> list[list[list[str]]]:
    """The page's tables, each a list of rows of cells (header and rule left out)."""
    tables, current = [], None
    for line in PAGE.read_text().splitlines():
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if current is None:
                current = []
                tables.append(current)
            elif not set("".join(cells)) <= set("-: "):
                current.append(cells)
        else:
            current = None
    return tables


def _named(row: list[str]) -> str:
    return row[0].strip("`")


def test_every_number_of_the_race_modules_is_on_the_page_with_its_value():
    rows = {_named(row): row for table in _tables() for row in table}
    for module in MODULES:
        for name, value in _numeric_constants(REPO / module).items():
            assert name in rows, f"{module}: {name} = {value!r} is not on {PAGE.name}"
            assert rows[name][2] == f"`{module}`", f"{PAGE.name}: {name} is in {module}, not {rows[name][2]}"
            shown = ast.literal_eval(rows[name][1])
            assert shown == value, f"{PAGE.name}: {name} is {value!r} in {module}, {shown!r} on the page"


def test_the_decision_constants_are_at_most_ten_and_the_fitted_ones_are_the_shipped_settings():
    decisions = _tables()[0]
    assert 0 < len(decisions) <= MOST_DECISIONS
    shipped = race.race_settings()
    by_name = {_named(row): row[1] for row in decisions}
    assert float(by_name["margin"]) == shipped.margin
    assert int(by_name["portfolio size"]) == len(shipped.portfolio)
    assert by_name["the portfolio (members and order)"] == f"{len(shipped.portfolio)} labels"
    assert all(row[3] for row in decisions), "each decision constant says how it is fitted or why it holds"


def test_the_scan_finds_the_constants_it_should():
    """The scan reads the race's own numbers, an expression of them included, and leaves out what is not
    a number."""
    constants = _numeric_constants(REPO / "autosync/race.py")
    assert constants["HALVING"] == race.HALVING and constants["WIDEST_ROUND"] == race.WIDEST_ROUND
    assert "ROUNDS" not in constants and "REFERENCE" not in constants
    assert re.search(r"\bMARGINS\b", PAGE.read_text())
