"""A table's build (`autosync.table.build.build_table`) packs the same bytes however its cells were computed:
in one go or resumed after a stop, one at a time or on threads of one process."""

from __future__ import annotations

from pathlib import Path

from joblib import parallel_config

from autosync.table import Table
from autosync.table.build import build_table
from tests.conftest import small_job

POLICIES = [{"policy": "bsp", "params": {}}, {"policy": "asp", "params": {}},
            {"policy": "backup", "params": {"k": 3}}]


def _build(directory: Path, policies: list[dict], n_jobs: int = 1) -> bytes:
    built = build_table(Table(directory), [small_job()], lambda n: policies, held_out=1, n_jobs=n_jobs)
    assert built.failed == []
    (path,) = built.files
    return path.read_bytes()


def test_a_build_resumed_after_a_stop_packs_the_bytes_of_a_build_in_one_go(tmp_path):
    whole = _build(tmp_path / "whole", POLICIES)
    _build(tmp_path / "resumed", POLICIES[1:2])  # a build stopped after one policy's cells ...
    assert _build(tmp_path / "resumed", POLICIES[::-1]) == whole  # ... then completed, in another order


def test_cells_computed_on_threads_of_one_process_pack_the_bytes_of_cells_computed_one_at_a_time(tmp_path):
    # a run seeds torch's global generator: the cells of one process take turns, whatever the backend
    alone = _build(tmp_path / "alone", POLICIES)
    with parallel_config(backend="threading"):
        assert _build(tmp_path / "threads", POLICIES, n_jobs=3) == alone


def test_a_retrain_resumed_after_a_stop_replaces_a_stale_cell_with_the_bytes_of_a_fresh_build(tmp_path):
    from autosync.table import packing
    from autosync.table.build import RETRAINED, _compute_into, retrain_table, retrain_tasks

    whole = _build(tmp_path / "whole", POLICIES)
    stale = tmp_path / "stale"
    _build(stale, POLICIES)
    (path,) = stale.glob("*.cells.xz")
    records = packing.unpack(path.read_bytes())
    records[0]["evaluations"][-1]["test_loss"] += 0.25  # what an engine change to the evaluation would leave
    path.write_bytes(packing.pack(records))

    _compute_into(Table(stale / RETRAINED), retrain_tasks(Table(stale), [small_job()])[:1], 1, None)  # then stopped
    retrained = retrain_table(Table(stale), [small_job()])
    assert (retrained.computed, retrained.reused, retrained.changed) == (len(records) - 1, 1, 1)
    assert path.read_bytes() == whole
    assert not (stale / RETRAINED).exists()  # nothing left aside
    assert retrain_table(Table(stale), [small_job()]).changed == 0


def test_a_cell_run_on_the_workload_an_earlier_cell_of_its_job_built_is_the_cell_run_on_its_own():
    from autosync.catalog import policy_from_dict
    from autosync.table.build import _compute, tasks
    from autosync.table.replay import compute_cell

    first, *rest = tasks([small_job()], lambda n: POLICIES, held_out=0)
    _compute(first)  # builds the job's workload, which the next cells of the job and seed reuse
    for task in rest:
        key, cell, _ = _compute(task)
        assert cell.to_json(key) == compute_cell(task.job, policy_from_dict(task.policy)).to_json(key)


def test_a_build_interrupted_before_its_first_cell_says_nothing_was_kept(tmp_path, monkeypatch):
    """It said '0 cells computed by this command are kept in DIR', a folder the command then removed."""
    import pytest

    from autosync.core.errors import Interrupted
    from autosync.table import build

    def interrupted(task):
        raise KeyboardInterrupt

    monkeypatch.setattr(build, "_compute", interrupted)
    with pytest.raises(Interrupted, match="^interrupted before any cell was computed: nothing was kept; the same "
                                          "command starts the table again$"):
        build_table(Table(tmp_path / "t"), [small_job()], lambda n: POLICIES, held_out=1, n_jobs=1)
