"""The learning-rate rules of the synchronous policies: the step for k of n gradients aggregated."""

from __future__ import annotations

import math

import pytest

from autosync.catalog import make_policy
from autosync.engine import simulate
from autosync.engine.simulator import Simulator
from autosync.policies import BSP, BackupWorkers
from autosync.policies._barriers import LR_RULES, lr_factor
from tests.conftest import small_job

ETA = 0.1  # small_job's learning rate
JOB = small_job(budget={"max_updates": 30})


def test_each_rule_on_a_known_k_sequence():
    n = 16
    ks = [1, 4, 9, 16]
    assert [lr_factor("fixed", k, n) for k in ks] == [1.0] * 4
    assert [lr_factor("proportional", k, n) for k in ks] == [1 / 16, 4 / 16, 9 / 16, 1.0]
    assert [lr_factor("sqrt", k, n) for k in ks] == [1.0, 2.0, 3.0, 4.0]
    assert [lr_factor("linear", k, n) for k in ks] == [1.0, 4.0, 9.0, 16.0]
    assert set(LR_RULES) == {"fixed", "proportional", "sqrt", "linear"}


@pytest.mark.parametrize("rule", list(LR_RULES))
def test_backup_trains_with_the_rules_step(rule):
    k, n = 2, JOB.cluster.n_workers
    lrs = simulate(JOB, BackupWorkers(k=k, lr_rule=rule)).trace.column("updates", "lr")
    assert lrs == pytest.approx([ETA * lr_factor(rule, k, n)] * len(lrs))


def test_bsp_is_backup_k_n_only_under_the_rules_that_keep_eta_there():
    n = JOB.cluster.n_workers
    assert BackupWorkers(k=n, lr_rule="fixed").canonical(n) == BSP()
    assert BackupWorkers(k=n, lr_rule="proportional").canonical(n) == BSP()
    assert BackupWorkers(k=n, lr_rule="sqrt").canonical(n) == BackupWorkers(k=n, lr_rule="sqrt")
    lrs = simulate(JOB, BackupWorkers(k=n, lr_rule="linear")).trace.column("updates", "lr")
    assert lrs[0] == pytest.approx(ETA * n)


@pytest.mark.parametrize("rule", ["sqrt", "linear"])
def test_one_gradient_under_a_rule_that_scales_eta_by_k_is_one_gradient_at_eta(rule):
    """sqrt(1) = 1 = 1 x eta: backup k = 1 under "sqrt" or "linear" runs as k = 1 under "fixed", so a search
    trains the class once and a failed k = 1 is not repaired by itself."""
    n = JOB.cluster.n_workers
    assert BackupWorkers(k=1, lr_rule=rule).canonical(n) == BackupWorkers(k=1, lr_rule="fixed")
    assert BackupWorkers(k=2, lr_rule=rule).canonical(n) == BackupWorkers(k=2, lr_rule=rule)
    assert BackupWorkers(k=1, lr_rule="proportional").canonical(n) == BackupWorkers(k=1, lr_rule="proportional")
    ours, fixed = (simulate(JOB, BackupWorkers(k=1, lr_rule=r)).trace for r in (rule, "fixed"))
    for column in ("time", "loss", "lr"):
        assert ours.column("updates", column) == fixed.column("updates", column)


def test_lbbsp_aggregates_every_worker_so_its_rule_is_one_factor():
    n = JOB.cluster.n_workers
    for rule, factor in (("fixed", 1.0), ("proportional", 1.0), ("sqrt", math.sqrt(n)), ("linear", float(n))):
        lrs = simulate(JOB, make_policy("lbbsp", {"lr_rule": rule})).trace.column("updates", "lr")
        assert lrs == pytest.approx([ETA * factor] * len(lrs)), rule


@pytest.mark.parametrize("rule", ["fixed", "sqrt"])
def test_dbw_steps_with_the_rule_at_the_k_it_chose(rule):
    """Each update's step is eta times the rule's factor at the k aggregated; under the fixed rule every
    k has the job's eta, as the paper's estimators (eqs. 9-16) assume."""
    job = small_job(budget={"max_updates": 40})
    trace = simulate(job, make_policy("dbw", {"lr_rule": rule, "window": 3})).trace
    n = job.cluster.n_workers
    ks = trace.column("updates", "n_aggregated")
    lrs = trace.column("updates", "lr")
    assert lrs == pytest.approx([ETA * lr_factor(rule, k, n) for k in ks])
    if rule == "sqrt":
        assert len(set(ks)) > 1 or ks[0] > 1  # the rule moved the step at least once (k changes, or k > 1)


def test_an_unknown_rule_is_refused_with_the_choices():
    with pytest.raises(ValueError, match=r"lr_rule must be one of \['fixed', 'proportional', 'sqrt', 'linear'\]"):
        BackupWorkers(k=2, lr_rule="cubic").bind(4, 16)


@pytest.mark.parametrize("rule,factor", [("fixed", lambda tau: 1.0), ("sqrt_staleness", lambda tau: tau ** -0.5),
                                         ("staleness", lambda tau: 1.0 / tau)])
def test_asp_steps_each_gradient_by_the_rule_at_its_staleness(rule, factor):
    """Under ASP each update applies one gradient; its step is eta times the rule's factor at the updates
    made since that gradient's parameters were sent (at least 1)."""
    trace = simulate(JOB, make_policy("asp", {"lr_rule": rule})).trace
    stale = [max(1, s[0]) for s in trace.column("updates", "staleness")]
    assert max(stale) > 1  # the rule had something to act on
    assert trace.column("updates", "lr") == pytest.approx([ETA * factor(tau) for tau in stale])


def test_sync_switch_takes_a_rule_for_each_phase_and_the_paper_s_is_the_default():
    """BSP before the switch at the rule's factor for n gradients, ASP after it at the asynchronous rule's;
    by default BSP at n eta and ASP at eta (the configuration policy, sec. IV-C)."""
    n = JOB.cluster.n_workers

    def steps(params):
        trace = simulate(JOB, make_policy("sync_switch", {"switch_at": 0.5, **params})).trace
        phases = [value for _, value in trace.extras["phase_bsp"]]  # (update, value) per update
        stale = [max(1, s[0]) for s in trace.column("updates", "staleness")]
        return list(zip(phases, trace.column("updates", "lr"), stale))

    paper = steps({})
    assert {(bsp, round(lr / ETA, 9)) for bsp, lr, _ in paper} == {(1, float(n)), (0, 1.0)}
    for bsp, lr, tau in steps({"lr_rule": "sqrt", "asp_lr_rule": "sqrt_staleness"}):
        assert lr == pytest.approx(ETA * (math.sqrt(n) if bsp else tau ** -0.5))
    assert steps({"lr_rule": "linear"}) == paper  # the rule named is the configuration's own


def test_an_unknown_asynchronous_rule_is_refused_with_the_choices():
    with pytest.raises(ValueError, match=r"asp_lr_rule must be one of \['fixed', 'sqrt_staleness', 'staleness'\]"):
        make_policy("sync_switch", {"asp_lr_rule": "sqrt"}).bind(4, 16)


def _same_run(a, b) -> bool:
    ra, rb = simulate(JOB, a), simulate(JOB, b)
    return ra.trace.arrivals == rb.trace.arrivals and bool((ra.final_params == rb.final_params).all())


@pytest.mark.parametrize("params,form", [
    ({"config": "none", "lr_rule": "linear"}, {"config": "sync_switch", "lr_rule": None}),
    ({"config": "sync_switch", "lr_rule": "fixed"}, {"config": "none", "lr_rule": None}),
    ({"config": "sync_switch", "lr_rule": "proportional"}, {"config": "none", "lr_rule": None}),
    ({"config": "none", "lr_rule": "sqrt"}, {"config": "sync_switch", "lr_rule": "sqrt"}),
])
def test_sync_switch_s_explicit_rules_have_one_form_that_runs_alike(params, form):
    """`config` sets only the BSP phase's step: with a rule named it changes nothing, and the rules that give
    the configuration's step (eta, n eta over all n workers) are that configuration; the canonical form runs
    bit-identically, so a search trains each class once."""
    n = JOB.cluster.n_workers
    policy = make_policy("sync_switch", {"switch_at": 0.5, **params})
    canonical = policy.canonical(n)
    assert canonical == make_policy("sync_switch", {"switch_at": 0.5, **form})
    assert _same_run(policy, canonical)


def test_under_elastic_the_explicit_rules_stay_what_they_are():
    """Elastic BSP aggregates the group left, so "linear" and "proportional" differ from n eta and eta there."""
    n = JOB.cluster.n_workers
    for rule in ("linear", "proportional", "fixed"):
        policy = make_policy("sync_switch", {"stragglers": "elastic", "config": "none", "lr_rule": rule})
        assert policy.canonical(n).params()["lr_rule"] == rule


def test_lbbsp_s_proportional_rule_is_its_fixed_rule_and_a_composition_reaches_its_other_rules():
    """LB-BSP aggregates every worker, so proportional is fixed (one form, one run). Its rule is no preset
    parameter; the composed space reaches LB-BSP with a rule as backup k = n with that rule and LB-BSP's
    batches, which runs bit-identically."""
    from autosync.policies import Composed
    from autosync.policies._composed import composition_of

    n = JOB.cluster.n_workers
    proportional = make_policy("lbbsp", {"lr_rule": "proportional"})
    assert proportional.canonical(n) == make_policy("lbbsp", {"lr_rule": "fixed"})
    assert _same_run(proportional, make_policy("lbbsp", {}))
    sqrt = make_policy("lbbsp", {"lr_rule": "sqrt"})
    assert composition_of(sqrt) is None  # a standalone parameter: no composition carries it
    assert _same_run(sqrt, Composed(barrier="backup", k=n, lr_rule="sqrt", batch="lbbsp"))


def test_the_policy_space_searches_each_policy_s_rules_and_still_queues_the_paper_s_settings():
    """`policy` searches the rules of backup, DBW, B-DBW, LB-BSP, ASP and both Sync-Switch phases; a
    baseline at the paper's Sync-Switch (lr_rule None: the configuration's) is a point of it, not dropped."""
    import optuna

    from autosync.search.space import load_space, resolve_space_path

    space = load_space(resolve_space_path("policy", "policy"), 4)
    searched = {(policy, name) for policy, dims in space.dimensions.items() for name in dims if "lr_rule" in name}
    assert searched == {("backup", "lr_rule"), ("dbw", "lr_rule"), ("bdbw", "lr_rule"), ("lbbsp", "lr_rule"),
                        ("asp", "lr_rule"), ("sync_switch", "lr_rule"), ("sync_switch", "asp_lr_rule")}
    paper = {"policy": "sync_switch", "params": {"switch_at": 1.0, "config": "sync_switch"}}
    params = space.trial_params(paper)
    assert params is not None and params["sync_switch.lr_rule"] is None
    sampled = space.suggest(optuna.trial.FixedTrial(params))
    assert make_policy(sampled["policy"], sampled["params"]) == make_policy("sync_switch", paper["params"])


def test_a_composition_takes_the_rules_of_asp_and_of_both_sync_switch_phases():
    """`asp_lr_rule` composes: ASP under a rule is `asp:lr_rule=...` and Sync-Switch's schedule with one is
    `sync_switch:asp_lr_rule=...`, bit for bit, and with `bsp_lr_rule` too Sync-Switch paired at sqrt;
    DANA-Slim's look-ahead under ASP steps by the rule too."""
    from autosync.policies import Composed

    assert _same_run(Composed(barrier="asp", asp_lr_rule="staleness"), make_policy("asp", {"lr_rule": "staleness"}))
    assert _same_run(Composed(schedule="sync_switch", switch_at=0.5, asp_lr_rule="sqrt_staleness"),
                     make_policy("sync_switch", {"switch_at": 0.5, "asp_lr_rule": "sqrt_staleness"}))
    paired = Composed(schedule="sync_switch", switch_at=0.5, bsp_lr_rule="sqrt", asp_lr_rule="sqrt_staleness")
    assert paired.as_seed() == make_policy("sync_switch", {"switch_at": 0.5, "lr_rule": "sqrt",
                                                           "asp_lr_rule": "sqrt_staleness"})
    assert _same_run(paired, paired.as_seed())
    trace = simulate(JOB, Composed(barrier="asp", update="dana_slim", asp_lr_rule="staleness")).trace
    stale = [max(1, s[0]) for s in trace.column("updates", "staleness")]
    assert max(stale) > 1
    assert trace.column("updates", "lr") == pytest.approx([ETA / tau for tau in stale])


@pytest.mark.parametrize("rule", list(LR_RULES))
def test_dbw_gain_is_eq_16_at_the_rules_step_for_each_k_and_eq_16_itself_under_fixed(rule):
    """G_k of eq. (16) with eta_k = eta * factor(k): DBW's gains after its last update, recomputed from its
    own estimates (V, ||grad F||^2, L: eqs. 13-15) and the step the rule gives each k; under `fixed` every
    eta_k is the job's eta, which is eq. (16) as printed (one eta for every k)."""
    job = small_job(budget={"max_updates": 30}, workload__optimizer__momentum=0.0)
    sim = Simulator(job, make_policy("dbw", {"lr_rule": rule, "window": 3}))
    trace = sim.run().trace
    barrier = sim.strategies.barrier
    n = job.cluster.n_workers
    variance, grad_norm_sq, L = barrier.gain.averages()
    eta = trace.column("updates", "lr")[-1] / lr_factor(rule, trace.column("updates", "n_aggregated")[-1], n)
    assert eta == pytest.approx(ETA)
    steps = [ETA * lr_factor(rule, k, n) for k in range(1, n + 1)]
    eq16 = [s * grad_norm_sq - (L * s * s / 2) * (grad_norm_sq + variance / k) for k, s in enumerate(steps, 1)]
    assert trace.extras["gains"][-1][1] == pytest.approx(eq16)
    if rule == "fixed":
        assert eq16 == pytest.approx([(ETA - L * ETA ** 2 / 2) * grad_norm_sq - L * ETA ** 2 / 2 * variance / k
                                      for k in range(1, n + 1)])


def test_a_rule_runs_as_fixed_exactly_where_its_factor_on_eta_is_one():
    """`rule_as_run`, the one place both backup workers' and LB-BSP's canonical forms read it from."""
    from autosync.policies._barriers import rule_as_run

    n = JOB.cluster.n_workers
    assert [rule_as_run(r, 1, n) for r in ("fixed", "proportional", "sqrt", "linear")] == \
        ["fixed", "proportional", "fixed", "fixed"]
    assert [rule_as_run(r, n, n) for r in ("fixed", "proportional", "sqrt", "linear")] == \
        ["fixed", "fixed", "sqrt", "linear"]
    assert make_policy("lbbsp", {"lr_rule": "proportional"}).canonical(n) == make_policy("lbbsp", {"lr_rule": "fixed"})
    assert make_policy("lbbsp", {"lr_rule": "sqrt"}).canonical(n) == make_policy("lbbsp", {"lr_rule": "sqrt"})
