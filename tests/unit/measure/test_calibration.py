"""The server's costs per update and per gradient, fitted from two real runs, and the calibration check."""

from __future__ import annotations

import json

import pytest

from autosync.measure.calibration import (
    RATE_POLICIES, Calibration, RateRun, calibrate, measure_real, scale_units, simulated_runner, with_server, with_units,
)
from autosync.catalog import make_policy
from autosync.engine import simulate
from autosync.core.job import load_job
from tests.conftest import autosync, no_traceback, small_job

UPDATES = 40
JOB = small_job(budget={"max_updates": 40})


@pytest.fixture(scope="module")
def real_with_server_costs() -> dict[str, float]:
    """Two synthetic "real" runs: the job's own simulation on a server that pays 0.2 s per update and
    0.05 s per gradient (a round trip is about 1 s)."""
    return measure_real(with_server(JOB, 0.2, 0.05), simulated_runner(), UPDATES)


def test_the_servers_loop_handles_one_gradient_at_a_time():
    """With a per-gradient cost g, ASP's arrivals are handled one after another: n gradients can never be
    handled in less than n g, whatever the workers' round trips."""
    slow = simulate(with_server(JOB, 0.0, 0.5), make_policy("asp"))
    instant = simulate(JOB, make_policy("asp"))
    handled = [row[0] for row in slow.trace.arrivals]
    assert all(b - a >= 0.5 - 1e-9 for a, b in zip(handled, handled[1:]))
    assert slow.trace.updates[-1][1] > instant.trace.updates[-1][1]


def test_a_server_without_a_per_gradient_cost_keeps_its_fingerprint():
    job = small_job(cluster__server={"bandwidth": 1e6, "apply_seconds": 0.01})
    assert job.fingerprint() == with_server(job, 0.01, 0.0).fingerprint()
    assert job.fingerprint() != with_server(job, 0.01, 0.001).fingerprint()


def test_the_fit_makes_the_simulation_match_both_real_runs(real_with_server_costs):
    result, fitted = calibrate(JOB, real_with_server_costs, UPDATES, {"backend": "synthetic"})
    assert [run.name for run in result.before] == [name for name, _ in RATE_POLICIES]
    assert not result.before[1].fits  # the one-gradient updates pay the server's costs most
    assert all(abs(run.ratio - 1.0) <= 0.05 for run in result.after), result.to_dict()
    assert result.fits and "fits the real runs" in result.verdict()
    assert result.server["apply_seconds"] > 0 or result.server["gradient_seconds"] > 0
    assert fitted.cluster.server.apply_seconds == result.server["apply_seconds"]
    again, _ = calibrate(fitted, real_with_server_costs, UPDATES, {}, fit=False)  # the fitted job checks out
    assert again.fits and again.server is None


def test_a_calibration_writes_itself_as_write_calibration_writes_it(real_with_server_costs, tmp_path):
    """What `api.calibrate` returns (`Calibrated`) unpacks as the pair it was, and `.write(job_file)` writes
    the files `api.write_calibration(calibration, job, job_file)` writes, byte for byte."""
    from autosync import api
    from autosync.reporting.calibration_files import Calibrated

    calibrated = Calibrated(*calibrate(JOB, real_with_server_costs, UPDATES, {"backend": "synthetic"}))
    result, fitted = calibrated
    new = calibrated.write(tmp_path / "new" / "job.yaml")
    old = api.write_calibration(result, fitted, tmp_path / "old" / "job.yaml")
    assert [p.name for p in new] == [p.name for p in old] == ["calibration.json", "job.yaml"]
    assert [p.read_text() for p in new] == [p.read_text() for p in old]


def test_the_fit_starts_from_the_worker_processes_as_compute_units():
    """"Real" runs on 2 processes that queue the 4 workers' gradients (0.3 s each, one process half as fast)
    besides a server cost; the units were timed 25% slow (the rounds that time them are busier than the
    runs): given the units, the fit makes both runs match, scaling the units' times, and the job keeps them."""
    units = {"count": 2, "compute": {"model": "linear", "seconds_per_sample": 0.4 / 16}, "speed_factors": [1.0, 0.5]}
    real = measure_real(with_server(scale_units(with_units(JOB, units), 0.75), 0.1, 0.0), simulated_runner(), UPDATES)
    result, fitted = calibrate(JOB, real, UPDATES, {}, units=units)
    assert not all(run.fits for run in result.before)
    assert all(abs(run.ratio - 1.0) <= 0.05 for run in result.after), result.to_dict()
    assert fitted.cluster.compute_units.speed_factors == [1.0, 0.5] and result.to_dict()["units"] == units
    assert result.server["units_factor"] == pytest.approx(0.75, abs=0.1)
    checked, job = calibrate(JOB, real, UPDATES, {}, fit=False, units=units)  # only checked: nothing given
    assert job is JOB and checked.units is None


def test_measured_units_are_kept_where_the_job_fits_both_runs_without_them():
    """Units small beside the round trips: both runs fit the job as given, and it keeps the units all the
    same (a barrier between the two runs' update rates leaves tasks queued on them), their times unscaled."""
    units = {"count": 2, "compute": {"model": "linear", "seconds_per_sample": 0.01 / 16}, "speed_factors": None}
    real = measure_real(JOB, simulated_runner(), UPDATES)
    result, fitted = calibrate(JOB, real, UPDATES, {}, units=units)
    assert all(abs(run.ratio - 1.0) <= 0.02 for run in result.before)
    assert fitted.cluster.compute_units is not None and result.units == units
    assert result.server["units_factor"] == 1.0 and all(abs(run.ratio - 1.0) <= 0.02 for run in result.after)


def test_the_check_says_whether_a_job_fits_and_which_run_misses(real_with_server_costs):
    fits, _ = calibrate(with_server(JOB, 0.2, 0.05), real_with_server_costs, UPDATES, {}, fit=False)
    assert fits.fits and all(run.ratio == pytest.approx(1.0) for run in fits.before)
    misses, job = calibrate(JOB, real_with_server_costs, UPDATES, {}, fit=False)
    assert not misses.fits and job is JOB
    assert misses.verdict().startswith("the simulation does not fit the real runs: backup k=1's real time is")


def test_a_ratio_far_below_one_is_printed_with_a_digit_that_is_not_zero():
    """Worker processes that answer in milliseconds against a job that describes seconds: 0.003x, not 0.00x."""
    far = Calibration({}, 20, [RateRun("bsp", 20, 80, 0.099, 33.5), RateRun("backup k=1", 20, 41, 0.062, 17.9)])
    assert [run.ratio_text for run in far.before] == ["0.003", "0.003"]
    assert "bsp's real time is 0.003x the simulated one (real / simulated: bsp 0.003, backup k=1 0.003;" \
        in far.verdict()
    assert RateRun("bsp", 20, 80, 0.5, 1.0).ratio_text == "0.50"


@pytest.mark.slow
@pytest.mark.processes
def test_cli_calibrates_a_job_on_real_processes_and_writes_a_job_that_loads(tiny_job, tmp_path):
    proc = autosync("calibrate", str(tiny_job), "--updates", "10", "--out", "cal/job.yaml", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "simulation against real runs of 10 updates" in proc.stdout
    record = json.loads((tmp_path / "cal" / "calibration.json").read_text())
    # the real runs' times are this machine's, so whether the job fits is read from them: the verdict
    # printed is the one the recorded ratios give, and only that one
    final = record["after"] or record["before"]
    fits = all(abs(r["real_seconds"] / r["simulated_seconds"] - 1.0) <= record["tolerance"] for r in final)
    assert final and record["fits"] == fits
    # after the fit, the fitted simulation's ratios (the table's real / fitted: it said "real / simulated")
    ratio = "real / fitted" if record["after"] else "real / simulated"
    verdicts = {True: f"the simulation fits the real runs ({ratio}: ", False: "the simulation does not fit the real runs"}
    assert verdicts[fits] in proc.stdout and verdicts[not fits] not in proc.stdout
    assert record["execution"]["clock"] == "real" and len(record["before"]) == 2
    job = load_job(tmp_path / "cal" / "job.yaml")
    assert job.cluster.server.apply_seconds == record["server"]["apply_seconds"]
    assert (tmp_path / "cal" / "job.yaml").read_text().startswith("# Calibrated against real runs")
    wrong = autosync("calibrate", str(tiny_job), "--clock", "virtual", cwd=tmp_path)
    no_traceback(wrong)
    assert wrong.returncode == 2 and "calibrate runs on --backend processes --clock real" in wrong.stderr
    (tmp_path / "taken" / "calibration.json").mkdir(parents=True)  # refused after the real runs, lost with them
    taken = autosync("calibrate", str(tiny_job), "--updates", "10", "--out", "taken/job.yaml", cwd=tmp_path)
    no_traceback(taken)
    assert taken.returncode == 2 and "error: --out: taken/calibration.json is a directory" in taken.stderr
    assert "simulation against real runs" not in taken.stdout  # before any run


def test_a_run_that_stops_short_of_its_updates_is_one_line_not_a_rate():
    """A diverged run (2 of 20 updates) was reported as a run of 20 updates, and its rate fitted."""
    from autosync.core.errors import RuntimeFailure

    diverging = small_job(workload__optimizer={"lr": 1e30}, workload__model={"name": "mlp", "hidden": [16]})
    with pytest.raises(RuntimeFailure, match=r"bsp: the run stopped after \d+ of its 20 updates \(diverged\): the "
                                             r"rates compare whole runs"):
        measure_real(diverging, simulated_runner(), 20)
