"""A race run that starts before its horizon is known, and learns it while it trains.

A run to the target races the runs queued before it on its seed (`autosync.race.horizon`): it is stopped
at `margin` times the fastest of their times. Waiting for all of them to finish before it starts (as one
process would have run them) keeps its horizon, and so its run and cost, the same however many processes
share the round, but leaves every process but one idle through the first round.

Instead it starts at once and trains while its horizon stays out of reach: the fastest rival cannot finish
before the virtual time it has trained to, so `margin` times the least of the finished rivals' times and the
running rivals' progress is a bound below the horizon (`HorizonGate.bound`), rising as they train. The run
goes on up to the bound and waits there for it to rise; once every rival has finished the horizon is known
(`HorizonGate.final`) and the run stops there as if it had been its budget's `stop_at_seconds` from the
start (`autosync.engine.simulator.Simulator.stop_at`): the same run, bit for bit, and the same cost.

Each running race run publishes its progress (the virtual time of its last evaluation short of the target)
to a `ProgressBoard` in the directory the command's processes share (`autosync.engine.forks.sharing`). A
rival not on the board (not started yet, or run by another command) counts as not having begun: the run
waits until it finishes, as before.
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path
from typing import Callable

__all__ = ["HorizonGate", "ProgressBoard", "WAIT_SECONDS"]

WAIT_SECONDS = 0.05  # how often a run held at its bound looks again for its rivals' progress (a file read)
CLEAR_EVERY = 20  # waits between two checks for dead processes' trials (`fail_dead_trials`: about 1 s)


class ProgressBoard:
    """Where each running race run stands, by trial id: one small file each in `directory` (None: no board,
    every rival unknown)."""

    def __init__(self, directory: str | Path | None):
        self.directory = Path(directory) / "race-progress" if directory is not None else None
        if self.directory is not None:
            self.directory.mkdir(exist_ok=True)

    def publish(self, trial_id: int, seconds: float) -> None:
        """Trial `trial_id` has trained to `seconds` of virtual time without reaching the target."""
        if self.directory is None:
            return
        path = self.directory / str(trial_id)
        scratch = path.with_suffix(f".{os.getpid()}")
        try:
            scratch.write_text(repr(float(seconds)))
            os.replace(scratch, path)  # a reader sees the old figure or the new one, never half of one
        except OSError:
            pass  # the directory gone with its command: a figure not published only keeps a rival waiting

    def progress(self, trial_id: int) -> float:
        """The virtual time trial `trial_id` has trained to (0: not on the board)."""
        if self.directory is None:
            return 0.0
        try:
            return float((self.directory / str(trial_id)).read_text())
        except (OSError, ValueError):
            return 0.0


class HorizonGate:
    """One run's horizon while it trains: `read()` answers (the horizon, once every rival has finished, else
    None; a bound below it); `clear()` fails the trials of processes that died, so that a run never waits on
    one. `stop_at` is the run's `Simulator.stop_at`."""

    def __init__(self, read: Callable[[], tuple[float | None, float]], clear: Callable[[], None]):
        self.read, self.clear = read, clear
        self.final: float | None = None
        self.bound = 0.0

    def stop_at(self, next_time: float) -> float | None:
        """Before an event at `next_time`: the horizon where the run stops there, else None, once the bound has
        passed `next_time` or the horizon is known (waiting for either)."""
        waits = 0
        while self.final is None and next_time > self.bound:
            if waits:
                time.sleep(WAIT_SECONDS)
                if waits % CLEAR_EVERY == 0:
                    self.clear()
            self.final, self.bound = self.read()
            waits += 1
        if self.final is not None:
            return self.final if next_time > self.final else None
        return None

    def settle(self, time_to_target: float, reached: bool, trained: float) -> float:
        """The horizon to judge the ended run by: the known one, or the bound where the run's outcome is the
        same under any horizon at or above it (it reached the target before the bound, or missed it and ended
        before the bound: it is not eliminated, and it was a whole run), else the horizon, waited for."""
        if self.final is None and time_to_target < self.bound and (reached or trained < self.bound):
            return self.bound
        while self.final is None:
            self.stop_at(math.inf)
        return self.final
