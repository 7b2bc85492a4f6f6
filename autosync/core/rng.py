"""Keyed random streams: every random draw is a pure function of (seed, stream, worker, task).

So skipping one gradient never shifts another worker's random numbers, and the in-process and
multiprocess drivers draw the same batches. Shared by the cluster model and the workloads.
"""

from __future__ import annotations

import numpy as np
from numpy.random.bit_generator import ISeedSequence

# Independent random streams; a draw is keyed by (seed, stream, worker, task).
STREAM_ROUND_TRIP = 1
STREAM_BATCH = 2
STREAM_WORKER_CONSTANT = 3
STREAM_RESOURCES = 4
STREAM_JOB_CONSTANT = 5
STREAM_DROPOUT = 6  # random layers of a model (dropout), per task


def rng_for(seed: int, stream: int, worker: int = 0, task: int = 0) -> np.random.Generator:
    """A generator that depends only on (seed, stream, worker, task): Philox keyed by them, its counter at 0.
    The key comes from `_Key` rather than `Philox(key=...)`, which first builds a SeedSequence from the
    system's entropy and then ignores it (two thirds of a draw's cost; the simulator makes one per round
    trip and per batch). The same generator, draw for draw."""
    key = _philox_key(seed, stream, worker, task)
    return np.random.Generator(np.random.Philox(_Key(np.array([key & _WORD, key >> 64], dtype=np.uint64))))


_WORD = 0xFFFFFFFFFFFFFFFF


class _Key(ISeedSequence):
    """A seed sequence that hands Philox its key words as they are (low word first, as `Philox(key=...)`
    splits a 128-bit key)."""

    __slots__ = ("words",)

    def __init__(self, words: np.ndarray):
        self.words = words

    def generate_state(self, n_words: int, dtype: type = np.uint32) -> np.ndarray:
        if n_words != 2 or dtype != np.uint64:
            raise ValueError(f"a Philox key is 2 uint64 words, but {n_words} {dtype} were asked for")
        return self.words


def _philox_key(seed: int, stream: int, worker: int, task: int) -> int:
    # Two 64-bit words: (seed, stream) and (worker, task), each packed 32+32 bits.
    hi = ((seed & 0xFFFFFFFF) << 32) | (stream & 0xFFFFFFFF)
    lo = ((worker & 0xFFFFFFFF) << 32) | (task & 0xFFFFFFFF)
    return (hi << 64) | lo
