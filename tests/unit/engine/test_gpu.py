"""The engine and the processes backend on a CUDA GPU (skipped where none is visible, as in CI)."""

from __future__ import annotations

import pytest
import torch

from autosync.catalog import POLICIES, make_policy
from autosync.engine.clock import LoggedClock
from autosync.engine.drivers import PerWorkerDriver, ProcessDriver
from autosync.engine.realtime import RealTimeClock
from autosync.engine.simulator import Simulator, simulate
from autosync.workloads.workload import Workload
from tests.conftest import fused_and_mean_gradient, small_job

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU on this machine")]

JOB = small_job(budget={"max_updates": 20})
PARAMS = {"backup": {"k": 3}}  # the defaults of the others fit 4 workers


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_every_policy_trains_on_the_gpu_as_on_the_cpu(name):
    gpu = simulate(JOB, make_policy(name, PARAMS.get(name, {})), workload=Workload(JOB, device="cuda"))
    cpu = simulate(JOB, make_policy(name, PARAMS.get(name, {})))
    assert gpu.final_params.device.type == "cuda"
    assert gpu.trace.arrivals == cpu.trace.arrivals  # the same decisions
    assert torch.allclose(gpu.final_params.cpu(), cpu.final_params, atol=1e-4)


@pytest.fixture
def no_tf32():
    """Convolutions and matmuls in full float32: TF32 (cuDNN's default) rounds a batch of 4 and one of 12
    differently, which batch norm over a few values amplifies (0.21 of a 1.18 step after 3 ResNet-20
    updates, measured on an H200)."""
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


def test_batch_norm_workers_fused_on_the_gpu_are_the_mean_of_each_workers_own_pass(no_tf32):
    """ResNet-20's batch norm computed per worker in one fused pass (`norm_groups`) on CUDA: the aggregate
    gradient of 3 workers against the mean of their own gradients, on the same parameters."""
    fused, mean, _, _ = fused_and_mean_gradient("cuda")
    assert torch.allclose(fused, mean, rtol=1e-3, atol=1e-5 * float(mean.abs().max()))


@pytest.mark.processes
@pytest.mark.parametrize("start_method", ["spawn", "forkserver"])
def test_worker_processes_share_the_gpu_slots_and_match_the_in_process_kernel(start_method):
    workload = Workload(JOB, device="cuda")
    reference = Simulator(JOB, make_policy("backup", {"k": 3}), workload=workload,
                          driver=PerWorkerDriver(workload, JOB.seed)).run()
    driver = ProcessDriver(workload, processes=2, timeout=30.0, start_method=start_method)
    try:
        result = Simulator(JOB, make_policy("backup", {"k": 3}), workload=workload, driver=driver).run()
        assert result.trace.arrivals == reference.trace.arrivals
        assert torch.allclose(result.final_params, reference.final_params, atol=1e-6)
        logged = Simulator(JOB, make_policy("asp", {}), workload=workload, driver=driver,
                           clock=RealTimeClock(driver, inject_stragglers=True, seconds_per_virtual_second=0.01)).run()
    finally:
        driver.close()
    replayed = Simulator(JOB, make_policy("asp", {}), workload=workload, driver=PerWorkerDriver(workload, JOB.seed),
                         clock=LoggedClock(logged.trace.arrivals)).run()
    assert torch.allclose(replayed.final_params, logged.final_params, atol=1e-6)


@pytest.mark.processes
def test_a_tune_on_worker_processes_sharing_the_gpu_trains_every_trial_there_and_caches_it(tiny_job, tmp_path):
    import json

    from tests.conftest import autosync

    proc = autosync("tune", str(tiny_job), "--n-trials", "2", "--sampler", "random", "--storage", "sqlite:///gpu.db",
                    "--backend", "processes", "--device", "cuda", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    cache = json.loads(proc.stdout)["cache"]
    assert cache["execution"] == {"backend": "processes", "device": "cuda", "clock": "virtual", "processes": 2}
    assert cache["best_value"] > 0
