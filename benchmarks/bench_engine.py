"""Simulated updates per second of the engine against two baselines measured in the same run.

    python benchmarks/bench_engine.py [--updates 200] [--job baselines/digits_default.yaml]

Baselines, on the same job, model, batch sizes and thread settings:
  (a) naive: the per-worker gradients computed one by one with a plain nn.Module and autograd,
      averaged, then an SGD step (what a straightforward simulator does);
  (b) fused floor: one forward/backward over the same n*B samples, then an SGD step (the compute floor
      of one BSP update: nothing a simulator does can be cheaper).
Reported: updates/s for BSP, backup k=12 and ASP, the ratios against (a) and (b), and peak memory.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time

import torch
import torch.nn.functional as F

from autosync.engine import Simulator
from autosync.core.job import load_job
from autosync.policies import ASP, BSP, BackupWorkers
from autosync.workloads.workload import Workload

from _report import Figures


def _time(fn, repeats: int) -> float:
    """Median seconds per call of fn over `repeats` timed batches (after one warm-up)."""
    fn()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def naive_update(workload: Workload, n: int, batch: int, updates: int) -> float:
    model, data = workload.model, workload.data
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    index = [torch.from_numpy(workload.batch(0, w, t, batch)) for t in range(updates) for w in range(n)]

    def run() -> None:
        for t in range(updates):
            grads = [torch.zeros_like(p) for p in model.parameters()]
            for w in range(n):
                i = index[t * n + w]
                model.zero_grad()
                F.cross_entropy(model(data.x_train[i]), data.y_train[i]).backward()
                for g, p in zip(grads, model.parameters()):
                    g += p.grad / n
            for g, p in zip(grads, model.parameters()):
                p.grad = g
            opt.step()

    return _time(run, 3) / updates


def fused_update(workload: Workload, n: int, batch: int, updates: int) -> float:
    model, data = workload.model, workload.data
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    index = [torch.cat([torch.from_numpy(workload.batch(0, w, t, batch)) for w in range(n)]) for t in range(updates)]

    def run() -> None:
        for t in range(updates):
            opt.zero_grad()
            F.cross_entropy(model(data.x_train[index[t]]), data.y_train[index[t]]).backward()
            opt.step()

    return _time(run, 3) / updates


def simulated_update(job, workload: Workload, policy, updates: int) -> float:
    def run() -> None:
        Simulator(job, policy, workload=workload).run()

    return _time(run, 3) / updates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--job", default=None, help="job file (default: the embedded digits job)")
    parser.add_argument("--updates", type=int, default=200, help="updates per timed run")
    parser.add_argument("--json", default=None, help="also write the figures here (benchmarks/make_table.py)")
    args = parser.parse_args()

    job = load_job(args.job)
    # Measure the update path: no evaluations inside the timed runs, a fixed number of updates.
    job = job.model_copy(update={"budget": job.budget.model_copy(update={
        "max_updates": args.updates, "max_virtual_seconds": None, "max_epochs": None, "stop_at_target": False})})
    job.workload.evaluation.every_seconds = 1e12
    workload = Workload(job)
    n, batch = job.cluster.n_workers, job.workload.batch_size
    print(f"job {job.name}: n={n}, B={batch}, model {job.workload.model.name} ({workload.dim} parameters), "
          f"torch threads {torch.get_num_threads()}")

    naive = naive_update(workload, n, batch, min(args.updates, 50))
    fused = fused_update(workload, n, batch, args.updates)
    print(f"{'baseline (a) naive per-worker loop':42s} {1 / naive:9.1f} updates/s")
    print(f"{'baseline (b) fused forward/backward floor':42s} {1 / fused:9.1f} updates/s")
    figures = Figures("bench_engine")
    for label, policy in (("BSP", BSP()), ("backup k=12", BackupWorkers(k=12)), ("ASP", ASP())):
        sim = simulated_update(job, workload, policy, args.updates)
        grads_per_update = n if label == "BSP" else (12 if label.startswith("backup") else 1)
        line = f"{'simulated ' + label:42s} {1 / sim:9.1f} updates/s"
        if label == "BSP":
            line += f"   {naive / sim:5.2f}x faster than (a), {sim / fused:5.2f}x the floor (b)"
            figures.add("simulated BSP update (default job)", 1e3 * sim, "ms", "fused forward/backward floor",
                        sim / fused)
            figures.add("simulated BSP update (default job)", 1e3 * sim, "ms", "naive per-worker loop", sim / naive)
        else:
            line += f"   {grads_per_update * (1 / sim):8.1f} applied gradients/s"
        print(line)
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak resident memory of this process: {peak_mib:.0f} MiB")
    figures.write(args.json)


if __name__ == "__main__":
    main()
