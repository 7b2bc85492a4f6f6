"""Worker processes compute the gradients; the server process keeps the engine (issue: processes backend).

One machine, `torch.multiprocessing` with the `spawn` start method. Before the workers start, the server
allocates two shared-memory slot tables, parameters and gradients, with one row per simulated worker
(a worker has at most one task in flight). Dispatching a task copies its parameters into the worker's
row and sends a small notification `(worker, task index, batch size)` down the owning process's
pipe; the process writes the gradient into the gradient row in place and answers `(worker, index,
loss)`. No tensor is created per message. Every process runs `worker_gradient`, the same kernel as the in-process
`PerWorkerDriver`, with one intra-op thread, so both backends give bit-identical results.

Faults: a process that dies is seen at once (its answer pipe ends); one that sends nothing for `timeout`
seconds while it has work counts as hung and is killed. Either way its simulated workers move to the
surviving processes (in virtual-clock mode the arrival order belongs to the cluster model, so any
process may compute any worker's gradient and the run stays bit-identical); with no process left the
run stops with an error naming the workers. `close()` (also on Ctrl-C or an exception, via the
simulator) stops and joins every process.
"""

from __future__ import annotations

import os
import time
from typing import Any, Sequence

import torch
import torch.multiprocessing as mp
from multiprocessing.connection import Connection, wait

from autosync.errors import UserError
from autosync.job import JobSpec
from autosync.policies import Task

_STOP = None  # the notification that ends a worker process


def _serve(job_json: dict[str, Any], params: torch.Tensor, grads: torch.Tensor, inbox: Connection,
           outbox: Connection, threads: int) -> None:
    """A worker process: compute the gradient of every task notified on `inbox` into `grads`."""
    torch.set_num_threads(threads)
    from autosync.engine.drivers.perworker import worker_gradient
    from autosync.workloads.workload import Workload

    job = JobSpec.model_validate(job_json)
    seed = job.seed
    workload = Workload(job)
    worker_gradient(workload, seed, workload.init_params(), 0, 0, 1)  # warm up: the timeout then sees steady state
    outbox.send(("ready", os.getpid(), None))
    while True:
        try:
            message = inbox.recv()
        except (EOFError, KeyboardInterrupt):  # the server is gone, or Ctrl-C reached the whole group
            return
        if message is _STOP:
            return
        worker, index, batch_size = message
        g, loss = worker_gradient(workload, seed, params[worker], worker, index, batch_size)
        grads[worker].copy_(g)
        outbox.send(("done", worker, index, loss))


class WorkerProcessError(UserError):
    """A worker process died or hung and no process is left to take its work."""


class ProcessDriver:
    """Computes task gradients in `processes` spawned worker processes on this machine's CPU.

    Each process has its own pair of pipes (tasks in, answers out): nothing is shared between processes
    but the slot tables, so a process killed at any instant cannot block the others, and its death is
    seen at once as the end of its answer pipe.
    """

    fuses_workers = False

    def __init__(self, job: JobSpec, dim: int, processes: int, timeout: float = 60.0, threads: int = 1):
        if processes < 1:
            raise UserError(f"--workers-per-device must be >= 1, but got {processes}")
        self.n_workers = job.cluster.n_workers
        self.timeout = timeout
        self.params = torch.zeros(self.n_workers, dim).share_memory_()
        self.grads = torch.zeros(self.n_workers, dim).share_memory_()
        ctx = mp.get_context("spawn")
        self.procs, self.inboxes, self.outboxes = [], [], []
        self.rank_of: dict[Connection, int] = {}  # answer pipe -> process
        self.alive: list[int] = []
        self.assignment: dict[int, int] = {}  # simulated worker -> process computing its gradients
        self._sent: set[int] = set()  # workers whose pending task is in a process's pipe (this batch)
        self.faults: list[str] = []  # one line per process lost, for the run's log
        self.wait_seconds = 0.0  # wall time the server spent waiting for answers (the rest is its own work)
        try:
            for rank in range(processes):
                task_out, task_in = ctx.Pipe(duplex=False)  # (receive end, send end)
                answer_out, answer_in = ctx.Pipe(duplex=False)
                proc = ctx.Process(target=_serve, daemon=True, name=f"autosync-worker-{rank}",
                                   args=(job.model_dump(mode="json"), self.params, self.grads, task_out,
                                         answer_in, threads))
                proc.start()
                task_out.close()
                answer_in.close()  # only the child holds it now: its death ends the pipe
                self.procs.append(proc)
                self.inboxes.append(task_in)
                self.outboxes.append(answer_out)
                self.rank_of[answer_out] = rank
                self.alive.append(rank)
            self.assignment = {w: w % processes for w in range(self.n_workers)}
            self._wait_ready()
        except BaseException:
            self.close()
            raise

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

    def worker_gradients(self, tasks: Sequence[Task]) -> None:
        """Fill `task.gradient` and `task.loss` of every task, computed in parallel by the processes."""
        pending = {t.worker: t for t in tasks}
        self._sent = set()
        for t in tasks:
            self.params[t.worker].copy_(t.params)
            self._send(t, pending)
        while pending:
            started = time.perf_counter()
            ready = wait([self.outboxes[r] for r in self.alive], timeout=self.timeout)
            self.wait_seconds += time.perf_counter() - started
            if not ready:
                hung = {self.assignment[w] for w in pending}
                self._lose(hung, f"hung (no gradient in {self.timeout:g} s)", pending)
                continue
            for conn in ready:
                rank = self.rank_of[conn]
                try:
                    kind, worker, index, loss = conn.recv()
                except (EOFError, OSError):
                    self.procs[rank].join(timeout=5.0)
                    self._lose({rank}, f"died (exit code {self.procs[rank].exitcode})", pending)
                    continue
                if kind == "done" and worker in pending and pending[worker].index == index:  # not a stale answer
                    t = pending.pop(worker)
                    t.gradient, t.loss = self.grads[worker].clone(), loss

    def _send(self, t: Task, pending: dict[int, Task]) -> None:
        """Notify the process of t's worker. A process whose pipe is already broken has died: it is dropped
        and the tasks it had been sent go to the survivors with t."""
        while True:
            rank = self.assignment[t.worker]
            try:
                self.inboxes[rank].send((t.worker, t.index, t.batch_size))
                self._sent.add(t.worker)
                return
            except OSError:
                self.procs[rank].join(timeout=5.0)
                moved = self._drop(rank, f"died (exit code {self.procs[rank].exitcode})", pending)
                for w in moved:
                    if w != t.worker and w in pending and w in self._sent:
                        self._send(pending[w], pending)

    def _lose(self, ranks: set[int], reason: str, pending: dict[int, Task]) -> None:
        """Drop dead or hung processes and re-send their unanswered tasks to the survivors.

        Only the lost processes' workers move: a healthy process keeps its workers and its queue, so no
        task is computed twice and no two processes ever write one worker's gradient row.
        """
        moved = [w for rank in sorted(ranks & set(self.alive)) for w in self._drop(rank, reason, pending)]
        for w in moved:
            if w in pending:
                self._send(pending[w], pending)

    def _drop(self, rank: int, reason: str, pending: dict[int, Task]) -> list[int]:
        """Kill process `rank` and give its workers to the survivors (round robin); returns those workers.

        With no process left, the run stops with an error naming the workers still waiting.
        """
        p = self.procs[rank]
        p.kill()
        p.join(timeout=5.0)
        self.alive.remove(rank)
        self.faults.append(f"worker process {rank} (pid {p.pid}) {reason}; its workers moved to the others")
        if not self.alive:
            raise WorkerProcessError(f"every worker process is gone ({'; '.join(self.faults)}); simulated "
                                     f"workers {sorted(pending)} have no process to compute their gradients")
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
