"""Cluster models: how long each worker's round trip takes, shared by every backend.

A round trip = compute time for the worker's batch (scaled by its speed, its current resources and any
slowdown) times a random multiplier, plus a fixed communication time. Every random number is a pure
function of (seed, stream, worker, task), so skipping one gradient never shifts another worker's draws.
"""

from __future__ import annotations

import heapq
from collections import deque
from pathlib import Path

import numpy as np

from autosync.core.errors import UserError
from autosync.core.traces import TraceProblem, read_trace
from autosync.core.job import (
    ClusterSpec, ComputeSpec, ComputeUnitsSpec, DeterministicRTT, GammaRTT, GPUCompute, LinearCompute, ParetoRTT,
    ServerSpec,
    ShiftedExponentialRTT, TraceRTT, UniformRTT,
)
from autosync.core.rng import STREAM_JOB_CONSTANT, STREAM_RESOURCES, STREAM_ROUND_TRIP, STREAM_WORKER_CONSTANT, rng_for

class RoundTripModel:
    """Round-trip times of every worker for one cluster spec and seed."""

    def __init__(self, spec: ClusterSpec, seed: int):
        self.spec = spec
        self.seed = seed
        self.n_workers = spec.n_workers
        self._speed = np.asarray(spec.speed_factors or [1.0] * spec.n_workers, dtype=float)
        self._trace = _load_trace(spec.round_trip) if isinstance(spec.round_trip, TraceRTT) else None
        self._gamma_means = self._gamma_worker_means()
        self._resources: dict[int, np.ndarray] = {}

    # ------------------------------------------------------------------ public
    def round_trip(self, worker: int, task: int, batch_size: int, start: float) -> float:
        """Seconds from the moment `worker` starts `task` at virtual time `start` to its arrival."""
        compute = self.compute_seconds(worker, batch_size, start)
        return float(compute * self.noise(worker, task) + self.spec.communication_seconds)

    def local_round_trip(self, worker: int, first_step: int, steps: int, batch_size: int, start: float) -> float:
        """Seconds from the moment `worker` starts `steps` local steps (its steps first_step .. first_step +
        steps - 1) at virtual time `start` to the arrival of its change: each step's compute time with its own
        random multiplier, plus one communication time (one exchange per task, whatever its steps). With one
        step it is `round_trip`, to the bit. Each step's compute time is read when that step starts, as a
        worker running its steps one after another meets it: a slowdown (or a resource period) that begins
        or ends during the task slows only the steps that start inside it. Where nothing changes during
        the task, the sum is the one of steps x the start's compute time, to the bit."""
        if steps == 1:
            return self.round_trip(worker, first_step, batch_size, start)
        total = 0
        for j in range(steps):
            total += self.compute_seconds(worker, batch_size, start + total) * self.noise(worker, first_step + j)
        return float(total + self.spec.communication_seconds)

    def compute_seconds(self, worker: int, batch_size: int, start: float) -> float:
        """Mean compute time of a batch on `worker` at time `start` (before the random multiplier)."""
        base = self.base_compute_seconds(batch_size)
        speed = self._speed[worker] * self.resource_speed(worker, start)
        return base / speed * self.slowdown(worker, start)

    def base_compute_seconds(self, batch_size: int) -> float:
        """Compute time of a batch at unit speed (`batch_seconds`)."""
        return batch_seconds(self.spec.compute, batch_size)

    def memory_cap(self, worker: int) -> int | None:
        """Largest batch `worker` can hold in memory (GPU compute model only)."""
        c = self.spec.compute
        return c.memory_cap_batch if isinstance(c, GPUCompute) else None

    def noise(self, worker: int, task: int) -> float:
        """The random multiplier (mean 1 for the built-in distributions) of one round trip."""
        rt = self.spec.round_trip
        if isinstance(rt, DeterministicRTT):
            return 1.0
        if isinstance(rt, TraceRTT) and rt.mode == "replay":
            trace = self._trace
            return float(trace[(task * self.n_workers + worker) % len(trace)])
        rng = rng_for(self.seed, STREAM_ROUND_TRIP, worker, task)
        if isinstance(rt, ShiftedExponentialRTT):
            return (1.0 - rt.alpha) + rt.alpha * rng.exponential(1.0)
        if isinstance(rt, UniformRTT):
            return rng.uniform(rt.low, rt.high)
        if isinstance(rt, ParetoRTT):
            return rt.scale * (1.0 + rng.pareto(rt.shape))
        if isinstance(rt, GammaRTT):
            return self._gamma_noise(rt, worker, rng)
        if isinstance(rt, TraceRTT):
            return float(self._trace[rng.integers(len(self._trace))])
        raise TypeError(f"unknown round-trip distribution {rt!r}")

    def slowdown(self, worker: int, time: float) -> float:
        """Product of the slowdown factors active for `worker` at `time` (DBW Fig. 9)."""
        factor = 1.0
        for s in self.spec.slowdowns:
            if worker in s.workers and s.at <= time < s.at + s.duration:
                factor *= s.factor
        return factor

    def resources(self, worker: int, time: float) -> tuple[float, float]:
        """(CPU share, memory share) available to `worker` at `time`; (1, 1) without a resource model."""
        res = self.spec.resources
        if res is None:
            return 1.0, 1.0
        period = int(time // res.period_seconds)
        series = self._resource_series(worker, period + 1)
        return float(series[period, 0]), float(series[period, 1])

    def resource_speed(self, worker: int, time: float) -> float:
        """Speed multiplier from resources: linear in CPU share, penalised when memory is short."""
        cpu, mem = self.resources(worker, time)
        memory_penalty = 1.0 if mem >= 0.7 else (mem / 0.7) ** 2  # swapping slows superlinearly
        return cpu * memory_penalty

    # ------------------------------------------------------------------ internals
    def _gamma_worker_means(self) -> np.ndarray | None:
        rt = self.spec.round_trip
        if not isinstance(rt, GammaRTT):
            return None
        a_mach, a_task = 1.0 / rt.v_mach ** 2, 1.0 / rt.v_task ** 2
        if rt.heterogeneous:  # Algorithm 12: p[j] ~ G(a_mach, mu/a_mach), one per machine
            return np.array([rng_for(self.seed, STREAM_WORKER_CONSTANT, w).gamma(a_mach, 1.0 / a_mach)
                             for w in range(self.n_workers)])
        # Algorithm 11: one task mean q ~ G(a_task, mu/a_task) for the whole job
        q = rng_for(self.seed, STREAM_JOB_CONSTANT).gamma(a_task, 1.0 / a_task)
        return np.full(self.n_workers, q)

    def _gamma_noise(self, rt: GammaRTT, worker: int, rng: np.random.Generator) -> float:
        mean = self._gamma_means[worker]
        shape = 1.0 / (rt.v_task ** 2 if rt.heterogeneous else rt.v_mach ** 2)
        return rng.gamma(shape, mean / shape)

    def _resource_series(self, worker: int, length: int) -> np.ndarray:
        """AR(1) availability per period, grown on demand; a pure function of (seed, worker)."""
        res = self.spec.resources
        series = self._resources.get(worker)
        if series is not None and len(series) >= length:
            return series
        length = max(length, 2 * (len(series) if series is not None else 64))
        rng = rng_for(self.seed, STREAM_RESOURCES, worker)
        shocks = rng.uniform(size=(length, 2))
        lows = np.array([res.cpu_min, res.memory_min])
        values = np.empty((length, 2))
        values[0] = lows + (1.0 - lows) * shocks[0]
        for p in range(1, length):
            values[p] = res.smoothness * values[p - 1] + (1 - res.smoothness) * (lows + (1.0 - lows) * shocks[p])
        self._resources[worker] = values
        return values


def batch_seconds(compute: ComputeSpec, batch_size: int) -> float:
    """Compute time of a batch at speed 1: linear (CPU, LB-BSP sec. 3.2) or flat then linear (GPU, sec. 3.3.1)."""
    if isinstance(compute, LinearCompute):
        return batch_size * compute.seconds_per_sample
    assert isinstance(compute, GPUCompute)
    return compute.launch_overhead + max(0, batch_size - compute.saturation_batch) * compute.seconds_per_sample


def _read_trace_file(path: str, column: str | None) -> tuple[float, ...]:
    try:
        return read_trace(path, column)
    except TraceProblem as exc:
        raise UserError(f"{path}: {exc}") from None


def _load_trace(rt: TraceRTT) -> np.ndarray:
    values = np.asarray(_read_trace_file(str(Path(rt.path)), rt.column))
    return values / values.mean() if rt.normalize else values


class ComputeUnits:
    """Compute that several workers share (`ComputeUnitsSpec`), as first-come-first-served queues (virtual
    seconds): worker w's gradient is computed on unit w % count once the unit has finished the gradients
    dispatched to it before, and takes the unit's time for its batch (`batch_seconds` / the unit's speed).

    Two ways to ask. `compute` books a task at once (every task is computed). The queue (`enqueue`,
    `start_next`, `drop`) books a task only when its unit reaches it, so that a task the server has
    given up on by then (a gradient its barrier will discard: `drop`) is answered at its turn without
    being computed and costs the unit nothing, as a worker process does with a task whose cancellation it
    finds before it starts. Without drops both give the same times, to the bit.

    Tasks are dispatched in order, non-decreasing in time (the clock's job), which makes first come,
    first served exact: a worker process of the processes backend takes its notifications in that order
    too.
    """

    def __init__(self, spec: ComputeUnitsSpec):
        self.spec = spec
        self._speed = list(spec.speed_factors or [1.0] * spec.count)
        self._free = [0.0] * spec.count
        # per unit: tasks dispatched, not yet started (begin, round trip, worker, index, batch size, steps)
        self._queues: list[deque[tuple[float, float, int, int, int, int]]] = [deque() for _ in range(spec.count)]
        self._heads: list[tuple[float, int]] = []  # (start of the unit's first queued task, unit), a heap
        self._queued: set[tuple[int, int]] = set()  # (worker, task index) in a queue
        self._dropped: set[tuple[int, int]] = set()  # (worker, task index) queued and given up on

    def unit_of(self, worker: int) -> int:
        return worker % self.spec.count

    def seconds(self, worker: int, batch_size: int) -> float:
        """How long `worker`'s gradient of `batch_size` samples occupies its unit."""
        return batch_seconds(self.spec.compute, batch_size) / self._speed[self.unit_of(worker)]

    def compute(self, worker: int, start: float, batch_size: int, steps: int = 1) -> float:
        """When the gradient (or the `steps` local steps) of a task of `worker` that can start at `start` has
        been computed."""
        unit = self.unit_of(worker)
        seconds = self.seconds(worker, batch_size)
        done = max(start, self._free[unit]) + (seconds if steps == 1 else steps * seconds)
        self._free[unit] = done
        return done

    # ------------------------------------------------------------------ the queue
    def enqueue(self, worker: int, index: int, begin: float, round_trip: float, batch_size: int,
                steps: int = 1) -> None:
        """Task `index` of `worker`, whose parameters reached it at `begin`, joins its unit's queue; its
        gradient will be ready `round_trip` after `begin` or once the unit has computed it, the later."""
        unit = self.unit_of(worker)
        queue = self._queues[unit]
        queue.append((begin, round_trip, worker, index, batch_size, steps))
        self._queued.add((worker, index))
        if len(queue) == 1:
            heapq.heappush(self._heads, (max(begin, self._free[unit]), unit))

    def start_next(self, limit: float) -> tuple[float, int, int] | None:
        """Start the queued task whose turn comes first (ties: the lower unit), if it comes at or before
        `limit`: returns its (ready time, worker, task index), else None. A dropped task is answered at
        its turn (ready when its round trip has passed or at its turn, the later) and the unit goes on
        at once."""
        if not self._heads or self._heads[0][0] > limit:
            return None
        start, unit = heapq.heappop(self._heads)
        queue = self._queues[unit]
        begin, round_trip, worker, index, batch_size, steps = queue.popleft()
        self._queued.discard((worker, index))
        if (worker, index) in self._dropped:
            self._dropped.discard((worker, index))
            done = start
        else:
            seconds = self.seconds(worker, batch_size)
            done = start + (seconds if steps == 1 else steps * seconds)
        self._free[unit] = done
        if queue:
            heapq.heappush(self._heads, (max(queue[0][0], done), unit))
        return max(begin + round_trip, done), worker, index

    def drop(self, worker: int, index: int) -> bool:
        """Give up on task `index` of `worker` if it is still queued (True); one started is computed."""
        if (worker, index) in self._queued:
            self._dropped.add((worker, index))
            return True
        return False

    def queued(self) -> int:
        """Tasks in the queues, not yet started."""
        return len(self._queued)

    def delay_all(self, seconds: float) -> None:
        """A pause of the whole cluster postpones what every unit was doing, and what it was to do."""
        self._free = [free + seconds for free in self._free]
        self._queues = [deque((b + seconds, *rest) for b, *rest in q) for q in self._queues]
        self._heads = [(start + seconds, unit) for start, unit in self._heads]  # the same order: still a heap


def started_at_once(spec: ComputeUnitsSpec | None, trips: list[float], batch_size: int) -> list[float]:
    """Each worker's time to its gradient when all of them start a task at time 0 with round trips
    `trips`: with compute units, the later of its round trip and its place in its unit's queue."""
    if spec is None:
        return list(trips)
    units = ComputeUnits(spec)
    return [max(trip, units.compute(w, 0.0, batch_size)) for w, trip in enumerate(trips)]


class ServerModel:
    """The parameter server's links and update loop as first-come-first-served queues (virtual seconds).

    A pull (the parameters to a worker) leaves on the server's outbound link, a push (a gradient) comes in
    on its inbound link, each taking model_bytes / shards / bandwidth once the link is free; an update
    takes apply_seconds / shards of the server's update loop, and each gradient received takes
    gradient_seconds of the same loop (one arrival or update at a time, first come first served). The
    shards hold equal parts of the model and see the same sequence of transfers, so one queue per
    direction stands for all of them. With an instant server (the default) every method returns its
    argument: no queueing, no cost.

    Pulls are asked for in dispatch order and pushes in the order their gradients are ready, both
    non-decreasing in time (the clock's job), which is what makes first come, first served exact.
    """

    def __init__(self, spec: ServerSpec, model_bytes: int):
        self.spec = spec
        self.instant = spec.instant
        size = spec.model_bytes if spec.model_bytes is not None else model_bytes
        self.transfer_seconds = 0.0 if spec.bandwidth is None else size / spec.shards / spec.bandwidth
        self.apply_seconds = spec.apply_seconds / spec.shards
        self.gradient_seconds = spec.gradient_seconds / spec.shards
        self._out_free = self._in_free = self._update_free = 0.0

    def pull(self, start: float) -> float:
        """When the parameters sent at `start` have reached the worker."""
        done = max(start, self._out_free) + self.transfer_seconds
        self._out_free = done
        return done

    def push(self, ready: float) -> float:
        """When a gradient ready at the worker at `ready` has reached the server."""
        done = max(ready, self._in_free) + self.transfer_seconds
        self._in_free = done
        return done

    def receive(self, arrived: float) -> float:
        """When the server's loop has handled a gradient that reached it at `arrived` (the arrival's time)."""
        if self.gradient_seconds == 0.0:
            return arrived
        done = max(arrived, self._update_free) + self.gradient_seconds
        self._update_free = done
        return done

    def update(self, start: float) -> float:
        """When an update the server can begin at `start` has been applied (its parameters can be sent)."""
        done = max(start, self._update_free) + self.apply_seconds
        self._update_free = done
        return done

    def delay_all(self, seconds: float) -> None:
        """A pause of the whole cluster postpones whatever the links and the update loop were doing."""
        self._out_free += seconds
        self._in_free += seconds
        self._update_free += seconds
