"""Worker processes sharing one GPU against one process computing the same gradients in a loop.

    python benchmarks/bench_gpu.py [--processes 4 8] [--updates 200] [--batch-size 128] [--parts ...] [--out FILE]

A ResNet-18 job on CIFAR-shaped synthetic data (3x32x32, 10 classes), 8 simulated workers. For ASP
(one gradient per update) and BSP (8 per update), on the virtual clock so that every configuration
computes exactly the same gradients:
- baseline: the server process computes each gradient itself with the per-worker kernel, one after
  the other (the processes' kernel, in a loop);
- processes: N worker processes on the same GPU (CUDA IPC slots), computing the gradients in parallel;
- real time: the same processes on the real-time clock (arrivals as they come, no injected stragglers).
Printed per configuration: updates per second, the ratio to the baseline, and the GPU utilisation
nvidia-smi reports while it runs (mean of 100 ms samples).

Two more figures, each against a floor measured in the same run:
- the simulated BSP update (the default in-process driver, virtual clock) against the fused
  forward/backward floor: a plain PyTorch training step (forward, backward, SGD step) on the union of the
  8 workers' batches, the least a BSP update can cost (goal: at least 0.8x the floor's rate);
- the start of N worker processes on the GPU, forkserver against spawn (the processes' start method).
Needs a CUDA GPU.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import subprocess
import threading
import time

import torch

from autosync.catalog import make_policy
from autosync.engine.drivers import PerWorkerDriver, ProcessDriver
from autosync.engine.realtime import RealTimeClock
from autosync.engine.simulator import Simulator
from autosync.workloads.workload import Workload

from _floors import resnet18_job
from _report import Figures


class Utilisation:
    """Mean GPU utilisation (%) that nvidia-smi reports while the block runs."""

    def __enter__(self) -> "Utilisation":
        self.samples: list[float] = []
        self._proc = subprocess.Popen(["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits",
                                       "-lms", "100"], stdout=subprocess.PIPE, text=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        return self

    def _read(self) -> None:
        for line in self._proc.stdout:
            try:
                self.samples.append(float(line.strip()))
            except ValueError:
                pass

    def __exit__(self, *exc) -> None:
        self._proc.terminate()
        self._proc.wait()
        self._reader.join(timeout=2)

    @property
    def mean(self) -> float:
        return statistics.fmean(self.samples) if self.samples else float("nan")


def timed(job, policy: str, workload, driver, clock=None) -> dict:
    torch.cuda.synchronize()
    with Utilisation() as gpu:
        start = time.perf_counter()
        result = Simulator(job, make_policy(policy, {}), workload=workload, driver=driver, clock=clock).run()
        torch.cuda.synchronize()
        seconds = time.perf_counter() - start
    return {"updates_per_second": len(result.trace.updates) / seconds, "gpu_utilisation": gpu.mean,
            "seconds": seconds, "updates": len(result.trace.updates)}


def fused_floor(workload: Workload, job, updates: int) -> dict:
    """Updates per second of a plain training loop: one forward/backward of the 8 workers' batches joined
    into one, and an SGD step, on the workload's own model and data (the floor of a BSP update)."""
    model = copy.deepcopy(workload.model).train()
    optimizer = torch.optim.SGD(model.parameters(), lr=job.workload.optimizer.lr)
    x, y = workload.data.x_train, workload.data.y_train
    batch = job.workload.batch_size * job.cluster.n_workers
    generator = torch.Generator(device="cpu").manual_seed(0)
    indices = [torch.randint(len(x), (batch,), generator=generator).to(x.device) for _ in range(updates + 10)]
    for step, index in enumerate(indices):
        if step == 10:  # the first 10 warm up
            torch.cuda.synchronize()
            start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        workload.loss.mean(model(x[index]), y[index]).backward()  # the workload's own loss, as the engine's
        optimizer.step()
    torch.cuda.synchronize()
    return {"updates_per_second": updates / (time.perf_counter() - start), "updates": updates}


def start_seconds(workload: Workload, processes: int, start_method: str, repeats: int = 3) -> float:
    """Median wall seconds from asking for `processes` worker processes on the GPU to all of them ready."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        ProcessDriver(workload, processes, timeout=120.0, start_method=start_method).close()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def processes_against_loop(job, warm_up, workload: Workload, processes: list[int], rows: list,
                           figures: Figures) -> None:
    """ASP and BSP: worker processes on the GPU (virtual and real clock) against one process in a loop."""
    for policy in ("asp", "bsp"):
        loop = PerWorkerDriver(workload, job.seed)
        timed(warm_up, policy, workload, loop)
        base = timed(job, policy, workload, loop)
        rows.append({"policy": policy, "configuration": "one process, gradients in a loop", **base})
        print(f"{policy}: one process in a loop: {base['updates_per_second']:.1f} updates/s, "
              f"GPU {base['gpu_utilisation']:.0f}%")
        for n in processes:
            driver = ProcessDriver(workload, n, timeout=120.0)
            try:
                timed(warm_up, policy, workload, driver)
                for clock_name in ("virtual", "real"):
                    clock = RealTimeClock(driver) if clock_name == "real" else None
                    r = timed(job, policy, workload, driver, clock)
                    ratio = r["updates_per_second"] / base["updates_per_second"]
                    rows.append({"policy": policy, "configuration": f"{n} processes, {clock_name} clock",
                                 "ratio_to_loop": ratio, **r})
                    print(f"{policy}: {n} processes, {clock_name} clock: {r['updates_per_second']:.1f} updates/s = "
                          f"{ratio:.2f}x the loop, GPU {r['gpu_utilisation']:.0f}%")
                    figures.add(f"{policy}, ResNet-18 on {torch.cuda.get_device_name()}, {n} processes, {clock_name} "
                                f"clock: updates per second", r["updates_per_second"], "1/s",
                                "one process computing the same gradients in a loop", ratio)
            finally:
                driver.close()


def simulated_against_floor(job, warm_up, workload: Workload, updates: int, rows: list, figures: Figures) -> None:
    """The simulated BSP update (in-process driver, virtual clock) against the fused forward/backward floor."""
    floor = fused_floor(workload, job, updates)
    timed(warm_up, "bsp", workload, None)
    simulated = timed(job, "bsp", workload, None)
    ratio = simulated["updates_per_second"] / floor["updates_per_second"]
    path = ("fused" if workload.independent_samples else
            "fused, batch norm per worker" if workload.norm_groups else "per worker, vmapped")
    rows.append({"policy": "bsp", "configuration": "fused forward/backward floor (plain training step)", **floor})
    rows.append({"policy": "bsp", "configuration": f"simulated, in-process driver ({path}), virtual clock",
                 "ratio_to_floor": ratio, **simulated})
    print(f"bsp: fused forward/backward floor {floor['updates_per_second']:.1f} updates/s; simulated ({path}) "
          f"{simulated['updates_per_second']:.1f} updates/s = {ratio:.2f}x the floor (goal >= 0.8)")
    figures.add(f"bsp, ResNet-18 on {torch.cuda.get_device_name()}, simulated in process: updates per second",
                simulated["updates_per_second"], "1/s", "a plain training step on the 8 workers' batches joined",
                ratio)


def process_starts(workload: Workload, processes: list[int], rows: list, figures: Figures) -> None:
    """Seconds to start N worker processes on the GPU, forkserver against spawn."""
    for n in processes:
        spawn, forkserver = (start_seconds(workload, n, method) for method in ("spawn", "forkserver"))
        rows.append({"configuration": f"{n} processes started", "spawn_seconds": spawn,
                     "forkserver_seconds": forkserver})
        print(f"{n} processes on the GPU start in {spawn:.2f} s spawned, {forkserver:.2f} s from a forkserver "
              f"({spawn / forkserver:.2f}x)")
        figures.add(f"start of {n} worker processes on {torch.cuda.get_device_name()}, forkserver: seconds",
                    forkserver, "s", "the same processes spawned", spawn / forkserver)


PARTS = ("processes", "floor", "starts")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, nargs="+", default=[4, 8])
    parser.add_argument("--updates", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS),
                        help="which comparisons to run (default: all)")
    parser.add_argument("--out", default=None, help="also write the figures as JSON here")
    parser.add_argument("--json", default=None, help="also write the figures here (benchmarks/make_table.py)")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("bench_gpu needs a CUDA GPU")
    torch.set_num_threads(1)
    job = resnet18_job(args.updates, args.batch_size, args.workers)
    warm_up = resnet18_job(10, args.batch_size, args.workers)
    workload = Workload(job, device="cuda")
    print(f"{torch.cuda.get_device_name()}: ResNet-18, {workload.dim} parameters, {args.workers} workers, "
          f"batch {args.batch_size}, {args.updates} updates per run")
    rows: list = []
    figures = Figures("bench_gpu")
    if "processes" in args.parts:
        processes_against_loop(job, warm_up, workload, args.processes, rows, figures)
    if "floor" in args.parts:
        simulated_against_floor(job, warm_up, workload, args.updates, rows, figures)
    if "starts" in args.parts:
        process_starts(workload, args.processes, rows, figures)
    figures.write(args.json)
    if args.out:
        with open(args.out, "w") as fh:
            json.dump({"device": torch.cuda.get_device_name(), "parameters": workload.dim, "workers": args.workers,
                       "batch_size": args.batch_size, "rows": rows}, fh, indent=2)


if __name__ == "__main__":
    main()
