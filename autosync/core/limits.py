"""The bounds a job file and the command-line options share, in a module of their own: the options read
them without loading the job schema (pydantic), which `autosync --help` never needs."""

from __future__ import annotations

__all__ = ["MAX_NAME", "MAX_SEED", "MAX_SIZE", "MAX_WAIT_SECONDS", "local_processes"]

#: The largest size a spec takes for what a run allocates (samples, features, classes, layer widths, a batch):
#: numpy and torch refuse far larger sizes with a traceback, so a number like 10**30 is refused here in one line.
MAX_SIZE = 2 ** 31 - 1
#: The longest job name: results/<name>-<space> and the like stay well under file systems' 255 bytes per name.
MAX_NAME = 100
#: Seeds are 32 bits: random streams key on the seed's low 32 bits (autosync.core.rng), and scikit-learn takes no more.
MAX_SEED = 2 ** 32 - 1
#: The longest a wait on a worker process may be: a poll of its pipe takes milliseconds as a C int (2^31 - 1 ms,
#: about 24.8 days); an infinite --worker-timeout raised OverflowError there.
MAX_WAIT_SECONDS = (2 ** 31 - 1) / 1000


def local_processes(n_jobs: int) -> int:
    """`--n-jobs` for processes started on this machine: -1 (every usable core) as it is, a larger count cut
    to the usable cores (joblib's count: the machine's, the CPU affinity's and a container's quota). A process
    beyond them only waits for a core, holding an interpreter with torch: `leaderboard --n-jobs 100000` of
    one run started over a thousand and ran a 24 GB machine out of memory. The runs are the same either way."""
    import joblib  # not at the top: the options read this module for `autosync --help`, which never needs joblib

    return n_jobs if n_jobs < 1 else min(n_jobs, joblib.cpu_count())
