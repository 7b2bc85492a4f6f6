"""Local-update policies: local SGD, AdaComm, DiLoCo, asynchronous local SGD and EASGD (`autosync.policies._local`)."""

from __future__ import annotations

import math
import re

import pytest
import torch

from autosync.catalog import make_policy
from autosync.core.cluster import RoundTripModel
from autosync.engine import simulate
from autosync.engine.drivers import ProcessDriver
from autosync.engine.simulator import Simulator
from autosync.policies import composition_of
from autosync.workloads.workload import Workload
from tests.conftest import per_worker_run, small_job

JOB = small_job(budget={"max_updates": 30})
NO_MOMENTUM = small_job(budget={"max_updates": 30}, workload__optimizer={"lr": 0.1, "momentum": 0.0})
LOCAL = ["local_sgd", "adacomm", "diloco", "async_local_sgd", "easgd"]


def _same_run(a, b) -> None:
    assert torch.equal(a.final_params, b.final_params)
    assert a.trace.arrivals == b.trace.arrivals
    without_wall = lambda updates: [u[:2] + u[3:] for u in updates]  # noqa: E731
    assert without_wall(a.trace.updates) == without_wall(b.trace.updates)


@pytest.mark.parametrize("local,reference", [
    ({"local": "period", "period": 1}, ("bsp", {})),
    ({"barrier": "asp", "local": "period", "period": 1}, ("asp", {})),
    ({"barrier": "backup", "k": 3, "local": "period", "period": 1}, ("backup", {"k": 3})),
    ({"barrier": "ssp", "staleness": 1, "local": "speed", "period": 1}, ("ssp", {"staleness": 1})),
], ids=["bsp", "asp", "backup", "ssp"])
def test_one_local_step_with_the_identity_outer_step_is_the_existing_policy_bit_for_bit(local, reference):
    for job in (JOB, small_job(budget={"max_updates": 30}, workload__optimizer={"lr": 0.1, "weight_decay": 0.01})):
        a = simulate(job, make_policy("compose", local))
        b = simulate(job, make_policy(*reference))
        _same_run(a, b)
        assert a.metrics == b.metrics


def test_diloco_with_one_step_and_the_identity_outer_step_is_bsp_bit_for_bit():
    """outer_lr 1 and outer_momentum 0 make DiLoCo's outer step x - (eta u + 0 m): BSP's x - eta u, to the bit,
    on a job whose own optimizer has no momentum (the job's momentum is BSP's, not DiLoCo's)."""
    for job in (NO_MOMENTUM, small_job(budget={"max_updates": 30}, workload__optimizer={"lr": 0.1, "weight_decay": 0.01})):
        a = simulate(job, make_policy("diloco", {"period": 1, "outer_lr": 1.0, "outer_momentum": 0.0}))
        _same_run(a, simulate(job, make_policy("bsp")))
    moved = simulate(NO_MOMENTUM, make_policy("diloco", {"period": 1}))  # the paper's 0.7 and 0.9 are not BSP
    assert not torch.equal(moved.final_params, simulate(NO_MOMENTUM, make_policy("bsp")).final_params)


def test_a_local_sgd_of_period_one_is_bsp_as_its_canonical_form():
    assert make_policy("local_sgd", {"period": 1}).canonical(4).name == "bsp"
    assert make_policy("local_sgd", {"period": 1, "steps": "speed"}).canonical(4).name == "bsp"
    assert make_policy("local_sgd", {"period": 2}).canonical(4).name == "local_sgd"


def test_local_sgd_without_momentum_averages_the_workers_local_models():
    """Stich 2019, Algorithm 1: after H local steps the server's model is the mean of the workers' models; the run's
    parameters after one BSP round of H = 3 equal the mean of the n local SGD runs, each on its own batches."""
    job = NO_MOMENTUM.model_copy(update={"budget": NO_MOMENTUM.budget.model_copy(update={"max_updates": 1})})
    workload = Workload(job)
    result = simulate(job, make_policy("local_sgd", {"period": 3}), workload=workload)
    x0 = workload.init_params()
    models = []
    for w in range(job.cluster.n_workers):
        x = x0
        for j in range(3):
            batch = workload.batch_index(job.seed, w, j, job.workload.batch_size)
            params = workload.leaves(x)
            loss, _ = workload.train_loss(params, workload.data.x_train[batch], workload.data.y_train[batch], None)
            x = x - job.workload.optimizer.lr * workload.flat_gradient(loss, params)
        models.append(x)
    assert torch.allclose(result.final_params, torch.stack(models).mean(0), atol=1e-6)
    assert result.trace.updates[0][-1] == pytest.approx(4 * 3 * 16 / workload.data.n_train)  # H steps' samples


def test_the_clock_charges_h_steps_of_compute_and_one_round_trip_of_communication():
    job = small_job(cluster__round_trip={"kind": "deterministic"}, cluster__communication_seconds=0.5,
                    cluster__compute={"model": "linear", "seconds_per_sample": 0.01})
    model = RoundTripModel(job.cluster, job.seed)
    assert model.local_round_trip(0, 0, 1, 16, 0.0) == model.round_trip(0, 0, 16, 0.0) == pytest.approx(0.66)
    assert model.local_round_trip(0, 0, 5, 16, 0.0) == pytest.approx(5 * 0.16 + 0.5)
    run = simulate(job.model_copy(update={"budget": job.budget.model_copy(update={"max_updates": 3})}),
                   make_policy("local_sgd", {"period": 5}))
    assert [u[1] for u in run.trace.updates] == pytest.approx([1.3, 2.6, 3.9])
    assert [a[2] for a in run.trace.arrivals[:4]] == [0, 0, 0, 0]  # a task's index is its first step
    assert [a[2] for a in run.trace.arrivals[4:8]] == [5, 5, 5, 5]


def test_a_slowdown_that_begins_or_ends_inside_a_local_task_slows_only_the_steps_that_start_in_it():
    """Steps run one after another: each reads its compute time when it starts. A 10x pause over [0.3, 0.5)
    slows worker 0's third step (it starts at 0.32) and no other; a task that starts inside the pause runs
    its later steps at full speed once the pause is over."""
    pause = {"at": 0.3, "duration": 0.2, "factor": 10.0, "workers": [0]}
    job = small_job(cluster__round_trip={"kind": "deterministic"}, cluster__communication_seconds=0.5,
                    cluster__compute={"model": "linear", "seconds_per_sample": 0.01}, cluster__slowdowns=[pause])
    model = RoundTripModel(job.cluster, job.seed)
    assert model.local_round_trip(0, 0, 5, 16, 0.0) == pytest.approx(4 * 0.16 + 1.6 + 0.5)
    assert model.local_round_trip(1, 0, 5, 16, 0.0) == pytest.approx(5 * 0.16 + 0.5)  # not paused
    assert model.local_round_trip(0, 0, 5, 16, 0.4) == pytest.approx(1.6 + 4 * 0.16 + 0.5)  # starts paused
    assert model.local_round_trip(0, 0, 5, 16, 2.0) == pytest.approx(5 * 0.16 + 0.5)  # after it


def test_the_link_model_charges_one_pull_and_one_push_per_exchange():
    """With a bandwidth-bound server the transfers dominate: H local steps pay them once per H steps."""
    server = {"bandwidth": 1e6, "model_bytes": 1e6}  # 1 s per transfer each way
    job = small_job(cluster__round_trip={"kind": "deterministic"}, cluster__server=server,
                    cluster__compute={"model": "linear", "seconds_per_sample": 0.01}, budget={"max_updates": 2})
    bsp = simulate(job, make_policy("bsp"))
    local = simulate(job, make_policy("local_sgd", {"period": 4}))
    # 4 pulls and 4 pushes queue on the server's links per round, whatever the steps of a task
    assert local.trace.updates[0][1] - bsp.trace.updates[0][1] == pytest.approx(3 * 0.16)


@pytest.mark.parametrize("name", LOCAL)
def test_each_local_update_policy_runs_and_learns(name):
    result = simulate(small_job(budget={"max_updates": 40}), make_policy(name, {"period": 4}))
    assert result.status == "completed"
    losses = [e[4] for e in result.trace.evals]
    assert losses[-1] < losses[0]


def test_adacomm_shrinks_its_period_as_the_loss_falls():
    result = simulate(small_job(budget={"max_virtual_seconds": 200}, budget__max_updates=None),
                      make_policy("adacomm", {"period": 8, "interval_seconds": 10.0}))
    periods = [v for _, v in result.trace.extras["period"]]
    assert periods[0] == 8 and periods[-1] < 8 and all(b <= a + 1 for a, b in zip(periods, periods[1:]))


def test_local_steps_from_speed_give_the_slow_worker_fewer_steps():
    job = small_job(cluster__speed_factors=[1.0, 1.0, 1.0, 0.25], cluster__round_trip={"kind": "deterministic"},
                    budget={"max_updates": 60})
    result = simulate(job, make_policy("async_local_sgd", {"period": 8}))
    steps = {}
    for _, worker, index, *_ in result.trace.arrivals:
        steps.setdefault(worker, []).append(index)
    assert steps[3][1] - steps[3][0] == 8  # its first task: the period, before its speed is known
    assert steps[3][-1] - steps[3][-2] == 2 and steps[0][-1] - steps[0][-2] == 8


def test_easgd_workers_keep_their_own_copies_pulled_toward_the_center():
    job = small_job(budget={"max_updates": 8})
    sim = Simulator(job, make_policy("easgd", {"period": 2, "elastic_alpha": 0.5}))
    sim.run()
    copies = sim.update_state["copies"]
    assert not torch.equal(copies[0], sim.params) and not torch.equal(copies[0], copies[1])


@pytest.mark.parametrize("name,param,value,message", [
    ("local_sgd", "period", 0, "period must be an integer >= 1"),
    ("local_sgd", "period", 2.5, "period must be int"),
    ("diloco", "outer_lr", math.nan, "outer_lr must be a finite number, but got nan"),  # every policy refuses nan
    ("diloco", "outer_lr", 0.0, "outer_lr must be a finite number"),
    ("async_local_sgd", "outer_momentum", 1.0, "outer_momentum must be a finite number in [0, 1)"),
    ("easgd", "elastic_alpha", 0.0, "elastic_alpha must be a finite number in (0, 1]"),
    ("adacomm", "interval_seconds", -1.0, "interval_seconds must be a finite number"),
    ("local_sgd", "steps", "random", "steps must be one of"),
])
def test_bad_parameters_are_one_line_errors_naming_the_parameter(name, param, value, message):
    with pytest.raises(ValueError, match=re.escape(message)) as err:
        make_policy(name, {param: value}).bind(4, 16)
    assert "\n" not in str(err.value) and repr(value) in str(err.value)


def test_a_bad_period_in_a_composition_is_one_line():
    with pytest.raises(ValueError, match=r"period must be an integer >= 1 .* but got period=0"):
        make_policy("compose", {"local": "period", "period": 0}).bind(4, 16)
    with pytest.raises(ValueError, match="period is a parameter of local"):
        make_policy("compose", {"period": 4}).bind(4, 16)
    with pytest.raises(ValueError, match="schedule sync_switch swaps them"):
        make_policy("compose", {"local": "period", "schedule": "sync_switch"}).bind(4, 16)


def test_the_named_policies_are_compositions_and_back():
    for name in LOCAL:
        policy = make_policy(name, {"period": 3})
        slots = composition_of(policy)
        assert slots is not None and slots["period"] == 3
        assert make_policy("compose", slots).as_seed() == policy
    assert make_policy("compose", {"barrier": "backup", "k": 3, "local": "period"}).as_seed() is None


@pytest.mark.parametrize("name", LOCAL)
def test_a_named_local_policy_runs_as_its_composition(name):
    policy = make_policy(name, {"period": 3})
    a = simulate(JOB, policy)
    b = simulate(JOB, make_policy("compose", composition_of(policy)))
    assert torch.equal(a.final_params, b.final_params) and a.trace.arrivals == b.trace.arrivals


def test_a_forked_local_update_run_equals_the_run_from_the_start():
    job = small_job(target__threshold=0.75, budget__max_updates=40)
    for name in LOCAL:
        policy = make_policy(name, {"period": 3})
        whole = Simulator(job, policy).run()
        stopping = Simulator(job.model_copy(update={"budget": job.budget.model_copy(update={"stop_at_target": True})}),
                             policy)
        stopped = stopping.run()
        assert stopped.status == "target_reached", name
        forked = Simulator.resume(stopping.snapshot(), job).run_on()
        assert torch.equal(forked.final_params, whole.final_params), name
        assert forked.trace.arrivals == whole.trace.arrivals, name


def test_local_steps_are_refused_on_the_real_clock_in_one_line():
    from autosync.core.errors import UserError
    from autosync.engine.realtime import RealTimeClock
    from autosync.policies import Task

    class _Driver:
        def submit(self, tasks):
            raise AssertionError("not reached")

    clock = RealTimeClock(_Driver())
    with pytest.raises(UserError, match="local steps run on the virtual clock only"):
        clock.dispatch([(Task(0, 0, 0, 16, 0.0, steps=4), 1.0)])


@pytest.mark.parametrize("name", ["local_sgd", "diloco", "async_local_sgd", "easgd"])
@pytest.mark.slow
@pytest.mark.processes
def test_a_local_update_run_on_worker_processes_is_the_in_process_run_bit_for_bit(name):
    job = JOB.model_copy(update={"cluster": JOB.cluster.model_copy(update={"speed_factors": [1.0, 1.0, 1.0, 0.3]})})
    policy = make_policy(name, {"period": 3})
    workload = Workload(job)
    reference = per_worker_run(job, policy, workload)
    real = simulate(job, policy, workload=workload, driver=ProcessDriver(workload, processes=2))
    _same_run(real, reference)


def test_the_bandwidth_bound_family_draws_slow_links_and_the_other_families_none():
    from pathlib import Path

    from autosync.core.cluster import ServerModel
    from autosync.core.family import load_family

    baselines = Path(__file__).resolve().parents[3] / "baselines"
    for job in load_family(baselines / "family_bandwidth.yaml").jobs(6):
        transfer = ServerModel(job.cluster.server, model_bytes=4).transfer_seconds
        assert 0.25 <= transfer <= 1.0
    for job in load_family(baselines / "family_stragglers.yaml").jobs(6):
        assert job.cluster.server.instant


def test_the_period_and_the_outer_step_are_searched_in_the_policy_and_composed_spaces():
    import optuna

    from autosync.policies import check_composition
    from autosync.search.space import load_space, resolve_space_path

    policy = load_space(resolve_space_path("policy", "policy"), 8)
    for name in ("diloco", "async_local_sgd"):
        assert {"period", "outer_lr", "outer_momentum"} <= set(policy.dimensions[name])
    assert "period" in policy.dimensions["local_sgd"] and "period" in policy.dimensions["adacomm"]
    assert set(LOCAL) <= set(policy.dimensions)
    composed = load_space(resolve_space_path("composed", "composed"), 8)
    assert {"local", "period", "outer_lr", "outer_momentum", "elastic_alpha"} <= set(composed.dimensions["compose"])
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    seen = set()
    for _ in range(300):
        trial = study.ask()
        sampled = make_policy("compose", composed.suggest(trial)["params"])
        check_composition(sampled)
        seen.add((sampled.barrier, sampled.local, sampled.update))
        study.tell(trial, 1.0)
    assert {local for _, local, _ in seen} == {"none", "period", "speed", "adacomm"}
    assert {("asp", "speed", "delayed_nesterov"), ("asp", "period", "easgd")} & seen
    assert any(local != "none" and barrier == "backup" for barrier, local, _ in seen)  # k of n changes averaged
