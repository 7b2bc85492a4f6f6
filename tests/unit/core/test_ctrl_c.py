"""joblib's workers started within `workers_spared_ctrl_c` never take a terminal's Ctrl-C; the command does."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from autosync.core.ctrl_c import workers_spared_ctrl_c

_STORM = """
import os, signal, sys, time
from joblib import Parallel, delayed
from autosync.core.ctrl_c import workers_spared_ctrl_c

def sigint_blocked(_):
    mask = int(open("/proc/self/status").read().split("SigBlk:")[1].split()[0], 16)
    return bool(mask >> (signal.SIGINT - 1) & 1)

with workers_spared_ctrl_c(2):
    print("workers blocked:", all(Parallel(n_jobs=2)(delayed(sigint_blocked)(i) for i in range(4))))
    try:
        for i, _ in enumerate(Parallel(n_jobs=2, return_as="generator")(delayed(time.sleep)(0.5) for _ in range(40))):
            if i == 0:
                os.killpg(0, signal.SIGINT)  # as a terminal does: every process of the command
        print("lost")
    except KeyboardInterrupt:
        print("the command interrupted")
"""


@pytest.mark.skipif(not Path("/proc/self/status").exists() or not hasattr(signal, "pthread_sigmask"),
                    reason="reads a process's signal mask from Linux's /proc")
def test_workers_start_with_sigint_blocked_and_the_command_alone_takes_ctrl_c(tmp_path):
    """The workers begin with SIGINT blocked (also where the pool's first spawn starts a resource tracker,
    which unblocked it in the spawning thread before `_start_resource_trackers`), so a Ctrl-C sent to the whole
    process group reaches the command alone: it is interrupted, and no worker prints a traceback."""
    script = tmp_path / "storm.py"
    script.write_text(_STORM)
    # SIGINT at its default in the child, as a terminal starts a command: a shell's background job (`cmd &`, a
    # CI script run so) starts with SIGINT ignored, every process inherits it, and the script's Python would then
    # never raise KeyboardInterrupt (`conftest.start_autosync` does the same)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                          start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert done.stdout.splitlines() == ["workers blocked: True", "the command interrupted"], done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr


def test_nothing_changes_for_one_job():
    """joblib starts no process for n_jobs 1: the mask stays as it was, and no tracker is started."""
    before = signal.pthread_sigmask(signal.SIG_BLOCK, set())
    with workers_spared_ctrl_c(1):
        assert signal.pthread_sigmask(signal.SIG_BLOCK, set()) == before
