"""The processes backend's own cost per update against two floors measured in the same run.

    python benchmarks/bench_transport.py [--repeats 5] [--models digits resnet18]

For the digits CNN (the default job: 16 workers, batch 32, 8,234 parameters) and ResNet-18 on synthetic
CIFAR-shaped images (4 workers, batch 4, 11.2 M parameters), with BSP (n gradients per update) and ASP
(one), on the virtual clock so that both sides compute exactly the same gradients:
- overhead per update: the wall time of the run on one worker process (`ProcessDriver`, one intra-op
  thread) minus that of the same run with the same kernel in this process (`PerWorkerDriver`, one
  thread), per update; medians of --repeats runs, alternated. What is left is the transport: slot
  copies, notifications, the worker's answer, the server taking the gradient back;
- latency floor: tasks per update times the round trip of an empty notification to a spawned process
  and back through a pipe pair (`_floors.pipe_round_trip`);
- bandwidth floor: tasks per update times 12 bytes per parameter at the copy bandwidth measured here.
Goals (the scale issue): ResNet-18 <= 2x the larger floor; the digits CNN <= 3x the latency floor.
The overhead can be negative: for ResNet-18 the worker process writes each gradient into its reused
shared row, while the in-process kernel allocates a new tensor of the model's size (page faults
included) for every gradient.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from autosync.catalog import make_policy
from autosync.engine.drivers import PerWorkerDriver, ProcessDriver
from autosync.engine.simulator import Simulator
from autosync.job import JobSpec, load_job
from autosync.workloads.workload import Workload

from _floors import copy_bandwidth, pipe_round_trip, resnet18_job
from _report import Figures

GOALS = {"digits": ("latency", 3.0), "resnet18": ("larger", 2.0)}


def _jobs(name: str, updates: int) -> JobSpec:
    if name == "resnet18":
        return resnet18_job(updates, batch_size=4, workers=4, eval_samples=16)
    return load_job(None, overrides={"budget": {"max_updates": updates, "max_virtual_seconds": None},
                                     "workload": {"evaluation": {"every_seconds": 1e9}}})


def _seconds(job: JobSpec, policy: str, workload: Workload, driver) -> tuple[float, int, int]:
    """Wall seconds of one run, its updates and its gradients."""
    start = time.perf_counter()
    result = Simulator(job, make_policy(policy, {}), workload=workload, driver=driver).run()
    wall = time.perf_counter() - start
    return wall, len(result.trace.updates), len(result.trace.arrivals)


def measure(name: str, updates: int, repeats: int, figures: Figures) -> None:
    job = _jobs(name, updates)
    round_trip, bandwidth = pipe_round_trip(), copy_bandwidth()  # both move with the machine's load: here
    print(f"{name}: floors measured now: empty task round trip {1e6 * round_trip:.1f} us, copy bandwidth "
          f"{bandwidth / 1e9:.1f} GB/s")
    workload = Workload(job)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the worker process's setting: both sides run the same single-threaded kernel
    in_process = PerWorkerDriver(workload, job.seed)
    remote = ProcessDriver(workload, processes=1)
    try:
        for policy in ("bsp", "asp"):
            _seconds(job.model_copy(update={"budget": job.budget.model_copy(update={"max_updates": 3})}),
                     policy, workload, in_process)  # warm-up
            local, far = [], []
            for _ in range(repeats):
                wall, m, tasks = _seconds(job, policy, workload, in_process)
                local.append(wall)
                far.append(_seconds(job, policy, workload, remote)[0])
            per_update = tasks / m
            overhead = (statistics.median(far) - statistics.median(local)) / m
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
