"""The race's constants are counted and explained (docs/contributing/race-constants.md): every module-level
number of the modules that run, fit and score the race is named there with its value, every row naming a
module's constant names one it holds, and the constants that decide the answer or the cost are at most ten."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from autosync import race
from autosync.search.tune_options import MIN_BUDGET
from autosync.table import build

REPO = Path(__file__).resolve().parents[3]
PAGE = REPO / "docs" / "contributing" / "race-constants.md"
# the modules that run or fit the race, score a missed target, and hold the protocol the fit is scored by
MODULES = ("autosync/race.py", "autosync/experiments/race_fit.py", "autosync/experiments/portfolio_fit.py",
           "autosync/search/race_trials.py", "autosync/search/race_horizon.py", "autosync/search/tune_options.py",
           "autosync/policy_score.py", "autosync/table/build.py", "autosync/experiments/reference_grid.py")
MOST_DECISIONS = 10  # the search issue's goal: at most ten decision constants
NAME = re.compile(r"`([A-Za-z_]\w*)`")
MODULE = re.compile(r"`(autosync/[\w/]+\.py)`")


def _numeric_constants(source: str) -> dict[str, object]:
    """The module-level names of `source` bound to a number or a tuple of numbers (an expression of them and
    of earlier such names included), with their values."""
    found: dict[str, object] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name, value = node.targets[0].id, node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            name, value = node.target.id, node.value
        else:
            continue
        try:
            evaluated = eval(compile(ast.Expression(value), "<constant>", "eval"), {"__builtins__": {}}, dict(found))
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


def _module_rows() -> dict[tuple[str, str], str]:
    """(name, module) -> the value shown, for every row naming one constant of one module."""
    rows = {}
    for row in (row for table in _tables() for row in table):
        name, module = NAME.fullmatch(row[0]), MODULE.fullmatch(row[2])
        if name and module:
            rows[(name.group(1), module.group(1))] = row[1]
    return rows


def _same(shown: object, value: object) -> bool:
    """Equal, and of the same kind, element by element (2 is not 2.0)."""
    if isinstance(value, tuple):
        return isinstance(shown, tuple) and len(shown) == len(value) and all(map(_same, shown, value))
    return type(shown) is type(value) and shown == value


def test_every_number_of_the_race_modules_is_on_the_page_with_its_value():
    rows = _module_rows()
    for module in MODULES:
        for name, value in _numeric_constants((REPO / module).read_text()).items():
            assert (name, module) in rows, f"{module}: {name} = {value!r} is not on {PAGE.name} with that module"
            shown = ast.literal_eval(rows[(name, module)])
            assert _same(shown, value), f"{PAGE.name}: {name} is {value!r} in {module}, {shown!r} on the page"


def test_every_row_naming_a_module_s_constant_names_one_it_holds():
    for (name, module), shown in _module_rows().items():
        assert module in MODULES, f"{PAGE.name}: {module} is not among the modules the scan reads"
        constants = _numeric_constants((REPO / module).read_text())
        assert name in constants, f"{PAGE.name}: {module} holds no number named {name}"


def test_the_decision_constants_are_at_most_ten_and_the_fitted_ones_are_the_shipped_settings():
    decisions = _tables()[0]
    assert 0 < len(decisions) <= MOST_DECISIONS
    shipped = race.race_settings()
    by_name = {row[0].strip("`"): row[1] for row in decisions}
    assert float(by_name["margin"]) == shipped.margin
    assert int(by_name["portfolio size"]) == len(shipped.portfolio)
    assert by_name["the portfolio (members and order)"] == f"{len(shipped.portfolio)} labels"
    assert all(row[3] for row in decisions), "each decision constant says how it is fitted or why it holds"


def test_the_seeds_the_race_compares_on_are_the_table_s_and_the_least_budget_pays_bsp_s_runs_on_them():
    assert race.SEARCH_SEEDS == build.SEARCH_SEEDS
    assert MIN_BUDGET == race.SEARCH_SEEDS  # one BSP training to the end of the budget on each search seed


def test_the_scan_reads_numbers_and_expressions_of_them_and_nothing_else():
    source = "A = 2\nB = 2 * A\nC = (1.5, 2)\nD = 'x'\nE = len('ab')\nF = True\nG: float = 0.5\ndef f():\n    H = 3\n"
    assert _numeric_constants(source) == {"A": 2, "B": 4, "C": (1.5, 2), "G": 0.5}
