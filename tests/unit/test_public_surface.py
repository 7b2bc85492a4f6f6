"""The package's public surface: what benchmarks/ and results/ import, they import from what a package offers.

A name imported as `from autosync.P import name` must be in P's `__all__`, and no module on the way may be
private (`_name`). The scripts so read
the package the way a user does, and a rename inside a package breaks no script.
Every `import autosync...` counts, at module level or inside a function.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = sorted([*(ROOT / "benchmarks").rglob("*.py"), *(ROOT / "results").rglob("*.py")])



def _all_of(module: str) -> set[str] | None:
    """The names in `module`'s `__all__`; None without one."""
    offered = getattr(importlib.import_module(module), "__all__", None)
    return set(offered) if offered is not None else None


def _problems(module: str, names: list[str]) -> list[str]:
    parts = module.split(".")
    problems = [f"{module} is private" for part in parts if part.startswith("_")]
    offered = _all_of(module)
    for name in names:
        if offered is None:
            problems.append(f"{module} has no __all__ (importing {name})")
        elif name not in offered:
            problems.append(f"{module}.__all__ does not offer {name}")
    return problems


def _imports(path: Path) -> list[tuple[int, str, list[str]]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("autosync"):
            found.append((node.lineno, node.module, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name, []) for a in node.names if a.name.startswith("autosync")]
    return found


def test_the_scripts_import_only_public_names():
    assert SCRIPTS, "no scripts found under benchmarks/ or results/"
    bad = [f"{path.relative_to(ROOT)}:{line}: {problem}"
           for path in SCRIPTS for line, module, names in _imports(path) for problem in _problems(module, names)]
    assert not bad, "\n".join(bad)


def test_each_package_of_modules_lists_them_all():
    """A package that holds modules rather than names (autosync itself, core, experiments, measure, reporting,
    workloads) names each module not starting with `_` in its `__all__`, so a new module is public or
    private by a decision, not by default."""
    bad = []
    for package in ("autosync", "autosync.core", "autosync.experiments", "autosync.measure", "autosync.reporting",
                    "autosync.workloads"):
        folder = ROOT.joinpath(*package.split("."))
        modules = {p.stem for p in folder.glob("*.py") if not p.stem.startswith("_")}
        modules |= {p.name for p in folder.iterdir() if (p / "__init__.py").is_file() and not p.name.startswith("_")}
        bad += [f"{package}: {name}" for name in sorted(modules - (_all_of(package) or set()))]
    assert not bad, f"modules missing from their package's __all__ (or private, with a `_`): {bad}"
