"""The processes backend's own cost per update against two floors measured in the same run.

    python benchmarks/bench_transport.py [--repeats 5] [--models digits resnet18]

For the digits CNN (the default job: 16 workers, batch 32, 8,234 parameters) and ResNet-18 on synthetic
CIFAR-shaped images (4 workers, batch 4, 11.2 M parameters), with BSP (n gradients per update) and ASP
(one), on the virtual clock so that both sides compute exactly the same gradients:
- overhead per update: the run on one worker process (`ProcessDriver`, one intra-op thread) against the
  same run with the same kernel in this process, one thread, writing each gradient into its worker's
  reused row as the worker process does (`RowsInProcess`). Each side's wall time less the seconds its
  kernel computed (the worker's own timing, `slot_gradient`, sent with each answer; the same timer
  around the kernel here), so that the kernel's run-to-run noise, large for ResNet-18 against a
  transport of a few ms, cancels; the difference per update, medians of --repeats runs, alternated.
  What is left is the transport: slot copies, notifications, the worker's answer, the server taking
  the gradient back, the process waking up (a slight underestimate where the server's own work overlaps
  the worker's kernel: handling one answer while the next task computes);
- latency floor: tasks per update times the round trip of an empty notification to a spawned process
  and back through a pipe pair (`_floors.pipe_round_trip`);
- bandwidth floor: tasks per update times 12 bytes per parameter at the copy bandwidth measured here.
Goals (the scale issue): ResNet-18 <= 2x the larger floor; the digits CNN <= 3x the latency floor.
(Against `PerWorkerDriver`, which allocates a new tensor of the model's size for every gradient, page
faults included, the overhead came out negative for ResNet-18: the reference must write where the
worker writes.)
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from autosync.catalog import make_policy
from autosync.engine.drivers import ProcessDriver
from autosync.engine.drivers.remote import Answer
from autosync.engine.drivers.perworker import worker_gradient
from autosync.engine.simulator import Simulator
from autosync.core.job import JobSpec, load_job
from autosync.policies import Task
from autosync.workloads.workload import Workload

from _floors import copy_bandwidth, pipe_round_trip, resnet18_job
from _report import Figures

GOALS = {"digits": ("latency", 3.0), "resnet18": ("larger", 2.0)}


class RowsInProcess:
    """The worker processes' kernel run in this process: each gradient written into its worker's reused row
    of a gradient table, as `ProcessDriver`'s processes write theirs, so that the two differ by the
    transport alone. (Under the virtual clock a gradient is applied before its worker's next task is
    computed, so a row is never rewritten while the engine still holds it.)"""

    fuses_workers = False

    def __init__(self, workload: Workload, seed: int):
        self.workload, self.seed = workload, seed
        self.rows = torch.zeros(workload.job.cluster.n_workers, workload.slot_dim)
        self.kernel_seconds = 0.0

    def worker_gradients(self, tasks: list[Task]) -> None:
        for t in tasks:
            started = time.perf_counter()
            t.gradient, t.loss, t.buffer_delta = worker_gradient(self.workload, self.seed, t.params, t.worker,
                                                                 t.index, t.batch_size, t.buffers, self.rows[t.worker])
            self.kernel_seconds += time.perf_counter() - started

    def close(self) -> None:
        """Nothing to release."""


class TimedProcesses(ProcessDriver):
    """`ProcessDriver` adding up the kernel seconds its worker processes report with their answers."""

    kernel_seconds = 0.0

    def collect(self, timeout: float | None = None) -> list[Answer]:
        answers = super().collect(timeout)
        self.kernel_seconds += sum(a.compute_seconds for a in answers)
        return answers


def _jobs(name: str, updates: int) -> JobSpec:
    if name == "resnet18":
        return resnet18_job(updates, batch_size=4, workers=4, eval_samples=16)
    return load_job(None, overrides={"budget": {"max_updates": updates, "max_virtual_seconds": None},
                                     "workload": {"evaluation": {"every_seconds": 1e9}}})


def _seconds(job: JobSpec, policy: str, workload: Workload, driver) -> tuple[float, float, int, int]:
    """Wall seconds of one run, those not spent in the gradient kernel, its updates and its gradients."""
    kernel = driver.kernel_seconds
    start = time.perf_counter()
    result = Simulator(job, make_policy(policy, {}), workload=workload, driver=driver).run()
    wall = time.perf_counter() - start
    return wall, wall - (driver.kernel_seconds - kernel), len(result.trace.updates), len(result.trace.arrivals)


def measure(name: str, updates: int, repeats: int, figures: Figures) -> None:
    job = _jobs(name, updates)
    round_trip, bandwidth = pipe_round_trip(), copy_bandwidth()  # both move with the machine's load: here
    print(f"{name}: floors measured now: empty task round trip {1e6 * round_trip:.1f} us, copy bandwidth "
          f"{bandwidth / 1e9:.1f} GB/s")
    workload = Workload(job)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the worker process's setting: both sides run the same single-threaded kernel
    in_process = RowsInProcess(workload, job.seed)
    remote = TimedProcesses(workload, processes=1)
    try:
        for policy in ("bsp", "asp"):
            _seconds(job.model_copy(update={"budget": job.budget.model_copy(update={"max_updates": 3})}),
                     policy, workload, in_process)  # warm-up
            local, far, local_rest, far_rest = [], [], [], []
            for _ in range(repeats):
                wall, rest, m, tasks = _seconds(job, policy, workload, in_process)
                local.append(wall)
                local_rest.append(rest)
                wall, rest, _, _ = _seconds(job, policy, workload, remote)
                far.append(wall)
                far_rest.append(rest)
            per_update = tasks / m
            overhead = (statistics.median(far_rest) - statistics.median(local_rest)) / m
            latency = per_update * round_trip
            band = per_update * 12 * workload.dim / bandwidth
            kind, goal = GOALS[name]
            floor = latency if kind == "latency" else max(latency, band)
            print(f"{name:9s} {policy}: {per_update:4.1f} gradients/update  in process "
                  f"{1e3 * statistics.median(local) / m:8.2f} ms/update  processes "
                  f"{1e3 * statistics.median(far) / m:8.2f}  overhead {1e3 * overhead:7.3f} ms  floors: latency "
                  f"{1e3 * latency:6.3f}, bandwidth {1e3 * band:6.3f} ms  overhead/{kind} floor "
                  f"{overhead / floor:5.2f}x (goal <= {goal:g}x)")
            figures.add(f"{name} {policy}: processes backend's overhead per update", 1e3 * overhead, "ms",
                        f"{'latency' if kind == 'latency' else 'the larger'} floor ({1e3 * floor:.3f} ms)",
                        overhead / floor, f"<= {goal:g}x", overhead / floor <= goal)
    finally:
        remote.close()
        torch.set_num_threads(threads)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--models", nargs="+", choices=sorted(GOALS), default=["digits", "resnet18"])
    parser.add_argument("--updates", type=int, default=None, help="updates per run (default: 100 digits, 10 resnet18)")
    parser.add_argument("--json", default=None, help="also write the figures here (benchmarks/make_table.py)")
    args = parser.parse_args()
    figures = Figures("bench_transport")
    for name in args.models:
        measure(name, args.updates or (100 if name == "digits" else 10), args.repeats, figures)
    figures.write(args.json)


if __name__ == "__main__":
    main()
