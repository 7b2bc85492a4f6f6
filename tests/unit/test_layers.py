"""The package's import structure: no cycles, and no lower layer importing a higher one.

Every `import autosync...` counts, at module level or inside a function (a lazy import is still a
dependency), except those under `if TYPE_CHECKING:` (annotations only).
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "autosync"

# Lowest first; a module may import its own layer and those below. Keyed by the first name under autosync.
LAYERS = [
    {"data", "__init__"},
    {"core"},
    {"policies", "workloads"},
    {"engine"},
    {"catalog", "contract", "policy_grid", "lattice"},
    {"table"},
    {"policy_score", "race"},
    {"search", "experiments", "measure"},
    {"reporting"},
    {"options"},
    {"api"},
    {"cli", "__main__"},
]


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.lru_cache(maxsize=None)
def _tree(path: Path) -> ast.Module:
    """`path` parsed once for every test here (each reads the whole package; its files do not change during
    a run)."""
    return ast.parse(path.read_text())


def _is_type_checking(node: ast.If) -> bool:
    return isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"


def _imports(path: Path, modules: set[str], annotations: bool = False) -> set[str]:
    """The autosync modules `path` imports (a package's import also runs its parents' __init__); with
    `annotations`, also those it names only under `if TYPE_CHECKING:`."""
    tree = _tree(path)
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node) and not annotations:
            return
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    me = _module_name(path)
    out = set()
    for name in found:
        if not name.startswith("autosync"):
            continue
        parts = name.split(".")
        for i in range(1, len(parts) + 1):  # the module and every package above it
            target = ".".join(parts[:i])
            if target in modules and target != me and not me.startswith(target + "."):
                out.add(target)
    return out


@functools.lru_cache(maxsize=None)
def _graph() -> dict[str, set[str]]:  # read, never changed, by the tests that share it
    paths = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    modules = set(paths)
    return {name: _imports(path, modules) for name, path in paths.items()}


def _layer(module: str) -> int:
    top = module.split(".")[1] if "." in module else "__init__"
    return next(i for i, names in enumerate(LAYERS) if top in names)


def test_every_module_has_a_layer():
    for module in _graph():
        _layer(module)


def test_no_module_imports_a_higher_layer():
    bad = [f"{a} -> {b}" for a, deps in _graph().items() for b in deps if _layer(b) > _layer(a)]
    assert not bad, bad


def test_no_import_cycles():
    graph = _graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def strongconnect(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                strongconnect(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in graph:
        if v not in index:
            strongconnect(v)
    assert not cycles, cycles


def test_no_two_modules_name_each_other_even_for_annotations():
    """A pair that imports each other only for type hints still reads as one module split in two. None is
    left: a user's workload is built, then checked (`workloads.build.build_workload`), and the checks
    read the workload they are given without the workload naming them."""
    paths = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    names = {m: _imports(p, set(paths), annotations=True) for m, p in paths.items()}
    pairs = sorted({tuple(sorted((a, b))) for a in names for b in names[a] if a in names.get(b, set())})
    assert pairs == [], pairs


CROSSINGS_PENDING: set[tuple[str, str]] = set()  # none left
COMPUTATIONS = ("autosync.search", "autosync.experiments")


def _crossings(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """(importer, imported) of each import from experiments/ into search/, or from search/ into experiments/."""

    def side(module: str) -> str | None:
        return next((s for s in COMPUTATIONS if module == s or module.startswith(s + ".")), None)

    return sorted((a, b) for a, deps in graph.items() for b in deps
                  if side(a) is not None and side(b) is not None and side(a) != side(b))


def test_no_import_between_the_experiments_and_the_search():
    """One direction between the two computations: neither imports the other, function-local imports
    included. What both read lives below them: the static-k grid and a robustness report read back
    (`autosync.policy_grid`), a policy's score over seeds and the final-metric constraint
    (`autosync.policy_score`)."""
    found = set(_crossings(_graph()))
    assert not found - CROSSINGS_PENDING, sorted(found - CROSSINGS_PENDING)
    assert CROSSINGS_PENDING <= found, f"no longer made, remove from CROSSINGS_PENDING: {CROSSINGS_PENDING - found}"


def test_the_crossing_check_sees_either_direction():
    """The check above flags an import each way, and not a module whose name only starts alike."""
    graph = {"autosync.experiments.reference_grid": {"autosync.search.objective", "autosync.policy_score"},
             "autosync.search.recommend.grid": {"autosync.experiments", "autosync.policy_grid"},
             "autosync.searching": {"autosync.experiments.robustness"}}
    assert _crossings(graph) == [("autosync.experiments.reference_grid", "autosync.search.objective"),
                                 ("autosync.search.recommend.grid", "autosync.experiments")]


MOST_LOCAL_IMPORTS = 60


def _function_local_imports() -> list[tuple[str, int, bool]]:
    """(file, line, whether it says why) of each import of autosync inside a function, in the whole package. It
    says why with a comment holding "not at the top" on its line or above its block of imports."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).as_posix()
        lines = path.read_text().splitlines()
        for node in ast.walk(_tree(path)):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for inner in ast.walk(node):
                module = inner.module if isinstance(inner, ast.ImportFrom) else None
                if isinstance(inner, ast.Import):
                    module = inner.names[0].name
                if module is None or not (module.startswith("autosync") or getattr(inner, "level", 0)):
                    continue
                above = inner.lineno - 1
                while above > 0 and lines[above - 1].strip().startswith(("from autosync", "import autosync")):
                    above -= 1  # the comment of a block of imports sits above its first
                comment = []
                while above > 0 and lines[above - 1].strip().startswith("#"):
                    comment.append(lines[above - 1])  # the comment right above, over several lines
                    above -= 1
                said = "not at the top" in lines[inner.lineno - 1] or any("not at the top" in c for c in comment)
                found.append((rel, inner.lineno, said))
    return sorted(set(found))


def test_function_local_imports_are_few_and_say_why():
    """A module imports at its top; an import inside a function stays only where it defers a measured
    start-up cost (torch, optuna, or numpy and every policy for `--help`: benchmarks/bench_startup.py), and
    its comment says which."""
    found = _function_local_imports()
    silent = [f"{file}:{line}" for file, line, said in found if not said]
    assert not silent, f"function-local imports without a 'not at the top: ...' comment: {silent}"
    assert len(found) <= MOST_LOCAL_IMPORTS, \
        f"{len(found)} function-local autosync imports, more than {MOST_LOCAL_IMPORTS}"


# File names that two modules may share. A package's own structure: its `__init__`, and a family's `_base`
# (each policy family's ABC). `build`: the one way to build what its package holds (a workload, a table).
SHARED_FILE_NAMES = {"__init__", "_base", "build"}
SHARED_FILE_NAMES_PENDING: set[str] = set()  # none left


def test_no_two_modules_share_a_file_name():
    """A file name says what its module is: a report's writer is not named like the computation it renders
    (`reporting.leaderboard_files` beside `experiments.leaderboard`), so a reader, grep and a traceback tell
    them apart by name."""
    homes: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        homes.setdefault(path.stem, []).append(path.relative_to(PACKAGE.parent).as_posix())
    shared = {name: paths for name, paths in homes.items() if len(paths) > 1}
    assert not set(shared) - SHARED_FILE_NAMES - SHARED_FILE_NAMES_PENDING, \
        {name: shared[name] for name in sorted(set(shared) - SHARED_FILE_NAMES - SHARED_FILE_NAMES_PENDING)}
    assert SHARED_FILE_NAMES_PENDING <= set(shared), \
        f"no longer shared, remove from SHARED_FILE_NAMES_PENDING: {SHARED_FILE_NAMES_PENDING - set(shared)}"
