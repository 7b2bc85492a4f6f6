"""LB-BSP: weighted aggregation (eq. 7), Algorithm 2 on a heterogeneous GPU cluster, Algorithm 1 with NARX."""

from __future__ import annotations

import pytest
import torch

from autosync.engine import simulate
from autosync.engine.drivers import InProcessDriver
from autosync.policies import BSP, LBBSP, Arrival, Task
from autosync.policies._lbbsp import BatchWeighted, proportional_split
from autosync.workloads.workload import Workload
from tests.conftest import small_job

GPU_CLUSTER = {"cluster__speed_factors": [8, 4, 2, 1], "workload__batch_size": 64,
               "cluster__compute": {"model": "gpu", "launch_overhead": 0.01, "saturation_batch": 8,
                                    "seconds_per_sample": 0.002, "memory_cap_batch": 200},
               "cluster__round_trip": {"kind": "shifted_exponential", "alpha": 0.1}}


def _mean_iteration(result, last: int = 100) -> float:
    times = result.trace.column("updates", "time")
    return (times[-1] - times[-last - 1]) / last


def test_batch_weighted_aggregate_is_the_gradient_of_the_union_batch():
    """Eq. (7): sum_i |B_i| g_i / sum_j |B_j| equals the mean gradient over the union of the batches."""
    job = small_job()
    workload = Workload(job)
    driver = InProcessDriver(workload, job.seed)
    theta = workload.init_params()
    tasks = [Task(w, 0, 0, b, 0.0, params=theta) for w, b in enumerate([3, 17, 40, 4])]
    weights = BatchWeighted().weights([Arrival(t, 0.0) for t in tasks])
    aggregate, _ = driver.aggregate(tasks, weights)
    index = torch.cat([driver.batch_of(t) for t in tasks])
    theta = theta.clone().requires_grad_(True)
    loss = workload.per_sample_loss(theta, workload.data.x_train[index], workload.data.y_train[index]).mean()
    (union,) = torch.autograd.grad(loss, theta)
    assert torch.allclose(aggregate, union, atol=1e-6)


@pytest.mark.parametrize("weights,total", [([1, 1, 1], 10), ([8, 4, 2, 1], 256), ([1e-9, 5, 5], 7), ([0, 0], 5)])
def test_proportional_split_keeps_the_total_and_gives_everyone_a_sample(weights, total):
    sizes = proportional_split(weights, total)
    assert sum(sizes) == total and min(sizes) >= 1
    if weights == [8, 4, 2, 1]:
        assert sizes == sorted(sizes, reverse=True)


@pytest.mark.parametrize("weights,total,caps", [([8, 4, 2, 1], 256, [70, None, None, None]),
                                                 ([8, 4, 2, 1], 256, [70, 70, 70, 70]),
                                                 ([100, 1, 1], 30, [12, 12, 12]), ([1, 1], 10, [None, None])])
def test_a_capped_split_keeps_the_total_and_no_worker_over_its_cap(weights, total, caps):
    sizes = proportional_split(weights, total, caps)
    assert sum(sizes) == total and min(sizes) >= 1
    assert all(cap is None or size <= cap for size, cap in zip(sizes, caps))
    if caps == [70, None, None, None]:  # the fastest at its cap, the rest shared 4 : 2 : 1
        assert sizes[0] == 70 and sizes[1:] == proportional_split([4, 2, 1], 256 - 70)


def test_the_cpu_balancer_keeps_each_batch_under_its_memory_cap():
    """Algorithm 1 splits n * B by predicted speed; a worker 8x faster than the slowest would take about half
    of it, past its memory: it stops at its cap and the others share the rest (the simulator raises on a
    batch over a cap)."""
    cluster = {**GPU_CLUSTER, "cluster__compute": {**GPU_CLUSTER["cluster__compute"], "memory_cap_batch": 80}}
    lb = simulate(small_job(budget={"max_updates": 40}, **cluster), LBBSP(mode="cpu", predictor="last"))
    sizes = lb.trace.column("updates", "batch_sizes")
    assert max(max(b) for b in sizes) <= 80 and {sum(b) for b in sizes} == {4 * 64}


@pytest.mark.slow
def test_gpu_balancer_reaches_an_equilibrium_much_faster_than_bsp():
    """Fig. 6 / Table 3: speeds 8:4:2:1 (V100 : M60 : K80 : K520), total batch n * B unchanged."""
    job = small_job(budget={"max_updates": 300}, **GPU_CLUSTER)
    bsp, lb = simulate(job, BSP()), simulate(job, LBBSP())
    assert _mean_iteration(lb) <= 0.6 * _mean_iteration(bsp)
    totals = {sum(b) for b in lb.trace.column("updates", "batch_sizes")}
    assert totals == {4 * 64}
    assert max(max(b) for b in lb.trace.column("updates", "batch_sizes")) <= 0.95 * 200
    assert lb.trace.extras["lb_fine_tune"][-1][1] == 1  # the oscillation switched it to fine-tuning


@pytest.mark.slow
def test_gpu_balancer_finds_a_new_equilibrium_after_a_slowdown():
    job = small_job(budget={"max_updates": 500},
                    cluster__slowdowns=[{"at": 15.0, "duration": 1000.0, "factor": 4.0, "workers": [0]}],
                    **GPU_CLUSTER)
    result = simulate(job, LBBSP())
    times = result.trace.column("updates", "time")
    share = {}
    for t, workers, batches in zip(times, result.trace.column("updates", "workers"),
                                   result.trace.column("updates", "batch_sizes")):
        share[t < 15.0] = dict(zip(workers, batches))[0]
    assert share[False] < share[True] - 20  # worker 0 lost a good part of its batch


@pytest.mark.slow
def test_cpu_balancer_with_narx_predicts_best_and_beats_bsp():
    """Fig. 10 and sec. 5.4: with time-varying CPU/memory, NARX's RMSE beats last value and EMA."""
    job = small_job(workload__batch_size=64, cluster__n_workers=8, budget={"max_updates": 500},
                    cluster__compute={"model": "linear", "seconds_per_sample": 0.002},
                    cluster__resources={"period_seconds": 2.0, "cpu_min": 0.2, "memory_min": 0.5,
                                        "smoothness": 0.3},
                    cluster__round_trip={"kind": "shifted_exponential", "alpha": 0.1})
    bsp, lb = simulate(job, BSP()), simulate(job, LBBSP(mode="cpu", predictor="narx", warmup=50))
    rmse = {k: v[-1][1] for k, v in lb.trace.extras.items() if k.startswith("rmse_")}
    assert rmse["rmse_narx"] < rmse["rmse_last"] and rmse["rmse_narx"] < rmse["rmse_ema"]
    assert _mean_iteration(lb, 300) < 0.85 * _mean_iteration(bsp, 300)
    assert {sum(b) for b in lb.trace.column("updates", "batch_sizes")} == {8 * 64}


def test_invalid_parameters_are_named():
    with pytest.raises(ValueError, match="mode must be one of"):
        LBBSP(mode="tpu").bind(4, 8)
    with pytest.raises(ValueError, match="predictor must be one of"):
        LBBSP(mode="cpu", predictor="arima").bind(4, 8)


@pytest.mark.parametrize("compute,mode", [({"model": "linear", "seconds_per_sample": 0.01}, "cpu"),
                                          ({"model": "gpu", "launch_overhead": 0.01, "saturation_batch": 8,
                                            "seconds_per_sample": 0.002}, "gpu")])
@pytest.mark.slow
def test_auto_mode_is_the_mode_the_compute_model_calls_for(compute, mode):
    from autosync.catalog import make_policy
    from autosync.engine import simulate
    from tests.conftest import small_job

    job = small_job(cluster__compute=compute, cluster__speed_factors=[4, 2, 1, 1])
    auto = simulate(job, make_policy("lbbsp"))
    explicit = simulate(job, make_policy("lbbsp", {"mode": mode}))
    assert make_policy("lbbsp").mode == "auto"
    same = [r[:2] + r[3:] for r in auto.trace.updates] == [r[:2] + r[3:] for r in explicit.trace.updates]  # r[2]: wall
    assert torch.equal(auto.final_params, explicit.final_params) and same


def test_a_round_counts_only_tasks_started_on_the_sizes_of_the_last_re_balance():
    """Under ASP a task still in flight at a re-balance ran on the old sizes: its time is not counted."""
    from types import SimpleNamespace

    from autosync.policies import Arrival, Task
    from autosync.policies._lbbsp import WorkerRounds

    rounds = WorkerRounds(2)
    arrive = lambda worker, version, start, end, size: rounds.observe(Arrival(Task(worker, 0, version, size, start), end))
    arrive(0, 0, 0.0, 1.0, 8)
    assert rounds.take(SimpleNamespace(version=1)) is None  # worker 1 has not finished a task yet
    arrive(1, 0, 0.0, 4.0, 8)
    assert rounds.take(SimpleNamespace(version=5)) == ([1.0, 4.0], [8, 8])
    arrive(1, 4, 4.0, 9.0, 8)  # started at version 4, before the re-balance at 5: not counted
    arrive(0, 5, 5.0, 6.0, 12)
    assert rounds.take(SimpleNamespace(version=6)) is None
    arrive(1, 5, 9.0, 11.0, 4)
    assert rounds.take(SimpleNamespace(version=7)) == ([1.0, 2.0], [12, 4])


@pytest.mark.parametrize("fractions", [0.5, True, "abc"])
def test_split_fractions_that_are_not_a_list_are_refused_in_one_line(fractions):
    from autosync.catalog import make_policy

    with pytest.raises(ValueError, match=r"fractions must be 4 non-negative numbers \(one per worker\)"):
        make_policy("split", {"fractions": fractions}).bind(4, 8)
