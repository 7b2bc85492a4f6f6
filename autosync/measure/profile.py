"""`autosync profile`: measure the real round trips of a job's workers and fit the cluster model to them.

Every round gives all n workers a task at once (as a BSP iteration would, so the processes contend
for the machine as in training) and records, per task, the compute time the worker process measured
around its kernel and the round trip the server saw (parameters copied in, notification, compute,
gradient back). From these the job's `cluster` section is fitted:
- compute: time against batch size by least squares, whichever fits better (by BIC) of a line through the origin
  (LinearCompute, LB-BSP sec. 3.2, a busy CPU) and a fixed cost plus a slope above the smallest batch
  timed (GPUCompute, LB-BSP sec. 3.3.1: a GPU, or any worker whose per-task overhead dominates);
- server: the server's own costs on this machine, timed apart from the rounds (`measure_server`): one update
  of the model by the default rule (apply_seconds) and one copy of the parameters into a shared-memory
  slot, the processes backend's transport (bandwidth = model bytes / that time); on the distributed
  backend the transfer is gloo's instead, timed within the rounds (`transfer_from_rounds`);
- communication_seconds: the median of round trip minus compute, less the pull and push the server model
  now charges (a round's p-th task waits for p pulls before its own);
- speed_factors: each worker's mean compute time against all workers' at the same batch size;
- round_trip: the measured compute times divided by their batch size's mean, as a trace the model
  samples from (`kind: trace`), so the simulator reproduces this machine's own variability.
On the processes backend the computation is fitted as compute units instead (`fit_units`): each worker
process computes its workers' tasks one after another, so the workers of one process queue behind each
other (`cluster.compute_units`: the compute fit above plus the per-task overhead the kernel timer does not
see, per-process speed factors), and the workers' own round trip is what the server's links charge.
The profile is written as profile.csv, the fitted cluster.yaml, and profiled_job.yaml: the job with
that cluster, ready for `autosync tune`. Its time budget and evaluation interval are rescaled by the
ratio of the measured to the modelled mean round trip, so it trains about as many updates as before,
and its slowdowns and resource model (times of the old model) are dropped.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from autosync.core.errors import UserError
from autosync.core.limits import MAX_SIZE
from autosync.core.cluster import RoundTripModel, started_at_once
from autosync.core.job import ClusterSpec, JobSpec
from autosync.core.phases import Phase, no_phase
from autosync.engine.backends import build
from autosync.policies import Task, UpdateRule

TRACE_FILE = "round_trips.csv"


@dataclass(frozen=True)
class Sample:
    """One measured task."""

    worker: int
    batch_size: int
    round: int
    compute_seconds: float
    round_trip_seconds: float

    @property
    def communication_seconds(self) -> float:
        """What the round trip spent outside the kernel: copies, messages and the wait in the process's queue."""
        return max(0.0, self.round_trip_seconds - self.compute_seconds)


def measure(driver, n_workers: int, batch_sizes: Sequence[int], rounds: int, params,
            on_round: Callable[[], None] | None = None, buffers=None) -> list[Sample]:
    """`rounds` rounds of one task per worker at each batch size, all workers at once; one warm-up round each.

    `buffers`: the model's initial buffers, sent with the parameters (None for a model without buffers).
    """
    samples: list[Sample] = []
    index = 0
    for b in batch_sizes:
        for r in range(-1, rounds):  # round -1 warms the kernels for this shape up and is not kept
            tasks = [Task(w, index, 0, b, 0.0, params=params, buffers=buffers) for w in range(n_workers)]
            index += 1
            sent = time.monotonic()
            driver.submit(tasks)
            waiting = set(range(n_workers))
            while waiting:
                for answer in driver.collect():
                    received = time.monotonic()
                    waiting.discard(answer.task.worker)
                    if r >= 0:
                        samples.append(Sample(answer.task.worker, b, r, answer.compute_seconds, received - sent))
            if r >= 0 and on_round is not None:
                on_round()
    return samples


@dataclass(frozen=True)
class ServerCosts:
    """The server side of this machine: what one update and one copy of the parameters take."""

    apply_seconds: float  # median time of the default update (SGD with the job's momentum) on the model
    transfer_seconds: float  # median time to copy the parameters into a shared-memory slot (one pull or push)
    model_bytes: int  # bytes of the parameters

    @property
    def bandwidth(self) -> float:
        """Bytes per second through the processes backend's transport (shared memory)."""
        return self.model_bytes / max(self.transfer_seconds, 1e-9)


def measure_server(job: JobSpec, params, repeats: int = 30) -> ServerCosts:
    """Time the server's own work on `params` (on their device): the update the default rule applies, and
    the copy through which the processes backend moves parameters to a worker and a gradient back."""
    import torch

    rule = UpdateRule()
    state = rule.init_state(params, job.cluster.n_workers, job.workload.optimizer)
    grad = torch.full_like(params, 1e-6)
    slot = torch.empty_like(params)
    if slot.device.type == "cpu":
        slot.share_memory_()

    def timed(work: Callable[[], object]) -> float:
        times = []
        for _ in range(repeats + 1):  # the first call warms up and is not kept
            start = time.perf_counter()
            work()
            if params.device.type == "cuda":
                torch.cuda.synchronize(params.device)
            times.append(time.perf_counter() - start)
        return statistics.median(times[1:])

    apply = timed(lambda: rule.apply(params, state, grad, 0.0, []))
    transfer = timed(lambda: slot.copy_(params))
    return ServerCosts(apply, transfer, params.numel() * params.element_size())


def transfer_from_rounds(server: ServerCosts, samples: Sequence[Sample], ranks: int) -> ServerCosts:
    """The server's costs with the transfer time of the distributed backend's transport (gloo messages)
    instead of a shared-memory copy: half the communication of the first task each rank gets in a round
    (workers 0 .. ranks-1; it waits behind no other task), median over the rounds."""
    first = [s.communication_seconds / 2 for s in samples if s.worker < ranks]
    return ServerCosts(server.apply_seconds, statistics.median(first), server.model_bytes)


def fit_compute(samples: Sequence[Sample]) -> dict:
    """Compute time against batch size (a `ComputeSpec` mapping) by least squares: whichever fits better
    (by BIC) of a line through the origin and a fixed cost plus a slope above the smallest batch timed."""
    sizes = sorted({s.batch_size for s in samples})
    b = np.array([s.batch_size for s in samples], dtype=float)
    t = np.array([s.compute_seconds for s in samples])
    per_sample = max(float((b @ t) / (b @ b)), 1e-9)
    linear = {"model": "linear", "seconds_per_sample": per_sample}
    design = np.stack([np.ones_like(b), b - sizes[0]], axis=1)
    (flat, slope), *_ = np.linalg.lstsq(design, t, rcond=None)
    flat, slope = max(float(flat), 1e-6), max(float(slope), 1e-9)
    affine = {"model": "gpu", "launch_overhead": flat, "saturation_batch": sizes[0], "seconds_per_sample": slope}
    return affine if _bic(t - flat - slope * (b - sizes[0]), 2) < _bic(t - per_sample * b, 1) else linear


def relative_speeds(samples: Sequence[Sample], groups: int, group_of: Callable[[int], int]) -> list[float]:
    """Each group's (worker's, or unit's) speed: the inverse of its mean compute time against all workers'
    at the same batch size."""
    sizes = {s.batch_size for s in samples}
    mean_at = {b: statistics.fmean(s.compute_seconds for s in samples if s.batch_size == b) for b in sizes}
    speed = []
    for g in range(groups):
        ratios = [s.compute_seconds / mean_at[s.batch_size] for s in samples if group_of(s.worker) == g]
        speed.append(round(1.0 / statistics.fmean(ratios), 4) if ratios else 1.0)
    return speed


def fit_units(samples: Sequence[Sample], count: int, transfer_seconds: float = 0.0, scale: float = 1.0) -> dict:
    """Compute units (a `ComputeUnitsSpec` mapping) fitted to rounds of tasks computed by `count` worker
    processes, worker w by process w % count, one task after another in worker order.

    A unit's time per task is the kernel time (`fit_compute`, speeds per process) plus an overhead `o` the
    kernel timer does not see (the notification, the answer, the copies in and out): in a round, the
    p-th task of a unit is answered after its own and its predecessors' kernels and p overheads, its
    parameters having left the server after w + 1 transfers and its gradient taking one more, so
    o = median((round trip - (w + 2) transfers - kernels so far) / p). `scale`: real seconds per second of
    the job (`--time-scale` with injected stragglers); the fitted times are divided by it.
    """
    compute = fit_compute(samples)
    rounds: dict[tuple[int, int], list[Sample]] = {}
    for s in samples:
        rounds.setdefault((s.batch_size, s.round), []).append(s)
    overheads = []
    for tasks in rounds.values():
        done: dict[int, tuple[float, int]] = {}  # unit -> (kernel seconds so far, tasks so far)
        for s in sorted(tasks, key=lambda s: s.worker):
            kernels, position = done.get(s.worker % count, (0.0, 0))
            kernels, position = kernels + s.compute_seconds, position + 1
            done[s.worker % count] = (kernels, position)
            overheads.append((s.round_trip_seconds - (s.worker + 2) * transfer_seconds - kernels) / position)
    overhead = max(0.0, statistics.median(overheads)) if overheads else 0.0
    if compute["model"] == "linear":  # the same line, as a fixed cost plus a slope above the smallest batch
        smallest = min(s.batch_size for s in samples)
        compute = {"model": "gpu", "launch_overhead": compute["seconds_per_sample"] * smallest,
                   "saturation_batch": smallest, "seconds_per_sample": compute["seconds_per_sample"]}
    compute["launch_overhead"] = (compute["launch_overhead"] + overhead) / scale
    compute["seconds_per_sample"] /= scale
    return {"count": count, "compute": compute,
            "speed_factors": relative_speeds(samples, count, lambda w: w % count)}


def fit_cluster(job: JobSpec, samples: Sequence[Sample], server: ServerCosts | None = None,
                units: int | None = None) -> dict:
    """The job's cluster section fitted to `samples` (see the module docstring), as a plain mapping.

    With `units` (the worker processes that computed the samples, worker w on process w % units), the
    computation moves to compute units (`fit_units`): the workers' own round trip is only what the
    server's links charge, and the workers of one process queue behind each other as they really do."""
    if units is not None:
        tau = server.transfer_seconds if server is not None else 0.0
        cluster = {"n_workers": job.cluster.n_workers, "compute": {"model": "linear", "seconds_per_sample": 0.0},
                   "communication_seconds": 0.0, "round_trip": {"kind": "deterministic"},
                   "compute_units": fit_units(samples, units, tau)}
        if server is not None:
            cluster["server"] = _server_section(server)
        return cluster
    compute = fit_compute(samples)
    speed = relative_speeds(samples, job.cluster.n_workers, lambda w: w)
    communication = statistics.median(s.communication_seconds for s in samples)
    cluster = {"n_workers": job.cluster.n_workers, "compute": compute, "communication_seconds": float(communication),
               "speed_factors": speed,
               "round_trip": {"kind": "trace", "path": TRACE_FILE, "column": "multiplier", "mode": "sample",
                              "normalize": True}}
    if server is not None:
        # The server model charges each task its pull and its push, and a round submits its tasks in worker
        # order (worker p's pull waits for p others): what is left of round trip - compute is the rest.
        tau = server.transfer_seconds
        left = [max(0.0, s.communication_seconds - (s.worker + 2) * tau) for s in samples]
        cluster["communication_seconds"] = float(statistics.median(left))
        cluster["server"] = _server_section(server)
    return cluster


def fit_measured(job: JobSpec, samples: Sequence[Sample], server: ServerCosts, backend: str,
                 processes: int) -> tuple[ServerCosts, dict, str]:
    """The server's costs, the cluster section fitted to the timed rounds and what computed them ("3 ranks",
    "2 worker processes"). Under torchrun (`backend` distributed) the transport is gloo's, timed by each
    rank's first task of every round, and the ranks are the group's but rank 0; else each process computes
    its workers' tasks one after another: the cluster's compute units."""
    import os

    if backend == "distributed":
        ranks = int(os.environ["WORLD_SIZE"]) - 1
        server = transfer_from_rounds(server, samples, ranks)
        return server, fit_cluster(job, samples, server, None), f"{ranks} rank" + "s" * (ranks != 1)
    return server, fit_cluster(job, samples, server, processes), \
        f"{processes} worker process" + "es" * (processes != 1)


def _server_section(server: ServerCosts) -> dict:
    """The cluster's server section from the server's measured costs."""
    return {"bandwidth": server.bandwidth, "model_bytes": server.model_bytes, "apply_seconds": server.apply_seconds}


def _bic(residuals: np.ndarray, n_parameters: int) -> float:
    """Bayesian information criterion of a least-squares fit: the extra parameter must earn its place."""
    n = len(residuals)
    return n * float(np.log(max(float(residuals @ residuals) / n, 1e-300))) + n_parameters * float(np.log(n))


def time_scale(job: JobSpec, cluster: dict) -> float:
    """The fitted cluster's mean round trip at the job's batch size over the one the job's own cluster gives."""
    fitted = ClusterSpec.model_validate({**cluster, "round_trip": {"kind": "deterministic"}})  # mean multiplier 1
    return mean_round_trip(fitted, job.workload.batch_size) / mean_round_trip(job.cluster, job.workload.batch_size)


def mean_round_trip(cluster: ClusterSpec, batch_size: int) -> float:
    """A round trip at `batch_size` averaged over the workers, at time 0 (the random multiplier's mean is 1).
    With compute units, a worker's is at least its place in its unit's queue when all workers start at
    once: (p + 1) / 2 of the unit's time for a unit of p workers, on average."""
    model = RoundTripModel(cluster, seed=0)
    trips = [model.compute_seconds(w, batch_size, 0.0) + cluster.communication_seconds
             for w in range(cluster.n_workers)]
    return statistics.fmean(started_at_once(cluster.compute_units, trips, batch_size))


def multipliers(samples: Sequence[Sample]) -> list[float]:
    """Each task's compute time over its worker's mean at its batch size: the noise around the model's mean
    (speed differences between workers are in speed_factors, not here)."""
    groups: dict[tuple[int, int], list[float]] = {}
    for s in samples:
        groups.setdefault((s.worker, s.batch_size), []).append(s.compute_seconds)
    means = {key: statistics.fmean(values) for key, values in groups.items()}
    return [s.compute_seconds / means[(s.worker, s.batch_size)] for s in samples]


def batch_summary(samples: Sequence[Sample]) -> list[tuple[int, float, float, float]]:
    """Per batch size: (batch size, mean compute, mean round trip, 90th-percentile round trip) in seconds."""
    rows = []
    for b in sorted({s.batch_size for s in samples}):
        mine = [s for s in samples if s.batch_size == b]
        trips = sorted(s.round_trip_seconds for s in mine)
        rows.append((b, statistics.fmean(s.compute_seconds for s in mine), statistics.fmean(trips),
                     trips[int(0.9 * (len(trips) - 1))]))
    return rows


def profile_workers(job: JobSpec, choice: Any, workload: Any, sizes: Sequence[int], rounds: int,
                    phase: Phase = no_phase) -> tuple[list[Sample], ServerCosts, dict, str]:
    """Time each worker's round trips on `choice`'s backend (`engine.backends.BackendChoice`: processes or
    torchrun ranks), `rounds` rounds per batch size, then the server's update, and fit the job's cluster
    model: the samples, the server's costs, the fitted cluster section and what computed (`fit_measured`).
    `phase`: called around starting the workers, the timed rounds (one step each) and timing the server."""
    with phase(f"starting the {choice.backend} backend's workers on {choice.device}", 0):
        driver, _ = build(choice, job, workload)
    try:
        n = job.cluster.n_workers
        with phase(f"rounds of {n} tasks", len(sizes) * rounds) as advance:
            samples = measure(driver, n, sizes, rounds, workload.init_params(), on_round=advance,
                              buffers=workload.init_buffers())
    finally:
        driver.close()
    with phase("timing the server's update and parameter copy", 0):
        server = measure_server(job, workload.init_params())
    return (samples, *fit_measured(job, samples, server, choice.backend, choice.processes))


def parse_batch_sizes(text: str | None, job: JobSpec) -> list[int]:
    """`--batch-sizes 16,32,64`, or by default half, once and twice the job's batch size."""
    if text is None:
        b = job.workload.batch_size
        return sorted({max(2, b // 2), max(2, b), 2 * b})
    try:
        sizes = sorted({int(v) for v in text.split(",") if v.strip()})
    except ValueError:
        raise UserError(f"--batch-sizes must be comma-separated integers, but got {text!r}") from None
    if not sizes or sizes[0] < 2 or sizes[-1] > MAX_SIZE:
        raise UserError(f"--batch-sizes must be integers from 2 (batch normalisation needs two samples) to "
                        f"{MAX_SIZE} (as a job's batch_size), but got {text!r}")
    return sizes
