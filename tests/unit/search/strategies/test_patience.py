"""A search that stops improving stops (`autosync tune --patience`): its queue is given up, with the reason."""

from __future__ import annotations

import json

import optuna
import pytest

from autosync.core.errors import SpaceFileError
from autosync.search.space import SPACE_DIR, load_space
from autosync.search.strategies.patience import trials_without_improvement
from autosync.search.study.cache import cached_studies
from autosync.search.study.storage import open_storage
from autosync.search.study.records import FULL_BUDGET_OF, GIVEN_UP, GIVEN_UP_PLACES
from autosync.search.study.trials import counted_trials
from autosync.search.tune import TuneRequest, tune
from tests.conftest import autosync, no_traceback, small_job, tune_request


def _trial(state: str, value: float | None = None, **attrs) -> optuna.trial.FrozenTrial:
    return optuna.trial.create_trial(state=getattr(optuna.trial.TrialState, state),
                                     value=value, user_attrs=attrs)


def test_trials_without_improvement_count_from_the_last_faster_trial():
    study = optuna.create_study()
    assert trials_without_improvement(study) == 0
    for trial in (_trial("COMPLETE", 10.0), _trial("COMPLETE", 12.0), _trial("PRUNED"),
                  _trial("COMPLETE", 9.0)):
        study.add_trial(trial)
    assert trials_without_improvement(study) == 0  # 9 is the fastest so far
    for trial in (_trial("COMPLETE", 9.0),  # a tie is no improvement
                  _trial("COMPLETE", 8.0, **{FULL_BUDGET_OF: 3}),  # a full-budget check is not the search's
                  _trial("FAIL", fail_reason="diverged"),  # a failure of its own counts
                  _trial("FAIL", **{GIVEN_UP: True, "fail_reason": "not run"}),  # given up: not a trial run
                  _trial("PRUNED")):
        study.add_trial(trial)
    assert trials_without_improvement(study) == 3


BUDGET = 5  # trials: --patience 1 gives up after the second (the small job's static_k space, random sampler)


def _request(tmp_path, job=None, space=None, **changes) -> TuneRequest:
    base = dict(n_trials=BUDGET, sampler="random", storage=f"sqlite:///{tmp_path / 'studies.db'}", tolerance=0.05)
    base.update(changes)
    return tune_request(job or small_job(budget={"max_virtual_seconds": 30}),
                        space or load_space(SPACE_DIR / "static_k.yaml", 4), **base)


def test_a_search_that_stops_improving_gives_up_its_queue_and_its_rerun_is_a_cache_hit(tmp_path):
    request = _request(tmp_path, patience=1)
    outcome = tune(request)
    record = outcome.cache
    given_up = record["search_breakdown"]["given_up"]
    assert given_up > 0 and record["trials"] + given_up == BUDGET and outcome.new_trials == record["trials"]
    study = optuna.load_study(study_name=outcome.study_name, storage=open_storage(request.storage))
    places = study.user_attrs[GIVEN_UP_PLACES]["places"]  # places of the budget not queued when it gave up
    assert counted_trials(study) + places == BUDGET  # the budget is spent: a resumed command runs none of the queue
    dropped = [t for t in study.trials if t.user_attrs.get(GIVEN_UP)]
    assert len(dropped) + places == given_up
    assert all(t.state.name == "FAIL" and "--patience" in t.user_attrs["fail_reason"] for t in dropped)
    assert record["search_breakdown"]["patience"] == 1 and all(t.user_attrs[GIVEN_UP] == 1 for t in dropped)
    listed = {row["study"]: row["trials"] for row in cached_studies(request.storage)}  # `autosync cache list`
    assert listed[outcome.study_name] == record["trials"] < len(study.trials)  # not the checks nor the given up
    assert trials_without_improvement(study) >= 1
    again = tune(request)
    assert again.cached and again.new_trials == 0 and again.cache == record
    whole = tune(_request(tmp_path, storage=f"sqlite:///{tmp_path / 'whole.db'}", patience=0))
    assert whole.cache["trials"] == BUDGET and whole.cache["search_breakdown"]["given_up"] == 0  # 0: the whole budget


def _space_file(tmp_path, patience: str) -> str:
    path = tmp_path / f"patient{patience}.yaml"
    path.write_text((SPACE_DIR / "static_k.yaml").read_text().replace("patience: 5", f"patience: {patience}")
                    .replace("name: static_k", f"name: patient{patience}"))  # an edited copy: a name of its own
    return str(path)


def test_a_space_sets_the_default_patience_which_the_option_and_a_grid_override(tmp_path):
    assert load_space(SPACE_DIR / "static_k.yaml", 4).patience == 5
    assert load_space(SPACE_DIR / "policy.yaml", 4).patience == 0  # a policy search finds its answer late
    impatient = load_space(_space_file(tmp_path, "1"), 4)
    stopped = tune(_request(tmp_path, space=impatient))  # patience=None: the space's
    assert stopped.cache["search_breakdown"]["given_up"] > 0
    for name, changes in (("option", {"patience": 0}), ("grid", {"sampler": "grid"})):
        run = tune(_request(tmp_path, space=impatient, storage=f"sqlite:///{tmp_path / (name + '.db')}", **changes))
        assert run.cache["search_breakdown"]["given_up"] == 0 and run.cache["trials"] == BUDGET, name


def test_a_negative_patience_in_a_space_file_is_a_clear_error(tmp_path):
    with pytest.raises(SpaceFileError, match=r"patience must be >= 0, but got -1"):
        load_space(_space_file(tmp_path, "-1"), 4)


@pytest.mark.slow
def test_the_command_says_the_search_stopped_improving_and_refuses_a_negative_patience(tmp_path):
    job = tmp_path / "tiny.yaml"
    job.write_text("name: tiny\nworkload: {dataset: {name: synthetic_classification, n_samples: 600}, "
                   "model: {name: logreg}, batch_size: 16, optimizer: {lr: 0.2}, evaluation: {every_seconds: 2}}\n"
                   "cluster: {n_workers: 4}\ntarget: {metric: test_accuracy, threshold: 0.5}\n"
                   "budget: {max_virtual_seconds: 30}\n")
    storage = f"sqlite:///{tmp_path / 's.db'}"
    proc = autosync("tune", str(job), "--sampler", "tpe", "--storage", storage, "--n-trials", "8", "--patience", "1",
                    cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    said = " ".join(proc.stdout.split())
    assert "The search stopped improving (1 trial in a row found nothing faster)" in said
    assert "(--patience 1; --patience 0 runs the whole budget)" in said
    cached = autosync("tune", str(job), "--storage", storage, "--json", cwd=tmp_path)
    record = json.loads(cached.stdout)["cache"]
    assert record["search_breakdown"]["given_up"] > 0
    bad = autosync("tune", str(job), "--patience", "-1", cwd=tmp_path)
    assert bad.returncode == 2 and "--patience" in bad.stderr, bad.stderr
    no_traceback(bad)


def test_giving_up_spends_the_budget_exactly_with_one_attribute_for_its_places_not_queued_yet(tmp_path):
    """Another process's proposal answered by a running twin is not counted, and its place may not be
    queued again when the search stops: the give-up fails the queued trials and records the places not
    queued in one study attribute (no row per place, whatever the budget), after which nothing is queued."""
    from autosync.search.strategies.patience import give_up_queued
    from autosync.search.study.trials import budget_used, top_up

    url = f"sqlite:///{tmp_path / 'g.db'}"
    study = optuna.create_study(storage=url)
    for value in (3.0, 2.0, 1.0):
        study.add_trial(optuna.trial.create_trial(value=value))
    study.enqueue_trial({})
    assert budget_used(study) == (3, 1)
    assert give_up_queued(study, 5, budget=6) == 3 and budget_used(study) == (4, 0)
    assert study.user_attrs[GIVEN_UP_PLACES] == {"budget": 6, "places": 2, "patience": 5}
    assert all(t.user_attrs[GIVEN_UP] == 5 and "--patience" in t.user_attrs["fail_reason"] for t in study.trials[3:])
    assert top_up(study, url, 6) == 0 and len(study.get_trials()) == 4