"""`autosync tune --backend processes`: every trial trains on worker processes, virtual or real clock."""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import signal
from pathlib import Path

import pytest

from autosync.engine.backends import BackendChoice
from autosync.search.study.cache import study_name
from autosync.policy_score import RunFailed, evaluate
from tests.conftest import (
    TINY_TUNE, autosync, computing_workers, no_traceback, signal_and_wait, small_job, start_autosync, wait_for,
)


def _trials(db) -> list[tuple[dict, list[float]]]:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    (summary,) = optuna.get_all_study_summaries(f"sqlite:///{db}")
    study = optuna.load_study(study_name=summary.study_name, storage=f"sqlite:///{db}")
    return [(t.params, t.values) for t in study.trials], study


@pytest.mark.slow
@pytest.mark.processes
def test_a_processes_tune_on_the_virtual_clock_gives_the_simulators_trial_values(tiny_job, tmp_path,
                                                                                tiny_simulated_tune):
    sim_db, sim = tiny_simulated_tune  # the same job and options on the simulator
    proc = autosync("tune", str(tiny_job), *TINY_TUNE, "--storage", "sqlite:///proc.db", "--backend", "processes",
                    cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    sim_trials, _ = _trials(sim_db)
    proc_trials, study = _trials(tmp_path / "proc.db")
    assert proc_trials == sim_trials  # bit for bit: the same policies, the same values
    assert study.study_name.endswith("-policy-processes-virtual-cpu")
    cache = json.loads(proc.stdout)["cache"]
    assert cache["execution"] == {"backend": "processes", "device": "cpu", "clock": "virtual", "processes": 2}
    assert json.loads(sim.stdout)["cache"]["execution"] == {"backend": "simulator", "device": "cpu"}


@pytest.mark.slow
@pytest.mark.processes
def test_a_real_clock_tune_finishes_and_caches_its_backend(tiny_job, tmp_path):
    args = ("tune", str(tiny_job), "--sampler", "tpe", "--n-trials", "2", "--storage", "sqlite:///real.db", "--backend", "processes",
            "--clock", "real", "--stragglers", "model", "--time-scale", "0.02", "--json")
    first = autosync(*args, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    cache = json.loads(first.stdout)["cache"]
    assert cache["execution"]["clock"] == "real" and cache["execution"]["time_scale"] == 0.02
    again = autosync(*args, cwd=tmp_path)  # a recurring job on the same backend: the cache answers
    assert again.returncode == 0 and json.loads(again.stdout)["cached"] is True
    simulated = autosync("tune", str(tiny_job), "--sampler", "tpe", "--n-trials", "2", "--storage", "sqlite:///real.db", "--json",
                         cwd=tmp_path)  # the simulator's study is another: a real result never answers for it
    assert simulated.returncode == 0 and json.loads(simulated.stdout)["cached"] is False


def test_the_cache_key_separates_backends():
    job = small_job()

    class Space:
        name = "static_k"

    names = {study_name(job, Space(), b) for b in (
        None, BackendChoice(), BackendChoice(backend="processes"),
        BackendChoice(backend="processes", clock="real"),
        BackendChoice(backend="processes", clock="real", stragglers="model", time_scale=0.05))}
    assert len(names) == 4  # the simulator is one, however it is named
    assert study_name(job, Space()) == f"{job.fingerprint()}-static_k"  # existing caches still match


@pytest.mark.processes
def test_a_trial_whose_worker_processes_die_fails_with_its_reason():
    job = small_job(budget={"max_virtual_seconds": 60})
    backend = BackendChoice(backend="processes", processes=1, worker_timeout=20)

    before = {p.pid for p in multiprocessing.active_children()}  # other tests' pools (joblib's) are not ours

    def kill_workers(info: dict, step: int) -> None:
        for child in multiprocessing.active_children():
            if child.pid not in before:
                os.kill(child.pid, signal.SIGKILL)

    with pytest.raises(RunFailed, match="the processes backend failed"):
        evaluate(job, {"policy": "bsp", "params": {}}, [0], report=kill_workers, backend=backend)
    assert {p.pid for p in multiprocessing.active_children()} <= before


@pytest.mark.parametrize("args, message", [
    (["--backend", "distributed"], "--backend distributed runs under torchrun"),
    (["--clock", "real"], "--clock real needs --backend processes or distributed"),
])
def test_bad_backend_options_for_tune_exit_2(tiny_job, tmp_path, args, message):
    proc = autosync("tune", str(tiny_job), "--n-trials", "1", *args, cwd=tmp_path)
    assert proc.returncode == 2
    no_traceback(proc)
    assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


# ---------------------------------------------------------------- --verify-top: simulation verified


@pytest.mark.slow
@pytest.mark.processes
def test_verify_top_reruns_the_best_candidates_and_bsp_on_the_backend(tiny_job, tmp_path):
    args = ("tune", str(tiny_job), "--n-trials", "4", "--sampler", "random", "--storage", "sqlite:///v.db",
            "--backend", "processes", "--verify-top", "2", "--out", "plots", "--json")
    proc = autosync(*args, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    v = out["verification"]
    assert v["execution"]["backend"] == "processes" and v["execution"]["clock"] == "virtual"
    assert len(v["rows"]) in (2, 3) and {"policy": "bsp", "params": {}} in [r["policy"] for r in v["rows"]]
    for r in v["rows"]:  # on the virtual clock the processes backend is the simulator, bit for bit
        assert r["real_time"] == r["simulated_time"] and r["real_over_simulated"] == 1.0
    assert v["same_winner"] and v["winner_gap"] == 1.0
    # equal real and simulated times rank the candidates alike: tau is 1 (None would mean all tied)
    assert len({r["simulated_time"] for r in v["rows"]}) >= 2 and v["kendall_tau"] == 1.0
    assert out["cache"]["verified"]["real_winner"] == out["cache"]["best_policy"]
    assert not out["study"].endswith("processes-virtual-cpu")  # the search itself was simulated
    for name in ("verify.md", "verify.json", "sim_vs_real.png"):
        assert (tmp_path / "plots" / name).stat().st_size > 0
    again = autosync(*args, cwd=tmp_path)  # verified on this backend already: nothing runs again
    assert again.returncode == 0 and json.loads(again.stdout)["verification"] is None
    bad = autosync("tune", str(tiny_job), "--verify-top", "2", cwd=tmp_path)
    assert bad.returncode == 2 and "--verify-top re-runs the simulated search's best" in bad.stderr


def test_kendall_tau_and_the_cache_answering_with_the_real_winner():
    from autosync.search.strategies.verify import Verification, _kendall_tau, with_verification

    assert _kendall_tau([(1, 10), (2, 20), (3, 30)]) == 1.0
    assert _kendall_tau([(1, 30), (2, 20), (3, 10)]) == -1.0
    assert _kendall_tau([(1, 10), (2, 30), (3, 20)]) == pytest.approx(1 / 3)
    assert _kendall_tau([(1, 10)]) is None
    fast, slow = {"policy": "asp", "params": {}}, {"policy": "bsp", "params": {}}
    v = Verification({"backend": "processes"}, [0], rows=[
        {"policy": fast, "simulated_time": 5.0, "real_time": 9.0},
        {"policy": slow, "simulated_time": 8.0, "real_time": 7.0}],
        kendall_tau=-1.0, simulated_winner=fast, real_winner=slow, same_winner=False, winner_gap=9 / 7)
    record = with_verification({"best_policy": fast, "best_value": 5.0, "trials": 3, "bsp_time_to_target": 8.0,
                                "speedup_vs_bsp": 1.6}, v)
    assert record["best_policy"] == slow and record["simulated_best_policy"] == fast and record["best_value"] == 8.0
    assert record["speedup_vs_bsp"] == 1.0  # the answered policy's, not the search winner's
    assert record["verified"]["real_winner"] == slow and "rows" not in record["verified"]


def test_after_a_verification_one_winner_line_gives_the_answer_on_both_clocks():
    from autosync import cli
    from autosync.search.strategies.verify import Verification

    winner, bsp = {"policy": "backup", "params": {"k": 5}}, {"policy": "bsp", "params": {}}
    v = Verification({"backend": "processes", "clock": "real"}, [0], rows=[
        {"policy": {"policy": "backup", "params": {"k": 2}}, "simulated_time": 46.0, "real_time": 80.0},
        {"policy": winner, "simulated_time": 62.0, "real_time": 64.0},
        {"policy": bsp, "simulated_time": 171.0, "real_time": 176.0}],
        kendall_tau=1 / 3, simulated_winner={"policy": "backup", "params": {"k": 2}}, real_winner=winner,
        same_winner=False)
    assert v.answer()["real_speedup"] == pytest.approx(176 / 64)
    for row in v.rows:
        row.update(real_over_simulated=row["real_time"] / row["simulated_time"], real_final_metric=0.97,
                   real_feasible=True)
    from autosync.reporting.console import verification_report

    with cli.console.capture() as captured:
        cli._show(verification_report(v))
    line = " ".join(captured.get().split())
    assert "the cache answers with backup(k=5): real 64.00 s vs BSP 176.00 s (2.75x faster than BSP " \
           "on the real clock); simulated 62.00 s vs BSP 171.00 s (2.76x faster than BSP)" in line, line


@pytest.mark.slow
@pytest.mark.processes
@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGKILL], ids=["ctrl-c", "killed"])
def test_an_interrupted_or_killed_real_backend_tune_leaves_no_process_and_no_shared_memory(tiny_job, tmp_path, stop):
    long_job = tmp_path / "long.yaml"
    long_job.write_text(re.sub(r"max_virtual_seconds: \d+", "max_virtual_seconds: 100000", tiny_job.read_text()))
    shm_before = set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()
    tune = start_autosync("tune", str(long_job), "--backend", "processes",
                          "--storage", f"sqlite:///{tmp_path}/s.db", cwd=tmp_path)
    children = computing_workers(tune.pid, 2, 120)  # computing the BSP reference run's gradients
    assert len(children) == 2, "the trial's worker processes did not start"
    stderr = signal_and_wait(tune, stop)
    assert "Traceback" not in stderr, stderr[-3000:]
    left = lambda: [c for c in children if Path(f"/proc/{c}").exists()]  # noqa: E731
    wait_for(lambda: not left(), 15, lambda: f"the worker processes to end ({left()} still there)")
    left = {f for f in set(os.listdir("/dev/shm")) - shm_before if f.startswith(("torch_", "psm_"))} \
        if os.path.isdir("/dev/shm") else set()
    assert not left, left


def test_no_speedup_is_claimed_over_a_bsp_that_missed_the_target():
    """A run that missed the target has a miss's score for its time (twice the seconds it ran): the answer
    after a verification gives no speedup on the clock where BSP, or the answer, missed."""
    from autosync.search.strategies.verify import Verification

    winner, bsp = {"policy": "backup", "params": {"k": 1}}, {"policy": "bsp", "params": {}}
    v = Verification({"backend": "processes"}, [0], real_winner=winner, rows=[
        {"policy": winner, "simulated_time": 20.0, "real_time": 21.0, "simulated_reached": 1, "real_reached": 1,
         "runs": 1},
        {"policy": bsp, "simulated_time": 40.0, "real_time": 60.0, "simulated_reached": 1, "real_reached": 0,
         "runs": 1}])
    answer = v.answer()
    assert answer["real_speedup"] is None and answer["simulated_speedup"] == 2.0
