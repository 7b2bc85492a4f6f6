"""What the benchmarks measure their results against, shared: machine floors and the ResNet-18 job.

`copy_bandwidth` and `pipe_round_trip` are floors measured on this machine in the benchmark's own run;
`resnet18_job` is the ResNet-18 workload on CIFAR-shaped synthetic images that the CPU and GPU
benchmarks of the processes backend use.
"""

from __future__ import annotations

import time
from multiprocessing.connection import Connection

import torch
import torch.multiprocessing as mp

from autosync.core.job import JobSpec, job_from_dict


def copy_bandwidth() -> float:
    """Bytes per second of a large in-memory copy (read + write counted)."""
    src, dst = torch.ones(64 * 2**20 // 4), torch.empty(64 * 2**20 // 4)
    dst.copy_(src)
    start = time.perf_counter()
    for _ in range(10):
        dst.copy_(src)
    return 10 * 2 * src.numel() * 4 / (time.perf_counter() - start)


def _echo(inbox: Connection, outbox: Connection) -> None:
    """A spawned process that answers each notification at once, in the processes backend's message shapes."""
    while (message := inbox.recv()) is not None:
        worker, index, _, _ = message
        outbox.send((worker, index, 0.0, 0.0, time.monotonic()))


def pipe_round_trip(rounds: int = 2000) -> float:
    """Seconds for one empty task round trip to a spawned process and back: a notification `(worker, index,
    batch size, row)` down one pipe, an answer `(worker, index, loss, seconds, time)` up another, which is what
    the processes backend exchanges per task with no gradient to compute (median of 5 blocks)."""
    ctx = mp.get_context("spawn")
    task_out, task_in = ctx.Pipe(duplex=False)
    answer_out, answer_in = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_echo, args=(task_out, answer_in), daemon=True)
    proc.start()
    try:
        blocks = []
        for block in range(6):
            start = time.perf_counter()
            for i in range(rounds // 5):
                task_in.send((0, i, 32, 0))
                answer_out.recv()
            if block:  # the first block warms up
                blocks.append((time.perf_counter() - start) / (rounds // 5))
        return sorted(blocks)[len(blocks) // 2]
    finally:
        task_in.send(None)
        proc.join(timeout=5.0)


def resnet18_job(updates: int, batch_size: int, workers: int, eval_samples: int = 512,
                 name: str = "resnet18-synthetic") -> JobSpec:
    """ResNet-18 (torchvision's, 11.2 M parameters) on 3x32x32 synthetic images, 10 classes; evaluated once,
    at the end, on `eval_samples` samples."""
    return job_from_dict({
        "name": name,
        "workload": {"dataset": {"name": "synthetic_images", "n_samples": 10000, "image_shape": [3, 32, 32]},
                     "model": {"name": "resnet18"}, "batch_size": batch_size, "optimizer": {"lr": 0.05},
                     "evaluation": {"every_seconds": 1e9, "max_samples": eval_samples}},
        "cluster": {"n_workers": workers},
        "budget": {"max_updates": updates},
    }, name)
