"""Several machines' backend, on one: torchrun ranks over gloo compute the gradients, rank 0 serves."""

from __future__ import annotations

import subprocess
import sys

import torch

from autosync.catalog import make_policy
from autosync.engine.drivers import PerWorkerDriver
from autosync.engine.simulator import Simulator
from autosync.job import load_job
from autosync.workloads.workload import Workload
from tests.conftest import autosync, no_traceback


def _torchrun(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "3",
                           "-m", "autosync.cli", "run", *args], cwd=cwd, capture_output=True, text=True, timeout=300)


def test_torchrun_ranks_give_the_in_process_run_bit_for_bit_and_real_time_runs_rerun(tiny_job, tmp_path):
    virtual = _torchrun(str(tiny_job), "--backend", "distributed", "--policy", "backup", "--param", "k=3",
                        "--out", "v", cwd=tmp_path)
    assert virtual.returncode == 0, virtual.stderr[-2000:]
    job = load_job(tiny_job)
    workload = Workload(job)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the ranks' setting
    try:
        reference = Simulator(job, make_policy("backup", {"k": 3}), workload=workload,
                              driver=PerWorkerDriver(workload, job.seed)).run()
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(torch.load(tmp_path / "v" / "final_params.pt"), reference.final_params)

    real = _torchrun(str(tiny_job), "--backend", "distributed", "--clock", "real", "--stragglers", "model",
                     "--policy", "asp", "--out", "r", cwd=tmp_path)
    assert real.returncode == 0, real.stderr[-2000:]
    again = autosync("rerun", "r", cwd=tmp_path)
    assert again.returncode == 0 and "bit-identical to the logged run" in again.stdout, again.stdout

    alone = autosync("run", str(tiny_job), "--backend", "distributed", cwd=tmp_path)
    no_traceback(alone)
    assert alone.returncode == 2 and "--backend distributed runs under torchrun" in alone.stderr
