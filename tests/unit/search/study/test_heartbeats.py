"""Optuna's heartbeat thread has no one to report to: a beat the storage refuses is skipped, not raised there
(`autosync.search.study.storage.QuietHeartbeats`)."""

from __future__ import annotations

import optuna
import pytest
import sqlalchemy
from sqlalchemy import orm

from autosync.search.study.storage import open_storage


def test_a_heartbeat_the_storage_refuses_is_skipped_not_raised_in_optunas_thread(tmp_path):
    """A storage folder turned read-only mid-tune: Optuna's heartbeat thread printed its traceback above the
    command's one line, and stopped beating. The beat is skipped; the command's own write says it."""
    db = tmp_path / "s.db"
    storage = open_storage(f"sqlite:///{db}")
    trial = optuna.create_study(storage=storage).ask()
    read_only = sqlalchemy.create_engine(f"sqlite:///file:{db}?mode=ro&uri=true")
    storage.engine, storage.scoped_session = read_only, orm.scoped_session(orm.sessionmaker(bind=read_only))
    with pytest.raises(optuna.exceptions.StorageInternalError):  # the command's own write is refused
        storage.set_trial_user_attr(trial._trial_id, "a", 1)
    storage.record_heartbeat(trial._trial_id)  # skipped, in silence
