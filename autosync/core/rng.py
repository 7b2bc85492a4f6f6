"""Keyed random streams: every random draw is a pure function of (seed, stream, worker, task).

So skipping one gradient never shifts another worker's random numbers, and the in-process and
multiprocess drivers draw the same batches. Shared by the cluster model and the workloads.
"""

from __future__ import annotations

import numpy as np

# Independent random streams; a draw is keyed by (seed, stream, worker, task).
STREAM_ROUND_TRIP = 1
STREAM_BATCH = 2
STREAM_WORKER_CONSTANT = 3
STREAM_RESOURCES = 4
STREAM_JOB_CONSTANT = 5
STREAM_DROPOUT = 6  # random layers of a model (dropout), per task


def rng_for(seed: int, stream: int, worker: int = 0, task: int = 0) -> np.random.Generator:
    """A generator that depends only on (seed, stream, worker, task)."""
    return np.random.Generator(np.random.Philox(key=_philox_key(seed, stream, worker, task)))


def _philox_key(seed: int, stream: int, worker: int, task: int) -> int:
    # Two 64-bit words: (seed, stream) and (worker, task), each packed 32+32 bits.
    hi = ((seed & 0xFFFFFFFF) << 32) | (stream & 0xFFFFFFFF)
    lo = ((worker & 0xFFFFFFFF) << 32) | (task & 0xFFFFFFFF)
    return (hi << 64) | lo
