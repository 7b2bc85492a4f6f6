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
