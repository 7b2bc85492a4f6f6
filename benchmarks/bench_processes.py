"""The processes backend on the CPU: throughput against the simulator, and the real-time clock.

    python benchmarks/bench_processes.py [--updates 200] [--processes 2]

On the default job (digits CNN, 16 workers) with BSP and ASP:
(1) updates per second of the processes backend against the in-process simulator (fused driver) and
    against the in-process per-worker kernel the processes run, on the same job;
(2) the same with the real-time clock (`--clock real --stragglers machine`: tasks go out at once and
    arrive in the order the processes answer), against the virtual clock on the same processes.
The backend's own cost per update against its latency and bandwidth floors is bench_transport.py's.
"""

from __future__ import annotations

import argparse
import time

import torch

from autosync.catalog import make_policy
from autosync.engine.drivers import PerWorkerDriver, ProcessDriver
from autosync.engine.realtime import RealTimeClock
from autosync.engine.simulator import Simulator
from autosync.core.job import load_job
from autosync.workloads.workload import Workload

from _report import Figures


def timed_run(job, policy, workload, driver=None, clock=None) -> tuple[float, int]:
    start = time.perf_counter()
    result = Simulator(job, make_policy(policy, {}), workload=workload, driver=driver, clock=clock).run()
    return time.perf_counter() - start, len(result.trace.updates)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--updates", type=int, default=200)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--json", default=None, help="also write the figures here (benchmarks/make_table.py)")
    args = parser.parse_args()
    figures = Figures("bench_processes")
    job = load_job(None, overrides={"budget": {"max_updates": args.updates, "max_virtual_seconds": None},
                                    "workload": {"evaluation": {"every_seconds": 1e9}}})  # only the final one
    workload = Workload(job)
    warm_up = job.model_copy(update={"budget": job.budget.model_copy(update={"max_updates": 20})})
    for policy in ("bsp", "asp"):  # torch.func's first use imports for ~2 s: keep it out of the timings
        timed_run(warm_up, policy, workload)
    driver = ProcessDriver(workload, args.processes)
    try:
        for policy in ("bsp", "asp"):
            fused_s, n = timed_run(job, policy, workload)
            torch_threads = torch.get_num_threads()
            torch.set_num_threads(1)
            per_worker_s, _ = timed_run(job, policy, workload, PerWorkerDriver(workload, job.seed))
            torch.set_num_threads(torch_threads)
            proc_s, m = timed_run(job, policy, workload, driver)
            print(f"{policy}: processes ({args.processes}) {m / proc_s:.1f} updates/s = {fused_s / proc_s:.2f}x the "
                  f"fused simulator ({n / fused_s:.1f}/s) and {per_worker_s / proc_s:.2f}x the per-worker kernel in "
                  f"one process ({n / per_worker_s:.1f}/s)")
            figures.add(f"{policy}, default job, {args.processes} worker processes: updates per second", m / proc_s,
                        "1/s", "the fused in-process simulator", fused_s / proc_s)
            figures.add(f"{policy}, default job, {args.processes} worker processes: updates per second", m / proc_s,
                        "1/s", "the per-worker kernel in one process", per_worker_s / proc_s)
            real_s, r = timed_run(job, policy, workload, driver, RealTimeClock(driver, inject_stragglers=False))
            print(f"{policy}: real-time clock {r / real_s:.1f} updates/s = {(r / real_s) / (m / proc_s):.2f}x the "
                  f"virtual clock on the same {args.processes} processes")
            figures.add(f"{policy}, default job, real-time clock: updates per second", r / real_s, "1/s",
                        "the virtual clock on the same processes", (r / real_s) / (m / proc_s))
    finally:
        driver.close()
    figures.write(args.json)


if __name__ == "__main__":
    main()
