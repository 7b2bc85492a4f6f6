"""The real-time clock: worker processes' answers decide the order; the arrival log replays a run exactly."""

from __future__ import annotations

import json

import pytest
import torch

from autosync.catalog import make_policy
from autosync.engine.clock import LoggedClock, RerunMismatch
from autosync.engine.drivers import ProcessDriver
from autosync.engine.realtime import RealTimeClock
from autosync.engine.simulator import Simulator, simulate
from autosync.workloads.workload import Workload
from tests.conftest import autosync, no_traceback, per_worker_run, small_job

pytestmark = pytest.mark.processes

SCALE = 0.01  # real seconds per virtual second: a 0.5 s round trip of the model lasts 5 ms
JOB = small_job(budget={"max_updates": 30})
SLOW_WORKER = small_job(budget={"max_updates": 40}, cluster__round_trip={"kind": "deterministic"},
                        cluster__speed_factors=[0.1, 1.0, 1.0, 1.0])


@pytest.fixture(scope="module")
def workload():
    return Workload(JOB)


@pytest.fixture(scope="module")
def driver(workload):
    d = ProcessDriver(workload, processes=2, timeout=10.0)
    yield d
    d.close()


def _real_time_run(job, name, params, workload, driver, inject=True):
    return Simulator(job, make_policy(name, params), workload=workload, driver=driver,
                     clock=RealTimeClock(driver, inject_stragglers=inject, seconds_per_virtual_second=SCALE)).run()


def _replay(job, name, params, workload, arrivals):
    return per_worker_run(job, make_policy(name, params), workload, clock=LoggedClock(arrivals))


@pytest.mark.parametrize("name,params,inject", [("backup", {"k": 3}, True), ("asp", {}, False),
                                                ("sync_switch", {"switch_at": 0.5}, True)])
@pytest.mark.slow
def test_a_real_time_run_replays_bit_identically_from_its_arrival_log(name, params, inject, workload, driver):
    logged = _real_time_run(JOB, name, params, workload, driver, inject)
    replayed = _replay(JOB, name, params, workload, logged.trace.arrivals)
    assert torch.equal(logged.final_params, replayed.final_params)
    assert replayed.trace.arrivals == logged.trace.arrivals
    assert [u[:2] + u[3:] for u in replayed.trace.updates] == [u[:2] + u[3:] for u in logged.trace.updates]
    times = [a[0] for a in logged.trace.arrivals]
    assert times == sorted(times) and len(logged.trace.updates) == 30


@pytest.mark.slow
def test_the_replay_stops_at_the_first_arrival_that_differs(workload, driver):
    logged = _real_time_run(JOB, "backup", {"k": 3}, workload, driver).trace.arrivals
    discarded = next(i for i, a in enumerate(logged) if not a[5])
    flipped = [list(a) for a in logged]
    flipped[discarded][5] = True
    with pytest.raises(RerunMismatch, match=rf"arrival {discarded} was accepted in the logged run, but the replay "
                                             "discards it"):
        _replay(JOB, "backup", {"k": 3}, workload, flipped)
    swapped = [list(a) for a in logged]
    swapped[0][2] = 7
    with pytest.raises(RerunMismatch, match=r"arrival 0 is worker \d's task 7 .* but the replayed run has task 0"):
        _replay(JOB, "backup", {"k": 3}, workload, swapped)
    with pytest.raises(RerunMismatch, match="needs more than the 10 logged arrivals"):
        _replay(JOB, "backup", {"k": 3}, workload, logged[:10])


@pytest.mark.slow
def test_injected_stragglers_hold_each_answer_for_its_model_round_trip(workload):
    d = ProcessDriver(workload, processes=2, timeout=10.0)
    try:
        result = _real_time_run(SLOW_WORKER, "asp", {}, workload, d)
    finally:
        d.close()
    virtual = simulate(SLOW_WORKER, make_policy("asp", {}))
    # Worker 0 computes at a tenth of the speed: 5 s per task against 0.5 s, as on the virtual clock.
    assert sum(1 for a in virtual.trace.arrivals if a[1] == 0) <= 2
    # Under ASP a worker gets its next task at its answer, so each answer comes at least its model round trip
    # after the one before: bounds on the logged times, whatever else the machine runs (how many answers
    # each worker gives before the 40th update is the machine's speed, so it is not checked). The others'
    # 40 updates take at least 40 / 3 x 0.5 s > 5 s: the straggler answers before the end.
    for worker, round_trip in enumerate([5.0, 0.5, 0.5, 0.5]):
        times = [0.0] + [a[0] for a in result.trace.arrivals if a[1] == worker]
        assert len(times) > 1, f"worker {worker} never answered"
        assert all(b - a >= round_trip - 1e-9 for a, b in zip(times, times[1:])), (worker, times)


@pytest.mark.slow
def test_cli_real_time_run_then_rerun_is_bit_identical(tiny_job, tmp_path):
    run = autosync("run", str(tiny_job), "--policy", "backup", "--param", "k=3", "--backend", "processes",
                   "--clock", "real", "--stragglers", "model", "--time-scale", "0.01", "--out", "r", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert "autosync rerun r" in run.stderr  # a hint: status goes to stderr
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["execution"] == {"backend": "processes", "device": "cpu", "processes": 2, "clock": "real",
                                    "stragglers": "model", "time_scale": 0.01}
    again = autosync("rerun", "r", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert "bit-identical to the logged run" in again.stdout

    trace = json.loads((tmp_path / "r" / "trace.json").read_text())
    # a task no worker was given: the replay stops at arrival 3 whatever order the workers answered in (moving
    # the arrival to another worker is not always caught there: that worker may have a task of the same index,
    # version and batch in flight, so the first arrival that differs can come later)
    trace["arrivals"][3]["task"] = 10**6
    (tmp_path / "r" / "trace.json").write_text(json.dumps(trace))
    bad = autosync("rerun", "r", cwd=tmp_path)
    no_traceback(bad)
    errors = [line for line in bad.stderr.splitlines() if line.startswith("error:")]  # the progress bar is on stderr too
    assert bad.returncode == 2 and len(errors) == 1 and "r/trace.json: arrival 3 is worker" in errors[0]

    for column, value in (("worker", "x"), ("time", -1.0)):  # a traceback (int("x")) or replayed as logged
        damaged = json.loads(json.dumps(trace))
        damaged["arrivals"][3] = {**trace["arrivals"][2], column: value}
        (tmp_path / "r" / "trace.json").write_text(json.dumps(damaged))
        line = autosync("rerun", "r", cwd=tmp_path)
        no_traceback(line)
        assert line.returncode == 2 and f"r: corrupt run log (ValueError: arrivals.3.{column} must be a" in line.stderr
    (tmp_path / "r" / "summary.json").write_text(json.dumps({**summary, "execution": 5}))
    line = autosync("rerun", "r", cwd=tmp_path)  # AttributeError: 'int' object has no attribute 'get'
    assert line.returncode == 2 and "summary.json: execution must be an object" in line.stderr, line.stderr
    (tmp_path / "r" / "summary.json").write_text(json.dumps(summary))
    trace["arrivals"] = trace["arrivals"][: len(trace["arrivals"]) // 2]  # a log cut short: it replayed "as logged"
    (tmp_path / "r" / "trace.json").write_text(json.dumps(trace))  # to the log's end, then exit 1 as a bug
    short = autosync("rerun", "r", cwd=tmp_path)
    no_traceback(short)
    assert short.returncode == 2 and "the log is cut short or from another run" in short.stderr, short.stderr
    simulated = autosync("run", str(tiny_job), "--out", "s", cwd=tmp_path)  # its gradients computed together
    assert simulated.returncode == 0, simulated.stderr
    refused = autosync("rerun", "s", cwd=tmp_path)  # it exited 1, "final parameters differ" (by 3e-08)
    no_traceback(refused)
    assert refused.returncode == 2 and "s: a run of the simulator" in refused.stderr, refused.stderr

    for args, message in [(["--clock", "real"], "--clock real needs --backend processes"),
                          (["--backend", "processes", "--clock", "real", "--stragglers", "none"],
                           "--stragglers must be machine or model, but got 'none'"),
                          (["--backend", "processes", "--clock", "real", "--time-scale", "0"],
                           "--time-scale must be > 0"),
                          (["--backend", "processes", "--clock", "real", "--time-scale", "inf"],  # a traceback
                           "--time-scale must be > 0 and at most 1000"),
                          (["--device", "tpu"], "--device must be cpu or cuda")]:
        wrong = autosync("run", str(tiny_job), *args, cwd=tmp_path)
        no_traceback(wrong)
        assert wrong.returncode == 2 and message in wrong.stderr, wrong.stderr
