"""The engine: one parameter-server run, driven by a clock and a gradient driver.

By default computation runs at full speed while a virtual clock decides when each gradient arrives (DBW
paper sec. 4): that order decides which gradients are stale or discarded. Gradients are computed on the
(possibly stale) parameters their worker received, only when the server uses them, and batched. With
the real-time clock (`autosync.engine.realtime`) worker processes compute every task as soon as it is
dispatched and the order they answer in is the arrival order; the replay clock repeats a logged run.
"""

from __future__ import annotations

import math
import pickle
import time as wallclock
from dataclasses import dataclass, field
from typing import Any, Callable, cast

import torch

from autosync.core.cluster import ComputeUnits, RoundTripModel, ServerModel
from autosync.engine.allocator import keep_freed_memory
from autosync.engine.clock import Clock, VirtualClock
from autosync.engine.drivers import Driver, FusingDriver, InProcessDriver
from autosync.engine.local import run_local_steps
from autosync.engine.server import Server, Start, Update
from autosync.engine.threads import on_simulation_threads
from autosync.engine.trace import Trace
from autosync.core.job import JobSpec
from autosync.engine.metrics import run_metrics
from autosync.policies import Arrival, Policy, Progress, Strategies, Task, UpdateStats
from autosync.policies._base import momentum_of
from autosync.workloads.build import build_workload
from autosync.workloads.workload import Workload

__all__ = ["ProgressFn", "RunResult", "Simulator", "StopAt", "simulate"]

ProgressFn = Callable[[dict[str, Any]], None]
# not in a snapshot: `resume` passes them (`_pause` is only set inside `run_until`; a resumed run has no `stop_at`)
_REBUILT_ON_RESUME = ("job", "workload", "driver", "progress", "after_step", "_pause", "stop_at")
# `Simulator.stop_at`: asked with the time of the next event, the time the run stops at (None: go on); it may wait
StopAt = Callable[[float], "float | None"]


@dataclass
class RunResult:
    """Everything one run produced: its identity, how it ended, its trace and its scores."""

    job_name: str
    fingerprint: str
    policy: dict[str, Any]
    seed: int
    status: str  # "completed", "target_reached" or "diverged"
    trace: Trace
    metrics: dict[str, Any]
    wall_seconds: float
    final_params: torch.Tensor | None = field(default=None, repr=False)
    final_buffers: torch.Tensor | None = field(default=None, repr=False)  # the model's buffers (None: it has none)
    faults: list[str] = field(default_factory=list)  # worker processes lost and replaced during the run

    def summary(self) -> dict[str, Any]:
        return {"job": self.job_name, "fingerprint": self.fingerprint, "policy": self.policy,
                "seed": self.seed, "status": self.status, "wall_seconds": self.wall_seconds,
                **self.metrics}


class Simulator:
    """Runs one policy on one job: the virtual clock and the in-process driver unless given others."""

    def __init__(self, job: JobSpec, policy: Policy, workload: Workload | None = None,
                 progress: ProgressFn | None = None, driver: Driver | None = None, clock: Clock | None = None,
                 target_metric_only: bool = False, threads: int | None = None):
        self.job = job
        self.threads = threads  # torch threads while it runs (None: `autosync.engine.threads.simulation_threads`)
        self.policy = policy
        self.workload = workload if workload is not None else build_workload(job)
        self.progress = progress
        self.after_step: Callable[[], None] | None = None  # called between events, where `snapshot` may be taken
        self._pause: Callable[[], bool] | None = None  # `run_until`'s condition, asked between events
        # a horizon decided while the run trains (`autosync.search.race_horizon`): asked before each event as
        # `budget.stop_at_seconds` is, with the event's time, it answers where the run stops once that is known
        # to be before the event, and may wait until it knows; a run so stopped is bit-identical to one given
        # that horizon as its budget's `stop_at_seconds`
        self.stop_at: StopAt | None = None
        self._started = False  # `run` has launched the first tasks (a paused run goes on with `run_on`)
        n = job.cluster.n_workers
        self.strategies: Strategies = policy.bind(n, job.workload.batch_size)
        self.cluster = RoundTripModel(job.cluster, job.seed)
        self.driver: Driver = driver if driver is not None else InProcessDriver(self.workload, job.seed)
        units = job.cluster.compute_units
        # workers that share a unit (a worker process) skip the tasks the server gave up on, as the
        # processes backend does; with a unit each, a task always starts at once and nothing is skipped
        self.clock: Clock = clock if clock is not None else VirtualClock(
            ServerModel(job.cluster.server, model_bytes=4 * self.workload.dim),
            ComputeUnits(units) if units is not None else None,
            drops_superseded=units is not None and units.count < n)
        self.server = Server(self.strategies, n, memory_caps=[self.cluster.memory_cap(w) for w in range(n)],
                             resources=self.cluster.resources, compute_model=job.cluster.compute.model,
                             cancels=getattr(self.clock, "drops_superseded", False))
        self.trace = Trace()
        self.inflight: dict[int, Task] = {}
        self.task_counter = [0] * n
        self.params = self.workload.init_params()
        self.buffers = self.workload.init_buffers()  # the model's buffers, owned by the server (None: none)
        self.update_state = self.strategies.update.init_state(self.params, n, job.workload.optimizer)
        self.samples_applied = 0
        self._stacked: torch.Tensor | None = None  # reused for each update's per-worker gradients (`_gradients`)
        self.now = 0.0
        self._next_eval = 0.0
        self._start_wall = 0.0
        # evaluations compute what the target needs (a search's runs): the training-loss pass is skipped
        # unless the target is the training loss; the test loss and accuracy share one pass anyway
        self.train_loss_evaluated = not target_metric_only or job.target.metric == "train_loss"

    @property
    def epoch(self) -> float:
        """Epochs of training data the applied updates have consumed."""
        return self.samples_applied / self.workload.data.n_train

    # ------------------------------------------------------------------ public
    def run(self) -> RunResult:
        """Simulate until the budget is spent (or the target is met, or the loss diverges), on one torch
        thread (`autosync.engine.threads`)."""
        keep_freed_memory()  # a large model's tensors, new at every update, reuse mapped pages
        with on_simulation_threads(self.threads):
            self._start_wall = wallclock.perf_counter()
            self._started = True
            self._launch(self.server.start())
            status = "target_reached" if self._evaluate_due() and self.job.budget.stop_at_target else "completed"
            return self._run_on(status)

    def snapshot(self) -> bytes:
        """The run's whole state where it stands (parameters, optimizer and strategy state, the server's and
        the clock's queues, the trace, the clock's time), for `Simulator.resume`, taken between events (after
        `run` returned, or from `after_step`; not from the progress callback, which an event calls before its
        workers are launched again): a run continued from it is
        bit-identical to one that never stopped, since every random draw is a function of (seed, stream,
        worker, task) (`autosync.core.rng`) and no state lives outside this object. Only the virtual clock with
        the in-process driver can be snapshotted: worker processes and the real clock keep state elsewhere."""
        if not isinstance(self.clock, VirtualClock) or not isinstance(self.driver, InProcessDriver):
            raise ValueError("only a virtual-clock run on the in-process driver can be snapshotted")
        state = {k: v for k, v in self.__dict__.items() if k not in _REBUILT_ON_RESUME}
        state["_stacked"] = None  # scratch memory, rewritten before every read
        return pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)

    @classmethod
    def resume(cls, snapshot: bytes, job: JobSpec, workload: Workload | None = None,
               progress: ProgressFn | None = None) -> "Simulator":
        """A run continued from `snapshot` (`Simulator.snapshot`) of a run of the same policy on `job`; `job`
        may differ in its budget only (a run stopped at the target continues to the full budget).
        `resume(...).run_on()` finishes it."""
        sim = cls.__new__(cls)
        sim.__dict__.update(pickle.loads(snapshot))
        sim.job, sim.progress, sim.after_step, sim._pause, sim.stop_at = job, progress, None, None, None
        sim.workload = workload if workload is not None else build_workload(job)
        sim.driver = InProcessDriver(sim.workload, job.seed)
        return sim

    def continue_as(self, policy: Policy) -> None:
        """Go on as `policy`, which differs from this run's policy only in its schedule's switch point, one
        the run has not yet decided on (`Schedule.continue_as`: Sync-Switch above the quota used so far).
        The run from here on is `policy`'s, bit for bit, as if it had started with it: until the switch is
        decided no strategy reads the switch point. Raises ValueError where it is not."""
        fresh = policy.bind(self.job.cluster.n_workers, self.job.workload.batch_size)
        self.strategies.schedule.continue_as(fresh.schedule)
        self.policy = policy

    def run_until(self, pause: Callable[[], bool]) -> RunResult | None:
        """Run, or go on with a run this call paused before, until `pause()`, asked after every event, is
        true: then None, and the run stands between events, where another call continues it bit for bit;
        the run's result if it ends first (budget spent, target met, diverged: a step that ends the run
        is never paused over). `pause` sees each event, the last one's included."""
        self._pause = pause
        try:
            return self.run_on() if self._started else self.run()
        except _Paused:
            return None
        finally:
            self._pause = None

    def run_on(self) -> RunResult:
        """Continue a resumed run until its budget is spent (or the target is met, or the loss diverges).
        The progress callback hears the snapshot's evaluations first, in order: what it tracks (the time the
        target was met, a search's pruning bound and curve) then reads as in a run that never stopped. Those
        evaluations are marked `forked` (the virtual time up to the last of them was not trained again)."""
        keep_freed_memory()
        with on_simulation_threads(self.threads):
            self._start_wall = wallclock.perf_counter() - (self.trace.updates[-1][2] if self.trace.updates else 0.0)
            if self.progress is not None:
                for updates, now, epoch, train_loss, test_loss, accuracy in self.trace.evals:
                    named = {"train_loss": train_loss, "test_loss": test_loss, "test_accuracy": accuracy}
                    self.progress({"time": now, "updates": updates, "epoch": epoch, "forked": True,
                                   **{k: v for k, v in named.items() if v is not None}})
            return self._run_on("completed")

    def _run_on(self, status: str) -> RunResult:
        budget = self.job.budget
        # the budget is checked before each step, so a run resumed from a snapshot taken after a step
        # (`after_step`) checks it as the run that never stopped did
        while status == "completed" and self.clock and not self._budget_spent():
            if budget.max_virtual_seconds is not None and self.clock.peek_time() > budget.max_virtual_seconds:
                self.now = budget.max_virtual_seconds
                break
            if budget.stop_at_seconds is not None and self.clock.peek_time() > budget.stop_at_seconds:
                self.now = max(self.now, budget.stop_at_seconds)
                break
            if self.stop_at is not None and (stop := self.stop_at(self.clock.peek_time())) is not None:
                self.now = max(self.now, stop)
                break
            status = self._step()
            if self.after_step is not None:
                self.after_step()
            if self._pause is not None and self._pause() and status == "completed":
                raise _Paused
        if not self.trace.evals or self.trace.evals[-1][0] != len(self.trace.updates):
            self._evaluate()
        wall = wallclock.perf_counter() - self._start_wall
        return RunResult(
            job_name=self.job.name, fingerprint=self.job.fingerprint(), policy=self.policy.to_dict(),
            seed=self.job.seed, status=status, trace=self.trace,
            metrics=run_metrics(self.trace, self.job.target, self.now), wall_seconds=wall,
            final_params=self.params, final_buffers=self.buffers)

    # ------------------------------------------------------------------ one event
    def _step(self) -> str:
        time, worker, _ = self.clock.pop()
        self.now = max(time, self.now)  # a server still applying an update answers when it is done
        task = self.inflight.pop(worker)
        arrival = Arrival(task, self.now)
        decision = self.server.on_arrival(arrival)
        self.clock.check_decision(decision.accepted)
        self.trace.arrivals.append((time, worker, task.index, task.version, task.batch_size, decision.accepted))
        if not decision.accepted:  # never used: a driver holding its gradient need not keep a copy of it
            task.gradient = task.params = task.buffers = task.buffer_delta = None
        if decision.cancelled:  # given up on at this update: compute they share may skip them
            self.clock.cancel([self.inflight[w] for w in decision.cancelled], self.now)
        status = "completed"
        self._launch(decision.starts)
        if decision.update is not None:
            status = self._apply(decision.update)
            self._launch(self.server.start())  # who starts next is decided on the applied update
        return status

    def _apply(self, update: Update) -> str:
        """Apply one update and run the strategies' hooks; returns the run status."""
        strategies = self.strategies
        arrivals = update.arrivals
        self.now = self.clock.serve_update(self.now)  # the server's apply cost, when its model has one
        self.server.time = self.now
        weights = strategies.aggregation.weights(arrivals)
        aggregate, worker_grads, losses = self._gradients(arrivals, weights)
        lr = self.workload.learning_rate(self.epoch) * update.lr_scale
        self.params = strategies.update.apply(self.params, self.update_state, aggregate, lr, arrivals)
        if self.buffers is not None:
            self.buffers = self._moved_buffers(arrivals, weights)
        self.samples_applied += sum(a.task.batch_size * a.task.steps for a in arrivals)
        loss = sum(w * l for w, l in zip(weights, losses))
        stats = UpdateStats(arrivals, weights, aggregate, worker_grads, losses, lr, self.now,
                            momentum_of(self.update_state, self.job.workload.optimizer))
        diverged = not math.isfinite(loss) or not _all_finite(self.params)
        # a diverged update ends the run: the strategies never see its non-finite statistics (DBW's gain
        # estimates (9)-(16) would all be NaN, and its rule (19) has no k to choose among)
        pause = 0.0 if diverged else self._after_update(strategies, stats)
        if pause:  # a phase change stops the whole cluster: everything in flight arrives later too
            self.now += pause
            self.server.time = self.now
            self.clock.delay_all(pause)
        self.trace.updates.append((
            len(self.trace.updates) + 1, self.now, wallclock.perf_counter() - self._start_wall,
            self.server.version, update.target_count, len(arrivals), [a.worker for a in arrivals],
            update.staleness, [a.task.batch_size for a in arrivals], loss, lr,
            self.epoch))
        update_index = len(self.trace.updates)
        for strategy in strategies.all():
            for key, value in strategy.trace_values().items():
                self.trace.extras.setdefault(key, []).append((update_index, value))
        for a in arrivals:  # free the gradients: the tasks may still be referenced by the trace
            a.task.gradient = a.task.params = a.task.buffers = a.task.buffer_delta = None
        if diverged:
            return "diverged"
        if self._evaluate_due() and self.job.budget.stop_at_target:
            return "target_reached"
        return "completed"

    def _after_update(self, strategies: Strategies, stats: UpdateStats) -> float:
        """Tell each strategy about the update just applied; the pause a schedule's phase change asks for."""
        strategies.barrier.after_update(self.server, stats)
        strategies.batching.after_update(self.server, stats)
        strategies.local.after_update(self.server, stats)
        return strategies.schedule.after_update(self.server, strategies, stats, self._progress(), self.update_state)

    def _progress(self) -> Progress:
        """Training progress against the budget (epochs first: Sync-Switch measures its workload in samples)."""
        b = self.job.budget
        epoch = self.epoch
        updates = len(self.trace.updates) + 1
        if b.max_epochs is not None:
            fraction = epoch / b.max_epochs
        elif b.max_virtual_seconds is not None:
            fraction = self.now / b.max_virtual_seconds
        else:
            fraction = updates / b.max_updates if b.max_updates else 0.0
        return Progress(epoch=epoch, fraction=fraction, updates=updates, time=self.now)

    def _gradients(self, arrivals: list[Arrival], weights: list[float]):
        """Aggregate gradient, per-worker gradients (when asked for) and local losses of one update."""
        strategies = self.strategies
        tasks = [a.task for a in arrivals]
        local = [t for t in tasks if t.steps > 1 and t.gradient is None]
        if local:  # their changes first: the tasks of one step then go the usual way (a fused pass if it can)
            if strategies.barrier.always_applies:  # every in-flight change will be used: run them all now
                local += [t for t in self.inflight.values() if t.steps > 1 and t.gradient is None]
            run_local_steps(self.driver, local, self.job.workload.optimizer.weight_decay)
        pending = [t for t in tasks if t.gradient is None]
        same_params = all(t.params is tasks[0].params for t in tasks)
        if self.driver.fuses_workers and not strategies.needs_worker_gradients and len(pending) == len(tasks) \
                and same_params and not strategies.barrier.always_applies:
            aggregate, losses = cast(FusingDriver, self.driver).aggregate(tasks, weights)
            return aggregate, None, losses
        if pending:
            if strategies.barrier.always_applies:  # every in-flight gradient will be used: batch them now
                pending += [t for t in self.inflight.values() if t.gradient is None and t.steps == 1]
            self.driver.worker_gradients(pending)
        losses = [t.loss for t in tasks]
        if len(tasks) == 1 and weights[0] == 1.0:  # ASP: the aggregate is the gradient itself (1.0 * g == g)
            g = tasks[0].gradient
            return g, (g.unsqueeze(0) if strategies.needs_worker_gradients else None), losses
        stacked = self._stack([t.gradient for t in tasks])
        aggregate = torch.tensordot(torch.tensor(weights, dtype=stacked.dtype, device=stacked.device), stacked,
                                    dims=1)
        return aggregate, (stacked if strategies.needs_worker_gradients else None), losses

    def _stack(self, gradients: list[torch.Tensor]) -> torch.Tensor:
        """The gradients as the rows of one matrix, written into memory reused from update to update: a new
        matrix each time would fault in its pages anew (a third of a ResNet-18 BSP update's engine time).
        Strategies read the rows during the update's hooks and keep none of them."""
        k, first = len(gradients), gradients[0]
        buffer = self._stacked
        if buffer is None or buffer.shape[0] < k or buffer.shape[1] != first.numel() \
                or buffer.dtype != first.dtype or buffer.device != first.device:
            buffer = self._stacked = first.new_empty((k, first.numel()))
        return torch.stack(gradients, out=buffer[:k])

    def _moved_buffers(self, arrivals: list[Arrival], weights: list[float]) -> torch.Tensor:
        """The server's buffers after an update: moved by the weighted mean of the changes the aggregated
        gradients' forward passes made (the weights of the gradients; each change on the buffers that worker
        received). So BatchNorm's running statistics follow the batches each update is made of: BSP's n
        equal batches move them as one step of their mean, ASP moves them once per applied gradient.
        A new tensor: buffers sent to workers still computing stay as they were."""
        moved = self.buffers.clone()
        for w, a in zip(weights, arrivals):
            moved.add_(a.task.buffer_delta, alpha=w)
        return moved

    def _launch(self, starts: list[Start]) -> None:
        update_rule, state = self.strategies.update, self.update_state
        dispatched: list[tuple[Task, float]] = []
        for s in starts:
            cap = self.cluster.memory_cap(s.worker)
            if cap is not None and s.batch_size > cap:
                raise ValueError(f"batch size of worker {s.worker} must be <= its memory cap {cap}, "
                                 f"but the policy chose {s.batch_size}")
            if not isinstance(s.steps, int) or s.steps < 1:
                raise ValueError(f"local steps of worker {s.worker} must be an integer >= 1, but the policy "
                                 f"chose steps={s.steps!r}")
            index = self.task_counter[s.worker]  # the worker's steps so far: a task of H steps takes H indices
            self.task_counter[s.worker] += s.steps
            task = Task(s.worker, index, self.server.version, s.batch_size, self.now,
                        params=update_rule.params_for(s.worker, self.params, state), buffers=self.buffers,
                        steps=s.steps,
                        local_lr=self.workload.learning_rate(self.epoch) if s.steps > 1 else 0.0)
            self.inflight[s.worker] = task
            self.server.on_task_started(task)
            dispatched.append((task, self.cluster.local_round_trip(s.worker, index, s.steps, s.batch_size,
                                                                   self.now)))
        if dispatched:
            self.clock.dispatch(dispatched)  # all at once: one submission to the worker processes

    # ------------------------------------------------------------------ evaluation and budget
    def _evaluate_due(self) -> bool:
        """Evaluate if the evaluation clock says so; True when the target is met."""
        if self.now < self._next_eval:
            return False
        every = self.job.workload.evaluation.every_seconds
        self._next_eval = (math.floor(self.now / every) + 1) * every
        return self._evaluate()

    def _evaluate(self) -> bool:
        with self.clock.off_the_clock():
            result = self.workload.evaluate(self.params, self.buffers, train_loss=self.train_loss_evaluated)
        epoch = self.epoch
        self.trace.evals.append((len(self.trace.updates), self.now, epoch, result.get("train_loss"),
                                 result["test_loss"], result.get("test_accuracy")))
        if self.progress is not None:
            self.progress({"time": self.now, "updates": len(self.trace.updates), "epoch": epoch, **result})
        return self.job.target.reached(result.get(self.job.target.metric))

    def _budget_spent(self) -> bool:
        b = self.job.budget
        if b.max_updates is not None and len(self.trace.updates) >= b.max_updates:
            return True
        return b.max_epochs is not None and self.epoch >= b.max_epochs


class _Paused(Exception):
    """`run_until`'s condition held between two events: the run stops there, resumable."""


def simulate(job: JobSpec, policy: Policy, workload: Workload | None = None,
             progress: ProgressFn | None = None, driver: Driver | None = None, clock: Clock | None = None,
             ) -> RunResult:
    """Run `policy` on `job` and return the result.

    `driver` computes the gradients (default: the fused in-process driver); it is closed at the end,
    also when the run fails or is interrupted. `clock` orders the arrivals (default: the virtual clock).
    """
    try:
        result = Simulator(job, policy, workload=workload, progress=progress, driver=driver, clock=clock).run()
        result.faults = list(getattr(driver, "faults", []))
        return result
    finally:
        if driver is not None:
            driver.close()


def _all_finite(x: torch.Tensor) -> bool:
    """Whether every entry of x is finite. A finite sum proves it (an infinity or a NaN makes the sum
    non-finite) in one pass without a mask; only a non-finite sum, which overflow can also give, is
    checked entry by entry."""
    return math.isfinite(float(x.sum())) or bool(torch.isfinite(x).all())
