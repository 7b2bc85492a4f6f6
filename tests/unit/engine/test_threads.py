"""The simulator trains on one torch thread and gives the caller its own count back (`autosync.engine.threads`)."""

from __future__ import annotations

import pytest
import torch

from autosync.core.errors import UserError
from autosync.engine import simulate
from autosync.engine.simulator import Simulator
from autosync.policies import BSP
from tests.conftest import small_job


@pytest.fixture
def two_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def _threads_while_running(job) -> set[int]:
    seen: set[int] = set()
    simulate(job, BSP(), progress=lambda _: seen.add(torch.get_num_threads()))
    return seen


def test_a_run_trains_on_one_thread_and_restores_the_callers(two_threads):
    job = small_job(budget={"max_updates": 20})
    assert _threads_while_running(job) == {1}
    assert torch.get_num_threads() == 2


def test_a_paused_and_continued_run_trains_on_one_thread_too(two_threads):
    job = small_job(budget={"max_updates": 20})
    seen: set[int] = set()
    sim = Simulator(job, BSP(), progress=lambda _: seen.add(torch.get_num_threads()))
    assert sim.run_until(lambda: len(sim.trace.updates) >= 5) is None
    assert torch.get_num_threads() == 2
    sim.run_until(lambda: False)
    assert seen == {1} and torch.get_num_threads() == 2


def test_autosync_torch_threads_sets_another_count_and_a_bad_one_is_a_clear_error(two_threads, monkeypatch):
    job = small_job(budget={"max_updates": 20})
    monkeypatch.setenv("AUTOSYNC_TORCH_THREADS", "2")
    assert _threads_while_running(job) == {2}
    for bad in ("0", "two"):
        monkeypatch.setenv("AUTOSYNC_TORCH_THREADS", bad)
        with pytest.raises(UserError, match=f"AUTOSYNC_TORCH_THREADS must be an integer >= 1, but got '{bad}'"):
            simulate(job, BSP())
    assert torch.get_num_threads() == 2


def test_a_simulation_that_asks_for_its_threads_gets_them_whatever_the_variable(two_threads, monkeypatch):
    """`autosync rerun` computes what the worker processes did, on their one thread, bit for bit."""
    monkeypatch.setenv("AUTOSYNC_TORCH_THREADS", "2")
    seen: set[int] = set()
    Simulator(small_job(budget={"max_updates": 20}), BSP(), progress=lambda _: seen.add(torch.get_num_threads()),
              threads=1).run()
    assert seen == {1} and torch.get_num_threads() == 2
