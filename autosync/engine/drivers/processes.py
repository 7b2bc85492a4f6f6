"""Worker processes compute the gradients; the server process keeps the engine (issue: processes backend).

One machine, `torch.multiprocessing`, processes forked from the server on the CPU, started from a forkserver
on a GPU (`_context`). Before the
workers start, the server allocates two slot tables, parameters and gradients (each row followed by the
model's buffers and their change, for a model that has buffers), with one row per simulated worker (a
worker has at most one task in flight), and `SHARED_ROWS` more parameter rows: in shared memory on the CPU, or on the
GPU with `device="cuda"`, where the worker processes map the same rows through CUDA IPC. Dispatching a
task copies its parameters into the worker's row and sends a small notification `(worker, task index,
batch size, row)` down the owning process's pipe; tasks dispatched together with one parameter version
(BSP's n workers, the first tasks of any barrier) share one copy in a shared row, which is rewritten
only once no unanswered task reads it, so an update costs one copy of the parameters instead of n. The
process reads its row, writes the gradient into the worker's gradient row in place and answers
`(worker, index, loss, compute seconds, time sent)`. No tensor is created per message: the engine gets the
gradient as a view of the row, copied only if it still holds it when the worker's next task is sent
(`ProcessDriver._reclaim`).
Leftover work: a barrier that does not wait for everyone (backup workers, DBW) applies its update while
other workers' tasks are still queued on the processes, computing on parameters the update has made old,
whose gradients it will discard. The server gives up on them (`cancel`): it writes each one's index into a
shared table, and a process that reaches a task given up on answers at once without computing it (its
answer has no gradient), so the next round's tasks queued behind it start sooner. A task already started
is computed to the end. The cluster model's compute units do the same (`autosync.core.cluster.ComputeUnits`).
On the GPU each side synchronises its stream before it notifies the other, so a row is never read while a
copy into it is still queued.
Every process runs `worker_gradient`, the same kernel as the in-process `PerWorkerDriver`, with one
intra-op thread, so both backends give bit-identical results on the CPU.

Two ways to use it: `worker_gradients(tasks)` computes a batch and returns when all are done (the
virtual clock decides the arrival order); `submit` and `collect` let the real-time clock
(`autosync.engine.realtime`) take answers in the order the processes send them.

Faults: a process that dies is seen at once (its answer pipe ends); one that sends nothing for `timeout`
seconds while it has work counts as hung and is killed. Either way its simulated workers move to the
surviving processes, and their unanswered tasks are sent again; with no process left the run stops
with an error naming the workers. `close()` (also on Ctrl-C or an exception, via the simulator) stops
and joins every process.
"""

from __future__ import annotations

import contextlib
import gc
import os
import select
import signal
import time
from typing import Any, Iterator, Sequence

import torch
import torch.multiprocessing as mp
from multiprocessing.connection import Connection, wait

from autosync.engine.allocator import keep_freed_memory
from autosync.engine.drivers.perworker import pack_slot, slot_gradient, unpack_answer, worker_gradient
from autosync.engine.drivers.remote import Answer, RemoteDriver, WorkerProcessError
from autosync.core.errors import UserError
from autosync.core.job import JobSpec
from autosync.policies import Task
from autosync.workloads.tensors import Dataset
from autosync.workloads.build import build_workload
from autosync.workloads.workload import Workload

_STOP = None  # the notification that ends a worker process
SHARED_ROWS = 2  # parameter rows beyond the workers' own, for versions that several tasks read


def _serve(job_json: dict[str, Any], data: Dataset | None, params: torch.Tensor, grads: torch.Tensor,
           cancelled: torch.Tensor, inbox: Connection, outbox: Connection, threads: int, device: str,
           cpu: int | None = None, inherited: Sequence[Connection] = ()) -> None:
    """A worker process: compute the gradient of every task notified on `inbox` into `grads` (on `data`,
    the server's dataset in shared memory, or the job's dataset loaded here when None), on core `cpu`
    alone when given; a task whose index `cancelled` holds for its worker is answered without a gradient.
    `inherited`: the server's ends of the other processes' pipes, which a forked process closes (so that
    each pipe ends when its own process or the server does, as for processes started otherwise).

    It ends quietly when the server is gone (killed, or stopped by Ctrl-C): its pipes end, and it leaves.
    """
    for conn in inherited:
        conn.close()
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:  # forked: not the server's own handler
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        _compute_until_told(job_json, data, params, grads, cancelled, inbox, outbox, threads, device)
    except (BrokenPipeError, ConnectionResetError, EOFError, KeyboardInterrupt):
        return


def _compute_until_told(job_json: dict[str, Any], data: Dataset | None, params: torch.Tensor, grads: torch.Tensor,
                        cancelled: torch.Tensor, inbox: Connection, outbox: Connection, threads: int,
                        device: str) -> None:
    torch.set_num_threads(threads)
    keep_freed_memory()
    job = JobSpec.model_validate(job_json)
    seed = job.seed
    workload = build_workload(job, dataset=data, device=device)
    settle = torch.cuda.current_stream().synchronize if workload.device.type == "cuda" else (lambda: None)
    worker_gradient(workload, seed, workload.init_params(), 0, 0, 2)  # warm up (2: batch norm needs two samples)
    settle()
    outbox.send(("ready", os.getpid(), None, None, None))
    while True:
        message = inbox.recv()
        if message is _STOP:
            return
        worker, index, batch_size, row = message
        if int(cancelled[worker]) == index:  # the server gave up on it: no gradient, no time on this process
            outbox.send((worker, index, None, 0.0, time.monotonic()))
            continue
        loss, seconds = slot_gradient(workload, seed, params[row], worker, index, batch_size, grads[worker])
        settle()  # the gradient row is written before the server hears of it
        outbox.send((worker, index, loss, seconds, time.monotonic()))


@contextlib.contextmanager
def _frozen_heap(forking: bool) -> Iterator[None]:
    """While processes are forked: the server's objects out of the garbage collector's reach, so that a
    forked process never collects, so never finalises, them (the server's sockets and connections)."""
    if not forking:
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


START_METHODS = ("fork", "forkserver", "spawn")


def _context(device: torch.device, start_method: str | None = None, threads: int = 1) -> Any:
    """How worker processes start. On the CPU, by default, forked from the server, which has torch, the
    job's modules and its data loaded: they import nothing (the tutorial's calibration check of its
    sequence job took 6.6 CPU-s instead of 12.5 from a forkserver, on 2 cores). A forked process must
    keep to one intra-op thread (one that runs OpenMP with more hangs once the server has used them), and
    cannot use CUDA once the server has: with more threads, and on a GPU, processes are forked from a
    forkserver that has imported torch and this module once, but never initialises CUDA, so its children
    may (tests/unit/engine/test_gpu.py runs both starts on a GPU; results/processes_gpu/README.md has the
    GPU's figures). `start_method`, one of START_METHODS, overrides it ("spawn": a fresh interpreter per
    process)."""
    if start_method not in (None, *START_METHODS):
        raise UserError(f"start_method must be one of {', '.join(START_METHODS)}, but got {start_method!r}")
    methods = mp.get_all_start_methods()
    if start_method is None and device.type == "cpu" and threads == 1 and "fork" in methods:
        start_method = "fork"
    if start_method == "fork":
        return mp.get_context("fork")
    if start_method == "spawn" or "forkserver" not in methods:
        return mp.get_context("spawn")
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["torch", "autosync.engine.drivers.processes"])
    return ctx


class ProcessDriver(RemoteDriver):
    """Computes task gradients in `processes` worker processes on this machine's CPU or GPU.

    Each process has its own pair of pipes (tasks in, answers out): nothing is shared between processes
    but the slot tables, so a process killed at any instant cannot block the others, and its death is
    seen at once as the end of its answer pipe.
    """

    def __init__(self, workload: Workload, processes: int, timeout: float = 60.0, threads: int = 1,
                 cpus: tuple[int, ...] | None = None, start_method: str | None = None):
        """Processes for the server's `workload`, on its device. On the CPU they get its data in shared
        memory rather than loading the dataset again (one copy however many processes). With `cpus`,
        process p runs on core cpus[p % len(cpus)] alone (a slower core makes its workers real stragglers).
        `start_method` ("fork", "forkserver" or "spawn") overrides the device's default start (`_context`)."""
        if processes < 1:
            raise UserError(f"--workers-per-device must be >= 1, but got {processes}")
        job, dim = workload.job, workload.slot_dim  # a slot: the parameters, then the buffers
        self.device = workload.device
        data = workload.data.shared() if self.device.type == "cpu" else None
        self.n_workers = job.cluster.n_workers
        self.timeout = timeout
        self.params = torch.zeros(self.n_workers + SHARED_ROWS, dim, device=self.device)
        self.grads = torch.zeros(self.n_workers, dim, device=self.device)
        # per worker, the index of its last task the server gave up on (`cancel`): read by the processes
        self.cancelled = torch.full((self.n_workers,), -1, dtype=torch.int64).share_memory_()
        self.drops_superseded = processes < self.n_workers  # a process computes several workers' tasks in turn
        if self.device.type == "cpu":  # CUDA tensors are shared through CUDA IPC when passed to a process
            self.params.share_memory_()
            self.grads.share_memory_()
        ctx = _context(self.device, start_method, threads)
        forking = ctx.get_start_method() == "fork"
        self.procs, self.inboxes, self.outboxes = [], [], []
        self.rank_of: dict[Connection, int] = {}  # answer pipe -> process
        self._answers = select.poll()  # every live process's answer pipe, polled with one system call
        self._rank_of_fd: dict[int, int] = {}
        self.alive: list[int] = []
        self.assignment: dict[int, int] = {}  # simulated worker -> process computing its gradients
        self.pending: dict[int, Task] = {}  # worker -> its task sent to a process and not yet answered
        self.row_read: dict[int, int] = {}  # worker -> the parameter row its pending task reads
        self.sent_to: dict[int, int] = {}  # worker -> the process its pending task was last sent to
        self.parameter_copies = 0  # parameter slots written so far (the transport's largest cost)
        self._lent: dict[int, Task] = {}  # worker -> its last answered task, whose gradient is a view of its row
        self._deadline: dict[int, float] = {}  # process -> when it counts as hung if still silent
        self.faults: list[str] = []  # one line per process lost, for the run's log
        self.wait_seconds = 0.0  # wall time the server spent waiting for answers (the rest is its own work)
        self.skipped = 0  # tasks given up on that a process skipped (answered without computing them)
        try:
            with _frozen_heap(forking):
                self._start(ctx, processes, job, data, threads, cpus, forking)
            self.assignment = {w: w % processes for w in range(self.n_workers)}
            self._wait_ready()
        except BaseException:
            self.close()
            raise

    def _start(self, ctx: Any, processes: int, job: JobSpec, data: Dataset | None, threads: int,
               cpus: tuple[int, ...] | None, forking: bool) -> None:
        """Start the `processes` worker processes from `ctx`, each with its two pipes; a forked one is also
        given the server's ends of the pipes started before it, to close (`_serve`)."""
        job_json = job.model_dump(mode="json")
        for rank in range(processes):
            task_out, task_in = ctx.Pipe(duplex=False)  # (receive end, send end)
            answer_out, answer_in = ctx.Pipe(duplex=False)
            proc = ctx.Process(target=_serve, daemon=True, name=f"autosync-worker-{rank}",
                               args=(job_json, data, self.params, self.grads,
                                     self.cancelled, task_out,
                                     answer_in, threads, str(self.device),
                                     cpus[rank % len(cpus)] if cpus else None,
                                     [*self.inboxes, *self.outboxes, task_in, answer_out] if forking else ()))
            proc.start()
            task_out.close()
            answer_in.close()  # only the child holds it now: its death ends the pipe
            self.procs.append(proc)
            self.inboxes.append(task_in)
            self.outboxes.append(answer_out)
            self.rank_of[answer_out] = rank
            self._rank_of_fd[answer_out.fileno()] = rank
            self._answers.register(answer_out.fileno(), select.POLLIN)
            self.alive.append(rank)

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def _wait_ready(self) -> None:
        waiting = set(self.alive)
        limit = max(self.timeout, 120.0)  # building the workload takes a while
        deadline = time.monotonic() + limit
        while waiting:
            ready = wait([self.outboxes[r] for r in waiting], timeout=max(0.0, deadline - time.monotonic()))
            if not ready:
                raise WorkerProcessError(f"worker processes {sorted(waiting)} did not start within {limit:g} s")
            for conn in ready:
                rank = self.rank_of[conn]
                try:
                    conn.recv()
                except EOFError:
                    raise WorkerProcessError(f"worker process {rank} did not start (exit code "
                                             f"{self.procs[rank].exitcode}); run it in the foreground with "
                                             "--backend simulator to see why") from None
                waiting.discard(rank)

    # ------------------------------------------------------------------ computing
    def submit(self, tasks: Sequence[Task]) -> None:
        """Copy each task's parameters into a slot (one shared slot per version that several of them hold,
        while a shared row is free) and notify the worker's process."""
        idle = set(self.alive) - self._busy_ranks()
        for t in tasks:
            self._reclaim(t.worker)
            self.cancelled[t.worker] = -1  # its last task was answered: a new run's indices start again
            self.sent_to.pop(t.worker, None)  # a task it replaces (abandoned unanswered) was sent, not this one
        for group in self._by_version(tasks):
            row = self._free_shared_row() if len(group) > 1 else None
            if row is not None:
                self._pack(group[0], row)
                self.row_read.update({t.worker: row for t in group})
            else:
                for t in group:
                    self._pack(t, t.worker)
                    self.row_read[t.worker] = t.worker
            self.pending.update({t.worker: t for t in group})
        self._start_deadlines(idle)
        if self.device.type == "cuda":
            torch.cuda.current_stream(self.device).synchronize()  # the rows are written before anyone reads
        for t in tasks:
            if t.worker not in self.sent_to:  # not already sent by `_lose` while an earlier send failed
                self._send(t)

    @staticmethod
    def _by_version(tasks: Sequence[Task]) -> list[list[Task]]:
        """The tasks grouped by the parameters (and buffers) they hold: the same tensors, not equal ones."""
        groups: dict[tuple[int, int], list[Task]] = {}
        for t in tasks:
            groups.setdefault((id(t.params), id(t.buffers)), []).append(t)
        return list(groups.values())

    def _free_shared_row(self) -> int | None:
        """A shared parameter row no unanswered task reads, or None."""
        read = set(self.row_read.values())
        return next((r for r in range(self.n_workers, len(self.params)) if r not in read), None)

    def _pack(self, task: Task, row: int) -> None:
        pack_slot(task, self.params[row])
        self.parameter_copies += 1

    def collect(self, timeout: float | None = None) -> list[Answer]:
        """Answers that arrive within `timeout` seconds (None: wait for at least one), in arrival order.

        A process silent for the driver's `timeout` while it has work is lost as hung, and one whose pipe
        ends as dead; their tasks go to the survivors, so `collect` returns only real gradients.
        """
        if not self.pending:
            return []
        answers: list[Answer] = []
        limit = None if timeout is None else time.monotonic() + timeout
        while not answers:
            now = time.monotonic()
            hung = {r for r in self._busy_ranks() if self._deadline[r] <= now}
            if hung:
                self._lose(hung, f"hung (no gradient in {self.timeout:g} s)")
                continue
            next_deadline = min(self._deadline[r] for r in self._busy_ranks())
            until = next_deadline if limit is None else min(next_deadline, limit)
            started = time.perf_counter()
            ready = self._answers.poll(max(0.0, until - now) * 1e3)
            self.wait_seconds += time.perf_counter() - started
            for fd, _ in ready:
                answers += self._read(self._rank_of_fd[fd])
            if limit is not None and time.monotonic() >= limit:
                break
        return answers

    def _read(self, rank: int) -> list[Answer]:
        """The next answer in process `rank`'s pipe, which the poll found readable; a closed pipe loses the
        process. (One per poll: further answers make the next poll return at once.)"""
        if rank not in self.alive:  # lost while this poll's other answers were read
            return []
        try:
            worker, index, loss, compute, sent = self.outboxes[rank].recv()
        except (EOFError, OSError):
            self.procs[rank].join(timeout=5.0)
            self._lose({rank}, f"died (exit code {self.procs[rank].exitcode})")
            return []
        self._deadline[rank] = time.monotonic() + self.timeout
        task = self.pending.get(worker)
        if task is None or task.index != index:  # a stale answer to a task sent again elsewhere
            return []
        del self.pending[worker]
        del self.row_read[worker]
        del self.sent_to[worker]
        if loss is None:  # skipped: given up on before the process reached it (`cancel`)
            self.skipped += 1
            return [Answer(task, 0.0, sent)]
        unpack_answer(task, self.grads[worker], loss)
        self._lent[worker] = task
        return [Answer(task, compute, sent)]

    def cancel(self, tasks: Sequence[Task]) -> None:
        """The server will discard these tasks' gradients: their processes skip those they have not started."""
        for t in tasks:
            if self.pending.get(t.worker) is t:
                self.cancelled[t.worker] = t.index

    def _reclaim(self, worker: int) -> None:
        """Before `worker`'s gradient row is written again: its last answer, if the engine still holds it
        (not yet applied: the real-time clock starts a worker's next task before applying its gradient),
        gets its own copy. Answers are lent as views of the row (`_read`), so an update costs no copy of
        the gradient and no new memory, which for a large model is most of the transport's cost."""
        task = self._lent.pop(worker, None)
        if task is not None and task.gradient is not None:
            unpack_answer(task, self.grads[worker].clone(), task.loss)

    def _busy_ranks(self, exclude: Sequence[int] = ()) -> set[int]:
        """Processes with unanswered tasks (leaving out the workers in `exclude`)."""
        return {self.assignment[w] for w in self.pending if w not in exclude}

    def _start_deadlines(self, idle: set[int]) -> None:
        """Processes of `idle` that have work now are silent from now on."""
        now = time.monotonic()
        for rank in self._busy_ranks() & idle:
            self._deadline[rank] = now + self.timeout

    def _send(self, t: Task) -> None:
        """Notify the process of t's worker. A process whose pipe is already broken has died: it is dropped,
        the tasks it had been sent go to the survivors, and so does t."""
        while True:
            rank = self.assignment[t.worker]
            try:
                self.inboxes[rank].send((t.worker, t.index, t.batch_size, self.row_read[t.worker]))
            except OSError:
                self.procs[rank].join(timeout=5.0)
                self._lose({rank}, f"died (exit code {self.procs[rank].exitcode})")
                if self.sent_to.get(t.worker) in self.alive:  # the loss sent t on already (it had been sent)
                    return
                continue
            self.sent_to[t.worker] = rank
            return

    def _lose(self, ranks: set[int], reason: str) -> None:
        """Drop dead or hung processes and send their unanswered tasks to the survivors.

        Only the lost processes' workers move: a healthy process keeps its workers and its queue, so no
        task is computed twice and no two processes ever write one worker's gradient row. A task is sent
        again only if it went to a lost process: one not sent yet (`submit` is still sending its batch) is
        sent once, by `submit`, and one a nested loss already sent on is not sent twice. (A second
        computation would write the worker's gradient row from a shared parameter row that may hold
        another version by then.)
        """
        moved = [w for rank in sorted(ranks & set(self.alive)) for w in self._drop(rank, reason)]
        self._start_deadlines(set(self.alive) - self._busy_ranks(exclude=moved))
        for w in moved:
            if w in self.sent_to and self.sent_to[w] not in self.alive:
                self._send(self.pending[w])

    def _drop(self, rank: int, reason: str) -> list[int]:
        """Kill process `rank` and give its workers to the survivors (round robin); returns those workers.

        With no process left, the run stops with an error naming the workers still waiting.
        """
        p = self.procs[rank]
        p.kill()
        p.join(timeout=5.0)
        self.alive.remove(rank)
        self._answers.unregister(self.outboxes[rank].fileno())
        if not self.alive:
            lost = "; ".join([*self.faults, f"worker process {rank} (pid {p.pid}) {reason}"])
            raise WorkerProcessError(f"every worker process is gone ({lost}); simulated workers "
                                     f"{sorted(self.pending)} have no process left to compute their gradients")
        self.faults.append(f"worker process {rank} (pid {p.pid}) {reason}; its workers moved to the others")
        orphaned = [w for w, r in self.assignment.items() if r == rank]
        for i, w in enumerate(orphaned):
            self.assignment[w] = self.alive[i % len(self.alive)]
        return orphaned

    def close(self) -> None:
        """Stop every process and wait for it; kill those that do not stop."""
        for rank in list(self.alive):
            try:
                self.inboxes[rank].send(_STOP)
            except (OSError, ValueError):
                pass
        for p in self.procs:
            p.join(timeout=5.0)
            if p.is_alive():
                p.kill()
                p.join(timeout=5.0)
        for conn in [*self.inboxes, *self.outboxes]:
            conn.close()
        self.alive = []
