"""autosync's own errors: anything a user can cause ends as one line and exit code 2, a failure while
running as one line and exit code 1 (130 when interrupted)."""

from __future__ import annotations


class AutosyncError(Exception):
    """The base of autosync's own errors: `except AutosyncError` catches what autosync raises on purpose,
    each a one-line message the command line prints without a traceback, exiting with `exit_code`."""

    exit_code = 1


class UserError(AutosyncError, ValueError):
    """An error caused by user input (job file, CLI option, search space, storage URL, cache).

    The CLI prints ``str(error)`` as a single line and exits with code 2; no traceback. A ValueError too:
    callers that validate values catch it as one.
    """

    exit_code = 2


class FileProblems(UserError):
    """An input file failed validation; carries every problem found, one per line, each naming the file."""

    def __init__(self, path: str, problems: list[str]):
        self.path = path
        self.problems = [_one_line(p) for p in problems]
        super().__init__("\n".join(f"{_one_line(path)}: {p}" for p in self.problems))

    def __reduce__(self) -> tuple:
        """Rebuilt from (path, problems): an error raised in a worker process (joblib, a spawned worker)
        reaches the parent as itself, not as a failure to unpickle it."""
        return type(self), (self.path, self.problems)


def _one_line(text: str) -> str:
    """`text` on one line: a line break inside a problem (a key or value the user wrote) would read as two."""
    return " ".join(text.splitlines())


class RuntimeFailure(AutosyncError):
    """A run or search that was set up right but failed while it ran (workers died, nothing met the target).

    The CLI prints ``str(error)`` as one line and exits with `exit_code` (input and usage errors: 2).
    """

    exit_code = 1


class Interrupted(RuntimeFailure):
    """The user stopped a command (Ctrl-C); the message says what was kept and how to resume.

    The CLI prints it as one line and exits with code 130 (the shell's code for SIGINT).
    """

    exit_code = 130


class StorageLost(RuntimeFailure):
    """The study storage's server stopped answering for longer than the command waits for it; what finished
    is kept there, and the message says how to resume (the command line adds the command). Exit code 1."""


class JobFileError(FileProblems):
    """A job file failed validation."""


class SpaceFileError(FileProblems):
    """A search-space file failed validation."""
