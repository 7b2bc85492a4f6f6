"""Several machines' backend, on one: torchrun ranks over gloo compute the gradients, rank 0 serves."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import uuid

import pytest
import torch

from autosync.catalog import make_policy
from autosync.core.job import load_job
from autosync.workloads.workload import Workload
from tests.conftest import TINY_TUNE, autosync, no_traceback, per_worker_run, wait_for
from tests.unit.search.test_tune_backends import _trials

pytestmark = [pytest.mark.slow, pytest.mark.processes, pytest.mark.distributed]


def _torchrun(*args: str, cwd, command: str = "run", ranks: int = 3) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
                           str(ranks), "-m", "autosync.cli", command, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300)


def test_a_torchrun_tune_runs_every_trial_on_the_ranks_and_gives_the_simulators_trial_values(tiny_job, tmp_path,
                                                                                          tiny_simulated_tune):
    args = TINY_TUNE
    ranks = _torchrun(str(tiny_job), *args, "--storage", "sqlite:///ranks.db", "--backend", "distributed",
                      cwd=tmp_path, command="tune")
    assert ranks.returncode == 0, ranks.stderr[-2000:]
    sim_db, _ = tiny_simulated_tune  # the same job and options on the simulator
    ranks_trials, study = _trials(tmp_path / "ranks.db")
    assert ranks_trials == _trials(sim_db)[0]  # bit for bit: the same policies, the same values
    assert study.study_name.endswith("-policy-distributed-virtual-cpu")
    cache = json.loads(ranks.stdout[ranks.stdout.index("{"):])["cache"]
    assert cache["execution"] == {"backend": "distributed", "device": "cpu", "clock": "virtual", "ranks": 3}
    # a recurring job, launched on 2 ranks this time: the cache answers (a virtual-clock answer is the same on
    # any number of ranks), and the rank waiting for a job is released
    again = _torchrun(str(tiny_job), *args, "--storage", "sqlite:///ranks.db", "--backend", "distributed",
                      cwd=tmp_path, command="tune", ranks=2)
    assert again.returncode == 0 and '"cached": true' in again.stdout, again.stderr[-2000:]
    crowded = autosync("tune", str(tiny_job), "--n-trials", "2", "--n-jobs", "2", "--backend", "distributed",
                       cwd=tmp_path)  # refused as the options are read, on every rank alike
    assert crowded.returncode == 2 and "--n-jobs must be 1 with --backend distributed" in crowded.stderr


def test_a_torchrun_profile_times_the_ranks_and_gloos_transfer_into_the_fitted_server(tiny_job, tmp_path):
    proc = _torchrun(str(tiny_job), "--backend", "distributed", "--rounds", "2", "--batch-sizes", "8,16", "--out",
                     "prof", cwd=tmp_path, command="profile")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "measured on cpu with 2 ranks" in proc.stdout
    job = load_job(tmp_path / "prof" / "profiled_job.yaml")
    assert len(job.cluster.speed_factors) == 4 and job.cluster.server.apply_seconds > 0
    assert job.cluster.server.bandwidth < 1e9  # gloo's messages, far slower than a shared-memory copy


def test_a_real_time_run_on_torchrun_ranks_reruns_bit_for_bit_and_needs_torchrun(tiny_job, tmp_path):
    """(The virtual clock's bit-for-bit match with the in-process run is the composition's test below.)"""
    real = _torchrun(str(tiny_job), "--backend", "distributed", "--clock", "real", "--stragglers", "model",
                     "--policy", "asp", "--out", "r", cwd=tmp_path)
    assert real.returncode == 0, real.stderr[-2000:]
    again = autosync("rerun", "r", cwd=tmp_path)
    assert again.returncode == 0 and "bit-identical to the logged run" in again.stdout, again.stdout

    alone = autosync("run", str(tiny_job), "--backend", "distributed", cwd=tmp_path)
    no_traceback(alone)
    assert alone.returncode == 2 and "--backend distributed runs under torchrun" in alone.stderr


def test_a_composition_on_torchrun_ranks_is_the_in_process_run_bit_for_bit(tiny_job, tmp_path):
    """SSP's bound with DANA-Slim's look-ahead and LB-BSP's batches, named in one spec."""
    spec = "compose(barrier=ssp, staleness=1, update=dana_slim, batch=lbbsp, mode=cpu)"
    ranks = _torchrun(str(tiny_job), "--backend", "distributed", "--policy", spec, "--out", "c", cwd=tmp_path)
    assert ranks.returncode == 0, ranks.stderr[-2000:]
    job = load_job(tiny_job)
    reference = per_worker_run(job, make_policy(spec), Workload(job))
    assert torch.equal(torch.load(tmp_path / "c" / "final_params.pt"), reference.final_params)


class _Launch:
    """A torchrun launch of a long real-time run whose rank processes can be found and signalled."""

    def __init__(self, job, cwd):
        self.tag = uuid.uuid4().hex  # inherited by every process of this launch, so none is missed
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "3",
             "-m", "autosync.cli", "run", str(job), "--backend", "distributed", "--clock", "real",
             "--stragglers", "model", "--time-scale", "1", "--worker-timeout", "3"],
            cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "AUTOSYNC_TEST_LAUNCH": self.tag})
        self.stderr: list[str] = []
        self.ready = threading.Event()
        threading.Thread(target=self._read_stderr, daemon=True).start()
        threading.Thread(target=self.proc.stdout.read, daemon=True).start()
        self.ready.wait(timeout=120)  # rank 0 says so (on stderr) once every rank has joined and built its workload

    def _read_stderr(self) -> None:
        for line in iter(self.proc.stderr.readline, ""):
            self.stderr.append(line)
            if "distributed backend ready" in line:
                self.ready.set()
        self.ready.set()  # the launch ended without it: let the test see why

    def processes(self) -> dict[int, str]:
        """pid -> RANK of every live process of this launch (torchrun's own has none)."""
        found = {}
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
                state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if f"AUTOSYNC_TEST_LAUNCH={self.tag}".encode() in env and state != "Z":
                found[int(pid)] = next((e.decode()[5:] for e in env if e.startswith(b"RANK=")), "")
        return found

    def rank_pid(self, rank: int) -> int:
        return next(pid for pid, r in self.processes().items() if r == str(rank))

    def wait_for_stderr(self, text: str, seconds: float) -> None:
        """Wait until a line of the launch's stderr holds `text`; fail naming its error lines after `seconds`."""
        wait_for(lambda: any(text in line for line in self.stderr), seconds,
                 lambda: f"{text!r} on the launch's stderr; its error lines:\n"
                 + "".join(line for line in self.stderr if "error" in line.lower())[-2000:]
                 + "\nits end:\n" + "".join(self.stderr)[-1500:])

    def wait_for_no_process(self) -> None:
        wait_for(lambda: not self.processes(), 10, lambda: f"the launch's processes to end: {self.processes()}")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="finds the rank processes through /proc")
def test_a_hung_rank_stops_the_run_with_an_error_naming_it_and_no_process_stays(tiny_job, tmp_path):
    launch = _Launch(tiny_job, tmp_path)
    victim = launch.rank_pid(2)
    os.kill(victim, signal.SIGSTOP)
    # the error comes while rank 2 is still stopped (it is continued only after), and it is the worker
    # timeout's (--worker-timeout 3 names its 3 s): no other timeout of gloo or torchrun fired first
    try:
        launch.wait_for_stderr("sent no gradient in 3 s (simulated workers [", 60)
    finally:
        with contextlib.suppress(ProcessLookupError):  # torchrun's SIGTERM then ends it at once, not after 30 s
            os.kill(victim, signal.SIGCONT)
    # The error names the rank silent longest first, and any other past the timeout after it: on a loaded
    # machine a rank that is only starved of the CPU can have been waited for longer than the stopped one.
    # Either way rank 2 is named, and where it is first, with the workers it simulates (1 and 3) that are
    # still waited for (one may have answered first).
    line = next(line for line in launch.stderr if "sent no gradient in 3 s" in line)
    first = re.search(r"error: rank (\d+) sent no gradient in 3 s \(simulated workers \[([0-9, ]+)\]\)", line)
    too = re.search(r"ranks \[([0-9, ]+)\] are silent too", line)
    assert first, line
    assert first.group(1) == "2" or (too and 2 in {int(r) for r in too.group(1).split(",")}), line
    if first.group(1) == "2":
        assert {int(w) for w in first.group(2).split(",")} <= {1, 3}, line
    assert launch.proc.wait(timeout=60) != 0
    launch.wait_for_no_process()
    assert "Traceback" not in "".join(line for line in launch.stderr if line.startswith("error:"))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="finds the rank processes through /proc")
def test_a_killed_rank_ends_the_whole_launch_naming_it_and_no_process_stays(tiny_job, tmp_path):
    launch = _Launch(tiny_job, tmp_path)
    os.kill(launch.rank_pid(2), signal.SIGKILL)
    assert launch.proc.wait(timeout=60) != 0  # torchrun stops the group: it cannot go on without a member
    launch.wait_for_no_process()
    report = "".join(launch.stderr)
    assert "rank      : 2 (local_rank: 2)" in report and "exitcode  : -9" in report
