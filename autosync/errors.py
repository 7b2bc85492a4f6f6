"""User-facing errors: anything a user can cause ends as one line and exit code 2."""

from __future__ import annotations


class UserError(ValueError):
    """An error caused by user input (job file, CLI option, search space, storage URL, cache).

    The CLI prints ``str(error)`` as a single line and exits with code 2; no traceback.
    """


class JobFileError(UserError):
    """A job file failed validation; carries every problem found, one per line."""

    def __init__(self, path: str, problems: list[str]):
        self.path = path
        self.problems = problems
        super().__init__("\n".join(f"{path}: {p}" for p in problems))
