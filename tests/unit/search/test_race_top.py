"""The race's best candidates as `tune --json` lists them (`race_trials.race_top`), read from its record."""

from __future__ import annotations

from autosync.search.race_trials import race_top

BSP = {"policy": "bsp", "params": {}}
ASP = {"policy": "asp", "params": {}}


def record(with_trials: bool) -> dict:
    def run(label, policy, time, trial, **extra):
        return {"label": label, "policy": policy, "time": time, **({"trial": trial} if with_trials else {}), **extra}

    return {"ranked": [["asp", 4.0], ["bsp", 9.0]],
            "rounds": [{"round": "portfolio", "seed": 0, "runs": [run("asp", ASP, 3.0, 2), run("bsp", BSP, 8.0, 0)]},
                       {"round": "second seed", "seed": 1, "runs": [run("asp", ASP, 5.0, 4), run("bsp", BSP, 10.0, 1)]},
                       {"round": "final metric", "seed": 0, "runs": [run("asp", ASP, None, 6, final=0.5)]},
                       {"round": "final metric", "seed": 1, "runs": [run("asp", ASP, None, 7, final=0.7)]}]}


def test_the_top_lists_each_candidate_by_its_mean_with_its_first_trial_and_its_checked_final_metric():
    top = race_top(record(with_trials=True))
    assert [row["policy"] for row in top] == [ASP, BSP] and [row["trial"] for row in top] == [2, 0]
    assert top[0]["time_to_target"] == 4.0 and top[0]["final_metric"] == 0.6 and top[1]["final_metric"] is None
    assert top[0]["reached"] == 2 and top[0]["runs"] == 2


def test_a_record_whose_runs_name_no_trial_lists_none_rather_than_a_trial_it_never_ran():
    assert [row["trial"] for row in race_top(record(with_trials=False))] == [None, None]


def test_a_run_that_missed_the_target_is_not_counted_as_reaching_it():
    """A run that ended the budget short of the target has a time, the miss's score, but did not reach it."""
    missed = record(with_trials=True)
    missed["rounds"][1]["runs"][1].update(time=20.0, missed=True)  # BSP's run on the second seed
    top = race_top(missed)
    assert top[1]["policy"] == BSP and top[1]["reached"] == 1 and top[0]["reached"] == 2
