"""What a tune says when it is interrupted or killed and resumed, and processes started together on one study
never training the same policy twice."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autosync.core.family import load_family
from autosync.data import BASELINE_DIR
from autosync.table import Table
from tests.conftest import autosync, freeze_when, signal_and_wait, spawned_children, start_autosync
from tests.kill_storm import Zygote

pytestmark = [pytest.mark.slow, pytest.mark.processes]


def _trials(db: Path, state: str) -> int:
    try:
        with contextlib.closing(sqlite3.connect(db, timeout=30)) as con:
            return con.execute("select count(*) from trials where state = ?", (state,)).fetchone()[0]
    except sqlite3.OperationalError:  # no tables yet
        return 0


def _mid_trial(db: Path) -> bool:
    """Two to four trials of the budget finished (completed or pruned, their role written) and one of the
    search running inside its objective: tagged with its process, and what it spent not written yet.

    Counted by their role, as the tune counts what it kept (a trial answered from a twin is not of the
    budget); at most four, so that a trial that ends while a signal waits for a storage call to return
    still leaves the six-trial budget unfinished. Inside the objective, since elsewhere a signal finds
    the trial in states the test is not about:
      - between Optuna's `ask`, which makes the trial RUNNING, and the objective's process tag (the sampler
        proposing, Optuna starting the trial's heartbeat thread): a process killed there leaves a trial
        nobody can tell is dead until the heartbeat grace runs out, and the tune resumed then waits out
        that grace (about a minute) before it runs the trial again; Ctrl-C there leaves the same trial, and
        can leave the heartbeat thread running, so that the interrupted command never exits;
      - as the objective writes the trial's role on its way out: a Ctrl-C held until that write returns
        fails a trial whose role already says budget.
    Until it writes what it spent (`virtual_seconds`), the objective has another storage call to make
    before that last one: a Ctrl-C held until a call returns is raised inside the objective."""
    try:  # a short wait for a lock: the tune may be frozen holding one (`freeze_when`), and is looked at again
        with contextlib.closing(sqlite3.connect(db, timeout=1)) as con:
            (finished,) = con.execute("select count(*) from trials join trial_user_attributes using (trial_id) "
                                      "where state in ('COMPLETE', 'PRUNED') and key = 'role' "
                                      "and value_json = '\"budget\"'").fetchone()
            running: dict[int, set[str]] = {}
            for trial, key in con.execute("select trial_id, key from trials left join trial_user_attributes "
                                          "using (trial_id) where state = 'RUNNING'"):
                running.setdefault(trial, set()).add(key)
    except sqlite3.OperationalError:  # no tables yet
        return False
    if not (2 <= finished <= 4 and len(running) == 1):
        return False
    (keys,) = running.values()
    # a search trial, not a full-budget check or a repair after the search
    return "process" in keys and not keys & {"virtual_seconds", "role", "full_budget_check_of", "repair_of"}


def _start_and_stop_after_a_trial(job: Path, tmp_path: Path, sig: int,
                                  env: dict | None = None) -> tuple[subprocess.Popen, str]:
    """Start a tune, send it `sig` in its third to fifth trial; the process and its stderr once it has exited."""
    db = tmp_path / "s.db"
    tune = start_autosync("tune", str(job), "--space", "static_k", "--patience", "0", "--n-trials", "6",
                          "--storage", f"sqlite:///{db}", cwd=tmp_path, env=env)
    if not freeze_when(tune, lambda: _mid_trial(db)):
        tune.kill()
        raise AssertionError(f"the tune never got into its third trial; its stderr ends: {tune.communicate()[1][-2000:]}")
    return tune, signal_and_wait(tune, sig)  # sent to the frozen tune, which it then lets go on (SIGCONT)


def _long(tiny_job: Path, threshold: float = 0.8) -> Path:
    """The tiny job with a 60 s budget (and a target at `threshold`: 0.99 is never met, so every trial
    trains the whole budget and is still running when the test stops the tune)."""
    path = tiny_job.with_name("long.yaml")
    text = re.sub(r"max_virtual_seconds: \d+", "max_virtual_seconds: 60", tiny_job.read_text())
    path.write_text(text.replace("threshold: 0.8", f"threshold: {threshold}"))
    return path


def test_ctrl_c_says_what_was_kept_and_the_command_that_resumes(tiny_job, tmp_path):
    job = _long(tiny_job)
    tune, stderr = _start_and_stop_after_a_trial(job, tmp_path, signal.SIGINT)
    assert tune.returncode == 130 and "Traceback" not in stderr, stderr[-3000:]
    line = [x for x in stderr.splitlines() if x.startswith("error: interrupted")]
    assert len(line) == 1, stderr
    # what it kept: its finished trials of the budget and BSP's reference runs (the trials answered from them,
    # the checks, are the search's own: not counted)
    kept = int(re.search(r"interrupted: (\d+) finished trials? of the budget and BSP's reference runs of study \S+ "
                         r"kept in sqlite:///", line[0]).group(1))
    assert kept >= 2 and line[0].endswith(f"autosync tune {job} --space static_k --patience 0 --n-trials 6 "
                                          f"--storage sqlite:///{tmp_path}/s.db")
    resumed = autosync("tune", str(job), "--space", "static_k", "--patience", "0", "--n-trials", "6", "--storage",
                       f"sqlite:///{tmp_path}/s.db", cwd=tmp_path)  # the whole budget: static_k's patience gives up
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert f"resuming the study: {kept} finished trials of the budget and BSP's reference runs found" \
        in resumed.stderr
    assert f": {6 - kept} trial{'' if kept == 5 else 's'} run by this command, 6 in all" in resumed.stdout
    with sqlite3.connect(tmp_path / "s.db") as con:  # the study shows the budget: 6 trials whose role is budget
        roles = [r for (r,) in con.execute("select value_json from trial_user_attributes a join trials t using "
                                           "(trial_id) where a.key = 'role' and t.state in ('COMPLETE', 'PRUNED')")]
    assert roles.count('"budget"') == 6, roles


def test_a_killed_tune_resumed_says_which_dead_trial_it_runs_again(tiny_job, tmp_path):
    env = {**os.environ, "AUTOSYNC_HEARTBEAT_SECONDS": "1", "PYTHONFAULTHANDLER": "1"}
    job = _long(tiny_job, threshold=0.99)
    tune, _ = _start_and_stop_after_a_trial(job, tmp_path, signal.SIGKILL, env)
    assert tune.returncode == -signal.SIGKILL  # reaped: a process of this machine that is gone, its trial dead at once
    # the same command again, in this process (no new imports to pay; its heartbeat is the default 30 s: a trial
    # whose process of this machine is gone is dead at once whatever the interval)
    resumed = autosync("tune", str(job), "--space", "static_k", "--patience", "0", "--n-trials", "6", "--storage",
                       f"sqlite:///{tmp_path}/s.db", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert re.search(r"resuming the study: \d+ finished trials? of the budget and BSP's reference runs found; 1 trial "
                     r"whose process died \(#\d+\) re-queued",
                     resumed.stderr), resumed.stderr
    # nothing finished was lost and the budget is whole: the dead trial failed, the rest completed or pruned
    db = tmp_path / "s.db"
    assert _trials(db, "COMPLETE") + _trials(db, "PRUNED") >= 6 and _trials(db, "RUNNING") == 0
    with sqlite3.connect(db) as con:  # exactly the budget's 6 trials say so; the killed one says it was killed
        roles = [r for (r,) in con.execute("select value_json from trial_user_attributes where key = 'role'")]
    assert roles.count('"budget"') == 6 and roles.count('"killed"') == 1, roles


def _trials_in_order(db: Path) -> list[tuple[str, str | None, dict]]:
    """(state, role, parameters) of each trial the study holds, in the order they started."""
    with contextlib.closing(sqlite3.connect(db)) as con:
        order = [n for (n,) in con.execute("select number from trials order by datetime_start, number")]
        states = dict(con.execute("select number, state from trials"))
        roles = dict(con.execute("select t.number, a.value_json from trial_user_attributes a join trials t "
                                 "using (trial_id) where a.key = 'role'"))
        params: dict[int, dict] = {}
        for number, name, value in con.execute("select t.number, p.param_name, p.param_value from trial_params p "
                                               "join trials t using (trial_id)"):
            params.setdefault(number, {})[name] = value
    return [(states[n], roles.get(n), params.get(n, {})) for n in order]


def _first_trained_trial_running(db: Path) -> bool:
    """BSP's trial answered from its reference runs, and the next queued one (ASP) running in its objective."""
    try:
        with contextlib.closing(sqlite3.connect(db, timeout=1)) as con:
            finished = con.execute("select count(*) from trials where state = 'COMPLETE'").fetchone()[0]
            running = con.execute("select count(*) from trials t join trial_user_attributes a using (trial_id) "
                                  "where t.state = 'RUNNING' and a.key = 'process'").fetchone()[0]
    except sqlite3.OperationalError:  # no tables yet
        return False
    return finished == 1 and running == 1


def test_a_tpe_search_cut_short_in_its_first_queued_trial_runs_it_again_in_its_place(tiny_job, tmp_path):
    """Ctrl-C in a new study's first trained trial (ASP, queued with fixed parameters ahead of the sampler's):
    the resumed search runs ASP again, in its place, then the other queued points in the order a search never
    stopped runs them, to the same answer. ASP was failed and never run again (the first points are queued
    only in a new study), and the points the interrupted command had trained were taken for another process's
    twins, proposed again. (TPE's later proposals may differ: its history lists trials by number, and the
    re-run has a later one.)"""
    job = _long(tiny_job)
    argv = ["tune", str(job), "--sampler", "tpe", "--n-trials", "7", "--patience", "0"]
    whole = autosync(*argv, "--storage", "sqlite:///whole.db", cwd=tmp_path)
    assert whole.returncode == 0, whole.stderr[-2000:]
    db = tmp_path / "cut.db"
    tune = start_autosync(*argv, "--storage", f"sqlite:///{db}", cwd=tmp_path)
    if not freeze_when(tune, lambda: _first_trained_trial_running(db)):
        tune.kill()
        raise AssertionError(f"the tune never started its first trained trial: {tune.communicate()[1][-2000:]}")
    stderr = signal_and_wait(tune, signal.SIGINT)
    assert tune.returncode == 130 and "Traceback" not in stderr, stderr[-3000:]
    resumed = autosync(*argv, "--storage", f"sqlite:///{db}", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    cut, ran = _trials_in_order(db), _trials_in_order(tmp_path / "whole.db")
    # (cut after it suggested some of its parameters, or all)
    assert cut[1][:2] == ("FAIL", '"interrupted"') and cut[1][2].items() <= ran[1][2].items() \
        and "asp.lr_rule" in ran[1][2], cut
    again = [c for c in cut if c[0] != "FAIL"]
    queued = [i for i, c in enumerate(ran) if c[1] in ('"budget"', '"answered"')][:5]  # BSP, ASP, 3 baselines
    assert [again[i] for i in queued] == [ran[i] for i in queued], (again, ran)
    assert sum(c[1] == '"budget"' for c in again) == 7
    answer = [line for line in whole.stdout.splitlines() if line.startswith("best:")]
    assert answer and answer == [line for line in resumed.stdout.splitlines() if line.startswith("best:")]


def test_processes_started_together_never_train_one_policy_twice(tiny_job, tmp_path):
    """Four processes seeded alike draw the same start-up points: each proposal another process trains or
    trained is proposed again (up to MAX_RESAMPLES times in a row, then answered from the twin without
    training), so the 6 trials of the budget train distinct policies, and each process reports the trials it
    ran itself.

    The budget's trials are the ones whose role is budget: completed, pruned, or failed for a reason of
    their own (a policy that diverged, or parameters invalid for the job: no canonical policy). Which
    policies TPE proposes depends on how the four processes interleave, so a run may or may not hold such
    a failure, or a repair after a failed check (the search's own, as the checks are); none of them is
    told by its state or by its canonical policy alone."""
    db = tmp_path / "s.db"
    argv = ["tune", str(tiny_job), "--sampler", "tpe", "--n-trials", "6", "--storage", f"sqlite:///{db}",
            "--patience", "0"]  # the whole budget (a search that stops improving gives up places: test_patience)
    # four processes forked within milliseconds of each other from one that imported autosync and torch once
    # (`Zygote`), each with its output in its own log: started together, without four interpreter start-ups
    logs = [tmp_path / f"tune-{i}.log" for i in range(4)]
    zygote = Zygote(dict(os.environ))
    try:
        pids = [zygote.start(argv, tmp_path, log) for log in logs]
        codes = [zygote.wait(pid, 600) for pid in pids]
    finally:
        zygote.close()
    outs = [log.read_text() for log in logs]
    assert codes == [0] * 4, [out[-1500:] for out in outs]
    with contextlib.closing(sqlite3.connect(db)) as con:
        rows = con.execute("select t.number, t.state, (select c.value_json from trial_user_attributes c where "
                           "c.trial_id = t.trial_id and c.key = 'canonical_policy'), exists(select 1 from "
                           "trial_user_attributes c where c.trial_id = t.trial_id and c.key = 'same_as_trial') "
                           "from trials t join trial_user_attributes a on a.trial_id = t.trial_id "
                           "where t.state <> 'RUNNING' and a.key = 'role' and a.value_json = '\"budget\"'"
                           ).fetchall()
    assert len(rows) == 6, rows
    # a copy is answered from its twin, untrained (a proposal like a pruned trial is pruned again, untrained);
    # invalid parameters fail before training
    trained = [value for _, _, value, copied in rows if not copied and value is not None]
    assert len(set(trained)) == len(trained) >= 3, rows
    # a process that starts once the others have finished answers from the cache: it ran none
    said = [" ".join(out.split()) for out in outs]  # a line the console wrapped, joined again
    found = [re.search(r": (\d+) trials? run by this command, 6 in all", out) for out in said]
    assert all(m or "cache hit" in out for m, out in zip(found, said)), \
        [re.findall(r"study \S+: \d+ trials? run by this command, \d+ in all", out) or out[-800:] for out in said]
    ran = [int(m.group(1)) if m else 0 for m in found]
    assert sum(ran) == 6, ran
    with sqlite3.connect(db) as con:  # what the study shows: 6 finished trials whose role is budget
        roles = [r for (r,) in con.execute("select a.value_json from trial_user_attributes a join trials t using "
                                           "(trial_id) where a.key = 'role' and t.state <> 'RUNNING'")]
    assert roles.count('"budget"') == 6, roles


def _processes_tagged(db: Path) -> int:
    """How many processes have claimed a trial of the study (its trials' process tags)."""
    try:
        with contextlib.closing(sqlite3.connect(db, timeout=1)) as con:
            return con.execute("select count(distinct value_json) from trial_user_attributes "
                               "where key = 'process'").fetchone()[0]
    except sqlite3.OperationalError:  # no tables yet
        return 0


@pytest.mark.parametrize("when", ["helper starting", "both racing"])
def test_ctrl_c_on_a_race_in_two_processes_ends_the_helper_without_a_traceback(tiny_job, tmp_path, when):
    """A terminal sends Ctrl-C to every process of the command: the race's helper ends in silence, as it
    starts (its interpreter and torch loading) or while it runs a trial, and the command says what it kept
    in its one line. The target is never met (every run trains its whole budget), so the race is still running
    when the helper has claimed its first run: with a target the tiny job meets, the race could end in the
    moment between that claim and the Ctrl-C, which then reached a process already ending (exit -2)."""
    db = tmp_path / "s.db"
    tune = subprocess.Popen([sys.executable, "-m", "autosync.cli", "tune", str(_long(tiny_job, 0.99)), "--n-jobs", "2",
                             "--storage", f"sqlite:///{db}"], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    ready = (lambda: bool(spawned_children(tune.pid))) if when == "helper starting" \
        else (lambda: _processes_tagged(db) >= 2)
    deadline = time.monotonic() + 120
    while not ready() and tune.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert tune.poll() is None, f"the race ended before the test could interrupt it: {tune.communicate()[1][-2000:]}"
    os.killpg(tune.pid, signal.SIGINT)
    stderr = tune.communicate(timeout=60)[1]
    assert tune.returncode == 130 and "Traceback" not in stderr, stderr[-3000:]
    assert len([x for x in stderr.splitlines() if x.startswith("error: interrupted")]) == 1, stderr


@pytest.mark.parametrize("to", ["the command", "its process group"])
def test_sigterm_ends_a_race_in_two_processes_as_ctrl_c_does_and_leaves_no_temporary_folder(tiny_job, tmp_path, to):
    """SIGTERM sent to the command's process alone (`kill PID`), or to every process of the command (`timeout`,
    a scheduler's time limit), while it and its helper train runs of the whole budget: the helper handles it
    as Ctrl-C (passed on by the command, or its own) and ends its run rather than finishing it, and the
    command says what it kept in one line, exit status 130, leaving no folder of kept runs in the temporary
    directory and no semaphores behind. SIGTERM's default ended the command on the spot, leaving both (and a
    helper so ended left its trial running)."""
    db, temporary = tmp_path / "s.db", tmp_path / "tmp"
    temporary.mkdir()
    tune = subprocess.Popen([sys.executable, "-m", "autosync.cli", "tune", str(_long(tiny_job, 0.99)), "--n-jobs", "2",
                             "--storage", f"sqlite:///{db}"], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env={**os.environ, "TMPDIR": str(temporary)})
    deadline = time.monotonic() + 120
    while _processes_tagged(db) < 2 and tune.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert tune.poll() is None, f"the race ended before the test could stop it: {tune.communicate()[1][-2000:]}"
    if to == "the command":
        os.kill(tune.pid, signal.SIGTERM)
    else:
        os.killpg(tune.pid, signal.SIGTERM)
    stderr = tune.communicate(timeout=60)[1]
    assert tune.returncode == 130 and "Traceback" not in stderr and "leaked" not in stderr, stderr[-3000:]
    assert len([x for x in stderr.splitlines() if x.startswith("error: interrupted")]) == 1, stderr
    assert not list(temporary.glob("autosync-forks-*"))
    # (a trial may still be left running where the signal fell between Optuna's ask and the objective's process
    # tag, as with Ctrl-C: `_mid_trial`; the resumed search re-queues it at once, its process being gone)


def test_ctrl_c_on_a_table_build_keeps_the_cells_computed_and_says_how_many(tmp_path):
    """A terminal's Ctrl-C reaches the build and joblib's workers: the workers never take it (no traceback
    of theirs), and the build says in one line how many cells it computed are kept for the same command to
    resume from; they are in the table."""
    out = tmp_path / "table"
    build = subprocess.Popen([sys.executable, "-m", "autosync.cli", "table", str(BASELINE_DIR / "family_quarry.yaml"),
                              "--jobs", "1", "--n-jobs", "2", "--out", str(out)], cwd=tmp_path,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    while not any(f.stat().st_size for f in out.glob("*.jsonl")) and build.poll() is None \
            and time.monotonic() < deadline:
        time.sleep(0.05)
    assert build.poll() is None, f"the build ended before the test could interrupt it: {build.communicate()[1][-2000:]}"
    os.killpg(build.pid, signal.SIGINT)
    stderr = build.communicate(timeout=60)[1]
    assert build.returncode == 130 and "Traceback" not in stderr, stderr[-3000:]
    (line,) = [x for x in stderr.splitlines() if x.startswith("error: interrupted")]
    kept = int(re.search(r"interrupted: (\d+) cells computed by this command are kept in ", line).group(1))
    job = load_family(BASELINE_DIR / "family_quarry.yaml").job(0)
    assert 1 <= kept <= len(Table(out).cells(job.fingerprint())), line


def test_ctrl_c_on_a_run_says_nothing_was_written_and_the_same_command_trains_it_again(tiny_job, tmp_path):
    """It said a bare 'error: interrupted', whatever was kept. The run is long (its budget is far out of reach
    of the test): Ctrl-C lands in training once its output folder exists."""
    job = tiny_job.with_name("endless.yaml")
    job.write_text(re.sub(r"max_virtual_seconds: \d+", "max_virtual_seconds: 1000000", tiny_job.read_text()))
    out = tmp_path / "out"
    run = start_autosync("run", str(job), "--out", str(out), cwd=tmp_path)
    deadline = time.monotonic() + 120
    while not out.exists() and run.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)  # into the training
    stderr = signal_and_wait(run, signal.SIGINT)
    assert run.returncode == 130 and "Traceback" not in stderr, stderr[-3000:]
    assert stderr.strip().splitlines()[-1] == (f"error: interrupted: the run was cut short, so nothing was written "
                                               f"to {out} (a run is written whole once it has ended); the same "
                                               "command trains it again")
    assert not out.exists()  # the empty folder it made is gone
