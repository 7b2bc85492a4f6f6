"""The race's procedure (`autosync.race.plan`) on hand-made runs: each round asks for what it lacks,
eliminates by the margin, halves, steps on the lattice seed by seed and checks the finalists in order."""

from __future__ import annotations

import math

import pytest

from autosync.core.errors import UserError
from autosync.race import Answer, RaceSettings, Run, Runs, horizon, keeps_paired, load_settings, plan


def backup(k: int, rule: str = "sqrt") -> dict:
    return {"policy": "backup", "params": {"k": k, "lr_rule": rule}}


BSP = {"policy": "bsp", "params": {}}
POINTS = {"bsp": BSP, "a": {"policy": "asp", "params": {"lr_rule": "fixed"}}, "k3": backup(3), "k4": backup(4),
          "k5": backup(5), "k4lin": backup(4, "linear"), "share": backup(4), "d": {"policy": "dana_slim", "params": {}}}
SETTINGS = RaceSettings(("a", "k4", "d", "share", "bsp"), margin=1.5, finalists=2)


def run_all(times: dict, finals: dict, truth: dict, true_finals: dict, settings: RaceSettings = SETTINGS,
            order=lambda runs: runs, stopped: dict | None = None) -> tuple[Answer, list[Runs]]:
    """Plays the race with `truth[(label, seed)]` as each run's time (stopped at its horizon) and
    `true_finals` as its final metric; `order` reorders each round's runs (another process finishing first)."""
    steps, stopped = [], {} if stopped is None else stopped
    while not isinstance(step := plan(settings, POINTS, times, stopped, finals, 0.01, accuracy=True), Answer):
        steps.append(step)
        for run in order(step.runs):
            key = (run.label, run.seed)
            if run.full:
                finals[key] = true_finals[key]
                times.setdefault(key, truth[key])
            else:
                limit = horizon(run, settings.margin, times)
                if truth[key] < limit:
                    times[key] = truth[key]
                else:
                    stopped[key] = limit
    return step, steps


TRUTH = {("a", 0): 30.0, ("a", 1): 34.0, ("k4", 0): 20.0, ("k4", 1): 26.0, ("d", 0): 29.0, ("d", 1): 20.0,
         ("bsp", 0): 60.0, ("bsp", 1): 62.0, ("k3", 0): 19.0, ("k3", 1): 25.0, ("k5", 0): 40.0, ("k5", 1): 21.0,
         ("k4lin", 0): 29.0, ("k4lin", 1): 30.0}
FINALS = {("bsp", 0): 0.95, ("bsp", 1): 0.96, ("k3", 0): 0.90, ("k3", 1): 0.91, ("k4", 0): 0.95, ("k4", 1): 0.955,
          ("d", 0): 0.96, ("d", 1): 0.96}


def test_each_round_runs_what_it_lacks_on_the_seeds_every_candidate_of_it_runs():
    answer, steps = run_all({}, {}, TRUTH, FINALS)
    assert [s.round for s in steps] == ["portfolio", "second seed", "local step", "local step", "final metric",
                                        "final metric"]
    first, second, step0, step1, check1, check2 = steps
    assert [r.label for r in first.runs] == ["a", "k4", "d", "bsp"]  # "share" names k4's point: run once
    assert all(r.seed == 0 and not r.full for r in first.runs)
    # strictly within 1.5 x the fastest (20): k4 and d (a at 30 is not; bsp was stopped at d's 1.5 x 20);
    # the faster half of the two goes on
    assert [(r.label, r.seed) for r in second.runs] == [("k4", 1)]
    # k4 leads; its neighbours k3, k5, k4lin run on seed 0 ("share" is k4's own point), stopped past 1.5 x 20
    assert sorted(r.label for r in step0.runs) == ["k3", "k4lin", "k5"] and {r.seed for r in step0.runs} == {0}
    assert sorted(r.label for r in step1.runs) == ["k3", "k4lin"]  # k5 (40) was stopped on seed 0
    # ranked by mean: k3 (22), k4 (23), k4lin (29.5): k3 is checked first and breaks the rule, then k4 keeps it
    assert [(r.label, r.seed, r.full) for r in check1.runs] == [("bsp", 0, True), ("bsp", 1, True), ("k3", 0, True),
                                                                 ("k3", 1, True)]
    assert [r.label for r in check2.runs] == ["k4", "k4"]
    assert (answer.label, answer.time, answer.checked) == ("k4", 23.0, ["k3", "k4"])


def test_the_answer_is_the_same_whatever_order_a_round_s_runs_finish_in():
    forward, _ = run_all({}, {}, TRUTH, FINALS)
    backward, _ = run_all({}, {}, TRUTH, FINALS, order=lambda runs: list(reversed(runs)))
    assert (forward.label, forward.time, forward.ranked) == (backward.label, backward.time, backward.ranked)


def test_bsp_answers_when_no_finalist_keeps_the_rule():
    finals = {**FINALS, ("k4", 0): 0.90, ("k4", 1): 0.90}
    answer, steps = run_all({}, {}, TRUTH, finals)
    assert answer.label == "bsp" and answer.checked == ["k3", "k4"]  # two finalists at most
    assert answer.time == 61.0  # BSP's mean over its reference runs


def test_a_resumed_race_asks_only_for_the_runs_it_lacks():
    times = {("a", 0): 30.0, ("k4", 0): 20.0}
    step = plan(SETTINGS, POINTS, times, {}, {}, 0.01, accuracy=True)
    assert [r.label for r in step.runs] == ["d", "bsp"]


def test_a_run_races_the_fastest_finished_run_of_its_round_on_its_seed():
    run = Run("d", 0, "portfolio", ("a", "k4", "d"))
    assert horizon(run, 1.5, {}) == math.inf  # the first run of a round is not stopped
    assert horizon(run, 1.5, {("a", 0): 30.0, ("k4", 0): 20.0, ("k4", 1): 1.0}) == 30.0
    assert horizon(Run("d", 0, "final metric", full=True), 1.5, {("a", 0): 1.0}) == math.inf


@pytest.mark.parametrize("finals, bsp, tolerance, kept", [
    ([0.95, 0.95], [0.955, 0.96], 0.01, True),  # within the tolerance
    ([0.90, 0.92], [0.955, 0.96], 0.01, False),
    ([0.90, 0.92], [0.90, 0.99], 0.01, True),  # within BSP's own spread between the seeds (0.09)
    ([0.95, None], [0.95, 0.95], 0.01, False),  # a diverged run never keeps it
])
def test_the_final_metric_rule_is_a_paired_test_widened_to_bsp_s_own_spread(finals, bsp, tolerance, kept):
    assert keeps_paired(finals, bsp, tolerance, accuracy=True) is kept
    assert keeps_paired([2 - f if f else None for f in finals], [2 - b for b in bsp], tolerance,
                        accuracy=False) is kept  # a loss: lower is better


@pytest.mark.parametrize("text, field", [
    ("portfolio: []\nmargin: 1.5\nfinalists: 2\n", "portfolio"),
    ("portfolio: [bsp]\nmargin: 0.5\nfinalists: 2\n", "margin"),
    ("portfolio: [bsp]\nmargin: 1.5\nfinalists: 0\n", "finalists"),
    ("- just a list\n", "mapping"),
    ("portfolio: [bsp\n", "cannot read"),
])
def test_a_bad_settings_file_is_one_line_naming_the_file_and_field(tmp_path, text, field):
    path = tmp_path / "race.yaml"
    path.write_text(text)
    with pytest.raises(UserError) as err:
        load_settings(path)
    assert str(path) in str(err.value) and field in str(err.value) and "\n" not in str(err.value)


def test_the_shipped_settings_load_and_name_points_of_every_job_size():
    from autosync.data import RACE_SETTINGS
    from autosync.lattice import labelled_points

    settings = load_settings(RACE_SETTINGS)
    for n in (3, 8, 32):
        assert all(label in labelled_points(n) for label in settings.portfolio)
