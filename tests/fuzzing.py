"""A fuzzer for the files users hand autosync: hypothesis strategies for job, family and search-space files,
and the property each loader keeps on them.

The property: whatever a file holds, its loader accepts it (and what it returns works: a job's fingerprint,
a family's drawn jobs, a space's size) or refuses it with a UserError of one line per problem, each naming
the file; never a traceback or any other exception.

Files are drawn in two layers:
- a document: a valid file (the built-in ones below, or one shipped with autosync: baselines/, the search
  spaces) with a few random changes: a node replaced by a generated value (wrong types, NaN and infinity,
  huge and tiny numbers, empty lists and mappings, odd unicode, nested garbage), nudged (a value of the same
  type), deleted, given an unknown sibling, or shared with another place (a YAML anchor and alias);
- its text: the document dumped as block or flow YAML or as JSON, then maybe given YAML's oddities (a
  byte-order mark, CRLF line endings, a directive, a second document, a line with a tag, an alias, a merge
  key, a complex key, a date; tabs, control characters, truncation, another encoding).

`tests/unit/core/test_loader_properties.py` holds the document layer to stricter round trips;
`tests/unit/core/test_fuzz_inputs.py` runs both layers in CI (derandomized, a bounded number of examples);
`benchmarks/bench_fuzz_inputs.py` is the long run, counting what it found.
"""

from __future__ import annotations

import copy
import itertools
import math
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import yaml
from hypothesis import strategies as st

from autosync.core.errors import FileProblems, UserError

REPO = Path(__file__).resolve().parents[1]

JOB = {
    "name": "prop",
    "workload": {
        "dataset": {"name": "synthetic_classification", "n_samples": 600, "n_features": 10, "n_classes": 3},
        "model": {"name": "mlp", "hidden": [16, 8]},
        "batch_size": 16,
        "optimizer": {"lr": 0.1, "momentum": 0.5, "nesterov": True},
        "lr_schedule": {"kind": "step", "step_epochs": 2.0, "gamma": 0.5},
        "evaluation": {"every_seconds": 5.0},
    },
    "cluster": {
        "n_workers": 4,
        "round_trip": {"kind": "uniform", "low": 0.5, "high": 1.5},
        "compute": {"model": "gpu", "launch_overhead": 0.2, "saturation_batch": 32, "seconds_per_sample": 0.02},
        "speed_factors": [1.0, 1.0, 0.5, 0.25],
        "slowdowns": [{"at": 1.0, "duration": 5.0, "factor": 3.0, "workers": [0, 2]}],
        "server": {"shards": 2, "bandwidth": 1.0e6, "apply_seconds": 0.001},
    },
    "target": {"metric": "test_accuracy", "threshold": 0.8},
    "budget": {"max_updates": 40, "max_virtual_seconds": 100.0},
    "seed": 3,
}

FAMILY = {
    "name": "prop",
    "seed": 0,
    "n_workers": [4, 8],
    "momentum": {"low": 0.0, "high": 0.9},
    "round_trips": [
        {"kind": "shifted_exponential", "alpha": {"low": 0.0, "high": 1.0}},
        {"kind": "uniform", "low": [0.2, 0.5], "high": {"low": 1.0, "high": 2.0}},
        {"kind": "deterministic",
         "slowdowns": {"episodes": [1, 2], "share": {"low": 0.1, "high": 0.5}, "factor": 2.0, "duration": 20.0}},
    ],
    "speed_factors": {"slow_share": {"low": 0.0, "high": 0.5}, "slowdown": {"low": 1.0, "high": 4.0, "log": True}},
    "workloads": [{
        "name": "w",
        "workload": {"dataset": {"name": "digits"}, "model": {"name": "logreg"}, "optimizer": {"lr": 0.2}},
        "target": {"metric": "train_loss", "threshold": 0.5},
        "budget": {"max_virtual_seconds": 50},
    }],
}

SPACE = {
    "name": "prop",
    "description": "a space to mutate",
    "policies": {
        "backup": {
            "k": {"type": "int", "low": 1, "high": "n_workers", "step": 1},
            "lr_rule": {"type": "categorical", "choices": ["fixed", "proportional"]},
        },
        "ssp": {"staleness": {"type": "int", "low": 0, "high": 4}},
        "bsp": {},
        "sync_switch": {"switch_at": {"type": "float", "low": 0.0, "high": 1.0, "step": 0.25},
                        "config": "sync_switch"},
        "split": {"fractions": {"type": "simplex", "size": "n_workers"}},
    },
}

KINDS = ("job", "family", "space")

SCALARS = st.one_of(
    st.none(), st.booleans(),
    st.integers(-3, 5000), st.sampled_from([0, -1, 2 ** 31, 2 ** 63, 10 ** 30, -(10 ** 30), 10 ** 400]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([math.nan, math.inf, -math.inf, 1e308, -1e308, 5e-324, 1e-300, 0.0, -0.0]),
    st.text(max_size=12),  # any unicode: control characters, surrogates excluded by YAML, line separators
    st.sampled_from(["", " ", "n_workers", "n_workers - 9", "n_workers*0", "n_workers/0", "fast_workers",
                     "\u2028", "é\u0301", "🙂", "名前", "\u202eevil", "a\nb", "\x85", "x" * 300, "1e999", "0x1F",
                     "yes", "~", ".nan", "2001-12-14"]),
)
NUMBERS = st.one_of(st.integers(-2, 5000), st.floats(-1.0, 1.0e4), st.floats(0.0, 1.0),
                    st.sampled_from([0, 1, 2, 0.5, 0.999, 1.0e-9, 1.0e9, 1.0e308, 5e-324, 10 ** 30, 2 ** 32]))
GARBAGE = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3),
    st.dictionaries(st.one_of(st.integers(), st.booleans(), st.none(), st.floats()), inner, max_size=2)),
    max_leaves=6)


def _yaml_files(pattern: str, exclude: str | None = None) -> list[dict]:
    """The mappings in the repository's YAML files matching `pattern` (a shipped file is a valid seed)."""
    out = []
    for path in sorted(REPO.glob(pattern)):
        if exclude is not None and path.match(exclude):
            continue
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        if isinstance(doc, dict):
            out.append(doc)
    return out


SEEDS: dict[str, list[dict]] = {
    "job": [JOB, *_yaml_files("baselines/*.yaml", exclude="family_*.yaml")],
    "family": [FAMILY, *_yaml_files("baselines/family_*.yaml")],
    # the shipped spaces under names of their own: a mutated copy named as a shipped space is refused by its
    # name (`autosync.search.space`), before what the mutation changed is checked
    "space": [SPACE, *({**doc, "name": f"fuzzed_{doc.get('name', 'space')}"}
                       for doc in _yaml_files("autosync/data/search_spaces/*.yaml"))],
}


def paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    """Every place in a document, the top level excluded: mapping keys and list indices."""
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    out = []
    for key, child in items:
        out.append(prefix + (key,))
        out += paths(child, prefix + (key,))
    return out


@st.composite
def mutated(draw: Any, bases: list[dict], share: bool = False) -> dict:
    """One of `bases` with one to three random changes (mostly one: more documents load and reach what runs
    after loading); with `share`, a change may also put one node at a second place (dumped as an anchor and
    an alias)."""
    doc = copy.deepcopy(draw(st.sampled_from(bases)))
    actions = ["replace", "replace", "nudge", "nudge", "delete", "sibling"] + ["share"] * share
    for _ in range(draw(st.sampled_from([1, 1, 1, 2, 3]))):
        places = paths(doc)
        if not places:
            break
        *parents, key = draw(st.sampled_from(places))
        node = doc
        for part in parents:
            node = node[part]
        action = draw(st.sampled_from(actions))
        if action == "replace":
            node[key] = draw(GARBAGE)
        elif action == "nudge":  # a value of the type written there, often a valid one
            old = node[key]
            node[key] = draw(NUMBERS if isinstance(old, (int, float)) and not isinstance(old, bool)
                             else _nudged_text(old) if isinstance(old, str)
                             else st.sampled_from([[], {}, old * 2]) if isinstance(old, list) else SCALARS)
        elif action == "delete":
            del node[key]
        elif action == "share":  # the same object twice: safe_dump writes &id001 ... *id001
            *other_parents, other_key = draw(st.sampled_from(places))
            other = doc
            for part in other_parents:
                other = other[part]
            if not _inside(node, other[other_key]):  # the node's own ancestor there would be a cycle
                node[key] = other[other_key]
        elif isinstance(node, dict):
            node[draw(st.one_of(st.text(min_size=1, max_size=8), st.sampled_from(["<<", "?", "-", "name", "\x00"]),
                                st.integers()))] = draw(SCALARS)
        else:
            node.append(draw(GARBAGE))
    return doc


def _nudged_text(old: str) -> st.SearchStrategy[str | list | dict]:
    """A string changed the ways a person edits one (policy specs and worker expressions are strings too)."""
    return st.sampled_from([[], {}, "", old * 2, old + ":", old + ":k=", old + ":k=1,k=2", old + "=1", old + "(",
                            old + "(x=1)", old[:len(old) // 2], old.upper(), f"{old}:k=n_workers/0",
                            f"{old}:k=n_workers*9-99", f"{old}:lr_rule=[1, 2]", old.replace("_", "-"), old + "\t"])


def _inside(node: Any, tree: Any) -> bool:
    """Whether `node` is `tree` or one of its descendants."""
    if node is tree:
        return True
    items = tree.values() if isinstance(tree, dict) else tree if isinstance(tree, list) else ()
    return any(_inside(node, child) for child in items)


# Lines YAML reads in its own ways, inserted between a document's lines.
ODD_LINES = [
    "x: &a [1, *a]", "anchor: &a {k: 1}", "merged: {<<: *a}", "<<: {name: merged}", "? [a, b]\n: complex key",
    "x: !!binary aGVsbG8=", "x: !!set {a, b}", "x: !!python/object/apply:os.system [ls]", "x: !custom 1",
    "x: 2001-12-14t21:59:43.10-05:00", "when: 2002-12-14", "x: 0o17", "x: 0b101", "x: 1_000", "x: 190:20:30",
    "x: 'unterminated", "\tx: 1", "x: *nope", "x: |\n  literal\n  text", "x: >-\n  folded", "- a list item",
    "x: [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]", "x: {a: {b: {c: {d: {e: {}}}}}}",
    "%TAG ! tag:example.com,2000:", "...", "---", "name: twice", "x: !!float 1e400", "x: !!int 0x_", "x: .NaN",
    "x: 1" + "0" * 5000, "x: -.inf", "x: !!str", "x: !!null 3", "x: !!bool maybe", "x: !!timestamp nope",
    "\u00a0x: 1", "x: \"\\ud800\"", "x: \"\\x00\"", "💥: 1", "x:\n  - 1\n - 2",
]


@st.composite
def file_text(draw: Any, doc: Any) -> bytes:
    """`doc` as the bytes of a file: dumped as block or flow YAML or as JSON, then maybe with YAML's
    oddities (see the module's docstring)."""
    import json

    style = draw(st.sampled_from(["block", "block", "flow", "json"]))
    if style == "json":
        try:
            text = json.dumps(doc, ensure_ascii=draw(st.booleans()))
        except (TypeError, ValueError):  # a key JSON cannot hold (None, a float): YAML then
            style = "block"
    if style != "json":
        text = yaml.safe_dump(doc, allow_unicode=draw(st.booleans()), sort_keys=False,
                              default_flow_style=None if style == "block" else True)
    for _ in range(draw(st.sampled_from([0, 0, 1, 2]))):  # half as plain dumps: more files reach the schema
        change = draw(st.sampled_from(["line", "line", "line", "bom", "crlf", "directive", "documents",
                                       "character", "truncate", "tabs"]))
        lines = text.split("\n")
        if change == "line":
            lines.insert(draw(st.integers(0, len(lines))), draw(st.sampled_from(ODD_LINES)))
            text = "\n".join(lines)
        elif change == "bom":
            text = "\ufeff" + text
        elif change == "crlf":
            text = text.replace("\n", "\r\n")
        elif change == "directive":
            text = draw(st.sampled_from(["%YAML 1.1\n---\n", "%YAML 1.2\n---\n", "%YAML 9.9\n---\n", "--- !!map\n"])) \
                + text
        elif change == "documents":
            text += draw(st.sampled_from(["\n---\nname: second\n", "\n...\n", "\n---\n"]))
        elif change == "character":
            at = draw(st.integers(0, len(text)))
            text = text[:at] + draw(st.characters(exclude_categories=["Cs"])) + text[at:]
        elif change == "truncate":
            text = text[:draw(st.integers(0, len(text)))]
        else:
            text = text.replace("  ", "\t")
    encoding = draw(st.sampled_from(["utf-8"] * 12 + ["utf-16", "latin-1"]))
    return text.encode(encoding, errors="replace")


def files(kind: str) -> st.SearchStrategy[bytes]:
    """The bytes of a `kind` file (job, family or space): a mutated seed, as text with YAML's oddities."""
    return mutated(SEEDS[kind], share=True).flatmap(file_text)


def refused_cleanly(exc: UserError, path: Path) -> str | None:
    """What is wrong with a refusal (None: nothing): every line must name the file, one line per problem."""
    lines = str(exc).splitlines()
    if not lines or not all(line.startswith(f"{path}: ") for line in lines):
        return f"a refusal whose lines do not all name the file: {str(exc)!r}"
    if isinstance(exc, FileProblems) and len(lines) != len(exc.problems):
        return f"a refusal of {len(exc.problems)} problems on {len(lines)} lines: {str(exc)!r}"
    return None


def _use_job(path: Path, n_workers: int) -> None:
    from autosync.core.job import job_from_dict, load_job

    spec = load_job(path)
    again = job_from_dict(spec.model_dump(mode="json"), str(path))  # what `family` writes reads back the same
    if again.fingerprint() != spec.fingerprint():
        raise AssertionError(f"the job's fingerprint changed on a round trip: {spec.fingerprint()} "
                             f"!= {again.fingerprint()}")


def _use_family(path: Path, n_workers: int) -> None:
    from autosync.core.family import load_family

    load_family(path).jobs(2)  # a drawn job is valid: a problem is the family file's, found when it loads


def _use_space(path: Path, n_workers: int) -> None:
    """Load a space, and bind the first policies it can sample on `n_workers`: a value the space holds that
    its policy refuses must be refused when the file loads, not found when a trial trains."""
    from autosync.catalog import make_policy
    from autosync.search.space import load_space
    from autosync.search.space_bounds import NOMINAL_BATCH

    space = load_space(path, n_workers)
    space.size()
    for point in itertools.islice(space.points(), 50) if space.is_discrete() else ():
        try:
            make_policy(point["policy"], point["params"]).bind(n_workers, NOMINAL_BATCH)
        except (UserError, ValueError, TypeError) as exc:
            raise AssertionError(f"{path} loaded, but its point {point} is refused on n_workers={n_workers}: "
                                 f"{exc}") from None


USE: dict[str, Callable[[Path, int], None]] = {"job": _use_job, "family": _use_family, "space": _use_space}


@dataclass(frozen=True)
class Outcome:
    """What one file met: "loaded", "refused", or "defect" with what went wrong (a traceback or the rule)."""

    kind: str
    defect: str | None = None


def check(kind: str, path: Path, n_workers: int = 4) -> Outcome:
    """The property on one file at `path` of `kind`: loaded and used, or refused cleanly; anything else (a
    traceback, a refusal that does not name the file on every line) is a defect, described."""
    try:
        USE[kind](path, n_workers)
    except UserError as exc:
        problem = refused_cleanly(exc, path)
        return Outcome("refused" if problem is None else "defect", problem)
    except Exception:  # noqa: BLE001 - the property: any other exception is what the fuzzer looks for
        return Outcome("defect", traceback.format_exc())
    return Outcome("loaded")
