"""The docs site's promises: the generated reference pages are up to date and list every command-line option
and every job-file field; no page is longer than a reader reads in one go; the pages speak of the project as
it is (no first person, no history)."""

from __future__ import annotations

import importlib.util
import re
import sys
import typing
from pathlib import Path

import pytest
from pydantic import BaseModel

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
GENERATED = {"reference/commands.md", "reference/job-fields.md", "reference/policies.md"}
MAX_WORDS = 1500
# The pages that follow the search's rewrite: their citations and notes are held when they are rewritten
FOLLOWS_THE_SEARCH = {"tutorial/first-tune.md"}
# The search issue's page on the procedure: at most 1,000 words, with a figure of one race
SEARCH_PAGE, SEARCH_PAGE_WORDS, RACE_FIGURE = "concepts/tuning.md", 1000, "](race.png)"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, DOCS / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _pages() -> dict[str, str]:
    return {p.relative_to(DOCS).as_posix(): p.read_text() for p in sorted(DOCS.rglob("*.md"))}


def test_the_generated_reference_pages_are_up_to_date():
    make = _load("make_reference")
    for name, page in make.PAGES.items():
        assert (DOCS / "reference" / name).read_text() == page(), \
            f"docs/reference/{name} is stale: run python docs/scripts/make_reference.py"


def test_the_commands_page_lists_every_command_argument_and_option():
    """Walks the command tree itself (click introspection of the typer app), not the generator's output."""
    import typer

    from autosync.cli import app

    page = (DOCS / "reference" / "commands.md").read_text()
    sections = dict(re.findall(r"^#{2,3} (autosync [a-z -]+)\n(.*?)(?=^#{2,3} autosync |\Z)", page, re.M | re.S))
    root = typer.main.get_command(app)
    ctx = root.make_context("autosync", [], resilient_parsing=True)
    seen = 0

    def walk(command, name):
        nonlocal seen
        if hasattr(command, "list_commands"):
            for sub in command.list_commands(ctx):
                walk(command.get_command(ctx, sub), f"{name} {sub}")
            return
        assert name in sections, f"{name} has no section in docs/reference/commands.md"
        for param in command.params:
            for flag in (param.opts + param.secondary_opts if param.param_type_name == "option"
                         else [param.name]):
                assert re.search(rf"^\| `[^`]*(?<![\w-]){re.escape(flag)}(?![\w-])[^`]*` \|", sections[name], re.M), \
                    f"{name}: {flag} is not in docs/reference/commands.md"
                seen += 1

    walk(root, "autosync")
    assert seen > 100  # the walk reached the commands' options


def test_the_commands_page_marks_the_arguments_that_may_be_left_out():
    """`autosync tune [OPTIONS] [JOB]`: a usage line brackets an argument with a default (the embedded job),
    and only such an argument."""
    import typer

    from autosync.cli import app

    page = (DOCS / "reference" / "commands.md").read_text()
    root = typer.main.get_command(app)
    ctx = root.make_context("autosync", [], resilient_parsing=True)
    stack, optional = [(root, "autosync")], 0
    while stack:
        command, name = stack.pop()
        if hasattr(command, "list_commands"):
            stack += [(command.get_command(ctx, sub), f"{name} {sub}") for sub in command.list_commands(ctx)]
            continue
        usage = next(line for line in page.splitlines() if line.startswith(f"{name} [OPTIONS]"))
        for param in (p for p in command.params if p.param_type_name == "argument"):
            word = param.name.upper()
            assert (f"[{word}" in usage) == (not param.required), (usage, param.name)
            optional += not param.required
    assert optional >= 8  # run, tune, leaderboard, ... take the embedded job by default


def test_the_reference_lists_every_environment_variable():
    """Every AUTOSYNC_* variable the package reads is in the command-line conventions page."""
    code = "\n".join(p.read_text() for p in (REPO / "autosync").rglob("*.py"))
    variables = set(re.findall(r"AUTOSYNC_[A-Z_]+", code))
    page = (DOCS / "reference" / "cli.md").read_text()
    assert len(variables) >= 3
    assert not {v for v in variables if f"`{v}" not in page}, "add them to docs/reference/cli.md"


def _field_paths(model: type[BaseModel], prefix: str = "") -> set[str]:
    """Every field of a pydantic model and of the models nested in it, dotted (lists and union variants
    add no marker)."""
    paths = set()
    for name, field in model.model_fields.items():
        paths.add(prefix + name)
        stack = [field.annotation]
        while stack:
            hint = stack.pop()
            if isinstance(hint, type) and issubclass(hint, BaseModel):
                paths |= _field_paths(hint, f"{prefix}{name}.")
            else:
                stack.extend(typing.get_args(hint))
    return paths


def test_the_job_fields_page_lists_every_field():
    from autosync.core.job import JobSpec

    page = (DOCS / "reference" / "job-fields.md").read_text()
    listed = {re.sub(r"\([a-z_]+=[a-z_]+\)|\[\]", "", f) for f in re.findall(r"^\| `([^`]+)` \|", page, re.M)}
    missing = _field_paths(JobSpec) - listed
    assert not missing, f"job-file fields missing from docs/reference/job-fields.md: {sorted(missing)}"


def test_the_policies_page_lists_every_policy_and_parameter():
    from autosync.catalog import POLICIES, policy_parameters

    page = (DOCS / "reference" / "policies.md").read_text()
    for name, cls in POLICIES.items():
        assert f"\n## {name}\n" in page, name
        row = next(line for line in page.splitlines() if line.startswith(f"| [`{name}`]"))
        for parameter in policy_parameters(cls):
            assert f"`{parameter}=" in row, (name, parameter)


# The first person and words that tell the project's history rather than what it is.
FIRST_PERSON = re.compile(r"(?<![\w'-])(?:I|I'm|I've|I'd)(?![\w'-])")  # case matters: `i` is an index
FORBIDDEN = re.compile(r"(?<![\w'-])(?:we|we're|we've|our|ours|us|my|earlier|previously|formerly|"
                       r"originally|used to|no longer|anymore|any more|was added|were added|now|at first|"
                       r"nowadays|until recently|in the past|these days|today|today's|since then|"
                       r"written before)(?![\w'-])", re.I)
ROMAN = re.compile(r"(?:Table|Fig\.|Figure|Algorithm|Section|sec\.|Type) I\b")


@pytest.mark.parametrize("name", sorted(_pages()))
def test_pages_have_no_first_person_or_history_phrases(name):
    text = _pages()[name]
    text = re.sub(r"```.*?```", "", text, flags=re.S)  # code and command output
    text = re.sub(r"`[^`\n]*`", "", text)  # inline code (flags, file names)
    text = ROMAN.sub("", text)
    found = [m.group(0) for pattern in (FIRST_PERSON, FORBIDDEN) for m in pattern.finditer(text)]
    assert not found, f"docs/{name}: {found}"


# A source file or a test named, or a claim that something is tested: notes for contributors, not concepts
SOURCE_OR_TEST = re.compile(r"autosync/[\w/]+\.py|\btests/|\btest_\w+\.py|\btested\b")


@pytest.mark.parametrize("name", sorted(name for name in set(_pages()) - GENERATED - FOLLOWS_THE_SEARCH
                                        if name.startswith(("concepts/", "reference/"))))
def test_concept_and_reference_pages_name_no_source_file_or_test(name):
    text = re.sub(r"```.*?```", "", _pages()[name], flags=re.S)
    assert not SOURCE_OR_TEST.findall(text), f"docs/{name}: move it to docs/contributing/"


def _with_includes(text: str) -> str:
    """A page's text with each snippet it includes (`--8<-- "path"` or `"path:first:last"`) put in its place, as
    the site renders it."""
    def include(match: re.Match) -> str:
        path, *span = match.group(1).split(":")
        lines = (REPO / path).read_text().splitlines()
        return "\n".join(lines[int(span[0]) - 1:int(span[1])] if span else lines)

    return re.sub(r'^--8<-- "([^"]+)"$', include, text, flags=re.M)


def test_included_snippets_count_as_words_of_the_page_that_includes_them():
    page = _pages()["reference/search-spaces.md"]
    assert len(_with_includes(page).split()) > len(page.split())


@pytest.mark.parametrize("name", sorted(set(_pages()) - GENERATED))
def test_pages_are_at_most_1500_words(name):
    text = re.sub(r"```.*?```", "", _with_includes(_pages()[name]), flags=re.S)  # shown output is not prose
    words = len(text.split())
    assert words <= MAX_WORDS, f"docs/{name}: {words} words (at most {MAX_WORDS} outside the generated reference)"


def test_the_search_page_describes_the_race_in_at_most_1000_words_with_its_figure():
    text = _pages()[SEARCH_PAGE]
    words = len(re.sub(r"```.*?```", "", text, flags=re.S).split())
    assert words <= SEARCH_PAGE_WORDS, f"docs/{SEARCH_PAGE}: {words} words (at most {SEARCH_PAGE_WORDS})"
    assert RACE_FIGURE in text and (DOCS / "concepts" / "race.png").is_file()
    assert all(f"**{name}" in text for name in ("Portfolio", "Second seed", "Local step", "Final metric",
                                                "Towards BSP"))


# A paper's numbered equation, problem, rule or algorithm, and LB-BSP's NARX predictor
CITED_NUMBER = re.compile(r"\b(?:rule|problem) \(\d+\)|\beqs?\. ?\(?\d+|\(\d+\)-\(\d+\)|\bAlgorithms? \d+|\bNARX\b",
                          re.I)


@pytest.mark.parametrize("name", sorted(set(_pages()) - GENERATED - FOLLOWS_THE_SEARCH - {"reference/papers.md"}))
def test_every_cited_equation_and_algorithm_links_to_the_papers_page(name):
    text = re.sub(r"```.*?```", "", _pages()[name], flags=re.S)
    text = re.sub(r"`[^`\n]*`", "", text)  # code: a module named after an equation (`_eq17`)
    text = re.sub(r"^#.*$", "", text, flags=re.M)  # headings: a link would change their anchors
    text = re.sub(r"\[[^\]]*\]\((?:\.\./)*(?:reference/)?papers\.md#[a-z-]+\)", "", text)
    assert not CITED_NUMBER.findall(text), f"docs/{name}: link these to reference/papers.md"


def test_the_papers_page_cites_each_paper_autosync_implements_in_full():
    page = (DOCS / "reference" / "papers.md").read_text()
    for anchor, title in [("dbw", "Dynamic Backup Workers for Parallel Machine Learning"),
                          ("sync-switch", "Sync-Switch: Hybrid Parameter Synchronization"),
                          ("lb-bsp", "Semi-Dynamic Load Balancing"),
                          ("dana", "Taming Momentum in a Distributed Asynchronous")]:
        title = r"\s+".join(map(re.escape, title.split()))  # a title may wrap
        assert re.search(rf"^## .*\{{#{anchor}\}}\n\n[^#|]*{title}", page, re.M), anchor


# Words the command line prints that a newcomer cannot guess, each with its glossary entry
PRINTED_TERMS = ("BSP", "ASP", "SSP", "policy family", "forked", "leader", "sibling", "twin", "neighbour",
                 "equivalent", "BSP trainings", "time to target", "full-budget check", "pruned", "regret",
                 "fingerprint", "compute unit", "cache hit")


def test_the_glossary_defines_the_words_the_output_uses():
    """Each term is in the package's source (it is still said) and opens a glossary entry."""
    code = "\n".join(p.read_text() for p in (REPO / "autosync").rglob("*.py")).lower()
    entries = [h.lower() for h in re.findall(r"^### (.+)$", (DOCS / "concepts" / "glossary.md").read_text(), re.M)]
    for term in PRINTED_TERMS:
        assert term.lower() in code, term
        assert any(h.startswith(term.lower()) for h in entries), f"docs/concepts/glossary.md: no entry for {term}"


def _slug(heading: str) -> str:
    """A heading's anchor, as the site's table of contents makes it ("BSP's reference run" ->
    bsps-reference-run)."""
    return re.sub(r"\s+", "-", re.sub(r"[^\w\s-]", "", heading.lower()).strip())


def test_every_glossary_term_in_the_first_tunes_output_is_linked_from_its_page():
    """Each glossary entry whose term the first tune prints (its first name; a plural or an N for a count
    allowed) is linked from tutorial/first-tune.md, where a newcomer reads that output."""
    output = (DOCS / "tutorial" / "output" / "first-tune" / "tune.txt").read_text().lower()
    output = " ".join(output.split())
    page = (DOCS / "tutorial" / "first-tune.md").read_text()
    linked = set(re.findall(r"concepts/glossary\.md#([\w-]+)", page))
    printed, missing = [], []
    for heading in re.findall(r"^### (.+)$", (DOCS / "concepts" / "glossary.md").read_text(), re.M):
        term = heading.split(",")[0].lower().removesuffix("s")
        pattern = re.escape(term).replace(r"\ n\ ", r"\ \d+\ ").replace(r"\ ", r"\s+")
        if re.search(rf"(?<![\w-]){pattern}s?(?![\w-])", output):
            printed.append(heading)
            if _slug(heading) not in linked:
                missing.append(heading)
    assert len(printed) >= 10  # the search's words: BSP trainings, pruned, forked, leaders, ...
    assert not missing, f"docs/tutorial/first-tune.md: link these glossary entries: {missing}"


def _error_classes() -> set[str]:
    """Every exception class of the package that derives, directly or not, from `AutosyncError` (read from
    the source, so that no module needs importing)."""
    import ast

    bases: dict[str, list[str]] = {}
    for path in (REPO / "autosync").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                bases[node.name] = [getattr(b, "id", getattr(b, "attr", "")) for b in node.bases]

    def derives(name: str) -> bool:
        return name == "AutosyncError" or any(derives(b) for b in bases.get(name, []) if b != name)

    return {name for name in bases if derives(name)}


def test_troubleshooting_has_an_entry_for_every_verdict_and_error_class():
    """Each verdict the command line prints (`reporting.console.VERDICTS`, each checked against the module that
    prints it) opens an entry, a heading or a bold item, and each error class is named."""
    import importlib.util

    from autosync.reporting.console import VERDICTS

    page = (DOCS / "troubleshooting.md").read_text()
    entries = [line for line in page.splitlines() if re.match(r"#{2,4} |- \*\*", line)]
    for verdict, module in VERDICTS.items():
        source = Path(importlib.util.find_spec(module).origin).read_text()
        assert verdict in " ".join(re.sub(r'"\s*\n\s*f?"', "", source).split()), (verdict, module)
        assert any(f'"{verdict}' in entry for entry in entries), f"docs/troubleshooting.md: no entry for {verdict!r}"
    errors = _error_classes()
    assert {"UserError", "RuntimeFailure", "Interrupted", "NoFeasibleTrial", "WorkerProcessError"} <= errors
    assert not {e for e in errors if f"{e}" not in page}, "docs/troubleshooting.md: name these error classes"


# ------------------------------------------------------------------------------------------ figures

# A measured figure in prose: a ratio, a share, a time, a search cost or a size
# (a word of comparison may come between, and a line may break before the unit: "1.31\nfewer BSP trainings")
UNIT = r"(?:(?:\s(?:fewer|more|less))?(?:\sBSP\strainings|\ss\b|\sms\b)|x\b|\s?%|\sMB\b|\sMiB\b|\sGiB\b)"
FIGURE = re.compile(r"(?<![\w.=/-])(\d+(?:\.\d+)?)(?=" + UNIT + ")")
# Where a figure may come from: a committed result, benchmark or family file, or a tutorial step's output
SOURCE = re.compile(r"(?:\.\./)*((?:results|benchmarks|baselines|docs/tutorial/output)/[\w./-]*[\w/])")
# Figures that are settings, definitions or examples of a printed form, not measurements, each with why
NOT_MEASURED = {
    ("concepts/glossary.md", "3.20x"): "how a speedup is printed",
    ("reference/cli.md", "3.20x"): "how a ratio is printed",
    ("reference/cli.md", "1.25x"): "how a ratio is printed",
    ("reference/cli.md", "60 s"): "the heartbeat's default (a setting)",
    ("reference/cli.md", "1 GiB"): "glibc's arena limit",
    ("how-to/shared-storage.md", "60 s"): "the heartbeat's default (a setting)",
    ("how-to/shared-storage.md", "1 s"): "the storage outage's retry interval (a setting)",
    ("how-to/shared-storage.md", "300 s"): "AUTOSYNC_STORAGE_WAIT_SECONDS's default (a setting)",
    ("how-to/shared-storage.md", "12 s"): "how the outage's end is printed (an example line)",
    ("troubleshooting.md", "300 s"): "AUTOSYNC_STORAGE_WAIT_SECONDS's default (a setting)",
    ("how-to/robustness.md", "1.1x"): "the definition of a report column",
    ("how-to/leaderboard.md", "5x"): "the DBW paper's slowdown job, as its job file sets it",
    ("how-to/leaderboard.md", "50 s"): "the DBW paper's slowdown job, as its job file sets it",
    ("index.md", "5x"): "the DBW paper's slowdown job, as its job file sets it",
    ("index.md", "50 s"): "the DBW paper's slowdown job, as its job file sets it",
    ("troubleshooting.md", "15%"): "the calibration's tolerance (a setting)",
    ("tutorial/first-tune.md", "95%"): "the default job's target (a setting)",
    ("concepts/parameter-server.md", "1.86 MB"): "the Sync-Switch paper's model size, a setting of its job",
    ("concepts/tpe-search.md", "30%"): "the pace rule's start, a fraction of the leader's time (a setting)",
    ("concepts/tpe-search.md", "1.05x"): "the factor past which another space's answer is named (a setting)",
}


def _units(text: str) -> list[str]:
    """A page's prose, as the site renders it, in the units a figure's source is cited in: paragraphs and
    table rows (shown code and output left out)."""
    text = re.sub(r"```.*?```|<!--.*?-->", "", _with_includes(text), flags=re.S)
    text = "\n".join(line for line in text.splitlines() if not line.startswith(("    ", "\t")))
    units = []
    for block in re.split(r"\n\s*\n", text):
        rows = [line for line in block.splitlines() if line.startswith("|")]
        units += rows if rows else [block]
    return units


def _numbers(lines: list[str]) -> list[str]:
    return re.findall(r"\d+(?:\.\d+)?", " ".join(lines))


def _found(figure: str, numbers: list[str]) -> bool:
    """Whether `figure` is one of `numbers` as written, to its own decimals (9.4 is 9.44 rounded)."""
    decimals = len(figure.partition(".")[2])
    return any(f"{float(n):.{decimals}f}" == figure for n in numbers)


def _cited_lines(unit: str) -> list[str]:
    """The lines of the files `unit` cites: a table row's backticked words after a path narrow that file to
    the lines holding them (its rows, or the sentence quoted)."""
    lines: list[str] = []
    cells = unit.split("|") if unit.startswith("|") else [unit]
    for cell in cells:
        for match in SOURCE.finditer(cell):
            path = REPO / match.group(1)
            if not path.exists():  # a file a command writes (results/robustness/quick/...), not a source
                continue
            files = sorted(f for f in path.iterdir() if f.suffix in (".md", ".json", ".csv", ".txt")) \
                if path.is_dir() else [path]
            text = [line for f in files for line in f.read_text().splitlines()]
            rest = cell[match.end():].removeprefix("`")  # what follows the path's closing backtick
            anchors = re.findall(r"`([^`]+)`", SOURCE.split(rest)[0]) if unit.startswith("|") else []
            anchors = [a for a in anchors if not SOURCE.fullmatch(a)]
            for a in anchors:
                held = [line for line in text if line.replace("*", "").startswith(f"| {a} |")] or \
                    [line for line in text if a in line]
                assert held, f"{match.group(1)} has no row or line {a!r}"
                lines += held
            lines += [] if anchors else text
    return lines


# Contributors' notes on how a benchmark's code was developed keep that development's own measurements
@pytest.mark.parametrize("name", sorted(n for n in set(_pages()) - GENERATED - FOLLOWS_THE_SEARCH
                                        if not n.startswith("contributing/")))
def test_every_figure_in_prose_is_in_the_file_it_cites(name):
    """A measured figure (a ratio, a time, a cost) sits beside the committed file it was read from, and is
    in it (rounded or as written): a result, a benchmark, a tutorial step's output. A figure no file
    holds was typed in, and goes stale unseen."""
    untraced = []
    for unit in _units(_pages()[name]):
        if not FIGURE.search(unit):
            continue
        numbers = _numbers(_cited_lines(unit))
        for m in FIGURE.finditer(unit):
            shown = " ".join(re.match(r"\d+(?:\.\d+)?" + UNIT, unit[m.start():m.end() + 20]).group(0).split())
            if (name, shown) in NOT_MEASURED or _found(m.group(1), numbers):
                continue
            untraced.append(f"{shown!r} in: {' '.join(unit.split())[:160]}")
    assert not untraced, f"docs/{name}: figures with no cited file holding them:\n" + "\n".join(untraced)


def test_every_number_of_the_choosing_guide_is_in_the_rows_it_cites():
    """how-to/choose.md: each row's evidence (its regrets too, which carry no unit) is read from the rows or
    lines of the committed reports that its source column names."""
    rows = [u for u in _units(_pages()["how-to/choose.md"]) if u.startswith("| ") and not u.startswith("| your job")]
    assert len(rows) >= 8
    for row in rows:
        cells = row.split("|")
        assert SOURCE.search(cells[-2]), f"no source in: {row[:80]}"
        numbers = _numbers(_cited_lines(row))
        evidence = re.findall(r"(?<![\w.=/-])\d+(?:\.\d+)?", cells[3])
        assert evidence, f"no figure in: {row[:80]}"
        assert not [n for n in evidence if not _found(n, numbers)], \
            (f"docs/how-to/choose.md: {[n for n in evidence if not _found(n, numbers)]} not in the cited rows of: "
             f"{cells[-2].strip()}")


@pytest.mark.parametrize("page, section", [("README.md", "Quick start"), ("docs/index.md", "Install")])
def test_the_install_steps_say_which_python_and_clone_first(page, section):
    import tomllib

    python = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["requires-python"]
    text = re.search(rf"^## {section}\n(.*?)(?=^## )", (REPO / page).read_text(), re.M | re.S).group(1)
    assert f"Python {python.removeprefix('>=')} or later" in text, (page, python)
    # the commands run in a clone (no URL is typed in: the repository's address is wherever it was cloned from)
    assert 0 <= text.find("In a clone of its repository") < text.find("pip install -e"), \
        f"{page}: the editable install runs in a clone"
    assert "<URL" not in text, f"{page}: a placeholder instead of a command"


# ------------------------------------------------------------------------------------------ commands shown

def _shown_commands() -> list[tuple[str, str]]:
    """(page, command line) of every `autosync ...` command in a code block of docs/ (fenced or indented;
    continuation lines joined, comments dropped), outside the generated command reference."""
    found = []
    for name, text in _pages().items():
        if name in GENERATED:
            continue
        blocks = re.findall(r"```[a-z]*\n(.*?)```", text, re.S)
        blocks += ["\n".join(line[4:] for line in block.splitlines())
                   for block in re.findall(r"(?:^(?: {4}|\t).*\n?)+", re.sub(r"```.*?```", "", text, flags=re.S), re.M)]
        for block in blocks:
            joined = re.sub(r"\\\n\s*", " ", block)
            for line in joined.splitlines():
                line = line.strip().removeprefix("$ ")
                line = re.sub(r"^torchrun .*?-m autosync\.cli ", "autosync ", line)  # the ranks' command
                match = re.search(r"(?:^|&& )(autosync(?: .*)?)$", line)
                if match:
                    found.append((name, re.sub(r"\s+#.*$", "", match.group(1))))
    return found


def test_docs_show_commands():
    assert len(_shown_commands()) > 25


@pytest.mark.parametrize("page, command", _shown_commands())
def test_every_command_shown_in_docs_parses(page, command):
    """Each command a page shows names a real command and real options with values of the right type (the
    command line's own parser, nothing run): a renamed option or command fails here."""
    import shlex

    import typer

    from autosync.cli import app

    args = shlex.split(command)[1:]
    args = [a for a in args if "$" not in a]  # shell variables stand for values
    group = typer.main.get_command(app)
    ctx = group.make_context("autosync", list(args), resilient_parsing=False) if args[:1] == ["--version"] else None
    if ctx is not None:
        return
    parent = group.make_context("autosync", [], resilient_parsing=True)
    command_obj, rest = group, args
    while hasattr(command_obj, "list_commands") and rest:
        sub = command_obj.get_command(parent, rest[0])
        assert sub is not None, f"docs/{page}: `{command}`: no command {rest[0]!r}"
        command_obj, rest = sub, rest[1:]
    try:
        command_obj.make_context(command_obj.name, list(rest), parent=parent)
    except Exception as exc:  # click's UsageError, BadParameter, ...
        pytest.fail(f"docs/{page}: `{command}` does not parse: {exc}")


# ------------------------------------------------------------------------------------------ the tutorial

def _words(transcript: str) -> list[str]:
    """The words of a command's output: numbers, times, dates and table rules left out, since they vary
    with the machine; what is left is the output's structure and its verdicts."""
    return re.findall(r"[A-Za-z][A-Za-z_'-]*", re.sub(r"\d+(?:[.:]\d+)*", " ", transcript))


def test_each_tutorial_page_shows_the_output_of_each_of_its_steps():
    make = _load("make_tutorial")
    for part, steps in make.PARTS.items():
        page = (DOCS / "tutorial" / f"{part}.md").read_text()
        included = re.findall(rf'--8<-- "docs/tutorial/output/{part}/([a-z-]+)\.txt"', page)
        shown = [s.name for s in steps if not s.command.startswith("export ")]
        assert included == shown, (part, included, shown)
        for step in steps:
            transcript = (DOCS / "tutorial" / "output" / part / f"{step.name}.txt").read_text()
            assert transcript.startswith(f"$ {step.command}\n"), (part, step.name)
            if step.command.startswith("export "):
                assert step.command in page, (part, step.command)
    for name in make.FIGURES:
        assert (DOCS / "tutorial" / "img" / name).is_file(), name


# The tutorial's parts, each run on its own: the first two run one simulating command at a time, beside the
# other tests under xdist; the third starts worker processes and torchrun ranks, so it runs with the tests
# marked `processes` (tests/conftest.py), one at a time.
_TUTORIAL_PARTS = [pytest.param(part, marks=[pytest.mark.processes, pytest.mark.distributed]
                                if any(step.real_clock for step in steps) else [])
                   for part, steps in _load("make_tutorial").PARTS.items()]


@pytest.mark.slow
@pytest.mark.parametrize("part", _TUTORIAL_PARTS)
def test_the_tutorial_runs_and_prints_what_its_pages_show(tmp_path, part):
    """docs/scripts/make_tutorial.py runs every step of a part in a fresh folder (each must exit 0); what the
    simulator steps print must read as the committed pages show it, numbers aside. The real-clock steps of
    part 3 measure this machine, so only their commands and exit codes are held."""
    make = _load("make_tutorial")
    assert make.main(["--out", str(tmp_path), "--part", part]) == 0
    for step in make.PARTS[part]:
        fresh = (tmp_path / part / f"{step.name}.txt").read_text()
        committed = (DOCS / "tutorial" / "output" / part / f"{step.name}.txt").read_text()
        assert fresh.splitlines()[0] == committed.splitlines()[0]
        if not step.real_clock:
            assert _words(fresh) == _words(committed), \
                (f"docs/tutorial/output/{part}/{step.name}.txt differs from what the command prints now: "
                 "run python docs/scripts/make_tutorial.py")


def test_every_switch_that_is_on_by_default_can_be_turned_off():
    """A boolean option whose default is on is listed, and accepted, with its off switch (--no-fit)."""
    import typer

    from autosync.cli import app

    root = typer.main.get_command(app)
    ctx = root.make_context("autosync", [], resilient_parsing=True)
    stack, seen = [root], 0
    while stack:
        command = stack.pop()
        if hasattr(command, "list_commands"):
            stack += [command.get_command(ctx, name) for name in command.list_commands(ctx)]
            continue
        for param in command.params:
            if param.param_type_name == "option" and param.default is True:
                assert param.secondary_opts, f"{command.name} {param.opts[0]}: on by default, no way to turn it off"
                seen += 1
    assert seen >= 2  # calibrate --fit, tune --transfer
