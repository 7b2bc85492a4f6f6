"""A kill storm: `autosync tune` processes sharing one study, SIGKILLed at random moments and started again.

Used by the shortened storm in the suite (tests/e2e/test_kill_storm.py) and the full one in
benchmarks/bench_kill_storm.py. Every process is forked from one parent that imported autosync, torch and
Optuna once (`Zygote`, as multiprocessing's forkserver does), so a process starts in milliseconds and a storm
of a hundred kills costs the trials it cuts short rather than a hundred interpreter start-ups (other tests
that start several tunes fork them from a `Zygote` too: tests/e2e/test_shared_study.py,
tests/e2e/test_interruptions.py). A kill lands anywhere: while the process opens the storage, trains BSP's
reference, claims a trial, commits it, sends a heartbeat, or writes the cache record. Afterwards `check` reads
the study from the storage: no trial running, none of the budget queued (a check a killed process queued may
be left: counted), the budget exact (the trials whose role is "budget"), every finished trial seen during the
storm still finished as it was (none lost), no policy trained twice in the budget (none duplicated), every
killed trial re-run, and the answer equal to the one of the same command run once without a kill.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.postgres import storage_rows

MAX_RETRIES = 3  # re-runs of one killed trial (`autosync.search.study.trials.RetryKilledTrial`'s max_retry)

#: What the zygote imports before it forks: what a tune needs, so that a forked process imports nothing more.
PRELOAD = ("autosync.cli", "autosync.api", "autosync.catalog", "autosync.policies", "autosync.search.tune",
           "autosync.search.objective",
           "autosync.search.strategies.samplers",
           "autosync.search.strategies.full_budget", "autosync.search.strategies.repair",
           "autosync.search.study.cache", "autosync.engine.simulator", "autosync.workloads.workload",
           "autosync.reporting.tune_files", "autosync.reporting.study_plots", "optuna", "optuna.visualization",
           "sqlalchemy", "alembic", "psycopg", "sklearn.datasets", "matplotlib.pyplot")

_ZYGOTE = textwrap.dedent("""
    import importlib, json, os, signal, sys
    for name in sys.argv[1:]:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    def reap(*_):
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            code = os.waitstatus_to_exitcode(status)
            os.write(1, (json.dumps({"exit": pid, "code": code}) + "\\n").encode())
    signal.signal(signal.SIGCHLD, reap)
    os.write(1, b'{"ready": true}\\n')
    for line in sys.stdin:
        order = json.loads(line)
        pid = os.fork()
        if pid == 0:
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            if order.get("session"):
                os.setsid()
            log = os.open(order["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND)
            os.dup2(log, 1)
            os.dup2(log, 2)
            os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
            os.chdir(order["cwd"])
            sys.argv = ["autosync", *order["argv"]]
            code = 0
            try:
                import autosync.cli
                autosync.cli.main()
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
            except BaseException:
                import traceback
                traceback.print_exc()
                code = 1
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
        os.write(1, (json.dumps({"started": pid}) + "\\n").encode())
    """)


class Zygote:
    """A parent process that imported `PRELOAD` once and forks `autosync ARGV` processes on request."""

    def __init__(self, env: dict[str, str]):
        self.proc = subprocess.Popen([sys.executable, "-c", _ZYGOTE, *PRELOAD], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, env=env, text=True, bufsize=1)
        self.exits: dict[int, int] = {}
        self._started: list[int] = []
        self._forked: list[tuple[int, bool]] = []  # every pid it started, and whether it leads a group
        self._lock = threading.Condition()
        assert json.loads(self.proc.stdout.readline()).get("ready")
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            message = json.loads(line)
            with self._lock:
                if "exit" in message:
                    self.exits[message["exit"]] = message["code"]
                else:
                    self._started.append(message["started"])
                self._lock.notify_all()

    def start(self, argv: list[str], cwd: Path, log: Path, session: bool = False) -> int:
        """Fork `autosync ARGV` in `cwd`, its output (stdout and stderr) appended to `log`; its pid. With
        `session`, it leads a new session and process group (its helper processes join it), as
        `subprocess.Popen(start_new_session=True)` makes one."""
        with self._lock:
            order = {"argv": argv, "cwd": str(cwd), "log": str(log), "session": session}
            self.proc.stdin.write(json.dumps(order) + "\n")
            self.proc.stdin.flush()
            self._lock.wait_for(lambda: self._started, timeout=60)
            self._forked.append((self._started[0], session))
            return self._started.pop(0)

    def wait(self, pid: int, timeout: float) -> int | None:
        """The exit code of `pid` (negative: the signal that ended it), None if still running after `timeout`."""
        with self._lock:
            self._lock.wait_for(lambda: pid in self.exits, timeout=timeout)
            return self.exits.get(pid)

    def close(self) -> None:
        """Kill what it started that still runs (a test that failed before they ended), then end it."""
        with self._lock:
            running = [(pid, leads) for pid, leads in self._forked if pid not in self.exits]
        for pid, leads in running:
            try:
                (os.killpg if leads else os.kill)(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


@dataclass
class Storm:
    """What a storm did and what the study held after it."""

    processes: int
    kills: int = 0
    mid_trial: int = 0  # kills of a process with a trial running (tagged with its pid) just before
    retries_spent: list[int] = field(default_factory=list)  # killed trials whose re-runs ran out (not re-run)
    queued_checks: int = 0  # checks (or repairs) left queued, outside the budget: a resumed search runs them
    starts: int = 0
    wall_seconds: float = 0.0
    killed_trials: list[int] = field(default_factory=list)  # trials failed as killed
    problems: list[str] = field(default_factory=list)  # every broken promise, one line each (none: it held)
    roles: dict[str, int] = field(default_factory=dict)
    answer: dict[str, Any] | None = None


def finished(url: str) -> dict[int, str]:
    """{trial number: state} of the finished trials of the storage's one study."""
    return dict(storage_rows(url, "select number, state from trials where state in ('COMPLETE', 'PRUNED', 'FAIL')"))


def _in_trial(url: str, pids: list[int]) -> list[int]:
    """The indices of `pids` whose process has a trial running (tagged with its pid)."""
    running = storage_rows(url, "select a.value_json from trials t join trial_user_attributes a on "
                         "a.trial_id = t.trial_id where t.state = 'RUNNING' and a.key = 'process'")
    tags = {json.loads(v).rsplit(":", 1)[-1] for (v,) in running}
    return [i for i, pid in enumerate(pids) if str(pid) in tags]


AIM_WAIT = 60.0  # seconds an aimed kill waits for a process in a trial (`run_storm`)


def run_storm(argv: list[str], url: str, cwd: Path, processes: int, kills: int, seed: int = 0,
              lifetime: float = 6.0, aim: float = 0.0, env: dict[str, str] | None = None,
              timeout: float = 1800) -> Storm:
    """Run `autosync ARGV --storage URL` in `processes` processes at once; SIGKILL each at a random moment of
    its life (drawn uniformly up to `lifetime` seconds after its start) and start it again at once, until
    `kills` kills; then let them finish. A fraction `aim` of the kills instead waits for a process to be in
    a trial and kills it there (on a busy machine, random moments land mostly in start-ups). The storm
    stops early when the search is done (every process exited 0)."""
    env = {**os.environ, "AUTOSYNC_HEARTBEAT_SECONDS": "1", **(env or {})}
    rng = random.Random(seed)
    storm = Storm(processes)
    zygote = Zygote(env)
    args = [*argv, "--storage", url]
    logs = [cwd / f"storm-{i}.log" for i in range(processes)]
    seen: dict[int, str] = {}
    began = time.monotonic()
    try:
        pids = [zygote.start(args, cwd, log) for log in logs]
        deaths = [time.monotonic() + rng.uniform(0, lifetime) for _ in pids]
        storm.starts = processes
        while storm.kills < kills and time.monotonic() - began < timeout:
            i = min(range(processes), key=deaths.__getitem__)  # the next to die
            time.sleep(max(0.0, deaths[i] - time.monotonic()))
            alive = [j for j, pid in enumerate(pids) if pid not in zygote.exits]
            for j, pid in enumerate(pids):  # a process that ended by itself: an error, or the search is done
                code = zygote.exits.get(pid)
                if code not in (None, 0, -signal.SIGKILL):
                    storm.problems.append(f"process {j} exited {code}: {logs[j].read_text()[-600:]}")
            if not alive or storm.problems:
                break
            if rng.random() < aim:  # an aimed kill: the first process seen in a trial, waited for up to
                # AIM_WAIT seconds (not `lifetime`: where other work loads the machine, BSP's reference can take
                # longer than a lifetime, and kills at random moments alone then never reach a trial)
                until = time.monotonic() + max(lifetime, AIM_WAIT)
                while (not (busy := [j for j in _in_trial(url, pids) if j in alive]) and alive
                       and time.monotonic() < until):
                    time.sleep(0.05)
                    alive = [j for j, pid in enumerate(pids) if pid not in zygote.exits]
                i = rng.choice(busy) if busy else i
            if i in alive:
                storm.mid_trial += i in _in_trial(url, pids)
                os.kill(pids[i], signal.SIGKILL)
                zygote.wait(pids[i], 60)  # reaped: its trial is seen dead at once
                storm.kills += 1
                pids[i] = zygote.start(args, cwd, logs[i])
                storm.starts += 1
            deaths[i] = time.monotonic() + rng.uniform(0, lifetime)
            now = finished(url)
            storm.problems += [f"trial {n} was {s}, now {now.get(n)}" for n, s in seen.items() if now.get(n) != s]
            seen.update(now)
        for i, pid in enumerate(pids):
            code = zygote.wait(pid, max(60.0, timeout - (time.monotonic() - began)))
            if code != 0:
                storm.problems.append(f"process {i} exited {code} after the storm: {logs[i].read_text()[-600:]}")
    finally:
        for pid in pids if "pids" in locals() else []:
            if pid not in zygote.exits:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        zygote.close()
    storm.wall_seconds = time.monotonic() - began
    now = finished(url)
    storm.problems += [f"trial {n} was {s}, now {now.get(n)}" for n, s in seen.items() if now.get(n) != s]
    return storm


def check(storm: Storm, url: str, budget: int) -> Storm:
    """Read the study after the storm into `storm`: its roles and answer, and each promise it broke."""
    attrs: dict[int, dict[str, Any]] = {}
    for trial_id, key, value in storage_rows(url, "select trial_id, key, value_json from trial_user_attributes"):
        attrs.setdefault(trial_id, {})[key] = json.loads(value)
    trials = storage_rows(url, "select trial_id, number, state from trials")
    running = [n for _, n, s in trials if s == "RUNNING"]
    if running:
        storm.problems.append(f"trials left running: {running}")
    outside = ("full_budget_check_of", "repair_of")  # the search's own, queued by a process killed before it ran them
    queued = [(n, any(k in attrs.get(tid, {}) for k in outside)) for tid, n, s in trials if s == "WAITING"]
    storm.queued_checks = sum(1 for _, own in queued if own)
    if any(not own for _, own in queued):
        storm.problems.append(f"trials of the budget left queued: {[n for n, own in queued if not own]}")
    roles: dict[str, int] = {}
    for tid, _, _ in trials:
        role = attrs.get(tid, {}).get("role")
        roles[str(role)] = roles.get(str(role), 0) + 1
    storm.roles = roles
    if roles.get("budget", 0) != budget:
        storm.problems.append(f"{roles.get('budget', 0)} trials of the budget, not {budget}: {roles}")
    trained = [json.dumps(attrs[tid].get("canonical_policy"), sort_keys=True) for tid, _, s in trials
               if attrs.get(tid, {}).get("role") == "budget" and s != "FAIL"
               and "same_as_trial" not in attrs[tid]]  # (a copy of a twin's result is not trained)
    twice = sorted({p for p in trained if trained.count(p) > 1})
    if twice:
        storm.problems.append(f"policies trained twice in the budget: {twice}")
    storm.killed_trials = [n for tid, n, _ in trials if attrs.get(tid, {}).get("role") == "killed"]
    rerun = {attrs.get(tid, {}).get("retry_of") for tid, _, s in trials if s != "WAITING"}
    history = {tid: json.loads(v) for tid, key, v in
               storage_rows(url, "select trial_id, key, value_json from trial_system_attributes") if key == "retry_history"}
    # a trial is re-run at most MAX_RETRIES times (Optuna's retry history); past that, its place in the budget
    # is queued afresh, which the exact budget above checks
    storm.retries_spent = [n for tid, n, _ in trials if attrs.get(tid, {}).get("role") == "killed"
                           and n not in rerun and len(history.get(tid, [])) >= MAX_RETRIES]
    storm.problems += [f"killed trial {n} was not re-run" for n in storm.killed_trials
                       if n not in rerun and n not in storm.retries_spent]
    storm.answer = answer(url)
    return storm


def answer(url: str) -> dict[str, Any] | None:
    """The study's cached answer: its policy and time (None: no answer was written)."""
    rows = storage_rows(url, "select value_json from study_user_attributes where key = 'cache'")
    if not rows:
        return None
    record = json.loads(rows[0][0])
    return {"policy": record["best_policy"], "time": round(record["best_value"], 6)}


def uninterrupted(argv: list[str], url: str, cwd: Path, env: dict[str, str] | None = None) -> dict[str, Any] | None:
    """The answer of `autosync ARGV --storage URL` run once, in one process, with no kill."""
    env = {**os.environ, **(env or {})}
    done = subprocess.run([sys.executable, "-m", "autosync.cli", *argv, "--storage", url], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"the uninterrupted tune failed: {done.stderr[-2000:]}")
    return answer(url)


def storm_job(path: Path, n_workers: int = 8, seconds: int = 40) -> Path:
    """The tests' tiny job (digits, logistic regression) on `n_workers`, its budget `seconds` virtual s."""
    path.write_text(
        "name: storm\n"
        "workload: {dataset: {name: digits}, model: {name: logreg}, batch_size: 16,"
        " optimizer: {lr: 0.2}, evaluation: {every_seconds: 2}}\n"
        f"cluster: {{n_workers: {n_workers}}}\n"
        "target: {metric: test_accuracy, threshold: 0.8}\n"
        f"budget: {{max_virtual_seconds: {seconds}}}\n")
    return path

