"""The SQLite file a storage URL names, as SQLAlchemy opens it: the file the lock and the cache's fast path read."""

from __future__ import annotations

from pathlib import Path

import pytest

from autosync.search.study.locking import sqlite_path


@pytest.mark.parametrize("url, path", [
    ("sqlite:///results/autosync-studies.db", Path("results/autosync-studies.db")),
    ("sqlite:////tmp/x/s.db", Path("/tmp/x/s.db")),
    ("sqlite:///my%20studies.db", Path("my studies.db")),  # %-escapes decoded (the lock was 'my%20studies.db.lock')
    ("sqlite:////tmp/c?d.db", Path("/tmp/c")),  # a query is no part of the file
    ("sqlite:///:memory:", None),
    ("sqlite://", None),
    ("postgresql://me@db/studies", None),
])
def test_the_file_of_an_sqlite_url_is_the_one_sqlalchemy_opens(url, path):
    assert sqlite_path(url) == path


def test_sqlalchemy_reads_an_escaped_file_name_as_sqlite_path_does():
    from sqlalchemy.engine import make_url

    url = "sqlite:////tmp/a%20b%23c.db"
    assert Path(make_url(url).database) == sqlite_path(url)
