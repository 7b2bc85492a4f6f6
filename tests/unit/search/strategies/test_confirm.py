"""--confirm-top: a search's best candidates re-run on more seeds, the cache answering with the best mean."""

from __future__ import annotations

import json
import math

import pytest

from autosync.search.study.records import CONFIRMATION_RUNS as RUNS
from autosync.policy_score import evaluate
from autosync.search.space import SPACE_DIR, load_space
from autosync.search.tune import tune
from tests.conftest import autosync, no_traceback, small_job, tune_request

JOB = small_job(budget={"max_updates": 30})


def _tune(url: str, space: str = "policy", trials: int = 5, top: int = 2, **request):
    """A tune confirmed on two new seeds; TPE (the confirmation is under test, not the portfolio search)."""
    request.setdefault("sampler", "tpe")
    request.setdefault("confirm_seeds", 2)
    return tune(tune_request(JOB, load_space(SPACE_DIR / f"{space}.yaml", 4), n_trials=trials, storage=url,
                             confirm_top=top, **request))


@pytest.mark.slow
def test_the_winner_is_the_best_mean_over_the_search_seed_and_the_new_ones(tmp_path):
    outcome = _tune(f"sqlite:///{tmp_path / 's.db'}")
    confirmed = outcome.cache["confirmed"]
    seeds = confirmed["seeds"]
    assert seeds == [JOB.seed, JOB.seed + 1, JOB.seed + 2]  # the two new seeds asked for, no more for a tie
    candidates = [r for r in confirmed["rows"] if r["source"] != "reference"]
    assert 1 <= len(candidates) <= 2 and candidates[0]["source"] == f"trial {outcome.top[0]['trial']}"  # best first
    for row in candidates:  # each mean is the search's score and the new runs, recomputed here
        if row["behind_at"] is not None:  # it stopped once it could not bring its mean under the leader's
            continue
        new = seeds[1:len(row["seed_times"])]
        fresh = [evaluate(JOB, row["policy"], [seed])["time_to_target"] for seed in new]
        assert row["seed_times"] == pytest.approx([row["search_time"], *fresh])
        assert row["time_to_target"] == pytest.approx(sum(row["seed_times"]) / len(row["seed_times"]))
    bsp = confirmed["rows"][-1] if confirmed["rows"][-1]["source"] == "reference" else None
    feasible = [r for r in candidates if r["feasible"]]
    winner = min(feasible, key=lambda r: r["time_to_target"])
    assert outcome.cache["best_policy"] == winner["policy"] == confirmed["winner"]
    assert outcome.cache["best_value"] == winner["time_to_target"]
    assert outcome.cache["search_best_policy"] == outcome.top[0]["policy"]
    if bsp is not None:  # BSP, not a candidate, keeps its reference run: it trains on no new seed
        reference = outcome.study.user_attrs["bsp_reference"]
        assert bsp["seed_times"] == [reference["time_to_target"]] and bsp["runs"] == 1
        assert not [key for key in outcome.study.user_attrs[RUNS] if json.loads(key)["policy"]["policy"] == "bsp"]
        assert outcome.cache["bsp_time_to_target"] == bsp["time_to_target"] == reference["time_to_target"]
        assert outcome.cache["speedup_vs_bsp"] == pytest.approx(bsp["time_to_target"] / winner["time_to_target"])


@pytest.mark.slow
def test_a_confirmed_study_answers_from_the_cache_and_an_interrupted_one_trains_only_what_is_missing(tmp_path):
    url = f"sqlite:///{tmp_path / 's.db'}"
    first = _tune(url)
    assert first.confirmation.trained_virtual_seconds > 0
    trials = sum(t.user_attrs.get("virtual_seconds", 0.0) for t in first.study.trials)
    reference = first.study.user_attrs["bsp_reference"]["virtual_seconds"]
    assert first.cache["search_cost_virtual_seconds"] == pytest.approx(  # the confirmation's runs are paid for
        trials + reference + first.confirmation.trained_virtual_seconds)
    saving = first.cache["bsp_time_to_target"] - first.cache["best_value"]
    assert first.cache["recurrences_to_amortize"] == (
        math.ceil(first.cache["search_cost_virtual_seconds"] / saving) if saving > 0 else None)
    again = _tune(url)
    assert again.cached and again.confirmation is None and again.cache == first.cache
    study = first.study
    runs = dict(study.user_attrs[RUNS])
    lost = sorted(runs)[0]
    del runs[lost]  # as if the process had died before that run was stored
    study.set_user_attr(RUNS, runs)
    record = dict(study.user_attrs["cache"])
    del record["confirmed"]
    study.set_user_attr("cache", record)
    resumed = _tune(url)
    assert resumed.confirmation.trained_virtual_seconds == pytest.approx(first.study.user_attrs[RUNS][lost]
                                                                        ["virtual_seconds"])
    assert resumed.cache["confirmed"]["rows"] == first.cache["confirmed"]["rows"]
    wider = _tune(url, top=3)  # another K is another confirmation: the runs it shares are copied
    assert wider.cache["confirmed"]["top"] == 3 and [r["source"] for r in wider.cache["confirmed"]["rows"][:2]] == [
        r["source"] for r in first.cache["confirmed"]["rows"][:2]]


@pytest.mark.slow
def test_a_composed_tune_confirms_the_policy_tunes_winner_too_and_is_never_slower_on_the_same_seeds(tmp_path):
    """The composed space holds every seed policy, so its confirmation includes the policy tune's confirmed
    winner (its runs copied, not trained): the composed answer's mean is at most the single one's."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    single = _tune(url, "policy")
    composed = _tune(url, "composed", top=1)
    rows = composed.cache["confirmed"]["rows"]
    seeds, its_seeds = composed.cache["confirmed"]["seeds"], single.cache["confirmed"]["seeds"]
    assert seeds == its_seeds
    from autosync.search.objective import canonical_policy

    winner = canonical_policy(single.cache["best_policy"], 4, JOB.workload.batch_size)
    twin = [r for r in rows if canonical_policy(r["policy"], 4, JOB.workload.batch_size) == winner]
    won = next(r for r in single.cache["confirmed"]["rows"] if r["policy"] == single.cache["best_policy"])
    common = min(len(twin[0]["seed_times"]), len(won["seed_times"]))
    assert len(twin) == 1 and twin[0]["seed_times"][:common] == pytest.approx(won["seed_times"][:common])
    if seeds == its_seeds:
        assert composed.cache["best_value"] <= single.cache["best_value"] + 1e-12
    assert composed.cache["best_policy"]["policy"] == "compose"  # in the form the composed space samples


@pytest.mark.slow
def test_trials_recorded_without_the_budget_are_candidates_and_a_changed_sibling_winner_is_confirmed_again(tmp_path):
    """Studies of an autosync that did not record the budget in a trial's scoring still confirm their best
    (they confirmed BSP alone before); a composed confirmation is redone once the policy tune answers with
    another winner."""
    import sqlite3

    url = f"sqlite:///{tmp_path / 's.db'}"
    plain = tune(tune_request(JOB, load_space(SPACE_DIR / "policy.yaml", 4), n_trials=4, storage=url,
                              sampler="tpe"))
    with sqlite3.connect(tmp_path / "s.db") as con:  # as an older autosync wrote it
        for (attr_id, value) in con.execute("select trial_user_attribute_id, value_json from trial_user_attributes "
                                            "where key = 'scoring'").fetchall():
            scoring = json.loads(value)
            del scoring["budget"]
            con.execute("update trial_user_attributes set value_json = ? where trial_user_attribute_id = ?",
                        (json.dumps(scoring), attr_id))
    single = _tune(url, "policy", trials=4, top=1)
    rows = single.cache["confirmed"]["rows"]
    assert rows[0]["source"] == f"trial {plain.top[0]['trial']}" and single.cache["confirmed"]["winner"] is not None
    composed = _tune(url, "composed", trials=4, top=1)
    first = [r["policy"] for r in composed.cache["confirmed"]["rows"]]
    record = dict(single.study.user_attrs["cache"])
    record["best_policy"] = {"policy": "asp", "params": {}}  # the policy tune now answers with ASP
    single.study.set_user_attr("cache", record)
    again = _tune(url, "composed", trials=4, top=1)
    assert again.confirmation is not None
    assert {"policy": "compose", "params": {"barrier": "asp", "asp_lr_rule": "fixed", "local": "none", "batch": "equal",
                                            "update": "sgd"}} in [
        r["policy"] for r in again.cache["confirmed"]["rows"]] != first


@pytest.mark.slow
def test_cli_prints_the_confirmation_and_refuses_bad_options_in_one_line(tmp_path):
    job = tmp_path / "tiny.yaml"
    job.write_text("name: tiny\nworkload: {dataset: {name: synthetic_classification, n_samples: 600}, "
                   "model: {name: logreg}, batch_size: 16, optimizer: {lr: 0.2}, evaluation: {every_seconds: 2}}\n"
                   "cluster: {n_workers: 4}\ntarget: {metric: test_accuracy, threshold: 0.7}\n"
                   "budget: {max_virtual_seconds: 30}\n")
    proc = autosync("tune", str(job), "--sampler", "tpe", "--n-trials", "3", "--tolerance", "0.05", "--confirm-top",
                    "1", "--confirm-seeds", "1", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    cache = json.loads(proc.stdout)["cache"]
    assert cache["confirmed"]["seeds"] == [0, 1] and cache["best_policy"] == cache["confirmed"]["winner"]
    proc = autosync("tune", str(job), "--sampler", "tpe", "--n-trials", "3", "--tolerance", "0.05", "--confirm-top", "1",
                    "--confirm-seeds", "1", cwd=tmp_path)
    assert proc.returncode == 0 and "confirmed on seeds [0, 1]" in proc.stdout
    bad = autosync("tune", str(job), "--sampler", "tpe", "--confirm-top", "1", "--objective", "time,metric", cwd=tmp_path)
    assert bad.returncode == 2 and "--confirm-top ranks candidates by one objective" in bad.stderr
    no_traceback(bad)
    bad = autosync("tune", str(job), "--confirm-top", "1", "--sampler", "binary", "--space", "switch_point", cwd=tmp_path)
    assert bad.returncode == 2 and "--sampler binary already trains each candidate on 3 seeds" in bad.stderr


@pytest.mark.slow
def test_where_every_candidate_fails_a_new_seed_the_cache_answers_with_bsp(tmp_path):
    """A candidate that diverges on a confirmation seed is not handed out: with none left, BSP answers."""
    from autosync.search.objective import BSP, canonical_policy

    url = f"sqlite:///{tmp_path / 's.db'}"
    first = _tune(url, top=1)
    study = first.study
    bsp = json.dumps(canonical_policy(BSP, 4, JOB.workload.batch_size), sort_keys=True)
    runs = dict(study.user_attrs[RUNS])
    failed = [key for key in runs if json.dumps(json.loads(key)["policy"], sort_keys=True) != bsp]
    assert failed and len(failed) == len(runs)  # the candidate's new seeds: BSP keeps its reference run
    for key in failed:  # the candidate diverged there (what `evaluate` raises is stored as its reason)
        runs[key] = {"reason": "diverged: the loss is nan"}
    study.set_user_attr(RUNS, runs)
    record = dict(study.user_attrs["cache"])
    del record["confirmed"]
    study.set_user_attr("cache", record)
    again = _tune(url, top=1)
    confirmed = again.cache["confirmed"]
    assert confirmed["fell_back_to_bsp"] and again.cache["best_policy"] == BSP == confirmed["winner"]
    assert again.cache["best_value"] == confirmed["bsp_time"] and again.cache["speedup_vs_bsp"] == 1.0
    assert again.cache["search_best_policy"] == first.cache["search_best_policy"] != BSP


def test_a_confirmed_winner_that_diverges_at_full_budget_keeps_nothing_and_raises_nothing():
    """The steady family's case: a winner stopped at the target in the search diverged in its full-budget
    check after the confirmation; the tune took the next candidate instead of stopping with a traceback."""
    from autosync.search.objective import ObjectiveSettings
    from autosync.search.tune import keeps_constraint_at_full_budget

    job = small_job(workload__model__name="mlp", workload__optimizer__lr=50.0, workload__optimizer__momentum=0.9)
    reference = {"final_metric": 0.8, "time_to_target": 10.0}
    asp = {"policy": "asp", "params": {"lr_rule": "fixed"}}
    assert keeps_constraint_at_full_budget(job, asp, ObjectiveSettings(), reference) is False


def test_leaders_closer_than_their_spread_or_the_indifference_margin_are_tied():
    """Means 4.3% apart are tied though both spreads are narrower (the answer-quality goal allows 5%); 11.8%
    apart within the slower one's spread between seeds are tied too; 11.8% apart, both steady, are not."""
    from autosync.search.strategies.confirm import INDIFFERENT, _tied

    def row(times: list[float], policy: str) -> dict:
        return {"feasible": True, "source": "trial", "time_to_target": sum(times) / len(times),
                "seed_times": times, "policy": policy}

    assert INDIFFERENT == 0.05
    best, near, far = row([16.0, 16.2], "a"), row([16.8, 16.8], "b"), row([18.0, 18.0], "c")
    assert _tied([best, near, far], best) == [near]  # 4.3% apart: tied, though not within either spread
    noisy = row([14.0, 22.0], "d")  # 11.8% apart, its own spread 5.7 s: tied though the winner's is 0.14 s
    assert _tied([best, noisy, far], best) == [noisy]


def test_a_candidate_whose_full_budget_check_diverged_is_not_confirmed():
    """The tiers family's case: SSP reached the target at the first evaluation and its check diverged; backup
    k = 8, checked feasible, is the candidate the confirmation runs, not SSP."""
    import optuna

    from autosync.search.strategies.confirm import candidates
    from autosync.search.study.records import CANONICAL, CONSTRAINT, FINAL_PENDING, FULL_BUDGET_OF, POLICY, SCORING

    scoring = {"seeds": [JOB.seed], "penalty": 2.0}
    ssp = {"policy": "ssp", "params": {"staleness": 3}}
    backup = {"policy": "backup", "params": {"k": 3, "lr_rule": "sqrt"}}

    def attrs(policy: dict, **more) -> dict:
        return {POLICY: policy, CANONICAL: policy, SCORING: scoring, "final_metric": 0.5, **more}

    study = optuna.create_study()
    study.add_trial(optuna.trial.create_trial(value=1.8, user_attrs=attrs(ssp, **{FINAL_PENDING: True})))
    study.add_trial(optuna.trial.create_trial(value=7.3, user_attrs=attrs(backup, **{FINAL_PENDING: True})))
    study.add_trial(optuna.trial.create_trial(state=optuna.trial.TrialState.FAIL, user_attrs=attrs(
        ssp, **{FULL_BUDGET_OF: 0, "fail_reason": "diverged at update 90"})))
    study.add_trial(optuna.trial.create_trial(value=7.3, user_attrs=attrs(backup, **{FULL_BUDGET_OF: 1}),
                                              constraints={CONSTRAINT: -0.04}))
    plan = candidates(study, 2, JOB, scoring)
    assert [c.policy for c in plan] == [backup] and plan[0].checked


def test_the_race_bound_leaves_room_for_the_seeds_still_to_run():
    """A candidate at 9 s on the search's seed, racing a leader whose mean is 10 s, with one new seed: it cannot
    win past 11 s there; with a second new seed still to run it can (12 s then 7 s is a mean of 9.3 s), so
    its bound on the first is 21 s, however fast the second could be."""
    from autosync.search.strategies.confirm import Candidate, _bound

    def run(t: float, seed: int) -> dict:
        return {"time_to_target": t, "final_metric": 0.9, "reached": 1, "seed": seed}

    leader, racer = Candidate({"policy": "a"}, "trial 0", 10.0, 0.9), Candidate({"policy": "b"}, "trial 1", 9.0, 0.9)
    plan, times = [leader, racer], {0: [run(10.0, 1)], 1: []}
    assert _bound(racer, times[1], 1, times, plan) == pytest.approx(11.0)
    assert _bound(racer, times[1], 1, times, plan, later=1) == pytest.approx(21.0)


def test_bsp_as_a_candidate_that_fails_on_a_new_seed_leaves_the_speedup_on_its_reference(tmp_path):
    """BSP, among the search's best, diverges on the new seed (stored as failed) while backup answers: the
    speedup reads BSP's reference run, not a missing mean."""
    import optuna

    from autosync.search.objective import canonical_on
    from autosync.search.strategies.confirm import Candidate, RunStore, confirm

    job = small_job()
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 's.db'}")
    store = RunStore(study, [])
    bsp, steady = {"policy": "bsp", "params": {}}, {"policy": "backup", "params": {"k": 3, "lr_rule": "fixed"}}
    seed = job.seed + 1
    store.put(RunStore.identity(canonical_on(steady, job), seed, 2.0, job),
              {"time_to_target": 30.0, "final_metric": 0.8, "reached": 1, "runs": 1, "virtual_seconds": 10.0})
    store.put(RunStore.identity(canonical_on(bsp, job), seed, 2.0, job), {"reason": "diverged: the loss is nan"})
    plan = [Candidate(steady, "trial 5", 28.0, 0.8), Candidate(bsp, "trial 0", 58.0, 0.81)]
    result = confirm(job, 2, plan, {"time_to_target": 58.0, "final_metric": 0.81}, store, 1, 1, 2.0, 0.01)
    assert result.trained_virtual_seconds == 0.0 and result.winner == steady
    assert result.bsp_time == 58.0 and result.bsp_final == 0.81


def _store_runs(url: str, name: str, tag: str, count: int) -> None:
    """One process's runs, stored one by one as a confirmation stores them (a spawned process's target)."""
    import optuna

    from autosync.search.strategies.confirm import RunStore

    runs = RunStore(optuna.load_study(study_name=name, storage=url), [])
    for i in range(count):
        runs.put(f"{tag}-{i}", {"time_to_target": float(i)})


@pytest.mark.processes
def test_two_processes_storing_runs_in_one_study_at_once_keep_every_run(tmp_path):
    """Each put reads the study's runs and writes them back: without the storage lock around the two, one
    process's write drops the runs the other stored in between."""
    import multiprocessing

    import optuna

    url = f"sqlite:///{tmp_path / 'runs.db'}"
    optuna.create_study(study_name="s", storage=url)
    spawn = multiprocessing.get_context("spawn")
    workers = [spawn.Process(target=_store_runs, args=(url, "s", tag, 25)) for tag in ("a", "b")]
    for w in workers:
        w.start()
    for w in workers:
        w.join(120)
        assert w.exitcode == 0
    stored = optuna.load_study(study_name="s", storage=url).user_attrs[RUNS]
    assert sorted(stored) == sorted(f"{tag}-{i}" for tag in ("a", "b") for i in range(25))
