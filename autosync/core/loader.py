"""Reading the YAML files users write (job files, job families, search spaces) and saying what is wrong
with them: a safe YAML loader that refuses a key written twice, and pydantic's validation errors
translated into one line per problem, 'field path rule, but got value'.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from autosync.core.errors import FileProblems


#: Pydantic's type errors as rules a reader of the file acts on ("unable to parse input string" names no string
#: the user wrote where the value is a float).
TYPE_RULES = {
    "int_type": "must be an integer", "int_parsing": "must be an integer", "int_from_float": "must be a whole number",
    "int_parsing_size": "must be an integer, not a float this large", "float_type": "must be a number",
    "float_parsing": "must be a number", "bool_type": "must be true or false", "bool_parsing": "must be true or false",
    "string_type": "must be a string", "list_type": "must be a list", "dict_type": "must be a mapping",
    "model_type": "must be a mapping", "model_attributes_type": "must be a mapping",
}


def describe_error(err: dict[str, Any]) -> str:
    """One problem of a pydantic error as 'field path rule, but got value'."""
    parts = err["loc"]
    loc = ".".join(plain_key(p) for i, p in enumerate(parts)
                   if not (i and _is_union_tag(p) and _holds_a_union(parts[i - 1]))) or "(top level)"
    typ, ctx, value = err["type"], err.get("ctx", {}), err.get("input")
    rules = {
        "greater_than_equal": lambda: f"must be >= {ctx.get('ge')}",
        "greater_than": lambda: f"must be > {ctx.get('gt')}",
        "less_than_equal": lambda: f"must be <= {ctx.get('le')}",
        "less_than": lambda: f"must be < {ctx.get('lt')}",
        "finite_number": lambda: "must be a finite number (not NaN or infinity)",
        "too_short": lambda: "must not be empty",
        "string_too_long": lambda: f"must be at most {ctx.get('max_length')} characters",
        "missing": lambda: "is required",
        "extra_forbidden": lambda: "is not a known field",
        "literal_error": lambda: f"must be one of {ctx.get('expected')}",
        "union_tag_invalid": lambda: f"must have kind/model one of {ctx.get('expected_tags')}",
        "union_tag_not_found": lambda: f"needs the key {ctx.get('discriminator')}",
        "string_pattern_mismatch": lambda: ("must be an import path 'package.module:function'"
                                            if loc.endswith("factory") else
                                            "may hold only letters, digits, '_', '.', '-'"),
    }
    if typ == "value_error":
        msg = str(ctx.get("error", err["msg"]))
        return msg if loc == "(top level)" else f"{loc}: {msg}"
    if typ == "bool_not_number":  # raised by the model for one of its fields: name that field
        loc, value = (f"{loc}." if loc != "(top level)" else "") + ctx["field"], ctx["value"]
    rule = TYPE_RULES.get(typ) or rules.get(typ, lambda: err["msg"][0].lower() + err["msg"][1:])()
    if typ == "missing":
        return f"{loc} {rule}"
    if typ == "extra_forbidden":
        return f"{loc} {rule} (unknown keys are errors), but got {short_repr(value)}"
    return f"{loc} {rule}, but got {short_repr(value)}"


def short_repr(value: Any, limit: int = 80) -> str:
    """`repr(value)` cut to `limit` characters: an error line names the value without echoing a whole file."""
    try:
        text = repr(value)
    except ValueError:  # an integer past Python's digit limit for str()
        text = f"an integer of {value.bit_length()} bits" if isinstance(value, int) else type(value).__name__
    return text if len(text) <= limit else text[:limit - 3] + "..."


def plain_key(part: Any) -> str:
    """A field path's part (a key or an index) as written; one that is not printable text (a line break in
    it) is quoted, so the path stays on one line."""
    text = str(part)
    return text if text.isprintable() else short_repr(part, 40)


def _holds_a_union(part: Any) -> bool:
    """Whether a location's part is a union field (or an entry of a list of unions: a family's round_trips)."""
    return isinstance(part, int) or part in UNION_FIELDS


def _is_union_tag(part: Any) -> bool:
    return isinstance(part, str) and part in UNION_TAGS


#: The tags pydantic puts in an error's location for a union branch; no part of the field path a user wrote.
#: The fields whose value is one of several specs (a union): a tag follows them (or a list index) in an
#: error's location, and only there ("gamma" is also a field of the learning-rate schedule).
UNION_FIELDS = frozenset({"round_trip", "compute", "dataset", "model", "loss"})
UNION_TAGS = frozenset({"deterministic", "shifted_exponential", "uniform", "pareto", "gamma", "trace", "linear", "gpu",
                        "user", "builtin"})


class _UniqueKeyLoader(yaml.SafeLoader):
    """The safe YAML loader, refusing a key written twice in one mapping (PyYAML would keep the last one
    silently, so a value the user wrote would be ignored)."""

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        """A node's value; a value its explicit tag cannot hold (`!!bool maybe`, `!!timestamp nope`, `!!int x`),
        which PyYAML's constructors fail on with KeyError, AttributeError or ValueError, is a YAML error at the
        node's line."""
        try:
            return super().construct_object(node, deep=deep)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            if isinstance(exc, yaml.YAMLError):
                raise
            tag = node.tag.replace("tag:yaml.org,2002:", "!!")
            what = short_repr(node.value, 40) if isinstance(node, yaml.ScalarNode) else f"a {node.id}"
            why = f": {str(exc).split(':')[0]}" if type(exc) is ValueError else ""  # e.g. Python's limit of digits
            raise yaml.constructor.ConstructorError(None, None, f"{what} cannot be read as {tag}{why}",
                                                    node.start_mark) from None

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        if not isinstance(node, yaml.MappingNode):  # `!!set [1]`: the base loader says what it expected
            return super().construct_mapping(node, deep=deep)
        seen: dict[Any, Any] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *anchor`: the keys written beside it override
                continue
            key = self.construct_object(key_node, deep=deep)
            try:
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"key {short_repr(key, 40)} appears twice in one mapping, first on line "
                                    f"{seen[key].start_mark.line + 1}", key_node.start_mark)
                seen[key] = key_node
            except TypeError:  # an unhashable key (a list): the base loader says so
                break
        return super().construct_mapping(node, deep=deep)


def read_yaml_file(file: Path, error: type[FileProblems]) -> Any:
    """A YAML file's content; a missing, unreadable, binary or invalid file raises `error` in one line naming
    the file."""
    if file.is_dir():
        raise error(str(file), ["is a directory, not a YAML file"])
    if not file.exists():
        raise error(str(file), ["file not found"])
    if not file.is_file():  # /dev/null, a named pipe: reading one blocks or reads nothing the user wrote
        raise error(str(file), ["is not a regular file (a device, pipe or socket), not a YAML file"])
    try:
        raw = file.read_bytes()
    except OSError as exc:
        raise error(str(file), [f"cannot be read ({exc.strerror or exc})"]) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(str(file), [f"not a text YAML file (byte 0x{raw[exc.start]:02x} at offset {exc.start} "
                                "is not UTF-8 text)"]) from None
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        if isinstance(exc, yaml.reader.ReaderError):  # a control character: text, but not YAML's
            code = exc.character if isinstance(exc.character, int) else ord(exc.character)
            where, problem = f"offset {exc.position}: ", f"the control character U+{code:04X} is not allowed"
        raise error(str(file), [f"{where}not valid YAML ({problem})"]) from None
    except ValueError as exc:  # an integer past Python's limit of digits
        raise error(str(file), [f"not valid YAML ({str(exc).split(':')[0]})"]) from None
    except RecursionError:
        raise error(str(file), ["not valid YAML (nested too deeply)"]) from None
