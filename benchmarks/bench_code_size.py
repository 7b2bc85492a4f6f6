"""The search's code against the search issue's goals: the lines of autosync/search (at most 4,000) and the
race's decision constants (at most 10).

    python benchmarks/bench_code_size.py

Lines are physical lines of the package's Python files, blank and comment lines included (as `wc -l` counts
them), per sub-package and in all; and, in all, of each kind: docstrings (a module's, class's or function's,
every line of it), comments, blank lines and the code left. The decision constants are the rows of the first table of
docs/contributing/race-constants.md, which tests/unit/search/test_race_constants.py holds to the code: every
module-level number of the race's modules named there with its value. Nothing is timed, so the figures are
the same on any machine for the same commit.
"""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

from _report import Figures

REPO = Path(__file__).resolve().parents[1]
SEARCH = REPO / "autosync" / "search"
CONSTANTS_PAGE = REPO / "docs" / "contributing" / "race-constants.md"
MOST_LINES = 4000  # the search issue's goal for autosync/search
MOST_DECISIONS = 10  # and for the race's decision constants


def lines(files: "list[Path]") -> int:
    """Physical lines over `files`, as `wc -l` counts them."""
    return sum(len(f.read_text().splitlines()) for f in files)


def parts() -> dict[str, int]:
    """Lines per sub-package of autosync/search (its top-level modules as one part)."""
    out = {"autosync/search/*.py": lines(sorted(SEARCH.glob("*.py")))}
    for sub in sorted(p for p in SEARCH.iterdir() if p.is_dir() and (p / "__init__.py").exists()):
        out[f"autosync/search/{sub.name}/"] = lines(sorted(sub.rglob("*.py")))
    return out


def kinds(files: "list[Path]") -> dict[str, int]:
    """The lines of `files` by kind: each line of a docstring, then of the others each comment, blank or code
    line (a line of a string that is no docstring is code)."""
    out = {"docstrings": 0, "comments": 0, "blank": 0, "code": 0}
    for f in files:
        text = f.read_text()
        in_docstring: set[int] = set()
        for node in ast.walk(ast.parse(text)):
            body = getattr(node, "body", None)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body \
                    and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                in_docstring.update(range(body[0].lineno, body[0].end_lineno + 1))
        for number, line in enumerate(text.splitlines(), start=1):
            kind = ("docstrings" if number in in_docstring else "blank" if not line.strip()
                    else "comments" if line.lstrip().startswith("#") else "code")
            out[kind] += 1
    return out


def decision_constants() -> int:
    """The rows of the page's first table (its header and rule left out)."""
    table = []
    for line in CONSTANTS_PAGE.read_text().splitlines():
        if line.startswith("|"):
            table.append(line)
        elif table:
            break
    return len(table) - 2


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", default=None, help="also write the figures here (benchmarks/make_table.py)")
    args = parser.parse_args()
    figures = Figures("bench_code_size")
    by_part = parts()
    total = sum(by_part.values())
    for part, count in by_part.items():
        print(f"{part:32s} {count:6d} lines")
        figures.add(f"{part}: lines", count, "lines", "autosync/search in all", count / total)
    print(f"{'autosync/search':32s} {total:6d} lines (goal <= {MOST_LINES:,})")
    figures.add("autosync/search: lines of Python", total, "lines", goal=f"<= {MOST_LINES:,}",
                met=total <= MOST_LINES)
    for kind, count in kinds(sorted(SEARCH.rglob("*.py"))).items():
        print(f"{'  of them ' + kind:32s} {count:6d} lines")
        figures.add(f"autosync/search: lines of {kind}", count, "lines", "autosync/search in all", count / total)
    decisions = decision_constants()
    print(f"the race's decision constants: {decisions} (goal <= {MOST_DECISIONS})")
    figures.add("the race's decision constants (docs/contributing/race-constants.md)", decisions, "",
                goal=f"<= {MOST_DECISIONS}", met=decisions <= MOST_DECISIONS)
    figures.write(args.json)


if __name__ == "__main__":
    main()
