"""Keep freed memory in the process for the next update instead of giving it back to the system.

glibc's malloc serves a request above its mmap threshold (at most 32 MiB however it adapts) with a fresh
mapping and unmaps it at free. A ResNet-sized model's tensors are all above it (ResNet-18: 45 MB of
parameters), and the engine makes new ones at every update (the parameters' next version, which stale
workers' old versions must not share, the update rule's temporaries, autograd's gradients in a worker),
so every update faults in every page of them again: 12 ms per 45 MB tensor on the 2-core machine of
benchmarks/, a quarter of a ResNet-18 BSP update and a third of an ASP update in this process
(benchmarks/bench_transport.py's runs, with and without). `keep_freed_memory` makes malloc serve every
size from its heap (M_MMAP_MAX = 0) and keep up to 1 GiB freed at the heap's top (M_TRIM_THRESHOLD), so
the next update reuses pages already mapped. The peak resident memory of those runs did not grow (BSP)
or by 6% (ASP). It changes no arithmetic, only where tensors live.

It is process-wide and stays for the life of the process, so the engine sets it where it runs (the
simulator's run, a worker process, a torch.distributed rank), once per process. Its cost: memory freed
below the heap's top is reused but not returned, and each malloc arena keeps up to 1 GiB freed; a process
that trains many models of different sizes may hold more memory than it would otherwise. Set
AUTOSYNC_KEEP_FREED_MEMORY=0 to leave malloc as it is. Elsewhere than glibc (macOS, musl) it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os

_M_TRIM_THRESHOLD = -1  # glibc's malloc.h
_M_MMAP_MAX = -4
_KEPT_BYTES = 2**30


@functools.cache
def keep_freed_memory() -> bool:
    """Set glibc's malloc to serve large tensors from its heap and keep freed memory; True where it took
    (False with AUTOSYNC_KEEP_FREED_MEMORY=0, or off glibc)."""
    if os.environ.get("AUTOSYNC_KEEP_FREED_MEMORY", "1") == "0":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(_M_MMAP_MAX, 0)) and bool(mallopt(_M_TRIM_THRESHOLD, _KEPT_BYTES))
