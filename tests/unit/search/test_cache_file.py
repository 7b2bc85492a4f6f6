"""A cache hit read from the SQLite file (`autosync.search.cache_file`): the outcome the search's Optuna path
gives, field for field; anything it does not answer alike (a damaged record, a file of another schema or
program, a description to update, a sibling study) left to that path, with its errors; and, as a command,
no Optuna, SQLAlchemy or torch loaded."""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from autosync import api
from autosync.core.errors import UserError
from autosync.engine.forks import FORKS
from autosync.search.cache_file import cached_outcome, read_study, schema_head
from autosync.search.request import TuneRequest
from autosync.search.tune import tune as optuna_path
from autosync.search.tune_options import TuneOptions
from autosync.table import KEPT

TINY = ("name: tiny\nworkload: {dataset: {name: digits}, model: {name: logreg}, batch_size: 16,"
        " optimizer: {lr: 0.2}, evaluation: {every_seconds: 2}}\ncluster: {n_workers: 4}\n"
        "target: {metric: test_accuracy, threshold: 0.8}\nbudget: {max_virtual_seconds: 20}\n")


@pytest.fixture(scope="module")
def tuned(tmp_path_factory) -> Path:
    """A storage holding one finished race of the tiny job (a few seconds), copied by each test that changes it."""
    root = tmp_path_factory.mktemp("tuned")
    (root / "tiny.yaml").write_text(TINY)
    FORKS.clear()  # the race as in a process of its own
    KEPT.clear()
    outcome = api.tune(api.load_job(root / "tiny.yaml"), storage=f"sqlite:///{root / 'studies.db'}")
    assert not outcome.cached and isinstance(outcome.cache.get("race"), dict)
    return root / "studies.db"


def _copy(db: Path, to: Path) -> str:
    """A copy of the storage `db` at `to` (its write-ahead log included), as a URL."""
    with sqlite3.connect(db) as source, sqlite3.connect(to) as copy:
        source.backup(copy)
    return f"sqlite:///{to}"


def _request(url: str, job_text: str = TINY, tmp: Path | None = None) -> TuneRequest:
    path = (tmp or Path(url.removeprefix("sqlite:///")).parent) / "job.yaml"
    path.write_text(job_text)
    return TuneRequest.from_options(api.load_job(path), TuneOptions(storage=url))


def _execute(url: str, sql: str, *args: object) -> None:
    with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
        conn.execute(sql, args)


def test_the_file_answers_with_the_outcome_the_optuna_path_gives(tuned, tmp_path):
    request = _request(_copy(tuned, tmp_path / "s.db"))
    fast = cached_outcome(request)
    slow = optuna_path(request)
    assert fast is not None and fast.cached and slow.cached
    assert fast.to_dict() == slow.to_dict()
    assert fast.study is None and slow.study is not None  # no Optuna study opened
    assert fast.cache == slow.study.user_attrs["cache"]
    assert cached_outcome(request).to_dict() == fast.to_dict()  # the Optuna path wrote nothing that changes it


def test_the_schema_revision_expected_is_the_one_the_installed_optuna_writes(tuned):
    with sqlite3.connect(tuned) as conn:
        assert conn.execute("SELECT version_num FROM alembic_version").fetchall() == [(schema_head(),)]


@pytest.mark.parametrize("damage, error", [
    ("UPDATE study_user_attributes SET value_json = '{\"best_value\": 1}' WHERE key = 'cache'",
     "corrupt cache entry (field best_policy is missing)"),
    ("UPDATE study_user_attributes SET value_json = '{not json' WHERE key = 'cache'", "corrupt cache entry (not JSON"),
    ("UPDATE alembic_version SET version_num = 'v99.0.0.a'", "cannot open the study storage"),
])
def test_a_damaged_record_or_another_schema_is_left_to_the_optuna_path_and_its_error(tuned, tmp_path, damage, error):
    url = _copy(tuned, tmp_path / "s.db")
    _execute(url, damage)
    request = _request(url)
    assert cached_outcome(request) is None
    with pytest.raises(UserError, match=re.escape(error)) as fast:
        api.tune(request.job, storage=url)
    with pytest.raises(UserError) as slow:
        optuna_path(request)
    assert str(fast.value) == str(slow.value)


def test_a_file_of_another_program_or_none_at_all_is_left_to_the_optuna_path(tmp_path):
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE notes (text TEXT)")
    text = tmp_path / "text.db"
    text.write_text("not a database\n")
    for url in (f"sqlite:///{other}", f"sqlite:///{text}", f"sqlite:///{tmp_path / 'none.db'}", "sqlite://"):
        assert cached_outcome(_request(url, tmp=tmp_path)) is None, url
    with pytest.raises(UserError, match="is not an SQLite database file"):
        api.tune(api.load_job(tmp_path / "job.yaml"), storage=f"sqlite:///{text}")


def test_a_description_to_update_or_a_sibling_study_is_left_to_the_optuna_path(tuned, tmp_path):
    url = _copy(tuned, tmp_path / "s.db")
    renamed = _request(url, TINY.replace("name: tiny", "name: renamed"))  # the same fingerprint, another name
    assert renamed.study_name == _request(url).study_name and cached_outcome(renamed) is None
    assert optuna_path(renamed).cached  # the Optuna path answers and writes the new name ...
    assert read_study(Path(url.removeprefix("sqlite:///")), renamed.study_name).user_attrs["job_name"] == "renamed"
    assert cached_outcome(renamed) is not None  # ... which the file then holds
    _execute(url, "INSERT INTO studies (study_name) VALUES ('sibling')")
    for key in ("fingerprint", "execution"):
        _execute(url, "INSERT INTO study_user_attributes (study_id, key, value_json) SELECT study_id, ?, ? FROM "
                 "studies WHERE study_name = 'sibling'", key, json.dumps(renamed.study_name.split("-")[0]
                                                                          if key == "fingerprint" else "simulator"))
    assert read_study(Path(url.removeprefix("sqlite:///")), renamed.study_name).siblings == ["sibling"]
    assert cached_outcome(renamed) is None


def test_refresh_study_or_another_sampler_are_left_to_the_optuna_path(tuned, tmp_path):
    url = _copy(tuned, tmp_path / "s.db")
    job = _request(url).job
    assert cached_outcome(_request(url)) is not None
    for options in (TuneOptions(storage=url, refresh=True), TuneOptions(storage=url, sampler="tpe"),
                    TuneOptions(storage=url, study=_request(url).study_name)):
        assert cached_outcome(TuneRequest.from_options(job, options)) is None, options


@pytest.mark.slow  # a new process: about 2 s
def test_a_cache_hit_command_loads_neither_optuna_sqlalchemy_nor_torch(tuned, tmp_path):
    url = _copy(tuned, tmp_path / "s.db")
    (tmp_path / "tiny.yaml").write_text(TINY)
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "autosync.cli", "tune", "tiny.yaml", "--storage",
                           url, "--json"], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["cached"] is True
    imported = {line.rsplit("|", 1)[1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    assert not {"optuna", "sqlalchemy", "alembic", "torch"} & imported
