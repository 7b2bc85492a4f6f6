"""The user's own code in a job: factories named by import path, called with the job's kwargs.

A job names a model, dataset or loss as ``"package.module:function"``. The module is imported (from the
installed packages, then from the job file's folder, which `load_job` adds to the search path), the
function is called with the job's ``kwargs`` and, when its signature asks for them and the kwargs do not
set them, with what autosync knows (``input_shape``, ``n_outputs`` for a model; ``seed`` for a dataset).
Anything that goes wrong is one `JobFileError` line naming the job file, the field and the problem.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import inspect
import sys
from pathlib import Path
from typing import Any, Callable

from autosync.core.errors import JobFileError
from autosync.core.job import IMPORT_ROOTS, add_import_root


def import_factory(path: str, field: str, source: str) -> Callable[..., Any]:
    """The callable `path` ("package.module:function", attributes dotted) names; errors name `field`.

    The job file's folder (`source`) is on the search path first, as `load_job` puts it: a process that
    builds the workload from a job it did not load itself (a joblib worker started before the job was
    loaded) imports the same code."""
    root = Path(source).parent.resolve() if Path(source).is_file() else None
    if root is not None:
        add_import_root(root)
    module_name, _, attribute = path.partition(":")
    try:
        target: Any = _import_beside(module_name, root)
    except Exception as exc:  # ImportError, or whatever the module raises while it is imported
        raise JobFileError(source, [f"{field}: {path!r} does not import: {_one_line(exc)}"]) from None
    except SystemExit as exc:  # a script's sys.exit() at import: the job's error, not autosync's exit
        raise JobFileError(source, [f"{field}: {path!r} does not import: module {module_name!r} called "
                                    f"sys.exit({exc.code!r}) while it was imported"]) from None
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise JobFileError(source, [f"{field}: module {module_name!r} has no attribute {attribute!r} "
                                        f"(from {path!r})"]) from None
    if not callable(target):
        raise JobFileError(source, [f"{field}: {path!r} must be callable, but it is a {type(target).__name__}"])
    return target


def _import_beside(module_name: str, root: Path | None) -> Any:
    """`module_name` imported, from the job's folder `root` where its package is there but the one imported
    already, or the one the search path finds first, is another job folder's (`validate a/job.yaml
    b/job.yaml`, both naming `mypkg`: the second job was checked against the first's code, and a job whose
    folder came second on the path took the first's dataset). A package installed, or anywhere but in a job's
    folder (`IMPORT_ROOTS`), is never replaced: a job's folder comes after the installed packages."""
    top = module_name.split(".")[0]
    if root is None or not ((root / top).is_dir() or (root / f"{top}.py").is_file()):
        return importlib.import_module(module_name)
    loaded = sys.modules.get(top)
    if loaded is not None:
        folder = _folder_of(getattr(loaded, "__file__", None))
    else:
        found = importlib.machinery.PathFinder.find_spec(top, sys.path)
        folder = None if found is None else _folder_of(found.origin)
    if folder is None or folder == root or str(folder) not in IMPORT_ROOTS:
        return importlib.import_module(module_name)
    for name in [n for n in sys.modules if n == top or n.startswith(f"{top}.")]:
        del sys.modules[name]  # built workloads keep the functions they hold, and those their own globals
    sys.path.insert(0, str(root))
    try:
        return importlib.import_module(module_name)
    finally:
        sys.path.remove(str(root))


def imported_from(spec: Any) -> Path | None:
    """The folder on the search path this process imported `spec`'s own code from (None: not imported)."""
    w = spec.workload
    for part in (w.dataset, w.model, getattr(w, "loss", None)):
        factory = getattr(part, "factory", None)
        module = sys.modules.get(factory.split(":")[0].split(".")[0]) if isinstance(factory, str) else None
        folder = _folder_of(getattr(module, "__file__", None))
        if folder is not None:
            return folder
    return None


def _folder_of(file: str | None) -> Path | None:
    """The folder on the search path a module's `file` is imported from (a package's parent), or None (a
    namespace package or a built-in)."""
    if file is None or not Path(file).is_file():
        return None
    path = Path(file).resolve()
    return path.parent.parent if path.name == "__init__.py" else path.parent


def call_factory(path: str, kwargs: dict[str, Any], offered: dict[str, Any], field: str, source: str) -> Any:
    """Call the factory at `path` with `kwargs`, plus each of `offered` its signature names and kwargs do not set.

    A factory that raises is a one-line error with its exception; the traceback is the user's to get by
    calling the function themselves.
    """
    factory = import_factory(path, field, source)
    arguments = dict(kwargs)
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):  # some builtins have none: pass only the kwargs
        signature = None
    if signature is not None:
        takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in signature.parameters.values())
        for name, value in offered.items():
            if name not in arguments and (name in signature.parameters and not takes_any):
                arguments[name] = value
        try:
            signature.bind(**arguments)
        except TypeError as exc:
            raise JobFileError(source, [f"{field}: {path!r} cannot be called with kwargs {kwargs!r}: {exc}"]) from None
    try:
        return factory(**arguments)
    except Exception as exc:
        raise JobFileError(source, [f"{field}: {path!r} raised {type(exc).__name__}: {_one_line(exc)}"]) from None
    except SystemExit as exc:
        raise JobFileError(source, [f"{field}: {path!r} called sys.exit({exc.code!r})"]) from None


def _one_line(exc: BaseException) -> str:
    """The first line of an exception's message (its type's name when it has none), for one-line errors."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
