"""The study's plots: the optimization history and the parameter importances are drawn."""

from __future__ import annotations

import optuna

from autosync.reporting.study_plots import write_study_plots


def test_a_study_of_two_parameters_gets_its_history_and_its_importances(tmp_path):
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    study.optimize(lambda t: (t.suggest_int("k", 1, 16) - 5) ** 2 + t.suggest_float("lr", 0.01, 1.0), n_trials=30)
    written, skipped = write_study_plots(study, tmp_path)
    assert not skipped and sorted(p.name for p in written) == ["optimization_history.png", "param_importances.png"]
    assert all(p.stat().st_size > 0 for p in written)



def test_a_study_with_fewer_than_two_parameters_skips_the_importances_and_says_why(tmp_path):
    """A race's trials (queued lattice points) suggest no parameter: Optuna would draw an empty chart."""
    none = optuna.create_study()
    none.optimize(lambda t: 1.0, n_trials=3)
    one = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    one.optimize(lambda t: t.suggest_float("lr", 0.01, 1.0), n_trials=5)
    for study, count in ((none, "no parameter"), (one, "1 parameter")):
        written, skipped = write_study_plots(study, tmp_path / count)
        assert [p.name for p in written] == ["optimization_history.png"]
        assert skipped == [f"param_importances.png: {count} among the completed trials, none to rank against another"]


def _race() -> tuple[dict, dict]:
    """A race's record, and its answer."""
    asp, bsp = {"policy": "asp", "params": {}}, {"policy": "bsp", "params": {}}
    return {"rounds": [
        {"round": "portfolio", "seed": 0, "runs": [{"label": "asp", "policy": asp, "time": 3.0}]},
        {"round": "reference", "seed": 0, "runs": [{"label": "bsp", "policy": bsp, "time": 9.0, "final": 0.9}]},
        {"round": "reference", "seed": 1, "runs": [{"label": "bsp", "policy": bsp, "time": None, "final": None}]},
        {"round": "final metric", "seed": 1, "runs": [{"label": "asp", "policy": asp, "time": 4.0, "final": 0.8}]},
        {"round": "towards BSP", "seed": 0, "runs": [{"label": "k", "policy": asp, "time": None, "final": 0.7}]}]}, asp


def test_a_race_gets_its_own_figure_instead_of_a_history_that_mixes_its_seeds_and_rounds(tmp_path):
    race, asp = _race()
    study = optuna.create_study()
    study.optimize(lambda t: 1.0, n_trials=2)
    written, skipped = write_study_plots(study, tmp_path, {"race": race, "best_policy": asp})
    assert [p.name for p in written] == ["race.png"] and not skipped and written[0].stat().st_size > 0


def test_a_cached_race_draws_its_figure_where_the_folder_lacks_it(tmp_path):
    """A tune stopped while drawing race.png had cached its answer: every later tune answered from the cache
    and drew nothing. A cached race is drawn from its record (no study opened) where the folder lacks it."""
    from autosync.reporting.tune_files import Tuned
    from autosync.search.outcome import TuneOutcome

    race, asp = _race()
    cached = Tuned.of(TuneOutcome("s", "sqlite:///x.db", True, 0, {"race": race, "best_policy": asp}))
    assert [p.name for p in cached.write(tmp_path / "out").plots] == ["race.png"]
    assert cached.write(tmp_path / "out").plots == []  # there already: the cache hit writes nothing
