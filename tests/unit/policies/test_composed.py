"""Composed policies: each seed policy is a composition and runs identically; forbidden combinations are
refused with their rule; the `composed` search space samples only allowed combinations."""

from __future__ import annotations

import json
import re

import optuna
import pytest
import torch

from autosync.catalog import POLICIES, make_policy, split_policy_spec
from autosync.engine import simulate
from autosync.core.errors import UserError
from autosync.engine.drivers import ProcessDriver
from autosync.catalog import label_of, parse_policy_spec
from autosync.policies import Composed, check_composition, composition_of
from autosync.search.space import load_space, resolve_space_path
from autosync.workloads.workload import Workload
from tests.conftest import autosync, no_traceback, per_worker_run, small_job

JOB = small_job(budget={"max_updates": 40})
SEEDS = [("bsp", {}), ("asp", {}), ("ssp", {"staleness": 1}), ("backup", {"k": 3}),
         ("backup", {"k": 2, "lr_rule": "proportional"}), ("dbw", {}), ("dbw", {"window": 5}), ("bdbw", {}),
         ("lbbsp", {}), ("lbbsp", {"mode": "cpu"}), ("lbbsp", {"mode": "gpu"}), ("sync_switch", {"switch_at": 0.3}),
         ("sync_switch", {"stragglers": "elastic"}), ("sync_switch", {"stragglers": "greedy", "config": "none"}),
         ("nag_asgd", {}), ("multi_asgd", {}), ("lwp", {}), ("dc_asgd", {"dc_lambda": 1.0}), ("dana_zero", {}),
         ("dana_slim", {}), ("dana_dc", {})]


@pytest.mark.slow
@pytest.mark.parametrize("name, params", SEEDS, ids=[f"{n}{p or ''}" for n, p in SEEDS])
def test_every_seed_policy_is_a_composition_that_runs_identically(name, params):
    seed = make_policy(name, params)
    slots = composition_of(seed)
    assert slots is not None
    composed = make_policy("compose", slots)
    a, b = simulate(JOB, seed), simulate(JOB, composed)
    assert torch.equal(a.final_params, b.final_params) and a.trace.arrivals == b.trace.arrivals
    assert composed.canonical(4) == seed.canonical(4)  # a search trains the class once


def test_every_named_policy_but_the_static_split_has_its_composition():
    missing = [name for name, cls in POLICIES.items() if name not in ("split", "compose")
               and composition_of(cls()) is None]
    assert missing == []
    assert composition_of(make_policy("dbw", {"beta": 1.5})) is None  # a non-default estimator is no preset


@pytest.mark.parametrize("slots, rule", [
    ({"barrier": "dbw", "update": "dana_slim"}, r"update dana_slim applies one gradient per update .* needs barrier "
                                                r"asp or ssp.* but got barrier=dbw"),
    ({"barrier": "bsp", "update": "dc_asgd"}, r"but got barrier=bsp"),
    ({"schedule": "greedy", "update": "dana_zero"}, r"schedule greedy switches back to BSP"),
    ({"barrier": "ssp", "schedule": "sync_switch"}, r"schedule sync_switch starts with BSP .* but got barrier=ssp"),
    ({"barrier": "asp", "k": 3}, r"k is a parameter of barrier backup, but got k=3 with barrier=asp"),
    ({"switch_at": 0.5}, r"switch_at is a parameter of schedule sync_switch or greedy or elastic"),
    ({"update": "adam"}, r"update must be one of \[.*\], but got update='adam'"),
])
def test_combinations_the_papers_rule_out_are_refused_with_the_rule(slots, rule):
    with pytest.raises(ValueError, match=rule):
        check_composition(Composed(**slots))


def test_a_refused_composition_is_one_line_with_exit_2(tmp_path):
    out = autosync("run", "--policy", "compose", "--param", "barrier=dbw", "--param", "update=dana_slim", cwd=tmp_path)
    no_traceback(out)
    assert out.returncode == 2 and out.stderr.strip().startswith("error: policy compose: update dana_slim")


@pytest.mark.slow
def test_new_compositions_run_and_use_each_slot():
    """SSP with DANA-Slim's look-ahead; Sync-Switch whose ASP phase is DANA-Zero, with LB-BSP batches before."""
    ssp_dana = simulate(JOB, make_policy("compose", {"barrier": "ssp", "staleness": 1, "update": "dana_slim"}))
    assert ssp_dana.trace.extras.get("gap") and max(r[0] for r in ssp_dana.trace.updates) == 40
    job = JOB.model_copy(update={"cluster": JOB.cluster.model_copy(update={"speed_factors": [1.0, 1.0, 1.0, 0.3]})})
    switch = simulate(job, make_policy("compose", {"schedule": "sync_switch", "switch_at": 0.5, "batch": "lbbsp",
                                                   "update": "dana_zero"}))
    phases = [v for _, v in switch.trace.extras["phase_bsp"]]
    assert phases[0] == 1 and phases[-1] == 0  # BSP first, ASP after the switch
    gaps = dict(switch.trace.extras["gap"])  # DANA's rule is traced from the update that switched on
    assert min(gaps) == phases.index(0)  # (1-based update number of the last BSP update)
    sizes = [u[8] for u in switch.trace.updates if len(u[8]) == 4]
    assert any(s != sizes[0] for s in sizes)  # LB-BSP moved samples to the fast workers before the switch


@pytest.mark.parametrize("slots", [{"barrier": "ssp", "staleness": 1}, {"barrier": "asp", "update": "dana_slim"},
                                   {"barrier": "backup", "k": 3}, {"barrier": "dbw"}],
                         ids=["ssp", "asp-dana_slim", "backup", "dbw"])
@pytest.mark.slow
def test_lbbsp_batches_move_to_the_fast_workers_under_every_barrier(slots):
    """Worker 3 runs at 0.3x: LB-BSP gives it fewer samples whether its gradients are applied alone (ssp,
    asp) or discarded as a straggler's (backup 3 of 4, dbw)."""
    job = JOB.model_copy(update={"cluster": JOB.cluster.model_copy(update={"speed_factors": [1.0, 1.0, 1.0, 0.3]}),
                                 "budget": JOB.budget.model_copy(update={"max_updates": 120})})
    run = simulate(job, make_policy("compose", {**slots, "batch": "lbbsp", "mode": "cpu"}))
    newest = {}
    for worker, size in zip(run.trace.column("arrivals", "worker"), run.trace.column("arrivals", "batch_size")):
        newest[worker] = size
    assert newest[3] < min(newest[w] for w in range(3)) < job.workload.batch_size * 2
    assert run.metrics["batch_spread"] > 1.5


def test_lbbsp_under_bsp_re_balances_at_every_barrier():
    """Under BSP a round is one iteration: the cpu mode's sizes change after every update once NARX's
    warm-up (EMA until then) has a speed for every worker."""
    job = JOB.model_copy(update={"cluster": JOB.cluster.model_copy(update={"speed_factors": [1.0, 1.0, 1.0, 0.3]})})
    sizes = [tuple(u[8]) for u in simulate(job, make_policy("lbbsp", {"mode": "cpu"})).trace.updates]
    assert sizes[0] == (JOB.workload.batch_size,) * 4 and sizes[1] != sizes[0]


@pytest.mark.parametrize("slots", [{"schedule": "elastic", "switch_at": 0.3, "update": "dana_slim"},
                                   {"barrier": "ssp", "staleness": 1, "batch": "lbbsp", "mode": "cpu"}],
                         ids=["elastic-dana_slim", "ssp-lbbsp"])
@pytest.mark.slow
@pytest.mark.processes
def test_a_composition_on_worker_processes_is_the_in_process_run_bit_for_bit(slots):
    job = JOB.model_copy(update={"cluster": JOB.cluster.model_copy(update={"speed_factors": [1.0, 1.0, 1.0, 0.3]})})
    policy = make_policy("compose", slots)
    workload = Workload(job)
    reference = per_worker_run(job, policy, workload)
    real = simulate(job, policy, workload=workload, driver=ProcessDriver(workload, processes=2))
    assert torch.equal(real.final_params, reference.final_params)


def test_labels_read_as_the_composition_and_specs_parse():
    spec = parse_policy_spec("compose:barrier=ssp,staleness=2,update=dana_slim", 4)
    assert label_of(spec) == "compose(barrier=ssp,update=dana_slim,staleness=2)"
    assert label_of({"policy": "compose", "params": Composed().params()}) == "compose(barrier=bsp)"
    assert parse_policy_spec(label_of(spec), 4) == spec  # a leaderboard's label is a spec too
    assert parse_policy_spec("compose(barrier=ssp, staleness=2, update=dana_slim)", 4) == spec
    dbw = parse_policy_spec("dbw(window=5,robust=False)", 4)
    assert dbw["params"]["robust"] is False and parse_policy_spec(label_of(dbw), 4) == dbw
    assert split_policy_spec("backup:lr_rule=f(x)") == ("backup", {"lr_rule": "f(x)"})  # the colon form
    assert split_policy_spec("compose(barrier='ssp', staleness=2)") == ("compose", {"barrier": "ssp", "staleness": 2})
    assert split_policy_spec("split(fractions=[0.5, 0.5])") == ("split", {"fractions": [0.5, 0.5]})
    assert split_policy_spec("bsp()") == split_policy_spec("bsp:") == split_policy_spec("bsp") == ("bsp", {})
    for bad, rule in (("backup(k=8))", "must look like name"), ("backup(k=1, k=2)", "given once"),
                      ("bsp(=1)", "must look like key=value"), ("backup:k=2,,", "an empty one between commas"),
                      ("backup:k=2,", "an empty one between commas"), ("compose(barrier=ssp,)", "an empty one")):
        with pytest.raises(UserError, match=re.escape(rule)):
            split_policy_spec(bad)


@pytest.mark.slow
def test_one_spec_names_a_composition_for_run_as_for_leaderboard(tmp_path):
    """`run --policy` takes the spec in either form, and gives the run `--param` gives: the three option sets
    make one policy (what `autosync run` trains, `api.run_setup`), and the command trains it."""
    from autosync import api
    from autosync.options import RunOptions

    path = tmp_path / "job.yaml"
    path.write_text(JOB.model_dump_json())
    forms = [RunOptions(policy="compose(barrier=ssp, staleness=1, update=dana_slim)"),
             RunOptions(policy="compose:barrier=ssp,staleness=1,update=dana_slim"),
             RunOptions(policy="compose", params=["barrier=ssp", "staleness=1", "update=dana_slim"])]
    made = [api.run_setup(path, options)[1] for options in forms]
    assert made[0] == made[1] == made[2] == make_policy("compose", {"barrier": "ssp", "staleness": 1,
                                                                    "update": "dana_slim"})
    out = autosync("run", str(path), "--policy", "compose", "--param", "barrier=ssp", "--param", "staleness=1",
                   "--param", "update=dana_slim", "--json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["policy"] == made[0].to_dict()
    for bad, rule in (("compose(barrier=dbw, update=dana_slim)", "error: policy compose: update dana_slim"),
                      ("compose(barrier=dbw", "error: --policy 'compose(barrier=dbw' must look like"),
                      ("compose(barrier)", "error: --policy 'compose(barrier)': each parameter must look like "
                                           "key=value, but got 'barrier'")):
        out = autosync("run", str(path), "--policy", bad, cwd=tmp_path)
        no_traceback(out)
        assert out.returncode == 2 and out.stderr.strip().startswith(rule), out.stderr
    out = autosync("leaderboard", str(path), "--policies", "compose:barrier=asp,schedule=elastic", cwd=tmp_path)
    no_traceback(out)
    assert out.returncode == 2 and "schedule elastic starts with BSP" in out.stderr, out.stderr


def test_a_search_space_that_can_sample_a_refused_composition_is_refused_with_the_rule(tmp_path):
    """In YAML too: a constant, or a choice, or a number outside its slot's choice."""
    cases = {"update: dana_slim": "compose(barrier=bsp,update=dana_slim), which is refused: update dana_slim "
                                  "applies one gradient per update",
             "update: {type: categorical, choices: [sgd, dana_zero]}": "compose(barrier=bsp,update=dana_zero)",
             "window: {type: int, low: 2, high: 10}": "which is refused: window is a parameter of barrier dbw"}
    for line, problem in cases.items():
        path = tmp_path / "space.yaml"
        path.write_text("name: mine\npolicies:\n  compose:\n    barrier: {type: categorical, choices: [bsp, asp]}\n"
                        f"    {line}\n")
        out = autosync("tune", "--space", str(path), "--n-trials", "1", cwd=tmp_path)
        no_traceback(out)
        assert out.returncode == 2 and f"{path}: policies.compose can sample " in out.stderr, out.stderr
        assert problem in out.stderr, out.stderr
        assert not (tmp_path / "results").exists()  # refused before any study or run
    allowed = tmp_path / "allowed.yaml"  # the same slots, each parameter where its choice is made
    allowed.write_text("name: ok\npolicies:\n  compose:\n    barrier: {type: categorical, choices: [bsp, asp]}\n"
                       "    update: {type: categorical, choices: [sgd, dana_zero], when: {barrier: [asp]}}\n")
    assert load_space(allowed, 4).policies == ["compose"]


def test_the_composed_space_samples_only_allowed_compositions_and_counts_its_points():
    space = load_space(resolve_space_path("composed", "static_k"), 8)
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    seen = set()
    for _ in range(150):
        trial = study.ask()
        policy = make_policy("compose", space.suggest(trial)["params"])
        check_composition(policy)
        seen.add((policy.barrier, policy.batch, policy.update, policy.schedule))
        study.tell(trial, 1.0)
    assert {s[0] for s in seen} == {"bsp", "backup", "dbw", "bdbw", "ssp", "asp"}
    assert any(s[2] != "sgd" and s[3] != "none" for s in seen)  # DANA in Sync-Switch's ASP phase
    assert space.size() is None  # dana_dc's lambda is continuous, as in the policy space


def test_a_conditional_discrete_space_counts_only_the_points_its_conditions_allow(tmp_path):
    path = tmp_path / "small.yaml"
    path.write_text("policies:\n  compose:\n    barrier: {type: categorical, choices: [bsp, backup, ssp]}\n"
                    "    k: {type: int, low: 1, high: n_workers, when: {barrier: [backup]}}\n"
                    "    staleness: {type: int, low: 0, high: 2, when: {barrier: [ssp]}}\n"
                    "    batch: {type: categorical, choices: [equal, lbbsp], when: [{barrier: [ssp]}, {k: [1]}]}\n")
    space = load_space(path, 4)
    # bsp 1; backup: k = 1 with 2 batch sizings, k = 2..4 with none (3); ssp: 3 staleness x 2 sizings
    assert space.size() == 1 + (2 + 3) + 6
    space = load_space(resolve_space_path("composed", "static_k"), 8)
    assert space.trial_params({"policy": "compose", "params": {"barrier": "bsp"}}) == {
        "compose.barrier": "bsp", "compose.schedule": "none", "compose.local": "none", "compose.batch": "equal"}


def test_a_refused_composition_behind_a_number_s_condition_is_found(tmp_path):
    """backup with k = 2 (inside the range, named by the condition) samples DANA-Slim: refused."""
    path = tmp_path / "small.yaml"
    path.write_text("policies:\n  compose:\n    barrier: {type: categorical, choices: [bsp, backup, ssp]}\n"
                    "    k: {type: int, low: 1, high: n_workers, when: {barrier: [backup]}}\n"
                    "    update: {type: categorical, choices: [sgd, dana_slim], when: [{barrier: [ssp]}, {k: [2]}]}\n")
    with pytest.raises(Exception, match=r"can sample compose\(barrier=backup,update=dana_slim,k=2\), which is "
                                        r"refused: update dana_slim applies one gradient"):
        load_space(path, 4)


def test_numbers_are_tried_at_the_values_they_can_sample(tmp_path):
    """A range whose only value is the default dc_lambda = 2.0 does not make it look set (a step longer than
    the range is refused: test_reliability); a value between
    the ones a condition names is tried too (staleness 2 leaves barrier at bsp, where staleness is refused)."""
    path = tmp_path / "step.yaml"
    path.write_text("policies:\n  compose:\n    barrier: {type: categorical, choices: [bsp, asp]}\n"
                    "    dc_lambda: {type: float, low: 2.0, high: 2.0, step: 1.0}\n")
    assert load_space(path, 4).policies == ["compose"]
    path.write_text("policies:\n  compose:\n    staleness: {type: int, low: 1, high: 5}\n"
                    "    barrier: {type: categorical, choices: [ssp], when: {staleness: [1, 5]}}\n")
    with pytest.raises(Exception, match=r"can sample compose\(barrier=bsp,staleness=2\), which is refused"):
        load_space(path, 4)


def test_a_when_clause_must_name_an_earlier_parameter(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("policies:\n  compose:\n    k: {type: int, low: 1, high: 4, when: {barrier: [backup]}}\n"
                    "    barrier: {type: categorical, choices: [bsp, backup]}\n")
    with pytest.raises(Exception, match=r"policies.compose.k.when: must name parameters listed before k.*'barrier'"):
        load_space(path, 4)


def test_a_run_reports_its_staleness_and_batch_spread_for_the_leaderboard():
    bsp = simulate(JOB, make_policy("bsp")).metrics
    assert bsp["mean_staleness"] == 0.0 and bsp["batch_spread"] == 1.0
    ssp_dana = simulate(JOB, make_policy("compose", {"barrier": "ssp", "update": "dana_slim"})).metrics
    assert ssp_dana["mean_staleness"] > 0.5 and ssp_dana["batch_spread"] is None  # one gradient per update
    job = JOB.model_copy(update={"cluster": JOB.cluster.model_copy(update={"speed_factors": [1.0, 1.0, 1.0, 0.3]})})
    assert simulate(job, make_policy("lbbsp")).metrics["batch_spread"] > 1.5


def test_cross_paper_variants_add_one_strategy_of_another_paper_where_the_rules_allow_it():
    from autosync.policies import cross_paper_variants

    assert cross_paper_variants({"barrier": "dbw", "window": 5}) == [
        {"barrier": "dbw", "window": 5, "batch": "lbbsp"}]  # no asynchronous rule under DBW's barrier
    assert cross_paper_variants({"barrier": "asp"}) == [
        {"barrier": "asp", "batch": "lbbsp"}, {"barrier": "asp", "update": "dana_slim"}]
    assert cross_paper_variants({"schedule": "sync_switch", "switch_at": 0.25, "batch": "lbbsp"}) == [
        {"schedule": "sync_switch", "switch_at": 0.25, "batch": "lbbsp", "update": "dana_slim"}]
    assert cross_paper_variants({"barrier": "ssp", "batch": "lbbsp", "update": "dana_dc"}) == []
    for slots in ({"barrier": "dbw"}, {"barrier": "asp"}, {"schedule": "sync_switch"}, {"barrier": "bsp"}):
        for variant in cross_paper_variants(slots):
            check_composition(Composed(**variant))  # every variant is allowed
