"""The simulator trains on one torch thread, whatever the machine's cores (`AUTOSYNC_TORCH_THREADS=N` for N).

Two reasons, both measured with the default job's `autosync tune` on the 2-core machine of benchmarks/:

- Same seed, same result on any machine. A kernel's floating-point sums are split among the threads torch
  runs it on, so the same run on 2 and on 16 cores parts in its last bits, and training amplifies that:
  with torch's default (a thread per core) backup k = 6 under `sqrt` reached the target at 119.8 s on 2
  threads and at 104.8 s on one, the same seed.
- A busy core. An intra-op thread spinning for a core that another process holds stalls every short kernel
  of the simulator's small models: beside one CPU-bound process the tune had not finished after 190 s
  with torch's default (170 s beside a reference grid), and took 26 s on one thread. The price is on idle
  cores: 26.7 s against 21.5 s (medians of 3 paired runs), the second core no longer sharing the digits
  CNN's kernels. A passive OpenMP wait (OMP_WAIT_POLICY=PASSIVE) cost more than that on idle cores
  (30.8 s) and a short spin (GOMP_SPINCOUNT=10000) still took 47 s beside a busy core.

The worker processes and torchrun ranks of the other backends already run one thread each. The setting
holds while a simulation runs (`Simulator.run`, `run_on`) and the caller's own is restored after it; a
simulation that must compute what the worker processes do, bit for bit (`autosync rerun`), asks for their
one thread whatever the variable says (`Simulator(threads=1)`).
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Iterator

from autosync.core.errors import UserError

THREADS_VARIABLE = "AUTOSYNC_TORCH_THREADS"


def simulation_threads() -> int:
    """The torch threads a simulation runs on: `AUTOSYNC_TORCH_THREADS` where set, else 1."""
    raw = os.environ.get(THREADS_VARIABLE, "1")
    try:
        threads = int(raw)
    except ValueError:
        threads = 0
    if threads < 1:
        raise UserError(f"{THREADS_VARIABLE} must be an integer >= 1, but got {raw!r}")
    return threads


@contextmanager
def on_simulation_threads(threads: int | None = None) -> Iterator[None]:
    """Run the block on `threads` torch threads (None: `simulation_threads()`), then give the caller its own
    count back."""
    import torch

    wanted, before = threads or simulation_threads(), torch.get_num_threads()
    if wanted != before:
        torch.set_num_threads(wanted)
    try:
        yield
    finally:
        if wanted != before:
            torch.set_num_threads(before)
