"""Several machines: worker ranks of a torch.distributed (gloo) group compute the gradients; rank 0 serves.

Launched with torchrun, every rank runs the same `autosync run ... --backend distributed` command.
Rank 0 loads the job and the policy, broadcasts the job to the others, and runs the engine with a
`DistributedDriver`; every other rank runs `serve_rank` and computes the tasks of the simulated
workers assigned to it (worker w on rank 1 + w mod (world size - 1)). Point-to-point messages only
(torch.distributed.rpc is in maintenance mode): a task is a small int64 header (worker, index, batch
size) and the parameters (then the model's buffers); an answer is a float64 header (worker, index, loss,
compute seconds) and the gradient (then the buffers' change), each kind with its own tag. Tensors travel through the CPU (gloo); a rank with `--device
cuda` computes on its GPU. NCCL is not used: it has no receive-from-any-rank (the receiver thread below
relies on it) and needs a GPU of its own for every rank, the server's included.

Arrival times under the real-time clock are the server's: the moment it sees both parts of an answer,
since machines do not share a clock. A rank that stays silent for the timeout while it has work stops
the run with an error naming it (a torch.distributed group cannot drop a member and go on).
"""

from __future__ import annotations

import datetime as dt
import os
import queue
import threading
import time
from pathlib import Path
from typing import Any, Sequence

import torch
import torch.distributed as dist

from autosync.core.job import JobSpec, add_import_root
from autosync.engine.allocator import keep_freed_memory
from autosync.engine.drivers.perworker import pack_slot, slot_gradient, unpack_answer
from autosync.engine.drivers.remote import Answer, RemoteDriver, WorkerProcessError
from autosync.core.errors import UserError
from autosync.policies import Task
from autosync.workloads.build import build_workload

TAG_TASK, TAG_PARAMS, TAG_ANSWER, TAG_GRADIENT = 1, 2, 3, 4
_STOP = -1  # a task header whose worker is -1 ends a rank's loop


def init_from_torchrun(timeout_seconds: float) -> int:
    """Join the gloo group torchrun describes in the environment; returns this process's rank."""
    missing = [v for v in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if v not in os.environ]
    if missing:
        raise UserError(f"--backend distributed runs under torchrun (missing {', '.join(missing)}), e.g. "
                        "torchrun --nproc-per-node 3 -m autosync.cli run JOB.yaml --backend distributed")
    dist.init_process_group("gloo", timeout=dt.timedelta(seconds=max(600.0, timeout_seconds)))
    if dist.get_world_size() < 2:
        dist.destroy_process_group()
        raise UserError("--backend distributed needs at least 2 ranks (rank 0 serves, the others compute), "
                        "but torchrun started 1")
    return dist.get_rank()


def share_job(job_json: dict[str, Any] | None, import_roots: list[str] | None = None,
              ) -> tuple[dict[str, Any] | None, list[str]]:
    """Rank 0 sends the job (None when it could not load one) and the folders its user code imports from;
    every rank returns what rank 0 sent."""
    box = [job_json, list(import_roots or [])]
    dist.broadcast_object_list(box, src=0)
    return box[0], box[1]


def serve_when_told(device: str = "cpu") -> None:
    """A worker rank's whole life: take the job from rank 0 and serve it (or leave if rank 0 has none).

    The job's user code is imported from rank 0's job-file folder where this machine has that folder too,
    else from the installed packages.
    """
    job_json, roots = share_job(None)
    if job_json is None:
        dist.destroy_process_group()
        return
    for root in roots:
        if os.path.isdir(root):
            add_import_root(Path(root))
    serve_rank(job_json, device)


def leave_without_job() -> None:
    """Rank 0 could not start the run: release the waiting ranks, then leave the group."""
    share_job(None)
    dist.destroy_process_group()


def serve_rank(job_json: dict[str, Any], device: str = "cpu", threads: int = 1) -> None:
    """A worker rank: compute every task rank 0 sends until it says stop, then leave the group."""
    torch.set_num_threads(threads)
    keep_freed_memory()
    job = JobSpec.model_validate(job_json)
    if device.startswith("cuda") and torch.cuda.device_count() > 1:
        device = f"cuda:{int(os.environ.get('LOCAL_RANK', 0)) % torch.cuda.device_count()}"
    workload = build_workload(job, device=device)
    header = torch.zeros(3, dtype=torch.int64)
    params = torch.zeros(workload.slot_dim)
    gradient = torch.zeros(workload.slot_dim, device=workload.device)  # each answer is written here
    dist.barrier()  # ready: the server starts sending
    try:
        while True:
            dist.recv(header, src=0, tag=TAG_TASK)
            worker, index, batch_size = (int(v) for v in header)
            if worker == _STOP:
                goodbye = torch.tensor([_STOP, 0, 0, 0], dtype=torch.float64)
                dist.send(goodbye, dst=0, tag=TAG_ANSWER)
                return
            dist.recv(params, src=0, tag=TAG_PARAMS)
            loss, seconds = slot_gradient(workload, job.seed, params.to(workload.device), worker, index,
                                          batch_size, gradient)
            answer = torch.tensor([worker, index, loss, seconds], dtype=torch.float64)
            dist.send(answer, dst=0, tag=TAG_ANSWER)
            dist.send(gradient.cpu(), dst=0, tag=TAG_GRADIENT)
    finally:
        dist.destroy_process_group()


class DistributedDriver(RemoteDriver):
    """Rank 0's driver: the `ProcessDriver` interface over the ranks of a gloo group.

    gloo completes a point-to-point operation only inside `wait()`, so nothing can be polled: one
    receiver thread takes the answers in the order they come (from any rank) into a queue, and one
    sender thread per rank sends that rank's tasks in order, so a busy rank never holds up the others
    or the engine.
    """

    def __init__(self, n_workers: int, dim: int, timeout: float = 60.0, session: bool = False):
        """`dim`: values per message, the workload's `slot_dim` (its parameters, then its buffers).
        `session`: the driver serves several runs (`open_session`); closing it ends a run, not the group."""
        self.dim = dim
        self.session = session
        self.ranks = list(range(1, dist.get_world_size()))
        self.timeout = timeout
        self.assignment = {w: self.ranks[w % len(self.ranks)] for w in range(n_workers)}
        self.pending: dict[int, Task] = {}
        self.faults: list[str] = []  # a lost rank stops the run instead
        self.wait_seconds = 0.0
        self._silent_since: dict[int, float] = {}
        self._inbox: queue.Queue = queue.Queue()
        self._outboxes = {r: queue.Queue() for r in self.ranks}
        dist.barrier()  # every rank has built its workload
        self._threads = [threading.Thread(target=self._receive, args=(dim,), daemon=True, name="autosync-recv")]
        self._threads += [threading.Thread(target=self._send, args=(r,), daemon=True, name=f"autosync-send-{r}")
                          for r in self.ranks]
        for t in self._threads:
            t.start()

    # ------------------------------------------------------------------ threads
    def _receive(self, dim: int) -> None:
        """Every answer of every rank, until each has said goodbye (a header with worker -1)."""
        answer, gradient, left = torch.zeros(4, dtype=torch.float64), torch.zeros(dim), len(self.ranks)
        try:
            while left:
                rank = dist.recv(answer, tag=TAG_ANSWER)  # from any rank
                if answer[0] == _STOP:
                    left -= 1
                    continue
                dist.recv(gradient, src=rank, tag=TAG_GRADIENT)
                self._inbox.put((rank, answer.tolist(), gradient.clone(), time.monotonic()))
        except RuntimeError as exc:  # the group broke (a rank died): the engine's next collect reports it
            self._inbox.put(exc)

    def _send(self, rank: int) -> None:
        """The tasks of one rank, in order; None sends the stop header."""
        outbox = self._outboxes[rank]
        while True:
            item = outbox.get()
            try:
                if item is None:
                    dist.send(torch.tensor([_STOP, 0, 0], dtype=torch.int64), dst=rank, tag=TAG_TASK)
                    return
                header, params = item
                dist.send(header, dst=rank, tag=TAG_TASK)
                dist.send(params, dst=rank, tag=TAG_PARAMS)
            except RuntimeError as exc:
                self._inbox.put(exc)
                return

    # ------------------------------------------------------------------ the driver interface
    def submit(self, tasks: Sequence[Task]) -> None:
        """Queue each task's header and parameters for its worker's rank."""
        now = time.monotonic()
        for t in tasks:
            rank = self.assignment[t.worker]
            if not self._busy(rank):
                self._silent_since[rank] = now
            self.pending[t.worker] = t
            header = torch.tensor([t.worker, t.index, t.batch_size], dtype=torch.int64)
            slot = torch.empty(self.dim)
            pack_slot(t, slot)
            self._outboxes[rank].put((header, slot))

    def collect(self, timeout: float | None = None) -> list[Answer]:
        """Answers that arrive within `timeout` seconds (None: at least one), in the order they came."""
        if not self.pending:
            return []
        started = time.monotonic()
        answers: list[Answer] = []
        while not answers:
            now = time.monotonic()
            hung = [r for r in self.ranks if self._busy(r) and now - self._silent_since[r] > self.timeout]
            if hung:  # named: the rank silent longest (on a loaded machine another may pass the timeout too)
                culprit = min(hung, key=lambda r: self._silent_since[r])
                workers = sorted(w for w in self.pending if self.assignment[w] == culprit)
                others = "" if len(hung) == 1 else f"; ranks {sorted(set(hung) - {culprit})} are silent too"
                raise WorkerProcessError(f"rank {culprit} sent no gradient in {self.timeout:g} s (simulated "
                                         f"workers {workers}){others}; a torch.distributed group cannot go on "
                                         "without it")
            deadline = min(self._silent_since[r] + self.timeout for r in self.ranks if self._busy(r))
            if timeout is not None:
                deadline = min(deadline, started + timeout)
            try:
                item = self._inbox.get(timeout=max(0.0, deadline - now))
            except queue.Empty:
                if timeout is not None and time.monotonic() >= started + timeout:
                    break
                continue
            answers.append(self._take(item))
            while not self._inbox.empty():
                answers.append(self._take(self._inbox.get()))
        self.wait_seconds += time.monotonic() - started
        return answers

    def _take(self, item: Any) -> Answer:
        if isinstance(item, Exception):
            raise WorkerProcessError(f"the torch.distributed group broke: {str(item).splitlines()[0]}")
        rank, (worker, index, loss, compute), gradient, received = item
        task = self.pending.pop(int(worker))
        if task.index != int(index):
            raise WorkerProcessError(f"rank {rank} answered task {int(index)} of worker {int(worker)}, "
                                     f"but task {task.index} was sent")
        unpack_answer(task, gradient, loss)
        self._silent_since[rank] = received
        return Answer(task, compute, received)

    def _busy(self, rank: int) -> bool:
        return any(self.assignment[w] == rank for w in self.pending)

    def close(self) -> None:
        """Let the ranks finish what they were sent; then, unless the driver serves a session's further runs,
        tell them to stop and leave the group."""
        if not dist.is_initialized():
            return
        try:
            while self.pending:
                self.collect(self.timeout)
        except WorkerProcessError:
            pass
        if self.session:  # the next run starts clean on the same ranks
            self.pending, self.faults, self.wait_seconds, self._silent_since = {}, [], 0.0, {}
            return
        for rank in self.ranks:
            self._outboxes[rank].put(None)
        for t in self._threads:
            t.join(timeout=self.timeout)
        dist.destroy_process_group()


_session: DistributedDriver | None = None  # rank 0's driver while a command runs several runs on the group


def open_session(n_workers: int, dim: int, timeout: float) -> None:
    """Rank 0 keeps one driver for every run of this command (`autosync tune`: one per trial and repeat);
    the ranks serve them all, one run at a time."""
    global _session
    _session = DistributedDriver(n_workers, dim, timeout, session=True)


def close_session() -> None:
    """Stop the ranks and leave the group at the end of the command."""
    global _session
    if _session is not None:
        driver, _session = _session, None
        driver.session = False
        driver.close()


def in_session() -> bool:
    return _session is not None


def require_session() -> None:
    """A one-line UserError unless this process is a rank of a torchrun session (`autosync tune` under it)."""
    if not in_session():
        raise UserError("--backend distributed tunes under torchrun, every rank running the same command, e.g. "
                        "torchrun --nproc-per-node 3 -m autosync.cli tune JOB.yaml --backend distributed")


def driver_for(n_workers: int, dim: int, timeout: float) -> DistributedDriver:
    """The session's driver when one is open (its `close` ends only the run), else a driver for one run."""
    return _session if _session is not None else DistributedDriver(n_workers, dim, timeout)
