"""The ladder walks only the rungs its space holds (`ladder.rungs_within`)."""

from __future__ import annotations

import pytest

from autosync.core.errors import UserError
from autosync.data import SPACE_DIR
from autosync.search.space import load_space
from autosync.search.strategies.ladder import DEFAULT_RUNGS, rungs_within
from autosync.search.strategies.samplers import check_sampler, make_sampler


def _space(tmp_path, switch_at: str):
    path = tmp_path / "late.yaml"
    path.write_text(f"name: late_switch\npolicies:\n  sync_switch:\n    switch_at: {switch_at}\n")
    return load_space(path, 4)


def test_the_ladder_walks_only_the_rungs_within_the_space(tmp_path):
    """A space of switch_at from 0.2 to 0.9 answered 0.03125, a rung outside it, and cached it."""
    space = _space(tmp_path, "{type: float, low: 0.2, high: 0.9}")
    assert make_sampler("ladder", 0, space, False, 20).rungs == (0.25, 0.5)
    stepped = _space(tmp_path, "{type: float, low: 0.0, high: 1.0, step: 0.25}")
    assert rungs_within(stepped.dimensions["sync_switch"]["switch_at"]) == (0.25, 0.5)
    listed = _space(tmp_path, "{type: categorical, choices: [0.125, 0.3]}")
    assert rungs_within(listed.dimensions["sync_switch"]["switch_at"]) == (0.125,)
    shipped = load_space(SPACE_DIR / "switch_point.yaml", 4)  # 0..1 in steps of 1/32: every rung
    assert make_sampler("ladder", 0, shipped, False, 20).rungs == DEFAULT_RUNGS


def test_a_space_that_holds_no_rung_is_refused_in_one_line(tmp_path):
    space = _space(tmp_path, "{type: float, low: 0.6, high: 0.9}")
    with pytest.raises(UserError, match=r"sync_switch.switch_at holds none of the ladder's rungs \(0.03125, "):
        make_sampler("ladder", 0, space, False, 20)
    with pytest.raises(UserError, match=r"holds none of the ladder's rungs"):  # with the request, before storage
        check_sampler("ladder", space, False)
