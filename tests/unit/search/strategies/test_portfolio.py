"""The portfolio search: a family is never lost for its first setting, a family that cannot win is dropped, a
family turn never runs a point already run, no
trial slot goes to an answered point, and an answer that misses on a seed it was not searched on is replaced."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import optuna
import pytest

from autosync.policy_score import evaluate
from autosync.search.study.records import ANSWERED, CANONICAL, PREDICTED
from autosync.search.space import POLICY_PARAM, SPACE_DIR, load_space
from autosync.search.strategies.confirm import REFERENCE, Candidate, RunStore, confirm, how_it_held
from autosync.search.strategies.portfolio import (
    FAMILY_TRIALS, contenders, family_standing, fit_to_budget, next_family, next_preset, portfolio_policies,
    portfolio_rounds, untried_point,
)
from autosync.search.strategies.samplers import make_sampler, sampler_for
from autosync.search.study.trials import budget_used
from autosync.search.tune import tune
from tests.conftest import small_job, tune_request

N = 8
FAST = 5  # the job's fast workers (`autosync.core.arrivals.fast_workers`), for the portfolio's `fast_workers` setting
JOB = small_job(cluster__n_workers=N)
POLICY_SPACE = load_space(SPACE_DIR / "policy.yaml", N)


def _time(policy: dict) -> float:
    """A job where ASP with a staleness-scaled step is the fastest policy and ASP with a fixed step misses
    the target (the stragglers family's shape): every other family ends between 1.3x and 3x slower."""
    name, params = policy["policy"], policy["params"]
    if name == "asp":
        return 500.0 if params["lr_rule"] == "fixed" else 40.0 if params["lr_rule"] == "sqrt_staleness" else 45.0
    if name == "backup":
        return 52.0 + 3 * abs(params["k"] - 4) + (0 if params["lr_rule"] == "fixed" else 4)
    return {"bsp": 120.0, "ssp": 70.0 + params.get("staleness", 0), "dbw": 80.0, "bdbw": 90.0,
            "sync_switch": 100.0, "dana_slim": 75.0, "dana_zero": 74.0, "lwp": 76.0, "dana_dc": 78.0,
            "lbbsp": 110.0, "local_sgd": 85.0, "adacomm": 88.0, "diloco": 82.0, "async_local_sgd": 72.0,
            "easgd": 95.0}[name]


def _search(sampler: str, seed: int, trials: int = 20, time=None) -> optuna.Study:
    """The first trials as a tune queues them (BSP and ASP; under the portfolio search BSP, then the
    portfolio's first round fitted to the budget), then the sampler's, on `time` (`_time`). BSP counts no
    trial, as in a tune (its reference answers it)."""
    time = time or _time
    study = optuna.create_study(sampler=make_sampler(sampler, seed, POLICY_SPACE, False, trials, N, FAST))
    bsp = {"policy": "bsp", "params": {}}
    first = [bsp, {"policy": "asp", "params": {"lr_rule": "fixed"}}]
    if sampler == "portfolio":
        first = [bsp] + fit_to_budget([p for p in portfolio_rounds(portfolio_policies(POLICY_SPACE, N))[0]
                                       if p != bsp], trials)
    for policy in first:
        study.enqueue_trial(POLICY_SPACE.trial_params(policy))
    study.optimize(lambda trial: time(POLICY_SPACE.suggest(trial)), n_trials=trials + 1)
    return study


def _found_best_asp(study: optuna.Study) -> bool:
    return study.best_value == 40.0


def test_tpe_alone_loses_the_asp_branch_on_some_seeds_and_the_portfolio_never_does():
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    tpe = [_found_best_asp(_search("tpe", seed)) for seed in range(5)]
    portfolio = [_found_best_asp(_search("portfolio", seed)) for seed in range(5)]
    assert not all(tpe)  # ASP (fixed) misses first, and TPE draws the branch too rarely to find its best child
    assert all(portfolio)


def test_the_portfolio_first_round_is_one_setting_per_family_and_leaves_trials_to_the_families():
    first, second = portfolio_rounds(portfolio_policies(POLICY_SPACE, N))
    assert [p["policy"] for p in first] == list(dict.fromkeys(p["policy"] for p in first + second))
    assert len(first) == len(POLICY_SPACE.policies) and {p["policy"] for p in second} < set(POLICY_SPACE.policies)
    assert fit_to_budget(first, 20) == first[:20 - FAMILY_TRIALS]
    bsp_free = fit_to_budget(first, 10, lambda p: p["policy"] != "bsp")
    assert sum(p["policy"] != "bsp" for p in bsp_free) == 10 - FAMILY_TRIALS
    assert fit_to_budget(first, 3) == []


def _race_time(policy: dict) -> float:
    """A job with a known answer: backup k = its fast workers under `linear` (k = 5 on 8 workers), a
    second-round setting, is the fastest (30 s); the first round's backup setting (k = n/4 + 2 = 4, sqrt) takes 45 s and
    ASP with a staleness-scaled step 40 s, so backup can still win after the first round; DBW and
    Sync-Switch, whose second-round settings would be as fast as their first (80 s, 100 s), cannot."""
    name, params = policy["policy"], policy["params"]
    if name == "backup":
        return 30.0 if (params["k"], params["lr_rule"]) == (5, "linear") else 45.0 + abs(params["k"] - 4)
    return _time(policy)


def test_the_race_runs_a_second_setting_only_where_the_family_can_still_win_and_finds_the_answer():
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    for seed in range(3):
        study = _search("portfolio", seed, time=_race_time)
        assert study.best_value == 30.0, seed  # the family that can win gets its second-round settings
        ran = [POLICY_SPACE.suggest(optuna.trial.FixedTrial(t.params)) for t in study.trials]
        assert {"policy": "dbw", "params": {"window": 20, "lr_rule": "linear"}} not in ran  # cannot win
        assert not any(p["policy"] == "sync_switch" and p["params"].get("lr_rule") == "sqrt" for p in ran)
        assert {"policy": "backup", "params": {"k": 5, "lr_rule": "linear"}} in ran  # backup's second round


def _trial(policy: dict, value: float | None, state: str = "COMPLETE", pruned_at: float | None = None,
           attrs: dict | None = None):
    params = POLICY_SPACE.trial_params(policy)
    distributions = POLICY_SPACE.distributions(params)
    kwargs = {"state": getattr(optuna.trial.TrialState, state), "params": params, "distributions": distributions,
              "user_attrs": {"policy": policy, **(attrs or {})}}
    if state == "COMPLETE":
        kwargs["value"] = value
    if pruned_at is not None:
        kwargs["intermediate_values"] = {3: pruned_at}
    return optuna.trial.create_trial(**kwargs)


def test_the_race_drops_a_family_that_cannot_win_and_keeps_each_that_can():
    """Known answers: backup's best is 50 s, ASP's best child 60 s (its first child missed the target, 500 s),
    DBW's only trial was stopped on its pace at a predicted 200 s, B-DBW's at its bound with a predicted
    130 s, BSP has one point, tried; families within 1.5x of the best take the free trials, the leader every
    other one."""
    study = optuna.create_study()
    for policy, value, state, pruned in [
            ({"policy": "bsp", "params": {}}, 120.0, "COMPLETE", None),
            ({"policy": "asp", "params": {"lr_rule": "fixed"}}, 500.0, "COMPLETE", None),
            ({"policy": "asp", "params": {"lr_rule": "staleness"}}, 60.0, "COMPLETE", None),
            ({"policy": "backup", "params": {"k": 2, "lr_rule": "fixed"}}, 50.0, "COMPLETE", None),
            ({"policy": "backup", "params": {"k": 6, "lr_rule": "fixed"}}, None, "PRUNED", 52.0),
            ({"policy": "dbw", "params": {"window": 20, "lr_rule": "fixed"}}, None, "PRUNED", 200.0),
            ({"policy": "bdbw", "params": {"lr_rule": "fixed"}}, None, "PRUNED", 51.0)]:  # predicted: 130 s
        study.add_trial(_trial(policy, value, state, pruned, {PREDICTED: 130.0} if policy["policy"] == "bdbw" else {}))
    families = POLICY_SPACE.policies
    standing = family_standing(study.trials, families)
    assert standing == {"bsp": 120.0, "asp": 60.0, "backup": 50.0, "dbw": 200.0, "bdbw": 130.0}
    assert contenders(standing) == ["backup", "asp"]
    assert next_family(study, POLICY_SPACE, len(study.trials)) == "ssp"  # a family not tried yet comes first
    for family in families:
        if family not in standing:
            study.add_trial(_trial(_any_point(family), 300.0))
    picks = []
    for _ in range(6):
        family = next_family(study, POLICY_SPACE, len(study.trials))
        picks.append(family)
        study.add_trial(_trial(_any_point(family, len(study.trials)), 58.0 if family == "asp" else 55.0))
    assert set(picks) == {"backup", "asp"} and picks.count("backup") >= picks.count("asp")  # dbw cannot win


def test_once_the_leading_family_is_fully_tried_the_trials_go_to_the_next_families():
    """ASP's three rules all tried and fastest; SSP 3x slower: the next trial searches SSP, not ASP again."""
    study = optuna.create_study()
    for rule, value in (("sqrt_staleness", 20.0), ("staleness", 25.0), ("fixed", 28.0)):
        study.add_trial(_trial({"policy": "asp", "params": {"lr_rule": rule}}, value))
    study.add_trial(_trial({"policy": "ssp", "params": {"staleness": 3}}, 60.0))
    two = dataclasses.replace(POLICY_SPACE, dimensions={f: POLICY_SPACE.dimensions[f] for f in ("asp", "ssp")},
                              constants={f: POLICY_SPACE.constants[f] for f in ("asp", "ssp")})
    assert contenders(family_standing(study.trials, ["asp", "ssp"])) == ["asp"]
    assert next_family(study, two, len(study.trials)) == "ssp"


def _any_point(family: str, salt: int = 0) -> dict:
    """A point of `family`'s sub-space (the `salt`-th of a discrete one, the first of a continuous one)."""
    dims = POLICY_SPACE.dimensions[family]
    params = dict(POLICY_SPACE.constants[family])
    for i, (name, dim) in enumerate(dims.items()):
        if dim.type == "categorical":
            params[name] = dim.choices[(salt + i) % len(dim.choices)]
        elif dim.type == "int":
            params[name] = int(dim.low) + salt % (int(dim.high) - int(dim.low) + 1)
        else:
            params[name] = dim.low
    return {"policy": family, "params": params}


def test_auto_is_the_race_on_the_policy_space_and_tpe_elsewhere():
    assert sampler_for("auto", POLICY_SPACE) == "race"
    assert sampler_for("auto", load_space(SPACE_DIR / "static_k.yaml", N)) == "tpe"
    assert {p["policy"] for p in portfolio_policies(POLICY_SPACE, N)} == set(POLICY_SPACE.policies)
    shares = [p["params"]["k"] for p in portfolio_policies(POLICY_SPACE, N) if p["policy"] == "backup"]
    assert shares and all(1 <= k <= N for k in shares)


def test_the_shipped_portfolio_is_the_one_chosen_from_the_committed_reports():
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[4] / "results" / "portfolio" / "choose.py"
    proc = subprocess.run([sys.executable, str(script), "--check"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.slow
def test_no_trial_slot_goes_to_an_answered_point(tmp_path):
    """On 3 workers static_k has 5 distinct policies (k = 3 under either rule is BSP); 4 trials train 4 of them,
    and every proposal of a point already answered (BSP's reference, a twin) takes no slot."""
    job = small_job(cluster__n_workers=3)
    space = load_space(SPACE_DIR / "static_k.yaml", 3)
    outcome = tune(tune_request(job, space, n_trials=4, storage=f"sqlite:///{tmp_path / 's.db'}",
                                patience=0, seed=1))
    trials = [t for t in outcome.study.trials if t.state.is_finished() and "full_budget_check_of" not in t.user_attrs]
    counted = [t for t in trials if not t.user_attrs.get(ANSWERED)]
    answered = [t for t in trials if t.user_attrs.get(ANSWERED)]
    assert len(counted) == budget_used(outcome.study)[0] == 4
    keys = [json.dumps(t.user_attrs[CANONICAL], sort_keys=True) for t in counted]
    assert len(set(keys)) == 4  # four distinct policies trained or pruned
    assert answered and all("same_as_trial" in t.user_attrs for t in answered)


def test_an_answer_that_misses_on_a_fresh_seed_is_replaced_and_the_output_says_so(tmp_path):
    """The stored runs of an interrupted confirmation (the search's best missed the target on seed 4, the
    runner-up reached it): the runner-up answers, nothing is trained, and the line says why."""
    job = small_job()
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 's.db'}")
    store = RunStore(study, [])
    fast = {"policy": "asp", "params": {"lr_rule": "fixed"}}
    steady = {"policy": "backup", "params": {"k": 3, "lr_rule": "fixed"}}
    seed = job.seed + 1
    from autosync.search.objective import canonical_on

    def stored(policy: dict, time: float | None) -> None:
        run = {"time_to_target": time if time is not None else 2 * 40.0, "final_metric": 0.8,
               "reached": int(time is not None), "runs": 1, "virtual_seconds": 10.0}
        store.put(RunStore.identity(canonical_on(policy, job), seed, 2.0, job), run)

    stored(fast, None)
    stored(steady, 30.0)
    stored({"policy": "bsp", "params": {}}, 60.0)  # not read: BSP keeps its reference run
    plan = [Candidate(fast, "trial 3", 20.0, 0.8), Candidate(steady, "trial 5", 28.0, 0.8)]
    result = confirm(job, 2, plan, {"time_to_target": 58.0, "final_metric": 0.81}, store, 1, 1, 2.0, 0.01)
    assert result.trained_virtual_seconds == 0.0
    assert result.winner == steady and result.winner_time == pytest.approx(29.0)
    assert result.rows[0]["missed_seeds"] == [seed] and not result.rows[0]["feasible"]
    assert result.bsp_time == pytest.approx(58.0)
    line = how_it_held(result.to_dict(), lambda p: p["policy"])
    assert line.startswith("the answer was replaced: the search's best asp missed the target on seed 4")
    assert "backup 29.0 s mean over seeds 3, 4" in line
    assert next(r for r in result.rows if r["source"] == REFERENCE)["time_to_target"] == pytest.approx(58.0)


@pytest.mark.slow
def test_candidates_run_on_the_new_seed_and_a_loser_stops_behind_the_leader(tmp_path):
    """Real runs: the two candidates are run on the new seed, and no more (leaders closer than the spread
    between seeds are reported tied); one too slow to catch the leader's mean stops at the bound, and the
    progress reaches its total."""
    job = small_job(budget={"max_updates": 30})
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 's.db'}")
    a, b = {"policy": "backup", "params": {"k": 3, "lr_rule": "fixed"}}, {"policy": "asp", "params": {"lr_rule": "fixed"}}
    score = {p["policy"]: evaluate(job, p, [job.seed], stop_at_target=True) for p in (a, b)}
    plan = [Candidate(p, f"trial {i}", score[p["policy"]]["time_to_target"], score[p["policy"]]["final_metric"])
            for i, p in enumerate((a, b))]
    bsp = evaluate(job, {"policy": "bsp", "params": {}}, [job.seed])
    progress = []
    result = confirm(job, 2, plan, bsp, RunStore(study, []), 1, 1, 2.0, 0.01,
                     on_run=lambda done, total: progress.append((done, total)))
    assert result.seeds == [job.seed, job.seed + 1]
    assert progress and progress[-1][0] == progress[-1][1] <= 2
    for row in result.rows:
        if row["source"] == REFERENCE:  # BSP keeps its reference run
            assert row["seed_times"] == [bsp["time_to_target"]]
            continue
        assert row["behind_at"] is not None or len(row["seed_times"]) >= 2 or row["missed_seeds"] or row["reason"]
    assert result.winner is not None


def test_a_family_turn_never_runs_a_point_already_run():
    """TPE inside a family with few trials peaks on its best point and proposes it again (3-4 repeats in 31
    trials of this search before); the family's turn takes the untried point nearest the proposal instead."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    for seed in range(3):
        study = _search("portfolio", seed, trials=30, time=_race_time)
        keys = [json.dumps(t.params, sort_keys=True) for t in study.trials]
        assert len(keys) == len(set(keys)), seed
        assert study.best_value == 30.0


def test_the_untried_point_nearest_the_proposal():
    rng = np.random.RandomState(0)
    tried = [POLICY_SPACE.trial_params({"policy": "backup", "params": {"k": k, "lr_rule": "fixed"}}) for k in (2, 3)]
    proposal = {"backup.k": 2, "backup.lr_rule": "fixed"}
    assert untried_point(POLICY_SPACE, "backup", {"backup.k": 4, "backup.lr_rule": "sqrt"}, tried, rng) \
        == {POLICY_PARAM: "backup", "backup.k": 4, "backup.lr_rule": "sqrt"}  # untried: the proposal itself
    assert untried_point(POLICY_SPACE, "backup", proposal, tried, rng)["backup.k"] == 1  # k: 1/7 away, a rule: 1
    nearest = {untried_point(POLICY_SPACE, "backup", proposal, tried[:1], np.random.RandomState(s))["backup.k"]
               for s in range(20)}
    assert nearest == {1, 3}  # equally near: drawn
    every = [POLICY_SPACE.trial_params({"policy": "asp", "params": {"lr_rule": r}})
             for r in ("fixed", "sqrt_staleness", "staleness")]
    assert untried_point(POLICY_SPACE, "asp", {}, every, rng) is None
    assert untried_point(POLICY_SPACE, "easgd", {}, [], rng) is None  # a continuous family: TPE's proposal stands


DIVERGED = {"fail_reason": "diverged at update 40"}


def test_a_family_whose_first_setting_diverged_runs_its_next_setting():
    """The fleet family's case: backup's first setting diverged, so the family has no time; its next
    portfolio setting runs before the leader's turns, and a family with no setting left is passed over."""
    study = optuna.create_study()
    for family in POLICY_SPACE.policies:
        if family not in ("backup", "ssp"):
            study.add_trial(_trial(_any_point(family), 30.0 if family == "asp" else 60.0))
    settings = [p for p in portfolio_policies(POLICY_SPACE, N) if p["policy"] == "backup"]
    study.add_trial(_trial(settings[0], None, "FAIL", attrs=DIVERGED))
    study.add_trial(_trial({"policy": "ssp", "params": {"staleness": 3}}, None, "FAIL", attrs=DIVERGED))
    presets = [POLICY_SPACE.trial_params(p) for p in portfolio_policies(POLICY_SPACE, N)]
    assert next_family(study, POLICY_SPACE, len(study.trials), 20) == "asp"  # without presets: the leader
    assert next_family(study, POLICY_SPACE, len(study.trials), 20, presets) == "backup"
    assert next_preset(study, "backup", presets, len(study.trials)) == POLICY_SPACE.trial_params(settings[1])
    for setting in settings[1:]:
        study.add_trial(_trial(setting, None, "FAIL", attrs=DIVERGED))
    assert next_family(study, POLICY_SPACE, len(study.trials), 20, presets) == "asp"  # none left to try


def test_a_fast_workers_setting_is_the_jobs_fast_workers_and_the_tune_reads_them_from_its_cluster():
    """`k=fast_workers` resolves to the job's fast workers (`autosync.core.arrivals.fast_workers`): 3 of 8
    where 5 workers are 2.5x slower; the static-k family's second setting runs there under `linear`."""
    settings = [p for p in portfolio_policies(POLICY_SPACE, N, FAST) if p["policy"] == "backup"]
    assert {"policy": "backup", "params": {"k": FAST, "lr_rule": "linear"}} == settings[1]
    job = small_job(cluster__n_workers=N, cluster__round_trip={"kind": "deterministic"},
                    cluster__speed_factors=[1.0] * 3 + [0.4] * 5)
    assert tune_request(job, space=POLICY_SPACE).fast_workers == 3
