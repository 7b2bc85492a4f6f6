"""What the command line prints for an error: one line `error: ...` per problem, never a traceback, and for
a parser error (an unknown command or option, a value of the wrong type or out of range) a hint naming the
help to read. Apart from `console` (the results' reports): it reads the parser's exception and the
command line as given, and returns the lines for the command line to print on stderr.
"""

from __future__ import annotations

import sys
from typing import Any, Callable, Optional, TypeVar

from autosync.core.errors import Interrupted, StorageLost
from autosync.search.study.urls import redact_url

T = TypeVar("T")


def error_lines(exc: Exception) -> list[str]:
    """Each line of an error as 'error: ...' (one problem, one line; the command line never wraps them),
    with the password of any storage URL in it masked."""
    return [f"error: {redact_url(line)}" for line in str(exc).splitlines()]


def resumable(call: Callable[[], T]) -> T:
    """`call()`, with the command that resumes it (the command line running) added to the message of an
    `Interrupted` error or of a `StorageLost` one (the storage's server waited for in vain)."""
    import shlex

    try:
        return call()
    except (Interrupted, StorageLost) as exc:
        raise type(exc)(f"{exc}: {shlex.join(['autosync', *sys.argv[1:]])}") from None


def usage_error_lines(exc: Exception, args: list[str], root: Callable[[], Any]) -> list[str]:
    """A parser error as 'error: <command>: <message>, but got <value>' and a hint naming the help to read;
    nothing where the parser has printed the help already (no command at all). `args`: the command line
    after the program's name; `root()`: the parser's top command (for an error raised without its context,
    such as an option missing its value)."""
    ctx = getattr(exc, "ctx", None)
    if type(exc).__name__ == "NoArgsIsHelpError":  # the parser has printed the help already: once is enough
        return []
    if hasattr(exc, "possibilities") and getattr(exc, "option_name", None):  # an unknown option
        message = exc.message + _close_options(exc.option_name, ctx)  # type: ignore[attr-defined]
    else:
        message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
    message = message[:1].lower() + message[1:]
    value = _given_value(getattr(exc, "param", None), args)
    if value is not None and repr(value) not in message:
        message = f"{message.rstrip('.')}, but got {value!r}"
    command = ctx.command_path if ctx is not None else _command_path(root(), args)
    return [f"error: {command}: {' '.join(message.split())}", f"hint: see '{command} --help'"]


def _close_options(given: str, ctx: Any) -> str:
    """' (did you mean --seed?)': the command's own options whose names are close to `given` (a mistyped
    letter or two), or nothing; the parser's own guess offers options that share only their dashes."""
    import difflib

    params = ctx.command.params if ctx is not None else []
    names = {opt.lstrip("-"): opt for p in params for opt in [*p.opts, *p.secondary_opts] if opt.startswith("--")}
    close = difflib.get_close_matches(given.lstrip("-"), list(names), n=3, cutoff=0.75)
    return f" (did you mean {' or '.join(names[c] for c in close)}?)" if close else ""


def _command_path(group: Any, args: list[str]) -> str:
    """'autosync tune', 'autosync cache show': the command `args` name under the parser's top `group`."""
    path = ["autosync"]
    for arg in args:
        sub = getattr(group, "commands", {}).get(arg)
        if sub is None:
            break
        group, path = sub, [*path, arg]
    return " ".join(path)


def _given_value(param: Any, args: list[str]) -> Optional[str]:
    """The value the command line gave an option (`--seed abc` or `--seed=abc`), for the error message."""
    for opt in getattr(param, "opts", None) or []:
        if not opt.startswith("-"):
            continue
        for i, arg in enumerate(args):
            if arg == opt and i + 1 < len(args):
                return args[i + 1]
            if arg.startswith(opt + "="):
                return arg[len(opt) + 1:]
    return None
