"""Shared fixtures: small, fast jobs built from the same spec types users write."""

from __future__ import annotations

import copy

from typing import Any, Iterator

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, TypeVar

import pytest

# One OpenMP thread for torch's kernels outside a simulation (which runs on one already:
# `autosync.engine.threads`) and for numpy's BLAS, in the tests and in the commands they start: the tests'
# small models and arrays gain nothing from a second thread, which spins waiting for a core that another
# process holds. Measured on 2 cores that other work loaded, `pytest -m "not slow"`: 144 s of CPU
# and 160 s of wall time with the libraries' default, 111 s and 146 s with one thread. Set before anything
# loads torch or numpy; a value already in the environment is kept.
os.environ.setdefault("OMP_NUM_THREADS", "1")

from autosync.contract import CONTRACT_JOB  # noqa: E402 - after the thread setting above
from autosync.core.job import JobSpec, job_from_dict  # noqa: E402


# Two pytest-xdist workers run the suite (`-n 2 --dist loadgroup`, pyproject.toml), each test where it is
# independent, except these groups, each of which runs whole on one worker, one test after another:
# - "processes": the tests marked `processes`, `postgres` or `distributed` (worker processes, several tune
#   processes, torchrun ranks, PostgreSQL servers, signals and kills). Two at once would each run on half the
#   cores they were sized for; one at a time, the other worker runs the in-process tests beside it.
# - a module's tests that use one of its fixtures wider than a test (scope "module": a tuned storage, a pool
#   of worker processes), so that the fixture is made once and not once per worker.
# xdist's own `xdist_group` mark cannot say this: it renames the tests' node ids, which pytest 9.2 no longer
# lets it do, so the mark is silently ignored there (pytest-xdist issue 1386). Instead each worker writes the
# groups of the tests it collected to a file and `_GroupScheduling`, the controller's scheduler, reads them.
GROUPED_MARKERS = ("processes", "postgres", "distributed")
# the families whose jobs results/table holds (with the default job), which `autosync fit` is fitted on
COMMITTED_FAMILIES = ("fresh", "quarry", "crest", "fleet", "steady", "tiers", "inverse", "mosaic")
TABLE_JOBS = 8  # results/table holds jobs 0..TABLE_JOBS-1 of each committed family
# a family results/table also holds, never fitted on: the shipped race judged on it (benchmarks/blind_ridge.md)
BLIND_FAMILIES = {"ridge": 5}  # family -> jobs 0..N-1
_GROUPS_KEY = "autosync_groups_dir"


def xdist_group(item: pytest.Item) -> str | None:
    """The group `item` runs in under xdist (above), or None where it runs on whichever worker is free."""
    if any(item.get_closest_marker(name) for name in GROUPED_MARKERS):
        return "processes"
    definitions = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
    if any(d[-1].scope != "function" and d[-1].baseid for d in definitions.values() if d):  # not pytest's own
        return item.nodeid.split("::")[0]  # the module's shared fixtures
    return None


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """xdist's controller, for each worker: the folder where the workers write their tests' groups."""
    config = node.config
    if not hasattr(config, "_autosync_groups_dir"):
        config._autosync_groups_dir = tempfile.mkdtemp(prefix="autosync-xdist-groups-")
    node.workerinput[_GROUPS_KEY] = config._autosync_groups_dir


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    folder = getattr(config, "workerinput", {}).get(_GROUPS_KEY)
    if folder:  # an xdist worker: write the groups before it tells the controller what it collected
        groups = {item.nodeid: group for item in items if (group := xdist_group(item))}
        path = Path(folder) / f"{config.workerinput['workerid']}.json"
        path.with_suffix(".tmp").write_text(json.dumps(groups))
        path.with_suffix(".tmp").replace(path)


def pytest_unconfigure(config: pytest.Config) -> None:
    if hasattr(config, "_autosync_groups_dir"):
        shutil.rmtree(config._autosync_groups_dir, ignore_errors=True)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class _GroupScheduling(LoadGroupScheduling):
        """xdist's `loadgroup` scheduling, with the groups the workers wrote (above). Largest group first:
        "processes" starts at once on one worker, the other takes the rest one test at a time."""

        groups: dict[str, str] = {}

        def schedule(self) -> None:
            if self.collection is None:  # the first call, once every worker has collected (the same tests)
                written = sorted(Path(config._autosync_groups_dir).glob("*.json"))
                self.groups = json.loads(written[0].read_text()) if written else {}
            super().schedule()

        def _split_scope(self, nodeid: str) -> str:
            return self.groups.get(nodeid) or super()._split_scope(nodeid)

    return _GroupScheduling(config, log)


def small_job(**changes: Any) -> JobSpec:
    """A 4-worker logistic-regression job on synthetic data that simulates in well under a second."""
    data: dict[str, Any] = copy.deepcopy(CONTRACT_JOB)  # the contract's job, with a lower target and budget
    data.update(name="small", target={"metric": "test_accuracy", "threshold": 0.8}, budget={"max_updates": 40})
    for dotted, value in changes.items():
        node = data
        *path, last = dotted.split("__")
        for key in path:
            node = node.setdefault(key, {})
        node[last] = value
    return job_from_dict(data, "test")


T = TypeVar("T")


def tune_request(job: JobSpec, space: Any, *, settings: dict[str, Any] | None = None, **options: Any) -> Any:
    """The tune request `options` make on `job` and `space`, built the way users build it: `TuneOptions`
    (so their cross-field rules apply) resolved by `TuneRequest.from_options`, as `api.tune` does.

    `settings` sets `ObjectiveSettings` fields that no option declares (`stop_at_target`, `prune`), on the
    resolved request: a test that names them needs a request the command line cannot make."""
    from dataclasses import replace

    from autosync.search.request import TuneRequest
    from autosync.search.tune_options import TuneOptions

    request = TuneRequest.from_options(job, TuneOptions(**options), space=space)
    if settings:
        request = replace(request, settings=replace(request.settings, **settings))
    return request


def wait_for(condition: Callable[[], T], seconds: float, what: str | Callable[[], str], every: float = 0.1) -> T:
    """Poll `condition` until it returns something true, and return that; fail the test after `seconds`.

    `what` says what was waited for (or is called, once, to say it with what was seen: a log's tail).
    A test waits for the state it needs, never for a fixed time that is too short on a busy machine.
    """
    deadline = time.monotonic() + seconds
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            pytest.fail(f"waited {seconds:g} s for: {what() if callable(what) else what}")
        time.sleep(every)


def write_calls(pid: int) -> int:
    """How many write system calls process `pid` has made (0 once it is gone). A worker process makes one
    per gradient it answers; starting up (receiving its shared tensors, its ready message) one made 27 when
    measured."""
    try:
        for line in Path(f"/proc/{pid}/io").read_text().splitlines():
            if line.startswith("syscw:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def spawned_children(pid: int) -> list[int]:
    """The worker processes of command `pid`: forked children of it (on the CPU: its own command line),
    spawned ones, or children of its forkserver (on a GPU); not multiprocessing's resource tracker nor the
    forkserver itself."""
    parents, lines = {}, {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parents[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            lines[int(stat.parent.name)] = (stat.parent / "cmdline").read_bytes()
        except OSError:
            continue
    servers = {p for p, parent in parents.items() if parent == pid and b"forkserver" in lines[p]}
    return [p for p, parent in parents.items()
            if (parent == pid and (b"spawn_main" in lines[p] or lines[p] == lines.get(pid))) or parent in servers]


def computing_workers(pid: int, n: int, seconds: float) -> list[int]:
    """Wait until the command `pid` has `n` spawned worker processes and each has answered gradients (100
    write calls, far past starting up); return their pids."""
    found: list[int] = []

    def computing() -> bool:
        found[:] = spawned_children(pid)
        return len(found) >= n and all(write_calls(c) >= 100 for c in found)

    wait_for(computing, seconds, lambda: f"{n} worker processes answering gradients (found {len(found)}, write "
                                         f"calls {[write_calls(c) for c in found]})", every=0.2)
    return found


def start_autosync(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    """Start the command line in the background for a test that signals it (`signal_and_wait`).

    SIGINT is reset to its default in the child: a shell runs a background job (`cmd &`, a CI script)
    with SIGINT ignored, every process it starts inherits that, and a Python started with SIGINT ignored
    never raises KeyboardInterrupt. Python's fault handler is on, so `signal_and_wait` can show stacks.
    """
    return subprocess.Popen([sys.executable, "-m", "autosync.cli", *args], cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**(env or os.environ), "PYTHONFAULTHANDLER": "1"},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def _frozen(pid: int) -> bool:
    try:  # the state field follows the command's name, which is in parentheses
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("T", "t")
    except (OSError, IndexError):
        return False


def freeze_when(proc: subprocess.Popen, ready: Callable[[], bool], seconds: float = 120) -> bool:
    """Freeze a command started by `start_autosync` (SIGSTOP) and look at what it wrote (its study), again
    and again, letting it go on (SIGCONT) for a moment between looks, until `ready()` holds while it is
    frozen; return True with the command frozen there (False if it ended first, or `seconds` passed).

    What the test does next (a signal, `signal_and_wait`, which lets it go on; a folder made read-only)
    then meets the command in the state seen: a trial of the tiny job lasts a tenth of a second, less than
    one poll of a busy machine, so a signal sent after a poll of a running tune could land in a later
    trial, a check after the search, or after the end. `ready` must not wait long for a lock the frozen
    command may hold (a short SQLite timeout: it is asked again)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and proc.poll() is None:
        proc.send_signal(signal.SIGSTOP)
        while not _frozen(proc.pid) and proc.poll() is None:
            time.sleep(0.001)
        if proc.poll() is None and ready():
            return True
        proc.send_signal(signal.SIGCONT)
        time.sleep(0.02)
    return False


def signal_and_wait(proc: subprocess.Popen, sig: int, within: float = 60.0) -> str:
    """Send `sig` to a command started by `start_autosync` and return its stderr once it exits. One
    still running `within` seconds later is aborted with its worker processes (SIGABRT: the fault handler
    writes every thread's stack to stderr) and the test fails showing where they were.

    SIGCONT follows: a command the test froze (SIGSTOP) in the state it waited for handles `sig` there as
    it goes on (a running one ignores SIGCONT)."""
    children = spawned_children(proc.pid)
    proc.send_signal(sig)
    proc.send_signal(signal.SIGCONT)
    try:
        return proc.communicate(timeout=within)[1]
    except subprocess.TimeoutExpired:
        for pid in [*spawned_children(proc.pid), *children, proc.pid]:
            try:
                os.kill(pid, signal.SIGABRT)
            except ProcessLookupError:
                pass
        _, stderr = proc.communicate(timeout=30)
        pytest.fail(f"still running {within:g} s after signal {sig}; stacks:\n{stderr[-12000:]}")


@pytest.fixture(scope="session", autouse=True)
def one_process_per_tune() -> Iterator[None]:
    """A tune in a test runs its trials in one process unless the test asks for more (`--n-jobs`): the suite
    already runs on every core (pytest-xdist), where the race's default of a process per core would start an
    interpreter importing torch for each tune. tests/unit/search/test_n_jobs_default.py checks that default
    itself, and tests/e2e/test_race_tune.py a race in two processes."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("autosync.search.request.usable_cores", lambda: 1)
        yield


@pytest.fixture
def job() -> JobSpec:
    return small_job()


def torch_sgd_reference(job: JobSpec):
    """Parameters after job.budget.max_updates steps of torch.optim.SGD on worker 0's batches (one worker)."""
    import torch
    import torch.nn.functional as F

    from autosync.workloads.workload import Workload

    workload = Workload(job)
    model = workload.model
    with torch.no_grad():
        torch.nn.utils.vector_to_parameters(workload.init_params(), model.parameters())
    o = job.workload.optimizer
    opt = torch.optim.SGD(model.parameters(), lr=o.lr, momentum=o.momentum, nesterov=o.nesterov,
                          weight_decay=o.weight_decay)
    data = workload.data
    for task in range(job.budget.max_updates):
        idx = torch.from_numpy(workload.batch(job.seed, 0, task, job.workload.batch_size))
        opt.zero_grad()
        F.cross_entropy(model(data.x_train[idx]), data.y_train[idx]).backward()
        opt.step()
    return torch.nn.utils.parameters_to_vector(model.parameters()).detach()


def autosync(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """Run the command line as a user would, in `cwd`: `autosync.cli.main` (the console script `run` adds only
    a quicker exit) with `autosync ARGS` as its command line, its own working directory, stdout and stderr, and
    its exit code (0, 1, 2 or 130, as `sys.exit` gives it) as the return code.

    It runs in this process, which has imported torch and the rest once (a new process pays about 3 s of
    imports per command); what only a new process shows (what it imports, signals, a kill) is tested with
    one (`start_autosync`, or subprocess with `python -m autosync.cli`). The process-wide settings a command
    may change (torch's thread count) are restored after it."""
    import contextlib
    import io

    import torch

    from autosync import cli

    out, err, code = io.StringIO(), io.StringIO(), 0
    saved = (os.getcwd(), sys.argv, torch.get_num_threads())
    try:
        os.chdir(cwd)
        sys.argv = ["autosync", *args]
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                cli.main()
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
    finally:
        os.chdir(saved[0])
        sys.argv = saved[1]
        torch.set_num_threads(saved[2])
    return subprocess.CompletedProcess(["autosync", *args], code, out.getvalue(), err.getvalue())


def no_traceback(proc: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout


TINY_JOB = ("name: tiny\n"
            "workload: {dataset: {name: digits}, model: {name: logreg}, batch_size: 16,"
            " optimizer: {lr: 0.2}, evaluation: {every_seconds: 2}}\n"
            "cluster: {n_workers: 4}\n"
            "target: {metric: test_accuracy, threshold: 0.8}\n"
            "budget: {max_virtual_seconds: 20}\n")


@pytest.fixture
def tiny_job(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(TINY_JOB)
    return path


TINY_TUNE = ("--n-trials", "2", "--sampler", "random", "--json")  # the tune `tiny_simulated_tune` runs


@pytest.fixture(scope="session")
def tiny_simulated_tune(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess]:
    """`autosync tune` of the tiny job with `TINY_TUNE` on the simulator, into sim.db of a folder of its own:
    the trials that a tune on a real backend (worker processes, torchrun ranks) gives bit for bit. Run once
    for the tests that compare with it (the same job and options give the same trials). Returns the
    study's database and the command's result."""
    folder = tmp_path_factory.mktemp("tiny-sim")
    (folder / "tiny.yaml").write_text(TINY_JOB)
    proc = autosync("tune", str(folder / "tiny.yaml"), *TINY_TUNE, "--storage", "sqlite:///sim.db", cwd=folder)
    assert proc.returncode == 0, proc.stderr
    return folder / "sim.db", proc


def per_worker_run(job: JobSpec, policy: Any, workload: Any, clock: Any = None) -> Any:
    """`policy` on the in-process per-worker kernel with one intra-op thread: what worker processes and
    torchrun ranks compute, bit for bit (`clock`: the engine's virtual clock unless given)."""
    from autosync.engine.drivers import PerWorkerDriver
    from autosync.engine.simulator import Simulator

    return Simulator(job, policy, workload=workload, driver=PerWorkerDriver(workload, job.seed), clock=clock,
                     threads=1).run()


BN_JOB = {"dataset": {"name": "synthetic_images", "n_samples": 64, "image_shape": [3, 8, 8]}, "model": {"name": "resnet20"},
          "batch_size": 4}  # ResNet-20: batch norm without running statistics (`autosync.workloads.norm_groups`)


def fused_and_mean_gradient(device: str = "cpu", workers: int = 3) -> tuple[Any, Any, list[float], list[float]]:
    """On the batch-norm job: the in-process driver's fused aggregate of `workers` equal tasks on theta_0,
    the mean of their own gradients, and the fused pass's and their own losses."""
    import torch

    from autosync.engine.drivers import InProcessDriver
    from autosync.policies import Task
    from autosync.workloads.workload import Workload

    job = small_job(workload=BN_JOB)
    workload = Workload(job, device=device)
    assert workload.norm_groups
    driver = InProcessDriver(workload, job.seed)
    theta = workload.init_params()
    tasks = [Task(worker=w, index=0, version=0, batch_size=4, start=0.0, params=theta) for w in range(workers)]
    fused, losses = driver.aggregate(tasks, [1 / workers] * workers)
    driver.worker_gradients(tasks)
    return fused, torch.stack([t.gradient for t in tasks]).mean(0), losses, [t.loss for t in tasks]
