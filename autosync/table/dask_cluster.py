"""A table built on a Dask cluster: `build_table`'s cells handed to the cluster's workers through joblib.

`on_cluster(scheduler)` is a context in which joblib runs on the "dask" backend, with a `distributed.Client`
connected to the scheduler at `scheduler` (an address such as tcp://host:8786), or to a cluster of this
machine's cores started for the build and closed after it (`LOCAL`). Each cell is computed on a worker and
sent back, and the process that builds writes it to the table, so the workers need autosync and the job's
workload installed, not the table's directory.

Dask is an optional dependency (`pip install "autosync[cluster]"`); without it, or where no scheduler
answers at the address, `on_cluster` fails in one line before anything runs.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

from autosync.core.errors import UserError

EXTRA = "cluster"  # the optional dependency in pyproject.toml
LOCAL = "local"  # the scheduler "address" that starts a cluster on this machine
CONNECT_SECONDS = 10  # how long to wait for a scheduler to answer


@contextlib.contextmanager
def on_cluster(scheduler: str, n_workers: int = -1) -> Iterator[Any]:
    """joblib's calls inside run on a Dask cluster: the one whose scheduler is at `scheduler`, or for
    `LOCAL` one started here with `n_workers` worker processes of one thread each (-1: one per core).
    Yields the `distributed.Client`."""
    from joblib import parallel_config

    try:
        from dask.distributed import Client, LocalCluster
    except ImportError:
        raise UserError(f"--scheduler needs Dask, which is not installed: pip install \"autosync[{EXTRA}]\"") \
            from None
    with contextlib.ExitStack() as stack:
        if scheduler == LOCAL:
            # worker processes of one thread: a cell seeds torch's global generator, which threads would share
            cluster = stack.enter_context(LocalCluster(n_workers=None if n_workers < 1 else n_workers,
                                                       threads_per_worker=1, processes=True,
                                                       dashboard_address=None))
            client = stack.enter_context(Client(cluster))
        else:
            try:
                client = stack.enter_context(Client(scheduler, timeout=CONNECT_SECONDS))
            except Exception as exc:  # refused, timed out, not an address, or something else answered
                why = " ".join(str(exc).split()) or type(exc).__name__
                raise UserError(f"--scheduler {scheduler}: no Dask scheduler answered there ({why})") from None
        stack.enter_context(parallel_config(backend="dask"))
        yield client
