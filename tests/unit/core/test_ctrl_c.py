"""joblib's workers started within `workers_spared_ctrl_c` never take a terminal's Ctrl-C; the command does."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autosync.core.ctrl_c import pass_sigterm_on_to, sigterm_as_ctrl_c, workers_spared_ctrl_c

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


def test_sigterm_within_sigterm_as_ctrl_c_runs_the_ctrl_c_handler_once_and_is_restored_after():
    """SIGTERM runs SIGINT's handler (KeyboardInterrupt by Python's default one), once: a second SIGTERM (a
    scheduler's to the process group, after the command's own) does not cut the first's clean-up short. Its
    own handler is back at the end."""
    before = signal.getsignal(signal.SIGTERM)
    with sigterm_as_ctrl_c():
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGTERM)
        signal.raise_signal(signal.SIGTERM)  # nothing happens
    assert signal.getsignal(signal.SIGTERM) is before
    with sigterm_as_ctrl_c():  # a command run again in the process (the API's caller): handled again
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGTERM)


def test_where_sigint_is_ignored_or_under_torchrun_sigterm_keeps_its_default(monkeypatch):
    """A command a script started in the background has SIGINT ignored: it has no Ctrl-C, and SIGTERM handled
    as one did nothing (it trained on to the end of its budget). Under torchrun the agent sends its ranks
    SIGTERM where they may wait inside a collective call, which no Python handler interrupts."""
    before = signal.getsignal(signal.SIGTERM)
    ignored = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with sigterm_as_ctrl_c():
            assert signal.getsignal(signal.SIGTERM) is before
    finally:
        signal.signal(signal.SIGINT, ignored)
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "x")
    with sigterm_as_ctrl_c():
        assert signal.getsignal(signal.SIGTERM) is before


def test_sigterm_is_passed_on_to_the_registered_helpers_and_forked_children_get_its_default():
    """A helper registered with `pass_sigterm_on_to` gets SIGTERM when the command does (here a process forked
    within `sigterm_as_ctrl_c`, with SIGTERM's default again: it ends at once)."""
    import multiprocessing as mp

    context = mp.get_context("fork")
    with sigterm_as_ctrl_c():
        sleeper = context.Process(target=time.sleep, args=(30,))
        sleeper.start()
        time.sleep(0.5)  # past its start
        pass_sigterm_on_to([sleeper])
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGTERM)
        sleeper.join(10)
        assert sleeper.exitcode == -signal.SIGTERM
