"""The processes backend: worker processes compute the gradients, bit-identical to the in-process engine."""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

import pytest
import torch

from autosync.catalog import make_policy
from autosync.engine.drivers import PerWorkerDriver, ProcessDriver
from autosync.engine.drivers.processes import SHARED_ROWS
from autosync.engine.drivers.remote import WorkerProcessError
from autosync.engine.simulator import Simulator
from autosync.policies import Task
from autosync.workloads.workload import Workload
from tests.conftest import (
    autosync, computing_workers, no_traceback, signal_and_wait, small_job, start_autosync, wait_for,
)

pytestmark = pytest.mark.processes

JOB = small_job(budget={"max_updates": 30})
POLICIES = [("bsp", {}), ("backup", {"k": 3}), ("dbw", {}), ("asp", {}), ("ssp", {"staleness": 2})]


@pytest.fixture(scope="module")
def workload():
    return Workload(JOB)


@pytest.fixture(scope="module")
def reference(workload):
    """Each policy on the in-process per-worker kernel, with the workers' thread setting."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return {name: Simulator(JOB, make_policy(name, params), workload=workload,
                                driver=PerWorkerDriver(workload, JOB.seed)).run()
                for name, params in POLICIES}
    finally:
        torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def driver(workload):
    d = ProcessDriver(workload, processes=2, timeout=2.0)
    yield d
    d.close()


def _same_run(a, b) -> None:
    assert torch.equal(a.final_params, b.final_params)  # bit-identical
    assert a.trace.arrivals == b.trace.arrivals
    without_wall = lambda updates: [u[:2] + u[3:] for u in updates]  # noqa: E731
    assert without_wall(a.trace.updates) == without_wall(b.trace.updates)


@pytest.mark.slow
@pytest.mark.parametrize("name,params", POLICIES)
def test_processes_backend_is_bit_identical_to_the_in_process_engine(name, params, workload, reference, driver):
    result = Simulator(JOB, make_policy(name, params), workload=workload, driver=driver).run()
    _same_run(result, reference[name])


def _tasks(workers, params, index=0):
    return [Task(w, index, 0, 8, 0.0, params=params) for w in workers]


@pytest.mark.slow
def test_tasks_on_one_version_share_one_parameter_copy_until_no_one_reads_it():
    job = small_job(cluster__n_workers=6)
    workload = Workload(job)
    theta = workload.init_params()
    d = ProcessDriver(workload, processes=2, timeout=60.0)  # worker w on process w % 2
    try:
        os.kill(d.pids[1], signal.SIGSTOP)  # workers 1, 3 and 5 wait: their rows stay read
        first, second = _tasks([0, 1], theta), _tasks([2, 3], theta + 0.01)
        d.submit(first)  # one shared row
        d.submit(second)  # the other
        assert d.parameter_copies == SHARED_ROWS
        answered = set()
        while answered != {0, 2}:
            answered |= {a.task.worker for a in d.collect()}
        third = _tasks([0, 2], theta + 0.02, index=1)
        d.submit(third)  # workers 1 and 3 still read both shared rows: the workers' own rows
        assert d.parameter_copies == SHARED_ROWS + 2 and d.row_read[0] == 0 and d.row_read[2] == 2
        os.kill(d.pids[1], signal.SIGCONT)
        while d.pending:
            d.collect()
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # the worker process's setting: the same bits
        try:
            for t in first + second + third:  # every task read the version it was given
                expected = _tasks([t.worker], t.params, index=t.index)
                PerWorkerDriver(workload, job.seed).worker_gradients(expected)
                assert torch.equal(t.gradient, expected[0].gradient)
        finally:
            torch.set_num_threads(threads)
        d.worker_gradients(_tasks(range(6), theta, index=2))  # no task reads a shared row: one copy
        assert d.parameter_copies == SHARED_ROWS + 3
    finally:
        d.close()


@pytest.mark.slow
def test_a_process_skips_a_task_the_server_gave_up_on_before_it_reached_it(workload, driver):
    """Process 1 (workers 1 and 3) is held while the tasks are sent and the server gives up on worker 3's:
    it computes worker 1's, then answers worker 3's at once without a gradient. The next task of worker 3
    is computed again."""
    theta = workload.init_params()
    tasks = _tasks(range(4), theta)
    skipped = driver.skipped
    os.kill(driver.pids[1], signal.SIGSTOP)
    try:
        driver.submit(tasks)
        driver.cancel([tasks[3]])
    finally:
        os.kill(driver.pids[1], signal.SIGCONT)
    answers = {}
    while driver.pending:
        answers.update({a.task.worker: a for a in driver.collect()})
    assert sorted(answers) == [0, 1, 2, 3] and driver.skipped == skipped + 1
    assert tasks[3].gradient is None and answers[3].compute_seconds == 0.0
    assert all(t.gradient is not None for t in tasks[:3])
    again = _tasks([3], theta, index=1)
    driver.worker_gradients(again)
    assert again[0].gradient is not None and driver.skipped == skipped + 1


@pytest.mark.slow
def test_a_killed_and_a_hung_worker_process_are_replaced_without_changing_the_run(workload, reference):
    d = ProcessDriver(workload, processes=3, timeout=2.0)
    try:
        os.kill(d.pids[0], signal.SIGKILL)
        os.kill(d.pids[1], signal.SIGSTOP)
        result = Simulator(JOB, make_policy("bsp", {}), workload=workload, driver=d).run()
        _same_run(result, reference["bsp"])
        assert len(d.faults) == 2 and any("died" in f for f in d.faults) and any("hung" in f for f in d.faults)
    finally:
        d.close()
    assert not any(p.is_alive() for p in d.procs)


def test_with_no_process_left_the_run_stops_naming_the_workers(workload):
    d = ProcessDriver(workload, processes=1, timeout=2.0)
    os.kill(d.pids[0], signal.SIGKILL)
    with pytest.raises(WorkerProcessError, match=r"every worker process is gone .* simulated workers \[0, 1, 2, 3\]") \
            as lost:
        Simulator(JOB, make_policy("bsp", {}), workload=workload, driver=d).run()
    assert "moved to the others" not in str(lost.value)  # there were no others
    d.close()
    assert not any(p.is_alive() for p in d.procs)


@pytest.mark.slow
def test_cli_runs_on_processes_and_ctrl_c_leaves_no_process(tiny_job, tmp_path):
    proc = autosync("run", str(tiny_job), "--backend", "processes", "--workers-per-device", "2",
                    "--out", str(tmp_path / "run"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "run" / "summary.json").is_file()
    bad = autosync("run", str(tiny_job), "--backend", "threads", cwd=tmp_path)
    no_traceback(bad)
    assert bad.returncode == 2 and "--backend must be simulator, processes or distributed, but got 'threads'" in bad.stderr

    long_job = tmp_path / "long.yaml"
    long_job.write_text(re.sub(r"max_virtual_seconds: \d+", "max_virtual_seconds: 100000", tiny_job.read_text()))
    assert "100000" in long_job.read_text()
    run = start_autosync("run", str(long_job), "--backend", "processes", "--workers-per-device", "2",
                         "--out", str(tmp_path / "long"), cwd=tmp_path)
    children = computing_workers(run.pid, 2, 120)  # Ctrl-C while the workers are computing
    stderr = signal_and_wait(run, signal.SIGINT)
    assert run.returncode == 130 and "Traceback" not in stderr, stderr[-3000:]  # typer's exit code for Ctrl-C
    assert len(children) == 2
    left = lambda: [c for c in children if Path(f"/proc/{c}").exists()]  # noqa: E731
    wait_for(lambda: not left(), 10, lambda: f"the worker processes to end after Ctrl-C ({left()} still there)")


@pytest.mark.slow
def test_worker_processes_pinned_to_cores_run_there_and_compute_the_same_run(workload, reference):
    """--worker-cpus: process p on core cpus[p % len] alone (its workers become real stragglers when that
    core is shared); the run itself is unchanged on the virtual clock."""
    cpu = min(os.sched_getaffinity(0))
    driver = ProcessDriver(workload, processes=2, cpus=(cpu,))
    try:
        assert [os.sched_getaffinity(p.pid) for p in driver.procs] == [{cpu}, {cpu}]
        result = Simulator(JOB, make_policy("backup", {"k": 3}), workload=workload, driver=driver).run()
    finally:
        driver.close()
    _same_run(result, reference["backup"])


def test_worker_cpus_are_checked_in_one_line():
    from autosync.engine.backends import BackendChoice
    from autosync.core.errors import UserError
    from autosync.options import ExecutionOptions
    from autosync.search.study.cache import execution_tag

    with pytest.raises(UserError, match="--worker-cpus pins worker processes: it needs --backend processes"):
        ExecutionOptions(worker_cpus="0")
    with pytest.raises(UserError, match="--worker-cpus must be comma-separated core numbers, but got '0;1'"):
        ExecutionOptions(backend="processes", worker_cpus="0;1")
    with pytest.raises(UserError, match="--worker-cpus must name cores this process may use"):
        ExecutionOptions(backend="processes", worker_cpus="100000")
    pinned = BackendChoice(backend="processes", clock="real", worker_cpus=(0,))
    assert pinned.describe()["worker_cpus"] == [0] and execution_tag(pinned) == "processes-real-machine-cpus0-cpu"
    assert ExecutionOptions(**ExecutionOptions.of_choice(pinned)).choice() == pinned


def test_on_the_cpu_processes_are_forked_from_the_server_unless_they_use_more_threads():
    from autosync.engine.drivers.processes import _context

    cpu = torch.device("cpu")
    assert _context(cpu).get_start_method() == "fork"
    assert _context(cpu, threads=2).get_start_method() == "forkserver"  # OpenMP threads hang in a forked child
    assert _context(cpu, "spawn").get_start_method() == "spawn"


def test_a_forked_process_keeps_no_other_process_s_pipe_open(workload):
    """Process 1, forked while the server held process 0's pipes, closes them: process 0's inbox ends when
    the server closes its end, and process 0 leaves while process 1 waits for tasks."""
    d = ProcessDriver(workload, processes=2, timeout=60.0)
    try:
        d.inboxes[0].close()
        d.procs[0].join(timeout=60.0)
        assert d.procs[0].exitcode == 0 and d.procs[1].is_alive()
    finally:
        d.close()


@pytest.mark.slow
def test_processes_started_from_a_forkserver_compute_the_same_run(workload, reference):
    """As on a GPU, or with more than one intra-op thread: the same bits as the forked processes give."""
    d = ProcessDriver(workload, processes=2, start_method="forkserver")
    try:
        result = Simulator(JOB, make_policy("backup", {"k": 3}), workload=workload, driver=d).run()
    finally:
        d.close()
    _same_run(result, reference["backup"])


def test_an_unknown_start_method_is_refused_before_any_process_starts():
    from autosync.core.errors import UserError

    with pytest.raises(UserError, match="start_method must be one of fork, forkserver, spawn, but got 'thread'"):
        ProcessDriver(Workload(JOB), processes=1, start_method="thread")
