"""Whether a spawned child process may import this process's main module again.

A child started by multiprocessing's spawn (the `--n-jobs` helpers: `autosync.search.study.helper_processes`)
imports the parent's main module before it runs anything, so a script that calls `autosync.api.tune` at its
top level, with no `if __name__ == "__main__":` guard, would start its tune again in every helper (Python's
"safe importing of main module"). The command line's entry point is guarded and says so (`declare_guarded`);
an interactive interpreter has no main file to import. Anywhere else autosync cannot tell, and starts no
process the caller did not ask for.
"""

from __future__ import annotations

import sys

__all__ = ["declare_guarded", "reimport_is_safe"]

_guarded = False


def declare_guarded() -> None:
    """Called by an entry point whose main module runs nothing when imported (the command line's `main`)."""
    global _guarded
    _guarded = True


def reimport_is_safe() -> bool:
    """Whether a spawned child can import the main module without running the caller's code again: under a
    guarded entry point, or in an interactive interpreter (no main file, no main module name)."""
    main = sys.modules.get("__main__")
    named = getattr(getattr(main, "__spec__", None), "name", None)
    return _guarded or (getattr(main, "__file__", None) is None and named is None)
