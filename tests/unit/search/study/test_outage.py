"""A storage server that stops answering is waited for, with one line each way, within a bounded wait
(`autosync.search.study.outage`); the end-to-end test restarts a real PostgreSQL (tests/e2e/test_storage_outage.py)."""

from __future__ import annotations

import pytest
import sqlalchemy.exc

from autosync.core.errors import StorageLost
from autosync.search.study import outage

URL = "postgresql://user:secret-pw@db.example:5432/studies"


def _lost() -> Exception:
    return sqlalchemy.exc.OperationalError("SELECT 1", {}, Exception("connection refused"))


@pytest.fixture
def quick(monkeypatch):
    monkeypatch.setattr(outage, "RETRY_SECONDS", 0.01)
    monkeypatch.setattr(outage, "WAIT_SECONDS", 0.2)
    lines: list[str] = []
    outage.report_to(URL, lines.append)
    outage._answered.add(URL)
    yield lines
    outage.report_to(URL, None)
    outage._answered.discard(URL)


def test_a_call_is_made_again_until_the_server_answers_saying_so_once_each_way(quick):
    failures = [_lost(), _lost(), _lost()]

    def call() -> str:
        if failures:
            raise failures.pop()
        return "rows"

    assert outage.call_waiting(URL, call) == "rows"
    assert len(quick) == 2 and quick[0].startswith("waiting for the study storage postgresql://user:***@db.example")
    assert "connection refused" in quick[0] and "answers again" in quick[1]
    assert "secret-pw" not in " ".join(quick)


def test_past_the_wait_the_call_fails_resumable_and_later_calls_fail_at_once(quick):
    def down() -> None:
        raise _lost()

    with pytest.raises(StorageLost, match=r"did not answer for 0.2 s \(connection refused\); every finished trial "
                                          r"is kept there"):
        outage.call_waiting(URL, down)
    with pytest.raises(StorageLost):  # at once: no second wait inside the same command
        outage.call_waiting(URL, lambda: "rows")


def test_other_errors_a_never_reached_server_and_sqlite_are_not_waited_for(quick):
    def bad() -> None:
        raise ValueError("not a lost connection")

    with pytest.raises(ValueError):
        outage.call_waiting(URL, bad)
    never = "postgresql://user:wrong@db.example:5432/other"  # a wrong password fails at once, as a bad URL
    with pytest.raises(sqlalchemy.exc.OperationalError):
        outage.call_waiting(never, lambda: (_ for _ in ()).throw(_lost()))
    with pytest.raises(sqlalchemy.exc.OperationalError):
        outage.call_waiting("sqlite:///x.db", lambda: (_ for _ in ()).throw(_lost()))
    assert quick == []
