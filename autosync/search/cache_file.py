"""A recurring job's tune answered straight from its SQLite study storage, without Optuna or SQLAlchemy.

Opening a storage through Optuna (SQLAlchemy, alembic and the schema check) takes most of a second; a cache
hit needs one study's attribute rows. `cached_outcome` reads them with the standard library's sqlite3 in
read-only mode, in one snapshot, and answers as `autosync.search.tune.tune` answers a cache hit, through the
same code: the record validated (`read_cache`), the study's owner checked (`check_owner`), its description
compared (`TuneRequest.describe` on a study that refuses every write), its best candidates listed
(`race_top`).

It answers only where both paths answer alike, and otherwise returns None: the search then opens the
storage through Optuna, which answers, or says what is wrong, as it does for every other storage. That is
the case for a URL other than an SQLite file, a file whose schema revision is not the one the installed
Optuna expects, a study that is missing or has no record, an attribute that is not JSON, a record
`read_cache` refuses, a description Optuna would write (a renamed job, say), a record of a search other
than the race (its best candidates are read from the trials), a search its --timeout ended short, a study
with sibling studies (whose records `faster_elsewhere` reads), and --refresh or --study.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autosync.core.errors import UserError
from autosync.search.outcome import TuneOutcome
from autosync.search.race_trials import race_differences, race_top
from autosync.search.request import TuneRequest
from autosync.search.strategies.samplers import RACE
from autosync.search.study.cache import check_owner, read_cache
from autosync.search.study.locking import sqlite_path
from autosync.search.study.records import EXECUTION, FINGERPRINT, TIMED_OUT_OF, StudyRecord
from autosync.search.study.siblings import is_sibling
from autosync.search.study.storage import read_only

__all__ = ["FileStudy", "cached_outcome", "read_study", "schema_head"]

# the study system attribute that Optuna keeps `Study.metric_names` in (optuna/study/study.py)
METRIC_NAMES = "study:metric_names"
# a file another process holds locked (writing with a rollback journal; a write-ahead log never blocks a
# reader) is left to the Optuna path, which waits up to 60 s for it: this path gives up at once
BUSY_SECONDS = 0.1


class WouldWrite(Exception):
    """The Optuna path would write to the study (a changed description): it answers instead."""


@dataclass
class FileStudy:
    """A study as the SQLite file holds it, read-only: what the cache hit reads of an `optuna.Study`."""

    study_name: str
    user_attrs: dict[str, Any]
    directions: list[str]  # "minimize" or "maximize", by objective
    metric_names: list[str] | None
    siblings: list[str]  # the other studies of its job and execution (`autosync.search.study.siblings`)

    def set_user_attr(self, key: str, value: Any) -> None:
        raise WouldWrite(key)

    def set_metric_names(self, names: list[str]) -> None:
        raise WouldWrite(METRIC_NAMES)


def cached_outcome(request: TuneRequest) -> TuneOutcome | None:
    """The outcome of `request` answered from the cache record in its SQLite file, as the search would answer
    it (`study` None: no Optuna study was opened); None where this path does not answer (the module doc)."""
    path = sqlite_path(request.storage)
    if request.refresh or request.study is not None or request.sampler != RACE or path is None \
            or not path.is_file():
        return None
    try:
        study = read_study(path, request.study_name)
        if study is None or study.siblings or study.directions != request.directions:
            return None
        check_owner(study, request.job, adopt=request.adopt_study, space=request.space.name)
        request.describe(study)
        record = read_cache(study)
        if record is None or record.get(TIMED_OUT_OF) or not isinstance(record.get("race"), dict):
            return None
        if race_differences(record, request):
            return None  # the search's path refuses it (`race_trials.refuse_another_race`)
        top = race_top(record["race"])
    except (sqlite3.Error, OSError, ValueError, TypeError, KeyError, UserError, WouldWrite):
        return None  # the Optuna path answers, or reports the problem in its own words
    return TuneOutcome(study.study_name, request.storage, True, 0, record, top)


def read_study(path: Path, name: str) -> FileStudy | None:
    """Study `name` of the Optuna storage in the SQLite file at `path`, read in one snapshot; None where the
    file's schema revision is not `schema_head()` or it holds no such study. An attribute that is not JSON
    raises ValueError, as Optuna does (json.loads); so do sqlite3's errors for a file that is not a database."""
    conn = read_only(path, timeout=BUSY_SECONDS)
    try:
        conn.execute("BEGIN")
        revision = conn.execute("SELECT version_num FROM alembic_version").fetchall()
        if revision != [(schema_head(),)]:
            return None
        found = conn.execute("SELECT study_id FROM studies WHERE study_name = ?", (name,)).fetchall()
        if len(found) != 1:
            return None
        study_id = found[0][0]
        attrs = {key: json.loads(value) for key, value in conn.execute(
            "SELECT key, value_json FROM study_user_attributes WHERE study_id = ?", (study_id,))}
        names = conn.execute("SELECT value_json FROM study_system_attributes WHERE study_id = ? AND key = ?",
                             (study_id, METRIC_NAMES)).fetchall()
        directions = [d.lower() for (d,) in conn.execute(
            "SELECT direction FROM study_directions WHERE study_id = ? ORDER BY objective", (study_id,))]
        others: dict[str, dict[str, Any]] = {}
        for other, key, value in conn.execute(
                "SELECT s.study_name, a.key, a.value_json FROM study_user_attributes a JOIN studies s "
                "ON s.study_id = a.study_id WHERE a.study_id != ? AND a.key IN (?, ?)",
                (study_id, FINGERPRINT, EXECUTION)):
            try:
                others.setdefault(other, {})[key] = json.loads(value)
            except (TypeError, ValueError):  # another study's damaged attribute: not a sibling, as in `siblings`
                pass
    finally:
        conn.close()
    mine = StudyRecord(attrs)
    return FileStudy(name, attrs, directions, json.loads(names[0][0]) if names else None,
                     [other for other, theirs in others.items() if is_sibling(mine, StudyRecord(theirs))])


def schema_head() -> str | None:
    """The schema revision the installed Optuna creates and accepts: the head of its alembic migration scripts,
    read from their files (as alembic reads them) without importing Optuna; None where they are not found."""
    spec = importlib.util.find_spec("optuna")
    if spec is None or spec.origin is None:
        return None
    revisions, parents = set(), set()
    for script in (Path(spec.origin).parent / "storages" / "_rdb" / "alembic" / "versions").glob("*.py"):
        text = script.read_text()
        revisions.update(re.findall(r'^revision = "([^"]+)"', text, re.MULTILINE))
        parents.update(re.findall(r'^down_revision = "([^"]+)"', text, re.MULTILINE))
    heads = revisions - parents
    return heads.pop() if len(heads) == 1 else None
