"""Runs kept where they stopped, so a later run that repeats their start forks from them instead.

A search's trials stop at the target (`autosync.search.objective`); the candidates that can still win are
then checked at full budget (`autosync.search.strategies.full_budget`). Such a check would repeat, bit for bit, the
run up to the target: it continues instead from the stopped run's snapshot (`Simulator.snapshot`), and
trains only the rest of the budget. The store is this process's memory, bounded in bytes (the oldest
snapshots go first), and while a command's processes share a directory (`sharing`: `autosync tune
--n-jobs`), that directory too (`autosync.engine.fork_files`), so a run continues whichever of them kept it.
A check whose snapshot is in neither (evicted) trains from the start and gets the same result.

Runs of a schedule with a switch point (Sync-Switch) also keep prefixes: while the switch is undecided,
the run is every switch point's above the quota used so far (`Schedule.undecided_above`), so a snapshot is
kept each time the quota passes another 1/`PREFIX_GRID` of the workload, and a run of another switch point
continues from the latest prefix below it (`Simulator.continue_as`). A search's switch-point candidates
then train BSP's phase once, not once each; so do their full-budget checks, which may also continue from
a prefix kept after the target was met (a run that stops at the target may not: it would have stopped).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import socket
import tempfile
from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

try:
    import fcntl
except ImportError:  # Windows: no folder is swept (`remove_folders_of_ended_commands`)
    fcntl = None  # type: ignore[assignment]

from autosync.core.job import JobSpec
from autosync.engine.fork_files import ForkFiles, Kept

if TYPE_CHECKING:
    from autosync.engine.simulator import ProgressFn, RunResult, Simulator, StopAt
    from autosync.policies import Policy
    from autosync.workloads.workload import Workload

__all__ = ["FOLDER_PREFIX", "FORKS", "ForkStore", "Kept", "MAX_BYTES", "OWNER_LOCK", "PREFIX_GRID", "fork_key",
           "prefix_key", "remove_folders_of_ended_commands", "run_sharing_prefixes", "sharing", "switch_param_of"]

MAX_BYTES = 512 * 2 ** 20  # what the kept snapshots may take, in all
FOLDER_PREFIX = "autosync-forks-"  # `sharing`'s folders' names: then the machine's name and the process number
OWNER_LOCK = ".owner.lock"  # the file in such a folder whose lock its command holds (`sharing`)


PREFIX_GRID = 32  # a switch-point run keeps a prefix each time its quota used passes another 1/32 (the
# shipped switch_point space's step)


def fork_key(job: JobSpec, policy: dict[str, Any], fingerprint: str | None = None) -> str:
    """What a run is, whatever its budget says of stopping at the target: the job (its seed included) and
    the policy. Runs with equal keys are the same run up to the target. `fingerprint`: `job.fingerprint()`
    where the caller has it already (it is most of the key's cost)."""
    whole = job.model_copy(update={"budget": job.budget.model_copy(update={"stop_at_target": False,
                                                                          "stop_at_seconds": None})})
    # the budget counts (the fingerprint leaves it out): Sync-Switch measures its quota in it
    return json.dumps([fingerprint or whole.fingerprint(), whole.budget.model_dump(mode="json"), job.seed, policy],
                      sort_keys=True)


def prefix_key(job: JobSpec, policy: dict[str, Any], switch_param: str) -> str:
    """What a switch-point run is before its switch: `fork_key` without the switch point."""
    params = {k: v for k, v in policy["params"].items() if k != switch_param}
    return fork_key(job, {**policy, "params": params}) + f" prefix of {switch_param}"


class ForkStore:
    """Snapshots of stopped runs by `fork_key` and prefixes by `prefix_key`, the newest kept while they fit
    in `max_bytes`: in this process's memory, and in `shared` (a directory of files, bounded alike) where
    one is set (`share`), which is read when memory lacks a run."""

    def __init__(self, max_bytes: int = MAX_BYTES):
        self.max_bytes = max_bytes
        self.shared: ForkFiles | None = None
        self._kept: OrderedDict[tuple[str, float | None], Kept] = OrderedDict()
        self._bytes = 0  # what the kept snapshots take, in all
        self._held: Any = None  # the shared folder's lock handle (`share`)

    def share(self, directory: str | None) -> None:
        """Keep runs in `directory` too, and read those other processes kept there (None: memory only). While
        it shares a folder of `sharing`'s, the process holds a shared lock on its `OWNER_LOCK`, so that no
        sweep removes it (`remove_folders_of_ended_commands`), whichever of the command's processes is left."""
        if self._held is not None:
            self._held.close()  # releases its lock
        self._held = _held_lock(directory) if directory is not None else None
        self.shared = None if directory is None else ForkFiles(directory, self.max_bytes)

    def put(self, key: str, snapshot: bytes, at_seconds: float, undecided_above: float | None = None,
            past_target: bool = False) -> None:
        """Keep a stopped run (`undecided_above` None) or a prefix of switch-point runs."""
        entry = (key, undecided_above)
        replaced = self._kept.pop(entry, None)
        if replaced is not None:
            self._bytes -= len(replaced.snapshot)
        if len(snapshot) > self.max_bytes:
            return
        kept = Kept(snapshot, at_seconds, undecided_above, past_target)
        self._kept[entry] = kept
        self._bytes += len(snapshot)
        while self._bytes > self.max_bytes:
            _, evicted = self._kept.popitem(last=False)
            self._bytes -= len(evicted.snapshot)
        if self.shared is not None:
            self.shared.put(key, kept)

    def get(self, key: str) -> Kept | None:
        """The stopped run kept under `key`."""
        return self._load(key, None)

    def prefix(self, key: str, switch_point: float, stops_at_target: bool = False,
               until: float | None = None) -> Kept | None:
        """The longest prefix kept under `key` that is the run of `switch_point` (one that `stops_at_target`:
        before the target was met; one that stops at virtual time `until`: no later than that)."""
        fitting = [kept for kept in self._entries(key)
                   if kept.undecided_above is not None and switch_point > kept.undecided_above
                   and not (stops_at_target and kept.past_target)
                   and (until is None or kept.at_seconds <= until)]
        for kept in sorted(fitting, key=lambda kept: kept.at_seconds, reverse=True):  # stable: memory's first
            loaded = self._load(key, kept.undecided_above)  # a file listed may be gone (evicted) by now
            if loaded is not None:
                return loaded
        return None

    def prefixes(self, key: str) -> list[Kept]:
        """The prefixes kept under `key` in memory, oldest first: what a run of a switch-point policy left for
        others."""
        return [kept for (k, above), kept in self._kept.items() if k == key and above is not None]

    def clear(self) -> None:
        """Forget every kept run, the shared directory's too."""
        self._kept.clear()
        self._bytes = 0
        if self.shared is not None:
            self.shared.clear()

    def __len__(self) -> int:
        return len(self._kept)

    def _entries(self, key: str) -> list[Kept]:
        """The runs kept under `key`: memory's (snapshots and all), then the shared directory's others
        (headers only: `_load` reads the one chosen)."""
        own = [kept for (k, _), kept in self._kept.items() if k == key]
        if self.shared is None:
            return own
        held = {kept.undecided_above for kept in own}
        return own + [kept for kept in self.shared.entries(key) if kept.undecided_above not in held]

    def _load(self, key: str, undecided_above: float | None) -> Kept | None:
        kept = self._kept.get((key, undecided_above))
        if kept is None and self.shared is not None:
            kept = self.shared.get(key, undecided_above)
        return kept


FORKS = ForkStore()  # this process's store, shared with the command's other processes while `sharing`


@contextlib.contextmanager
def sharing(enabled: bool, store: ForkStore = FORKS) -> Iterator[str | None]:
    """While in it, `store` also keeps runs in a temporary directory (`ForkStore.share`), removed at the end
    (those that commands killed earlier left are removed first: `remove_folders_of_ended_commands`);
    yields the directory, for the processes started meanwhile to share (`ForkStore.share` there). Not
    `enabled` (one process), or a store already shared: nothing changes, and it yields the store's
    directory (None: none)."""
    if not enabled or store.shared is not None:
        yield None if store.shared is None else store.shared.directory
        return
    remove_folders_of_ended_commands()
    with tempfile.TemporaryDirectory(prefix=f"{FOLDER_PREFIX}{socket.gethostname()}-{os.getpid()}-") as directory, \
            _owned(directory):
        store.share(directory)
        try:
            yield directory
        finally:
            store.share(None)


@contextlib.contextmanager
def _owned(directory: str) -> Iterator[None]:
    """Within: `directory`'s `OWNER_LOCK` exists, and this process holds a shared lock on it, which the sweep
    of folders left by killed commands must take exclusively before it removes one
    (`remove_folders_of_ended_commands`); the kernel releases it when the process ends, however it ends. The
    file is made locked (locked under another name, then renamed), so that no sweep finds it unlocked.
    Without fcntl's locks (Windows), nothing."""
    if fcntl is None:
        yield
        return
    descriptor, made = tempfile.mkstemp(dir=directory, prefix=".owner-")
    with os.fdopen(descriptor, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_SH)
        os.replace(made, os.path.join(directory, OWNER_LOCK))
        yield


def _held_lock(directory: str) -> Any:
    """An open handle on `directory`'s `OWNER_LOCK` holding a shared lock (`ForkStore.share`); None without
    fcntl's locks, or without the file (a folder of no `sharing`, such as a test's)."""
    if fcntl is None:
        return None
    try:
        handle = open(os.path.join(directory, OWNER_LOCK))
    except OSError:
        return None
    try:
        fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:  # a sweep removing it holds it exclusively: its command is gone
        handle.close()
        return None
    return handle


def remove_folders_of_ended_commands(temporary: str | None = None) -> list[Path]:
    """Remove the folders of kept runs (`sharing`'s) that commands ended by SIGKILL or out of memory (which no
    handler sees) left in the temporary directory (`temporary`: tempfile's): those whose owner's lock
    (`OWNER_LOCK`, held shared by `sharing` and by each process sharing the folder) can be taken exclusively
    at once, so that no process holds it.
    A lock held from another container or process namespace on this kernel is seen held all the same, where
    a process number would have looked gone. A folder without the lock file (being made, or of an autosync
    before it) is left alone. Returns the folders removed; none without fcntl's locks (Windows)."""
    if fcntl is None:
        return []
    removed = []
    for folder in Path(temporary or tempfile.gettempdir()).glob(f"{FOLDER_PREFIX}*"):
        try:
            with open(folder / OWNER_LOCK, "r+") as handle:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)  # held: its command is running
                shutil.rmtree(folder, ignore_errors=True)
        except OSError:  # no lock file, another user's, removed meanwhile, or held (BlockingIOError)
            continue
        removed.append(folder)
    return removed


def switch_param_of(job: JobSpec, policy: "Policy") -> str | None:
    """The parameter of `policy`'s switch point on `job` (None: its schedule has none): its runs continue from
    the prefixes other switch points' runs kept (`run_sharing_prefixes`)."""
    return type(policy.bind(job.cluster.n_workers, job.workload.batch_size).schedule).switch_param


def run_sharing_prefixes(job: JobSpec, policy: "Policy", progress: "ProgressFn | None" = None,
                         store: ForkStore = FORKS, own: Kept | None = None,
                         workload: "Workload | None" = None, stop_at: "StopAt | None" = None,
                         ) -> tuple["Simulator", "RunResult", float]:
    """Run `policy` on `job` in the simulator (evaluating only what the target reads), continuing from `own`
    (this run kept where it stopped at the target) when given; a policy whose schedule has a switch point
    continues instead from a longer prefix another switch point's run kept, if there is one, and keeps
    prefixes of its own while its switch is undecided. Returns the simulator (where it stopped), the run
    and the virtual seconds taken from a kept state instead of trained. `workload`: the job's, built already
    (None: built here); `stop_at`: the run's `Simulator.stop_at`."""
    from autosync.engine.simulator import Simulator  # not at the top: torch

    switch_param = switch_param_of(job, policy)
    key = prefix_key(job, policy.to_dict(), switch_param) if switch_param is not None else None
    prefix = store.prefix(key, policy.to_dict()["params"][switch_param], job.budget.stop_at_target,
                          job.budget.stop_at_seconds) if key is not None else None
    if own is not None and job.budget.stop_at_seconds is not None and own.at_seconds > job.budget.stop_at_seconds:
        own = None  # kept past where this run stops
    start = prefix if prefix is not None and (own is None or prefix.at_seconds > own.at_seconds) else own
    if start is None:
        sim = Simulator(job, policy, workload=workload, progress=progress, target_metric_only=True)
    else:
        sim = Simulator.resume(start.snapshot, job, workload=workload, progress=progress)
        if start is prefix:
            sim.continue_as(policy)
    sim.stop_at = stop_at
    if key is not None:
        _keep_prefixes(sim, job, store, key)
    result = sim.run() if start is None else sim.run_on()
    return sim, result, 0.0 if start is None else start.at_seconds


def _keep_prefixes(sim: "Simulator", job: JobSpec, store: ForkStore, key: str) -> None:
    """Have `sim` keep a prefix under `key` after each evaluation at which its switch is still undecided and
    its quota used has passed another 1/PREFIX_GRID since the last one (and since the state it resumed)."""
    progress = sim.progress
    above = sim.strategies.schedule.undecided_above()
    last_cell = math.floor(above * PREFIX_GRID) if above is not None else PREFIX_GRID
    target_met = due = False

    def hear(info: dict[str, Any]) -> None:  # an evaluation: a prefix is due once the quota passed a new cell
        nonlocal target_met, due
        target_met = target_met or job.target.reached(info.get(job.target.metric))
        above = sim.strategies.schedule.undecided_above()
        due = above is not None and math.floor(above * PREFIX_GRID) > last_cell
        if progress is not None:
            progress(info)

    def keep_prefix() -> None:  # after the event that evaluated: its workers are launched again
        nonlocal last_cell, due
        if due:
            above = sim.strategies.schedule.undecided_above()
            last_cell, due = math.floor(above * PREFIX_GRID), False
            store.put(key, sim.snapshot(), sim.now, undecided_above=above, past_target=target_met)

    sim.progress, sim.after_step = hear, keep_prefix
