"""`--n-jobs` when it is not given: every core for the race on the simulator (its answer and cost do not
depend on it), one process for the rest; a helper whose command was killed stops by itself."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import types
from pathlib import Path

import joblib
import pytest

from autosync.api import load_job
from autosync.core import main_module
from autosync.race import WIDEST_ROUND
from autosync.search.request import TuneRequest
from autosync.search.study.storage import open_storage
from autosync.search.tune import load_study, run_trials
from autosync.search.study.helper_processes import usable_cores
from autosync.search.tune_options import TuneOptions
from tests.conftest import start_autosync, wait_for

CORES = 3  # a machine's cores as the request sees them (the suite itself pins one: conftest)


@pytest.fixture
def cores(monkeypatch) -> int:
    """CORES usable, under the command line (whose main module a spawned helper may import)."""
    monkeypatch.setattr("autosync.search.request.usable_cores", lambda: CORES)
    monkeypatch.setattr("autosync.search.request.reimport_is_safe", lambda: True)
    return CORES


def _n_jobs(tiny_job: Path, tmp_path: Path, **options) -> int:
    options.setdefault("storage", f"sqlite:///{tmp_path / 's.db'}")
    return TuneRequest.from_options(load_job(tiny_job), TuneOptions(**options)).n_jobs


def test_usable_cores_are_the_cores_this_process_may_run_on():
    assert 1 <= usable_cores() == joblib.cpu_count() <= len(os.sched_getaffinity(0))


def test_the_race_on_the_simulator_runs_on_every_core_by_default(tiny_job, tmp_path, cores):
    assert _n_jobs(tiny_job, tmp_path) == cores  # --space policy: the race
    assert _n_jobs(tiny_job, tmp_path, sampler="race") == cores


@pytest.mark.parametrize("options", [
    {"space": "static_k"},  # TPE: its answer depends on which process finishes a trial first
    {"sampler": "random"},
    {"table": "a-table"},  # a replay reads its runs
    {"storage": "sqlite:///:memory:"},  # no other process can share it
    {"backend": "processes"},  # worker processes time their runs on the machine's cores
])
def test_every_other_search_runs_in_one_process_by_default(tiny_job, tmp_path, cores, options):
    if "table" in options:
        options["table"] = str(tmp_path / options["table"])
    assert _n_jobs(tiny_job, tmp_path, **options) == 1


def test_no_more_processes_than_the_race_s_widest_round_can_keep_busy(tiny_job, tmp_path, monkeypatch):
    monkeypatch.setattr("autosync.search.request.usable_cores", lambda: 64)
    monkeypatch.setattr("autosync.search.request.reimport_is_safe", lambda: True)
    assert _n_jobs(tiny_job, tmp_path) == WIDEST_ROUND < 64


def test_a_script_whose_main_module_is_not_known_to_be_guarded_runs_in_one_process(tiny_job, tmp_path, cores,
                                                                                  monkeypatch):
    monkeypatch.setattr("autosync.search.request.reimport_is_safe", lambda: False)
    assert _n_jobs(tiny_job, tmp_path) == 1


def test_only_a_guarded_entry_point_or_an_interactive_interpreter_may_be_imported_again(monkeypatch):
    monkeypatch.setattr(main_module, "_guarded", False)
    script = types.ModuleType("__main__")
    script.__file__ = "/home/user/tune_my_job.py"
    monkeypatch.setitem(sys.modules, "__main__", script)
    assert not main_module.reimport_is_safe()  # its top level would run again in each helper
    del script.__file__
    assert main_module.reimport_is_safe()  # python with no script: nothing to import again
    script.__file__ = "/venv/bin/autosync"
    main_module.declare_guarded()  # the command line's entry point
    assert main_module.reimport_is_safe()


@pytest.mark.slow  # a race of the tiny job from a script: about 6 s
def test_a_script_calling_tune_at_its_top_level_gets_the_answer_and_no_error(tiny_job, tmp_path):
    script = tmp_path / "tune_it.py"
    script.write_text("import autosync.api as autosync\n"
                      f"found = autosync.tune(autosync.load_job({str(tiny_job)!r}), storage='sqlite:///s.db')\n"
                      "print(found.cache['best_policy']['policy'])\n")
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and done.stdout.strip() and not done.stderr.strip(), done.stderr[-2000:]


def test_a_given_n_jobs_is_kept(tiny_job, tmp_path, cores):
    assert _n_jobs(tiny_job, tmp_path, n_jobs=1) == 1
    assert _n_jobs(tiny_job, tmp_path, space="static_k", n_jobs=2) == 2


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _ended(pid: int) -> bool:
    """Gone, or a zombie nobody reaped (its parent was killed, and the new one may not reap)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (OSError, IndexError):
        return True


def _helper_of(pid: int) -> int | None:
    """A race helper of process `pid`: a child running Python's spawn entry point (not its resource tracker)."""
    for child in _children(pid):
        try:
            cmdline = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(b"spawn_main" in part for part in cmdline):
            return child
    return None


@pytest.mark.slow  # a tune that spawns a helper (an interpreter importing torch): about 12 s
def test_a_race_helper_stops_by_itself_when_its_command_is_killed(tiny_job, tmp_path):
    job = tiny_job.with_name("long.yaml")  # the race is still on when it is killed
    job.write_text(tiny_job.read_text().replace("max_virtual_seconds: 20", "max_virtual_seconds: 200"))
    tune = start_autosync("tune", str(job), "--sampler", "race", "--n-jobs", "2",
                          "--storage", f"sqlite:///{tmp_path / 's.db'}", cwd=tmp_path)
    try:
        helper = wait_for(lambda: _helper_of(tune.pid) or tune.poll() is not None, 120, "a helper process")
        assert tune.poll() is None, tune.communicate()[1][-2000:]
        tune.send_signal(signal.SIGKILL)  # the command only: nothing sets the helper's stop event now
        tune.wait()
        wait_for(lambda: _ended(helper), 240, f"helper {helper} to stop after its command was killed")
    finally:
        if tune.poll() is None:
            tune.kill()


def test_a_tpe_helper_runs_no_trial_once_its_command_is_gone(tiny_job, tmp_path):
    """A TPE search's helper runs `run_trials` with `orphaned` (`Parent.gone`): once it holds, the helper
    takes no further trial of the budget, where it ran the rest of the budget unattended before."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    request = TuneRequest.from_options(load_job(tiny_job), TuneOptions(space="static_k", storage=url, n_trials=6,
                                                                       patience=0))
    study = load_study(request, open_storage(url))
    def finished() -> int:
        return sum(t.state.is_finished() for t in study.trials)

    run_trials(study, request, {"final_metric": 0.0}, budget=6, deadline=None,
               orphaned=lambda: finished() >= 2)  # the command is gone once two trials have finished
    assert finished() == 2 < 6
