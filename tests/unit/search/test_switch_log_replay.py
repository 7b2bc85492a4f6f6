"""Replay: switch-point searches answered from recorded Sync-Switch runs (Table II)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from autosync.core.errors import UserError
from autosync.data import SYNC_SWITCH_LOGS
from autosync.search.switch_log_replay import (TABLE_II_SETTINGS, ReplayBackend, SearchSetting, binary_strategy,
                                    ladder_strategy, load_switch_logs, replay_table, simulate_searches, tpe_strategy)
from autosync.search.space import SPACE_DIR
from tests.conftest import autosync, no_traceback

REAL_LOGS = SYNC_SWITCH_LOGS  # the paper's published logs, shipped in autosync/data/sync_switch_logs
BSP_STEPS, ASP_STEPS = 800, 6400  # a BSP step consumes 8 worker batches


def _write_run(folder: Path, steps: int, accuracy: float, seconds: float) -> None:
    folder.mkdir(parents=True)
    (folder / "acc_proc.csv").write_text(f"Wall time,Time,Step,Value\n100,0,0,0.1\n"
                                         f"{100 + seconds},{seconds},{steps},{accuracy}\n")


def _logs(tmp_path: Path) -> Path:
    """BSP (100 s, acc 0.92), ASP (20 s, 0.85); switch runs whose accuracy reaches BSP's from 25% on."""
    root = tmp_path / "logs"
    for i, acc in enumerate([0.91, 0.93]):
        _write_run(root / "baseline" / f"bsp_{i}", BSP_STEPS, acc, 100.0)
        _write_run(root / "baseline" / f"asp_{i}", ASP_STEPS, 0.85, 20.0)
    _write_run(root / "baseline" / "bsp", 500, 0.80, 60.0)  # stopped early
    for pct, acc in [(5, 0.86), (12, 0.88), (25, 0.918), (50, 0.92)]:
        s = pct / 100
        _write_run(root / "switch_exp" / f"b{pct}-a{100 - pct}-run1", round(s * BSP_STEPS + (1 - s) * ASP_STEPS),
                   acc, 20 + 80 * s)
    _write_run(root / "switch_exp" / "b15-a85-run1", round(0.5 * BSP_STEPS + 0.5 * ASP_STEPS), 0.9, 60.0)
    (root / "switch_exp" / "a50-b50-run1").mkdir()  # ASP first: not a candidate
    return root


def test_logs_are_read_with_shares_from_step_counts(tmp_path):
    logs = load_switch_logs(_logs(tmp_path))
    assert logs.shares == [0.0, 0.05, 0.12, 0.25, 0.5, 1.0]
    assert logs.bsp_seconds == 100.0 and logs.target_accuracy == pytest.approx(0.92)
    assert any("baseline/bsp: stopped early (500 of 800 steps)" in line for line in logs.skipped)
    assert any("b15-a85-run1: named 15% BSP but its 3600 steps mean 50.00%" in line for line in logs.skipped)
    assert [r.share for r in logs.pool(0.375)] == [0.25, 0.5]  # equally near: pooled
    backend = ReplayBackend(logs, np.random.default_rng(0))
    assert backend(0.25) == 0.918 and backend.cost == pytest.approx(0.4)


def test_binary_and_ladder_find_the_switch_point_of_the_logs(tmp_path):
    logs = load_switch_logs(_logs(tmp_path))
    recurring = SearchSetting(True, 0, 1)
    # Algorithm 1: 50% holds, 25% holds, 12.5% (-> 12%) does not, 18.75% (-> 25%) holds
    binary = simulate_searches(logs, "binary", binary_strategy(4), recurring, 5, 0, optimum=0.1875)
    assert binary.choices == {"0.1875": 5} and binary.success == 1.0 and binary.same_as_full_information == 1.0
    assert binary.mean_cost == pytest.approx((60 + 40 + 29.6 + 40) / 100)
    ladder = simulate_searches(logs, "ladder", ladder_strategy(SPACE_DIR / "switch_point.yaml"), recurring, 5, 0,
                               optimum=0.1875)
    assert ladder.choices == {"0.25": 5} and ladder.valid == 1.0 and ladder.success == 0.0  # valid, but later


def test_replay_is_reproducible_and_tpe_records_a_constrained_study(tmp_path):
    logs = load_switch_logs(_logs(tmp_path))
    strategies = {"tpe": tpe_strategy(SPACE_DIR / "switch_point.yaml", 3)}
    settings = (SearchSetting(False, 2, 1),)
    first = replay_table(logs, strategies, 4, 7, settings)
    again = replay_table(logs, strategies, 4, 7, settings)
    assert first[1][0].as_dict() == again[1][0].as_dict()
    assert first[1][0].mean_cost >= 2.0  # two BSP runs set A


def test_binary_search_cost_on_the_published_logs_is_near_table_ii():
    logs = load_switch_logs(REAL_LOGS)
    _, rows = replay_table(logs, {"binary": binary_strategy(4)}, 200, 0, TABLE_II_SETTINGS)
    costs = {r.setting: r.mean_cost for r in rows}
    assert costs["(No, 5, 5)"] == pytest.approx(12.71, rel=0.1)
    assert costs["(No, 3, 3)"] == pytest.approx(7.62, rel=0.1)
    assert costs["(Yes, 0, 3)"] == pytest.approx(4.63, rel=0.1)


def test_replay_cli_writes_the_table_and_rejects_a_wrong_folder(tmp_path):
    proc = autosync("replay", str(_logs(tmp_path)), "--simulations", "3", "--tpe-trials", "2",
                    "--out", str(tmp_path / "out"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    table = json.loads((tmp_path / "out" / "table.json").read_text())
    assert [r["strategy"] for r in table["rows"]] == ["binary"] * 3 + ["ladder"] * 3 + ["tpe (2 trials)"] * 3
    assert "Produced by `autosync replay" in (tmp_path / "out" / "table.md").read_text()
    bad = autosync("replay", str(tmp_path), cwd=tmp_path)
    no_traceback(bad)
    assert bad.returncode == 2 and "not a Sync-Switch log folder" in bad.stderr
    with pytest.raises(UserError, match="not a Sync-Switch log folder"):
        load_switch_logs(tmp_path / "nowhere")
