"""`autosync tune`'s progress bar names what it counts from its first frame: the race's trials, or TPE's BSP
reference runs before its trial budget."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from autosync.reporting.progress import tune_progress
from autosync.search.tune_options import TuneOptions


def _first_frame(race: bool) -> str:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=100)
    with tune_progress(console, 20, race=race) as (_, start):
        start()
    return out.getvalue()


def test_the_race_s_bar_counts_its_trials_from_the_start_and_tpe_s_its_reference_runs_first():
    race = _first_frame(race=True)
    assert "trials" in race and "0/?" in race and "BSP reference" not in race and "/20" not in race
    tpe = _first_frame(race=False)
    assert "BSP reference runs" in tpe and "0/20" in tpe


@pytest.mark.parametrize("fields, races", [({}, True), ({"sampler": "race"}, True), ({"sampler": "tpe"}, False),
                                           ({"space": "static_k"}, False)])
def test_the_options_say_whether_they_run_the_race(fields, races):
    assert TuneOptions(**fields).races() is races
