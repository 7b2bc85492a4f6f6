"""Choosing where gradients are computed and which clock orders them, and the torchrun ranks around a command.

`ExecutionOptions` declares the options once (the `--backend`, `--clock`, ... of `autosync run` and `tune`);
`BackendChoice` is the engine's checked record of them, with the same defaults."""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator, Optional

from autosync.core.declare import check_ranges, default_of, option
from autosync.core.errors import UserError
from autosync.core.limits import MAX_WAIT_SECONDS

if TYPE_CHECKING:
    from autosync.engine.clock import Clock
    from autosync.engine.drivers import Driver

BACKENDS = ("simulator", "processes", "distributed")
CLOCKS = ("virtual", "real")
STRAGGLER_SOURCES = ("machine", "model")
# --time-scale's largest value: a virtual second stretched to 1000 real ones already makes a 200 s budget two
# days of waiting; more is a typo (and inf overflowed the real clock's sleep, a traceback)
MAX_TIME_SCALE = 1000.0


@dataclass(frozen=True, kw_only=True)
class ExecutionOptions:
    """Where runs train: the options `autosync run` and `autosync tune` share (one BackendChoice either way)."""

    backend: str = option("simulator", "simulator (gradients in this process) | processes (worker processes "
                          "compute them; same arrival order and results) | distributed (the ranks of a torchrun "
                          "launch, rank 0 serving and running every trial of `tune`).")
    device: str = option("cpu", "cpu | cuda (cuda:N): where the model, data, slots and worker processes compute.")
    workers_per_device: int = option(2, "--backend processes: worker processes on the device.", ge=1)
    worker_timeout: float = option(60.0, "--backend processes or distributed: seconds without a gradient before a "
                                   "worker process or rank counts as dead or hung.", ge=0.1, le=MAX_WAIT_SECONDS)
    clock: str = option("virtual", "--backend processes or distributed: virtual (the cluster model orders "
                        "arrivals: same results as the simulator) | real (the order the workers answer in; logged "
                        "for `autosync rerun`).")
    stragglers: str = option("machine", "--clock real: machine (only this machine's own) | model (also the job's "
                             "cluster model, as real delays).")
    time_scale: float = option(0.01, "--clock real --stragglers model: real seconds per virtual second of the "
                               "cluster model.")
    worker_cpus: Optional[str] = option(None, "--backend processes: comma-separated cores, worker process p on "
                                        "the p-th (cycling); a core shared with other work makes its workers real "
                                        "stragglers.")

    def __post_init__(self) -> None:
        check_ranges(self)
        self.choice()  # the engine's own rules: names, combinations, the device

    def choice(self) -> BackendChoice:
        """The engine's execution record of these options, checked."""
        choice = BackendChoice(self.backend, self.clock, self.stragglers, self.time_scale, self.device,
                               self.workers_per_device, self.worker_timeout, parse_cpus(self.worker_cpus))
        choice.check()
        return choice

    @classmethod
    def of_choice(cls, choice: BackendChoice) -> dict[str, Any]:
        """The fields of an execution record (`api.backend(...)`), to build options that train there."""
        return dict(backend=choice.backend, clock=choice.clock, stragglers=choice.stragglers,
                    time_scale=choice.time_scale, device=choice.device, workers_per_device=choice.processes,
                    worker_timeout=choice.worker_timeout,
                    worker_cpus=None if choice.worker_cpus is None else ",".join(map(str, choice.worker_cpus)))


def parse_cpus(text: str | None) -> tuple[int, ...] | None:
    """`--worker-cpus 0,1` as (0, 1); a one-line UserError for anything but non-negative integers."""
    if text is None:
        return None
    try:
        cpus = tuple(int(v) for v in text.split(","))
    except ValueError:
        raise UserError(f"--worker-cpus must be comma-separated core numbers, but got {text!r}") from None
    if not cpus or min(cpus) < 0:
        raise UserError(f"--worker-cpus must be comma-separated core numbers >= 0, but got {text!r}")
    return cpus


def _default(name: str) -> Any:
    return default_of(ExecutionOptions, name)


@dataclass(frozen=True)
class BackendChoice:
    """How one run is executed: the engine's record of `ExecutionOptions` (its defaults are theirs)."""

    backend: str = _default("backend")  # simulator: in this process; processes: worker processes; distributed: ranks
    clock: str = _default("clock")  # virtual: the cluster model orders arrivals; real: the processes' answers do
    stragglers: str = _default("stragglers")  # real clock: the machine's own, or the cluster model as real delays
    time_scale: float = _default("time_scale")  # real clock with model stragglers: real seconds per virtual second
    device: str = _default("device")  # cpu | cuda: where the workload's tensors live (server and workers)
    processes: int = _default("workers_per_device")  # worker processes on the device (`--workers-per-device`)
    worker_timeout: float = _default("worker_timeout")  # seconds of silence before a worker process counts as hung
    worker_cpus: tuple[int, ...] | None = None  # processes: worker process p runs on core worker_cpus[p % len]
    # (`--worker-cpus` parsed by `parse_cpus`)
    # simulator: a table directory whose recorded runs answer instead of training (`autosync.table`; a run it
    # lacks is trained and stored); the results are the simulator's, so the execution is described as it
    table: str | None = None

    def check(self) -> None:
        """A clear error for options that do not fit together or this machine."""
        if self.backend not in BACKENDS:
            raise UserError(f"--backend must be simulator, processes or distributed, but got {self.backend!r}")
        if self.clock not in CLOCKS:
            raise UserError(f"--clock must be virtual or real, but got {self.clock!r}")
        if self.clock == "real" and self.backend == "simulator":
            raise UserError("--clock real needs --backend processes or distributed (real arrivals come from "
                            f"worker processes), but got --backend {self.backend}")
        if self.stragglers not in STRAGGLER_SOURCES:
            raise UserError(f"--stragglers must be machine or model, but got {self.stragglers!r}")
        if not 0 < self.time_scale <= MAX_TIME_SCALE:
            raise UserError(f"--time-scale must be > 0 and at most {MAX_TIME_SCALE:g} (real seconds per virtual "
                            f"second), but got {self.time_scale}")
        check_device(self.device)
        if self.table is not None and self.backend != "simulator":
            raise UserError(f"--table replays simulator runs: it needs --backend simulator, but got --backend "
                            f"{self.backend}")
        if self.worker_cpus is not None:
            if self.backend != "processes":
                raise UserError(f"--worker-cpus pins worker processes: it needs --backend processes, but got "
                                f"--backend {self.backend}")
            usable = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
            if usable is None:
                raise UserError("--worker-cpus: this system cannot pin processes to cores")
            missing = [c for c in self.worker_cpus if c not in usable]
            if missing:
                raise UserError(f"--worker-cpus must name cores this process may use ({usable}), but got {missing[0]}")

    def describe(self) -> dict[str, Any]:
        """What the run's summary records about its execution."""
        info: dict[str, Any] = {"backend": self.backend, "device": self.device}
        if self.backend != "simulator":
            info.update(clock=self.clock)
        if self.backend == "processes":
            info.update(processes=self.processes)
            if self.worker_cpus is not None:
                info.update(worker_cpus=list(self.worker_cpus))
        if self.backend == "distributed":
            info.update(ranks=int(os.environ.get("WORLD_SIZE", 0)))  # torchrun's, still known after the group ends
        if self.clock == "real":
            info.update(stragglers=self.stragglers, time_scale=self.time_scale)
        return info


def check_device(device: str) -> None:
    """`device` is cpu, or cuda[:N] on a machine where CUDA sees that GPU."""
    if device == "cpu":
        return
    if not isinstance(device, str) or not device.startswith("cuda"):
        raise UserError(f"--device must be cpu or cuda (cuda:N for one GPU of several), but got {device!r}")
    import torch

    if not torch.cuda.is_available():
        raise UserError(f"--device {device}: no CUDA GPU is visible on this machine "
                        "(torch.cuda.is_available() is False)")
    index = torch.device(device).index
    if index is not None and index >= torch.cuda.device_count():
        raise UserError(f"--device {device}: this machine has {torch.cuda.device_count()} CUDA GPU(s)")


def replays_table(choice: BackendChoice | None) -> bool:
    """Whether runs on `choice` are read from a `--table` rather than trained."""
    return choice is not None and choice.table is not None


def simulates_here(choice: BackendChoice | None) -> bool:
    """Whether runs on `choice` train in this process's simulator (None: the default, the simulator): not on
    worker processes or ranks, and not replayed from a `--table`."""
    return choice is None or (choice.backend == "simulator" and not replays_table(choice))


def build(choice: BackendChoice, job: Any, workload: Any) -> tuple["Driver | None", "Clock | None"]:
    """The (driver, clock) of a run; (None, None) means the engine's defaults (in-process, virtual)."""
    choice.check()
    if choice.backend == "simulator":
        return None, None
    if choice.backend == "distributed":  # the group is joined and the job shared by `autosync run` or `tune`
        from autosync.engine.drivers.distributed import driver_for  # not at the top: torch

        driver = driver_for(job.cluster.n_workers, workload.slot_dim, timeout=choice.worker_timeout)
    else:
        from autosync.engine.drivers import ProcessDriver  # not at the top: torch

        driver = ProcessDriver(workload, choice.processes, timeout=choice.worker_timeout, cpus=choice.worker_cpus)
    if choice.clock == "virtual":
        return driver, None
    from autosync.engine.realtime import RealTimeClock  # not at the top: torch

    return driver, RealTimeClock(driver, inject_stragglers=choice.stragglers == "model",
                                 seconds_per_virtual_second=choice.time_scale)


def train(choice: BackendChoice, job: Any, policy: Any, workload: Any, progress: Any = None,
          on_ready: Any = None) -> Any:
    """Train `job` once under `policy` on `choice`'s backend (`build`) and return the `RunResult`;
    `on_ready()` is called once the backend's worker processes are up, before training starts."""
    from autosync.engine import simulate  # not at the top: torch, which a tune answered from the cache never needs

    driver, clock = build(choice, job, workload)
    try:
        if on_ready is not None and driver is not None:
            on_ready()
    except BaseException:  # Ctrl-C in the callback: the worker processes stop all the same
        driver.close()
        raise
    return simulate(job, policy, workload=workload, progress=progress, driver=driver, clock=clock)


class Ranks:
    """What `torchrun_ranks` gives the command inside it: whether this process leads, and the job's sharing."""

    def __init__(self, choice: BackendChoice, leader: bool):
        self.choice = choice
        self.leader = leader  # False on a rank other than 0: it served rank 0's runs already, nothing is left to do
        self.shared = choice.backend != "distributed"  # nothing to send off the distributed backend
        self.session = False

    def share(self, job: Any, every_run: bool = False) -> None:
        """Rank 0 sends the job (and the folder its own code imports from) to every other rank; with
        `every_run`, one driver on the group then serves every run until the `with` ends (`autosync tune`:
        every trial and repeat), instead of one driver per run."""
        if self.shared:
            return
        from pathlib import Path

        from autosync.engine.drivers import distributed  # not at the top: torch

        slot_dim = None
        if every_run:  # built before the job is sent: a workload that fails still releases the ranks
            from autosync.workloads.build import build_workload  # not at the top: torch

            slot_dim = build_workload(job, device=self.choice.device).slot_dim
        roots = [str(Path(job.source).resolve().parent)] if job.uses_user_code else []
        self.shared = True
        distributed.share_job(job.model_dump(mode="json"), roots)
        if slot_dim is not None:
            distributed.open_session(job.cluster.n_workers, slot_dim, self.choice.worker_timeout)
            self.session = True


@contextlib.contextmanager
def torchrun_ranks(choice: BackendChoice) -> Iterator[Ranks]:
    """--backend distributed, where torchrun runs the same command on every rank: the group, around a command.

    On entry every rank joins the group. A rank other than 0 serves rank 0's runs until told to stop and
    then yields a `Ranks` whose `leader` is False: the command has nothing left to do. Rank 0 (and every
    process of another backend) yields a leader: the command loads its job and calls `ranks.share(job)`
    before training. If rank 0 leaves before sharing (an error loading the job or its options), the
    waiting ranks are released first, so they exit instead of hanging; a session opened by `share` ends
    (the ranks stop and the group is left) when the `with` does.
    """
    if choice.backend != "distributed":
        yield Ranks(choice, leader=True)
        return
    from autosync.engine.drivers import distributed  # not at the top: torch

    if distributed.init_from_torchrun(choice.worker_timeout) != 0:
        distributed.serve_when_told(choice.device)
        yield Ranks(choice, leader=False)
        return
    ranks = Ranks(choice, leader=True)
    try:
        yield ranks
    finally:
        if not ranks.shared:
            distributed.leave_without_job()
        elif ranks.session:
            distributed.close_session()
