"""The table's replay answers a search's runs as the simulator does (`autosync.table.replay`): the same
evaluations heard in the same order, the same scores, the same seconds forked from kept runs."""

from __future__ import annotations

import gzip
import json
import re
from dataclasses import replace

import pytest

from autosync.catalog import make_policy
from autosync.core.errors import UserError
from autosync.engine.forks import FORKS
from autosync.policy_score import _simulate_forking
from autosync.table import KeptTimes, Table, Variant, cell_for, compute_cell, packing, replayed_run
from autosync.table.cells import SCORES, TO_TARGET
from tests.conftest import small_job


def job(**budget):
    return small_job(target__threshold=0.6, budget__max_updates=80, workload__evaluation__every_seconds=1.0,
                     cluster__round_trip={"kind": "gamma", "v_task": 0.5, "heterogeneous": True},
                     **{f"budget__{k}": v for k, v in budget.items()})


def live(job_, policy):
    """What `_simulate_forking` answers, the evaluations it heard and the seconds it forked."""
    heard = []
    result, forked = _simulate_forking(job_, policy, heard.append)
    return heard, result.status, {k: result.metrics[k] for k in SCORES}, forked


def replayed(table, kept, job_, policy):
    heard = []
    run, forked = replayed_run(table, job_, policy, heard.append, kept)
    return heard, run.status, {k: run.metrics[k] for k in SCORES}, forked


SEQUENCES = {  # the requests a search makes of one process, in order
    "stop at the target, then its full-budget check": [
        ("backup", {"k": 3}, {"stop_at_target": True}), ("backup", {"k": 3}, {})],
    "a check continued to a horizon": [
        ("bsp", {}, {"stop_at_target": True}), ("bsp", {}, {"stop_at_seconds": 30.0}), ("bsp", {}, {})],
    "switch points sharing prefixes": [
        ("sync_switch", {"switch_at": 0.7}, {}), ("sync_switch", {"switch_at": 0.35}, {"stop_at_target": True}),
        ("sync_switch", {"switch_at": 0.5}, {}), ("sync_switch", {"switch_at": 0.35}, {})],
}


@pytest.mark.parametrize("name", sorted(SEQUENCES))
def test_a_replayed_sequence_of_runs_is_the_live_sequence(name, tmp_path):
    table, kept = Table(tmp_path / "table"), KeptTimes()
    FORKS.clear()
    try:
        for policy_name, params, budget in SEQUENCES[name]:
            policy = make_policy(policy_name, params)
            expected = live(job(**budget), policy)
            assert replayed(table, kept, job(**budget), policy) == expected
        # a second process reading the stored cells answers the same without training
        FORKS.clear()
        again, kept = Table(tmp_path / "table"), KeptTimes()
        for policy_name, params, budget in SEQUENCES[name]:
            policy = make_policy(policy_name, params)
            assert replayed(again, kept, job(**budget), policy) == live(job(**budget), policy)
    finally:
        FORKS.clear()


def test_a_run_stopped_at_the_target_is_derived_from_the_full_cell_without_a_cell_of_its_own(tmp_path):
    table = Table(tmp_path)
    policy = make_policy("bsp", {})
    full = cell_for(table, job(), policy)
    stopped = cell_for(table, job(stop_at_target=True), policy)
    assert stopped.status == "target_reached" and len(table) == 1  # only the full run was trained
    assert stopped == compute_cell(job(stop_at_target=True), policy)
    assert full.variant == Variant()  # the table holds the full run only


def test_a_cell_stopped_at_the_target_answers_later_horizons_and_is_the_full_run_where_it_missed(tmp_path):
    table = Table(tmp_path)
    reached, missed = make_policy("bsp", {}), make_policy("backup", {"k": 1})
    stopped = cell_for(table, job(stop_at_target=True), reached)
    assert stopped.variant == TO_TARGET and stopped.scores["virtual_time"] < cell_for(Table(tmp_path / "x"), job(),
                                                                                     reached).scores["virtual_time"]
    assert cell_for(table, job(stop_at_target=True, stop_at_seconds=stopped.scores["virtual_time"] + 1.0),
                    reached).scores == stopped.scores and len(table) == 1  # a horizon after the target: no run
    cell_for(table, job(), reached)
    assert len(table) == 2  # the full budget past the target is a run of its own
    def unreachable(job_):
        return job_.model_copy(update={"target": job_.target.model_copy(update={"threshold": 0.999})})

    never = cell_for(table, unreachable(job(stop_at_target=True)), missed)
    assert never.status != "target_reached"
    assert cell_for(table, unreachable(job()), missed) == replace(never, variant=Variant())
    assert len(table) == 3  # the miss was the full run: the full-budget request trained nothing


def test_a_horizon_inside_the_budget_short_of_the_target_is_a_cell_of_its_own(tmp_path):
    table = Table(tmp_path)
    policy = make_policy("asp", {})
    cell_for(table, job(), policy)
    short = job(stop_at_seconds=2.5)
    cell = cell_for(table, short, policy)
    assert cell.variant == Variant(False, 2.5) and len(table) == 2  # the full run and the horizon's
    assert cell == compute_cell(short, policy)


def test_packing_gives_the_same_bytes_whatever_order_the_cells_came_in(tmp_path):
    runs = [(job(), make_policy(name, {})) for name in ("bsp", "asp", "ssp")]
    for order, directory in ((runs, tmp_path / "a"), (runs[::-1], tmp_path / "b")):
        table = Table(directory)
        for job_, policy in order:
            cell_for(table, job_, policy)
        table.pack()
    (a,), (b,) = (list((tmp_path / d).glob("*.cells.xz")) for d in "ab")
    assert a.read_bytes() == b.read_bytes()
    assert not list((tmp_path / "a").glob("*.jsonl"))  # the open file went into the packed one
    assert len(packing.unpack(a.read_bytes())) == 3


def test_a_cell_cut_short_by_a_kill_is_computed_again_and_a_damaged_file_is_named(tmp_path, monkeypatch):
    from autosync.table import store

    monkeypatch.setattr(store, "_CHUNK", 7)  # the cut line's start is looked for back over several chunks
    table = Table(tmp_path)
    cell_for(table, job(), make_policy("bsp", {}))
    (path,) = tmp_path.glob("*.jsonl")
    line = path.read_text()
    path.write_text(line + line[: len(line) // 2])  # a second line cut short
    assert len(Table(tmp_path)) == 1
    resumed = Table(tmp_path)  # a resumed build appends its next cell where the cut line began
    cell_for(resumed, job(), make_policy("asp", {}))
    assert path.read_text().startswith(line) and path.read_text().count("\n") == 2 and len(Table(tmp_path)) == 2
    path.write_text(line[: len(line) // 2])  # the file's only line cut short
    cell_for(Table(tmp_path), job(), make_policy("asp", {}))
    assert len(Table(tmp_path)) == 1
    path.write_text(line[: len(line) // 2] + "\n" + line)  # a damaged line that is not the last
    with pytest.raises(UserError, match=f"table file {path}, line 1, is damaged"):
        len(Table(tmp_path))
    path.write_bytes(b"\xff\xfe\n" + line.encode())  # bytes that are not UTF-8
    with pytest.raises(UserError, match=f"table file {path}, line 1, is damaged"):
        len(Table(tmp_path))
    json.loads(line)  # the whole line was valid JSON


@pytest.mark.parametrize("field, value, problem", [
    ("scores", "abc", "scores must be an object"),
    ("scores", {"virtual_time": "x"}, "scores.virtual_time must be a number, but got 'x'"),
    ("scores", {}, "scores.virtual_time must be a number, but got None"),
    ("prefixes", [["a", "b", "c"]], "prefixes.0 must be [seconds, quota, past the target]"),
    ("evaluations", [{"time": 1.0, "test_accuracy": "x"}], "evaluations.0.test_accuracy must be a number"),
    ("status", "won", "status must be one of"),
])
def test_a_cell_whose_fields_are_damaged_is_one_line_naming_the_file_and_field(tmp_path, field, value, problem):
    """Each was read as a cell and raised a traceback where a replayed tune or `fit` computed with it."""
    cell_for(Table(tmp_path), job(), make_policy("bsp", {}))
    (path,) = tmp_path.glob("*.jsonl")
    record = json.loads(path.read_text())
    record[field] = value
    path.write_text(json.dumps(record) + "\n")
    with pytest.raises(UserError, match=f"table file {path}, line 1, is damaged \\(.*{re.escape(problem)}"):
        len(Table(tmp_path))


def test_a_table_packed_as_gzipped_json_lines_is_read_and_packed_again_in_the_new_format(tmp_path):
    table = Table(tmp_path)
    for name in ("bsp", "asp"):
        cell_for(table, job(), make_policy(name, {}))
    (open_,) = tmp_path.glob("*.jsonl")
    lines = sorted(open_.read_text().splitlines())
    old = open_.with_name(open_.name + ".gz")  # how tables were packed before `packing`
    old.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode(), mtime=0))
    open_.unlink()
    again = Table(tmp_path)
    assert len(again) == 2 and again.fingerprints() == table.fingerprints()
    (packed,) = again.pack()
    assert packed.name.endswith(".cells.xz") and not old.exists()
    assert [json.dumps(r, sort_keys=True, separators=(",", ":")) for r in packing.unpack(packed.read_bytes())] == lines


def test_a_damaged_packed_file_is_named(tmp_path):
    table = Table(tmp_path)
    cell_for(table, job(), make_policy("bsp", {}))
    (path,) = table.pack()
    data = path.read_bytes()
    for damaged in (data[: len(data) // 2], b"not xz", packing.pack([{"key": "k"}])):
        path.write_bytes(damaged)
        with pytest.raises(UserError, match=f"table file {path}"):
            len(Table(tmp_path))


def test_packing_gives_back_each_record_with_its_types():
    records = [{"a": 1, "b": 1.0, "c": [0.1, float("inf"), None, True, "x"], "d": {"\x01e": "\x01f", "g": -0.0}},
               {"z": 2.5, "nan": float("nan"), "empty": [], "params": {}, "m": {"y": 0.25, "x": 0.5}}]  # unsorted
    again = packing.unpack(packing.pack(records))
    assert json.dumps(again, sort_keys=True) == json.dumps(records, sort_keys=True)
    assert [type(v) for v in again[0]["c"]] == [float, float, type(None), bool, str] and type(again[0]["a"]) is int
    assert packing.pack(again) == packing.pack(records)


def _format_3(records: list) -> bytes:
    """`records` packed as format 3 wrote them: the floats in the JSON's order, no field numbers."""
    import lzma

    import numpy as np

    floats: list = []
    shapes = "".join(json.dumps(packing._shape(r, floats, [], {}), sort_keys=True, separators=(",", ":")) + "\n"
                     for r in records).encode()
    body = packing.MAGIC_3 + len(shapes).to_bytes(8, "little") + shapes + np.asarray(floats, "<f8").tobytes()
    return lzma.compress(body, format=lzma.FORMAT_XZ)


def test_floats_packed_by_field_come_back_in_their_records_order_and_format_3_is_still_read(tmp_path):
    """Format 4 groups the floats by field (each evaluation's time together, ...): each comes back where its
    record holds it. A table packed in format 3 is read as it is, and packed again in format 4."""
    records = [{"evaluations": [{"time": 1.0 + i, "loss": 0.5 / (i + 1)} for i in range(3)], "key": f"k{n}",
                "scores": {"time": 9.5 + n, "loss": float("nan")}} for n in range(2)]
    packed = packing.pack(records)
    assert packing.is_current(packed) and not packing.is_current(_format_3(records))
    assert not packing.is_current(b"not xz")
    for data in (packed, _format_3(records)):
        assert json.dumps(packing.unpack(data), sort_keys=True) == json.dumps(records, sort_keys=True)
    table = Table(tmp_path / "a")
    cell_for(table, job(), make_policy("bsp", {}))
    (path,) = table.pack()
    current = path.read_bytes()
    path.write_bytes(_format_3(packing.unpack(current)))
    again = Table(tmp_path / "a")
    assert len(again) == 1 and again.pack() == [path] and path.read_bytes() == current  # packed again, same bytes


def test_a_file_of_a_newer_format_says_upgrade_not_delete(tmp_path):
    import lzma

    table = Table(tmp_path)
    cell_for(table, job(), make_policy("bsp", {}))
    (path,) = table.pack()
    body = lzma.decompress(path.read_bytes())
    path.write_bytes(lzma.compress(body.replace(packing.MAGIC, b"autosync-table 9\n", 1), format=lzma.FORMAT_XZ))
    with pytest.raises(UserError, match=r"is packed in format 9 by a newer autosync .*: upgrade autosync to read it$"):
        len(Table(tmp_path))


def test_records_in_more_fields_than_a_number_counts_are_packed_ungrouped():
    records = [{f"f{i}": float(i) for i in range(70_000)}]
    packed = packing.pack(records)
    assert not packing.is_current(packed) and packing.unpack(packed) == records


def test_a_packed_file_whose_fields_and_floats_disagree_is_refused():
    import lzma

    body = lzma.decompress(packing.pack([{"a": 1.0, "b": [2.0, 3.0]}]))
    for cut in (body[:-1], body[:-8], body + b"\0" * 9):
        with pytest.raises(ValueError, match="cut short|floats"):
            packing.unpack(lzma.compress(cut, format=lzma.FORMAT_XZ))


def test_a_table_path_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "f").write_text("")
    with pytest.raises(UserError, match="--table must be a directory"):
        Table(tmp_path / "f")


def test_a_table_of_the_proxy_checks_day_is_read_without_its_proxy_records(tmp_path):
    """Tables written while the search had a proxy equivalence check (since removed) hold proxy records
    (status "proxy") and a "proxy" key on every cell: the cells read as before, the records are dropped."""
    table = Table(tmp_path)
    cell_for(table, job(), make_policy("bsp", {}))
    (path,) = tmp_path.glob("*.jsonl")
    old = json.loads(path.read_text())
    record = {**old, "key": "0" * 64, "status": "proxy", "evaluations": [], "scores": {}, "proxy": "ab" * 16}
    path.write_text(json.dumps({**old, "proxy": None}) + "\n" + json.dumps(record) + "\n")
    again = Table(tmp_path)
    assert len(again) == 1 and again.get(old["fingerprint"], old["key"]) == table.get(old["fingerprint"], old["key"])
    again.pack()
    assert len(packing.unpack(next(tmp_path.glob("*.cells.xz")).read_bytes())) == 1


def _append_cells(directory: str, name: str) -> None:
    table = Table(directory)
    for lr in (0.05, 0.1, 0.2, 0.3):  # four cells of another job each: long lines, written at once
        cell_for(table, small_job(workload__optimizer__lr=lr, budget__max_updates=60), make_policy(name, {}))


@pytest.mark.slow  # three processes, each importing what a cell needs: about 6 s on 2 cores
def test_processes_filling_one_table_at_once_leave_every_line_whole(tmp_path):
    import multiprocessing

    # forked from a forkserver that has imported torch, as the engine starts its worker processes: three
    # spawned interpreters importing torch at once took most of this test's 20 s on 2 cores
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["torch", "autosync.engine.drivers.processes"])
    workers = [context.Process(target=_append_cells, args=(str(tmp_path), name)) for name in ("bsp", "asp", "ssp")]
    for w in workers:
        w.start()
    for w in workers:
        w.join(300)
        assert w.exitcode == 0
    table = Table(tmp_path)
    assert len(table) == 12  # every line parses (a damaged one that is not last would raise)
    assert sum(len(p.read_text().splitlines()) for p in tmp_path.glob("*.jsonl")) == 12
