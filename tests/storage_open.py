"""What each process of the test of processes creating a new storage's schema together runs
(tests/e2e/test_shared_study.py), in a module of its own: a spawned process imports the module of its
target, and this one imports only the storage and Optuna, where the test's module imports torch through
tests.conftest (about 2.5 s of CPU for each of the six processes)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


def open_when_ready(url: str, barrier: Any, created: Path) -> None:
    """Open the storage when every process is ready, appending this process's id to `created` if it is
    the one that created the studies table (SQLAlchemy's after_create fires only for a table it creates)."""
    from optuna.storages._rdb import models
    from sqlalchemy import event

    from autosync.search.study.storage import open_storage

    def mark(*_: object, **__: object) -> None:
        with created.open("a") as fh:
            fh.write(f"{os.getpid()}\n")

    event.listen(models.StudyModel.__table__, "after_create", mark)
    barrier.wait()
    open_storage(url)
