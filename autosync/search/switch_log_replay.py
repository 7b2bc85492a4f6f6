"""Sync-Switch's logs replayed: switch-point search strategies judged on recorded training runs instead of
new trainings (`autosync replay`; not the table's replay of a search's runs, `autosync.table.replay`).

A `SwitchLogs` holds the runs published with the Sync-Switch paper (one folder per run, `acc_proc.csv`
with the test accuracy over time): BSP, ASP, and "bX-aY" runs that trained X% of the workload with BSP
and the rest with ASP. A search asks for a training at switch point s; the `ReplayBackend` answers with
one recorded run drawn at random from the runs at the logged switch point nearest to s (the runs of two
equally near points are pooled) and charges its training time, in units of one BSP training (the median
BSP run). Simulating a search many times gives its cost and how often it finds a good switch point:
Sync-Switch's Table II (sec. VI-C1: 1000 simulated searches, accuracy threshold 0.01).

A run's BSP share is read from its step count (a BSP step consumes n worker batches, an ASP step one),
which also catches a run whose name disagrees with its steps, and runs that stopped early; both are left
out and listed in `SwitchLogs.skipped`.
"""

from __future__ import annotations

import csv
import math
import re
import statistics
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from autosync.core.errors import UserError
from autosync.core.phases import Phase, no_phase
from autosync.search.strategies.binary import binary_search, target_from_bsp
from autosync.search.strategies.ladder import DEFAULT_RUNGS, LadderSampler, ladder_finished, rungs_within
from autosync.search.strategies.samplers import refuse_without_a_switch_point
from autosync.search.cost import in_bsp_trainings
from autosync.search.space import load_space, resolve_space_path
from autosync.search.study.storage import quiet_optuna
from autosync.search.strategies.samplers import make_sampler
from autosync.search.study.records import CONSTRAINT, SWITCH_AT
from autosync.search.study.trials import feasible_trials

_SWITCH_NAME = re.compile(r"^b(\d+(?:\.\d+)?)[-_]a(\d+(?:\.\d+)?)")  # BSP first, then ASP
_BASELINE_NAME = re.compile(r"^(bsp|asp)")
_BSP_SHARE = {"bsp": 1.0, "asp": 0.0}  # a baseline run's share of the workload trained under BSP
SHARE_RESOLUTION = 400  # shares are rounded to 0.25% (the paper's 6.25% is logged as "b6")
SETUP_1_WORKERS = 8  # the logs' cluster (Sync-Switch setup 1): resolves n_workers in a search space


@dataclass(frozen=True)
class LoggedSwitchRun:
    """One recorded training: its BSP share, converged (final) test accuracy and training seconds."""

    share: float
    accuracy: float
    seconds: float
    steps: int
    path: str


@dataclass
class SwitchLogs:
    """Recorded runs grouped by BSP share (0 = ASP, 1 = BSP)."""

    runs: dict[float, list[LoggedSwitchRun]]  # read once; the summaries below are computed once
    skipped: list[str] = field(default_factory=list)  # "path: reason" of every run left out
    _pools: dict[float, list[LoggedSwitchRun]] = field(default_factory=dict, repr=False)

    @cached_property
    def shares(self) -> list[float]:
        return sorted(self.runs)

    @cached_property
    def bsp_seconds(self) -> float:
        """The cost unit: the median training time of the BSP runs."""
        return statistics.median(r.seconds for r in self.runs[1.0])

    @cached_property
    def target_accuracy(self) -> float:
        """BSP's converged accuracy over every logged BSP run: the A a search with full information uses."""
        return statistics.fmean(r.accuracy for r in self.runs[1.0])

    def pool(self, s: float) -> list[LoggedSwitchRun]:
        """The runs at the logged share nearest to s; two equally near shares are pooled (memoised per s)."""
        if s not in self._pools:
            distance = min(abs(x - s) for x in self.runs)
            self._pools[s] = [r for x in self.shares if abs(x - s) - distance < 1e-9 for r in self.runs[x]]
        return self._pools[s]

    def mean_accuracy(self, s: float) -> float:
        return statistics.fmean(r.accuracy for r in self.pool(s))


def load_switch_logs(folder: str | Path) -> SwitchLogs:
    """Read `baseline/{bsp,asp}*` and `switch_exp/bX-aY*` run folders under `folder` (Sync-Switch's layout)."""
    root = Path(folder)
    if not (root / "baseline").is_dir():
        raise UserError(f"{root}: not a Sync-Switch log folder (no baseline/ with bsp* and asp* runs); "
                        "expected e.g. autosync/data/sync_switch_logs/cifar10_res32 (the shipped logs)")
    skipped: list[str] = []
    baselines: dict[float, list[LoggedSwitchRun]] = {0.0: [], 1.0: []}
    for run_dir in sorted((root / "baseline").iterdir()):
        match = _BASELINE_NAME.match(run_dir.name)
        run = _read_run(run_dir, _BSP_SHARE[match.group(1)], skipped) if match else None
        if run is not None:
            baselines[run.share].append(run)
    for share, runs in baselines.items():
        longest = max((r.steps for r in runs), default=0)
        for r in [r for r in runs if r.steps < 0.9 * longest]:
            skipped.append(f"{r.path}: stopped early ({r.steps} of {longest} steps)")
            runs.remove(r)
        if not runs:
            raise UserError(f"{root}/baseline: no complete {'BSP' if share else 'ASP'} run with an acc_proc.csv")
    bsp_steps = statistics.median(r.steps for r in baselines[1.0])
    asp_steps = statistics.median(r.steps for r in baselines[0.0])
    if asp_steps <= bsp_steps:  # a switch run's BSP share is read from where its steps fall between the two
        raise UserError(f"{root}/baseline: the ASP runs must take more steps than the BSP runs (an ASP step "
                        f"consumes one worker batch, a BSP step n), but got a median of {asp_steps:g} ASP and "
                        f"{bsp_steps:g} BSP steps")
    runs_by_share: dict[float, list[LoggedSwitchRun]] = {s: list(rs) for s, rs in baselines.items()}
    switch_dir = root / "switch_exp"
    for run_dir in sorted(switch_dir.iterdir()) if switch_dir.is_dir() else []:
        match = _SWITCH_NAME.match(run_dir.name)
        if not match:
            continue  # ASP-first runs and other experiments
        run = _read_run(run_dir, math.nan, skipped)
        if run is None:
            continue
        named = float(match.group(1)) / 100
        share = round((asp_steps - run.steps) / (asp_steps - bsp_steps) * SHARE_RESOLUTION) / SHARE_RESOLUTION
        if abs(share - named) > 0.01 or not 0.0 < share < 1.0:
            skipped.append(f"{run.path}: named {named:.0%} BSP but its {run.steps} steps mean {share:.2%}")
            continue
        runs_by_share.setdefault(share, []).append(
            LoggedSwitchRun(share, run.accuracy, run.seconds, run.steps, run.path))
    return SwitchLogs(runs_by_share, skipped)


def _read_run(run_dir: Path, share: float, skipped: list[str]) -> LoggedSwitchRun | None:
    """The final accuracy, training time (switching overhead removed) and step count of one run folder."""
    path = run_dir / "acc_proc.csv"
    if not path.is_file():
        skipped.append(f"{run_dir}: no acc_proc.csv")
        return None
    try:
        with path.open(newline="") as handle:
            rows = list(csv.DictReader(handle))
        first, last = rows[0], rows[-1]
        seconds = float(last["Time"]) if last.get("Time") else float(last["Wall time"]) - float(first["Wall time"])
        accuracy, steps = float(last["Value"]), float(last["Step"])
    except (IndexError, KeyError, ValueError, TypeError) as exc:  # TypeError: a row short of a column (None)
        raise UserError(f"{path}: unreadable training log ({type(exc).__name__}: {exc}); expected columns "
                        "'Wall time', 'Step', 'Value' and optionally 'Time'") from None
    for column, value in (("Value", accuracy), ("Step", steps), ("Time" if last.get("Time") else "Wall time", seconds)):
        if not math.isfinite(value) or value < 0:
            raise UserError(f"{path}: the last row's {column} must be a finite number >= 0, but got {value}")
    return LoggedSwitchRun(share, accuracy, seconds, int(steps), str(run_dir))


class ReplayBackend:
    """Answers `run(s)` with a recorded run's accuracy and adds its training time to `cost` (BSP trainings)."""

    def __init__(self, logs: SwitchLogs, rng: np.random.Generator):
        self.logs, self.rng, self.cost = logs, rng, 0.0

    def __call__(self, s: float) -> float:
        pool = self.logs.pool(s)
        run = pool[int(self.rng.integers(len(pool)))]
        self.cost += in_bsp_trainings(run.seconds, self.logs.bsp_seconds) or 0.0
        return run.accuracy


# ---------------------------------------------------------------------------------------------- strategies
@dataclass(frozen=True)
class SearchSetting:
    """Table II's search setting: (recurring job, BSP runs, runs per candidate)."""

    recurring: bool
    bsp_runs: int
    runs_per_candidate: int

    @property
    def label(self) -> str:
        return f"({'Yes' if self.recurring else 'No'}, {self.bsp_runs}, {self.runs_per_candidate})"


TABLE_II_SETTINGS = (SearchSetting(False, 5, 5), SearchSetting(False, 3, 3), SearchSetting(True, 0, 3))
SearchStrategy = Callable[[Callable[[float], float], SearchSetting, float | None, int], float]


def binary_strategy(max_settings: int = 4, threshold: float = 0.01) -> SearchStrategy:
    """Sync-Switch's Algorithm 1 with M candidate switch points."""
    def search(run: Callable[[float], float], setting: SearchSetting, target: float | None, seed: int) -> float:
        return binary_search(run, threshold, setting.runs_per_candidate, max_settings, setting.bsp_runs, target)
    return search


def ladder_strategy(space_path: str | Path, rungs: tuple[float, ...] = DEFAULT_RUNGS, threshold: float = 0.01,
                    n_workers: int = SETUP_1_WORKERS) -> SearchStrategy:
    """The cost-ordered ladder as `autosync tune --sampler ladder` runs it: an Optuna study whose sampler
    is `LadderSampler`, stopped at the first rung that holds."""
    space = load_space(space_path, n_workers)
    rungs = rungs_within(refuse_without_a_switch_point(space, "the ladder")["switch_at"], rungs)  # the space's own, as tune's
    if not rungs:
        raise UserError(f"{space.path}: sync_switch.switch_at holds none of the ladder's rungs")
    return _study_strategy(space, lambda seed: LadderSampler(rungs=rungs), len(rungs),
                           threshold, finished=lambda study: ladder_finished(study, rungs))


def tpe_strategy(space_path: str | Path, n_trials: int, threshold: float = 0.01,
                 n_workers: int = SETUP_1_WORKERS) -> SearchStrategy:
    """`autosync tune`'s default: a TPE study over the switch-point space with the accuracy constraint."""
    space = load_space(space_path, n_workers)
    return _study_strategy(space, lambda seed: make_sampler("tpe", seed, space, False), n_trials, threshold)


def _study_strategy(space: Any, make: Callable[[int], Any], n_trials: int, threshold: float,
                    finished: Callable[[Any], bool] | None = None) -> SearchStrategy:
    """A search that is an Optuna study (sampler `make(seed)`) over the switch-point space, asked and told.

    Each trial averages R runs; its constraint is A - beta - mean accuracy (<= 0: within beta of BSP), its
    value the switch point (time grows with the BSP share: the smallest feasible s is the fastest). The
    answer is the fastest feasible trial (BSP when none is feasible).
    """
    import optuna

    def search(run: Callable[[float], float], setting: SearchSetting, target: float | None, seed: int) -> float:
        if target is None:
            target = target_from_bsp(run, setting.bsp_runs)
        study = optuna.create_study(sampler=make(seed))
        for _ in range(n_trials):
            trial = study.ask()
            s = float(space.suggest(trial)["params"]["switch_at"])
            accuracies = [run(s) for _ in range(setting.runs_per_candidate)]
            trial.set_constraint(CONSTRAINT, target - threshold - statistics.fmean(accuracies))
            trial.set_user_attr(SWITCH_AT, s)
            study.tell(trial, s)
            if finished is not None and finished(study):
                break
        best = feasible_trials(study)
        return best[0].user_attrs[SWITCH_AT] if best else 1.0
    return search


# ---------------------------------------------------------------------------------------------- Table II
@dataclass
class SimulationSummary:
    """One strategy under one setting over many simulated searches."""

    strategy: str
    setting: str
    simulations: int
    mean_cost: float  # BSP trainings per search
    success: float  # share of searches whose choice is valid and no slower than the full-information answer
    same_as_full_information: float  # the paper's definition: the same switch point as with every log known
    valid: float  # share whose choice's logged mean accuracy is >= BSP's - threshold
    choices: dict[str, int]  # switch point -> how often chosen

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def full_information_choice(logs: SwitchLogs, strategy: SearchStrategy) -> float:
    """The strategy's answer when every candidate's accuracy is its mean over all logs and A is known."""
    setting = SearchSetting(True, 0, 1)
    return strategy(logs.mean_accuracy, setting, logs.target_accuracy, 0)


def simulate_searches(logs: SwitchLogs, name: str, strategy: SearchStrategy, setting: SearchSetting,
                      simulations: int, seed: int, optimum: float, threshold: float = 0.01,
                      progress: Callable[[], None] | None = None,
                      own_optimum: float | None = None) -> SimulationSummary:
    """Run `strategy` `simulations` times on replayed runs.

    `optimum` is the reference switch point of the success column; `own_optimum` the strategy's own
    full-information answer (computed when not given).
    """
    target = logs.target_accuracy if setting.recurring else None
    if own_optimum is None:
        own_optimum = full_information_choice(logs, strategy)
    costs, successes, same, valid, choices = [], 0, 0, 0, {}
    streams = np.random.SeedSequence([seed, simulations, setting.bsp_runs, setting.runs_per_candidate])
    for index, stream in enumerate(streams.spawn(simulations)):
        backend = ReplayBackend(logs, np.random.default_rng(stream))
        choice = strategy(backend, setting, target, seed + index)
        ok = logs.mean_accuracy(choice) >= logs.target_accuracy - threshold
        costs.append(backend.cost)
        valid += ok
        successes += ok and choice <= optimum + 1e-12
        same += abs(choice - own_optimum) < 1e-12
        choices[f"{choice:.4g}"] = choices.get(f"{choice:.4g}", 0) + 1
        if progress is not None:
            progress()
    return SimulationSummary(name, setting.label, simulations, statistics.fmean(costs), successes / simulations,
                             same / simulations, valid / simulations, dict(sorted(choices.items())))


def replay_table(logs: SwitchLogs, strategies: dict[str, SearchStrategy], simulations: int, seed: int,
                 settings: tuple[SearchSetting, ...] = TABLE_II_SETTINGS, threshold: float = 0.01,
                 max_settings: int = 4, progress: Callable[[], None] | None = None,
                 ) -> tuple[float, list[SimulationSummary]]:
    """Table II for each strategy and setting; also returns the reference optimum."""
    optimum = full_information_choice(logs, binary_strategy(max_settings, threshold))  # the paper's reference
    rows = []
    for name, strategy in strategies.items():
        own_optimum = full_information_choice(logs, strategy)  # one per strategy, whatever the setting
        rows += [simulate_searches(logs, name, strategy, setting, simulations, seed, optimum, threshold, progress,
                                   own_optimum)
                 for setting in settings]
    return optimum, rows


def table_ii(logs: SwitchLogs, space: str, simulations: int, seed: int, threshold: float = 0.01,
             max_settings: int = 4, tpe_trials: Sequence[int] = (4, 8),
             phase: Phase = no_phase) -> tuple[float, list[Any]]:
    """Sync-Switch's Table II on `logs`: binary search (at most `max_settings` candidates), the cost-ordered
    ladder and TPE with each of `tpe_trials` trials over the switch-point space `space` (a shipped name or a
    YAML file), `simulations` searches per strategy and setting (`replay_table`: the optimum binary search
    picks with full information, and a `SimulationSummary` per strategy and setting). `phase`: called
    around the searches (one step each)."""
    quiet_optuna()
    space_path = resolve_space_path(space, "switch_point")
    refuse_without_a_switch_point(load_space(space_path, SETUP_1_WORKERS), f"autosync replay --space {space}:")
    strategies = {"binary": binary_strategy(max_settings, threshold),
                  "ladder": ladder_strategy(space_path, threshold=threshold)}
    for n in tpe_trials:
        strategies[f"tpe ({n} trials)"] = tpe_strategy(space_path, n, threshold)
    total = simulations * len(strategies) * len(TABLE_II_SETTINGS)
    with phase("searches", total) as advance:
        return replay_table(logs, strategies, simulations, seed, threshold=threshold, max_settings=max_settings,
                            progress=advance)
