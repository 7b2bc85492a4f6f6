"""What one `autosync tune` invocation asks for (`TuneRequest`): the job, the space, the budget and how the
search runs. Its own module so that the search's strategies (`switch_point`) name it without importing the
driver (`tune`) that imports them."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING

from autosync.core.declare import default_of
from autosync.core.errors import UserError
from autosync.core.main_module import reimport_is_safe
from autosync.core.limits import local_processes
from autosync.data import RACE_SETTINGS
from autosync.core.job import JobSpec
from autosync.engine.backends import BackendChoice, simulates_here
from autosync.search.objective import ObjectiveSettings
from autosync.search.recommend.neighbours import describe as describe_job
from autosync.search.space import SearchSpace, load_space, resolve_space_path
from autosync.search.study.cache import execution_name, study_name
from autosync.search.study.helper_processes import shared_storage, usable_cores
from autosync.search.study.records import BUDGET, describe_study
from autosync.search.study.storage import DEFAULT_STORAGE
from autosync.search.tune_options import DEFAULT_N_TRIALS, DEFAULT_TUNE_SPACE, RACE, TuneOptions
from autosync.search.strategies.samplers import check_sampler, sampler_for
from autosync.lattice import labelled_points
from autosync.race import WIDEST_ROUND, portfolio_members, race_settings

if TYPE_CHECKING:
    import optuna

__all__ = ["TuneRequest"]


def _default(name: str):
    return default_of(TuneOptions, name)


def default_n_jobs(sampler: str, backend: BackendChoice | None, storage: str) -> int:
    """`--n-jobs` when it is not given: every core this process may use for the race on the simulator, whose
    answer and cost are the same in any number of processes (`autosync.search.race_trials`;
    tests/e2e/test_race_tune.py), up to the runs of its final-metric round, which never wait for each other
    (`race.WIDEST_ROUND`; the first rounds' runs to the target train beside the rivals queued before them, but
    no further than their progress allows, `autosync.search.race_horizon`, and more processes than 2 were
    never measured); else 1. The other samplers' answers depend on which process finishes a trial first;
    worker-process backends time their runs on the machine's cores, which parallel trials would share; a
    `--table` replay reads its runs rather than training them, so a helper's start (an interpreter importing
    torch) costs more than it saves; an in-memory storage cannot be shared; and a helper would run the
    caller's script again where its main module is not known to be guarded (`autosync.core.main_module`:
    from Python, pass `n_jobs` under `if __name__ == "__main__":`)."""
    if sampler != RACE or not simulates_here(backend) or not shared_storage(storage) or not reimport_is_safe():
        return 1
    return min(usable_cores(), WIDEST_ROUND)


@dataclass
class TuneRequest:
    """Everything one `autosync tune` invocation asks for: `TuneOptions` resolved on a job and a space
    (`from_options`, as the API builds it). Its defaults are the options' (`autosync.search.tune_options`)."""

    job: JobSpec
    space: SearchSpace
    n_trials: int | None = _default("n_trials")  # None: DEFAULT_N_TRIALS, once the race has refused a given one
    timeout: float | None = _default("timeout")
    storage: str = DEFAULT_STORAGE  # --storage, resolved
    study: str | None = _default("study")
    adopt_study: bool = _default("adopt_study")  # --study may name a study made for another job
    sampler: str = _default("sampler")  # resolved on the space (`samplers.sampler_for`)
    seed: int = _default("seed")
    n_jobs: int | None = _default("n_jobs")  # None: `default_n_jobs`, once the sampler is resolved
    refresh: bool = _default("refresh")
    settings: ObjectiveSettings = ObjectiveSettings()
    verify_top: int = _default("verify_top")  # re-run the K best feasible candidates and BSP on verify_backend
    verify_backend: "BackendChoice | None" = None  # where the verification runs (processes, virtual or real clock)
    transfer: bool = _default("transfer")  # a new study starts from the winners of the nearest tuned jobs
    patience: int | None = _default("patience")  # stop once N trials in a row found nothing faster
    race_settings: str | None = _default("race_settings")  # --sampler race: its settings file (None: shipped)
    budget: float | None = _default("budget")  # --sampler race: its cost cap in BSP trainings (None: no cap)

    def __post_init__(self) -> None:
        self.sampler = sampler_for(self.sampler, self.space)  # "auto": the search this space is shipped for
        # the sampler checked against the space and the objective (grid on a continuous space, gp on two
        # objectives), so that a refusal comes before the storage exists; the search builds it (`tune.load_study`)
        check_sampler(self.sampler, self.space, self.settings.multi_objective)
        self._refuse_for_the_race()
        if self.n_trials is None:
            self.n_trials = DEFAULT_N_TRIALS
        if self.n_jobs is None:
            self.n_jobs = default_n_jobs(self.sampler, self.settings.backend, self.storage)
        else:  # the processes running trials are this machine's
            self.n_jobs = local_processes(self.n_jobs)
        if self.sampler == RACE:  # its settings file read once here too: a bad one is refused before the storage,
            # as is one whose labels name no point on this job's workers
            n = self.job.cluster.n_workers
            portfolio_members(race_settings(self.race_settings), labelled_points(n),
                              f"{self.race_settings or RACE_SETTINGS} on n_workers={n}: ")

    def _refuse_for_the_race(self) -> None:
        """The options the race does not take, refused in one line once the sampler is resolved on the space
        (`--sampler auto` is the race on the policy space): it compares its candidates on two seeds and checks
        its finalists' final metric itself, and runs to its answer."""
        if self.sampler != RACE:
            for name, value in (("--race-settings", self.race_settings), ("--budget", self.budget)):
                if value is not None:
                    raise UserError(f"{name} is read by the race only, but --sampler resolved to {self.sampler} on "
                                    f"--space {self.space.name}")
            return
        race = f"the race (--sampler race, the default on --space {self.space.name})"
        if self.verify_top or self.settings.multi_objective:
            raise UserError(f"{race} compares its candidates on two seeds and checks its finalists' final metric "
                            "itself: it takes --objective time and no --verify-top (--sampler tpe takes them)")
        if self.n_trials is not None:
            raise UserError(f"{race} runs to its answer: it takes no --n-trials (--budget caps its cost in BSP "
                            f"trainings; --sampler tpe takes --n-trials), but got --n-trials {self.n_trials}")
        if self.timeout is not None:
            raise UserError(f"{race} runs to its answer (Ctrl-C stops it, and the same command resumes it): it "
                            f"takes no --timeout (--sampler tpe takes one), but got --timeout {self.timeout:g}")
        settings = self.settings
        unread = [(f"--repeats {settings.repeats}", settings.repeats != 1, "runs each candidate on two seeds"),
                  (f"--constraint-at {settings.constraint_at}", settings.constraint_at != BUDGET,
                   "holds the final metric at the end of the budget"),
                  (f"--patience {self.patience}", self.patience is not None, "runs to its answer"),
                  ("--no-transfer", not self.transfer, "starts from its fitted portfolio, not from tuned neighbours")]
        for given, refused, why in unread:
            if refused:
                raise UserError(f"{race} does not read {given}: it {why} (--sampler tpe reads it)")

    @classmethod
    def from_options(cls, job: JobSpec, options: TuneOptions, space: SearchSpace | None = None) -> "TuneRequest":
        """The request `options` make on `job` (their space loaded for its workers unless `space` is given):
        with verify_top the search is simulated and its candidates verified on the options' backend."""
        opts = options
        choice = opts.choice()
        real = None if choice.backend == "simulator" else choice
        simulated = None if opts.table is None else BackendChoice(table=opts.table)  # the search's simulator runs
        if space is None:
            space = load_space(resolve_space_path(opts.space, DEFAULT_TUNE_SPACE), job.cluster.n_workers)
        return cls(
            job=job, space=space, n_trials=opts.n_trials, timeout=opts.timeout,
            storage=opts.storage or DEFAULT_STORAGE, study=opts.study, adopt_study=opts.adopt_study,
            sampler=opts.sampler, seed=opts.seed, n_jobs=opts.n_jobs, refresh=opts.refresh,
            settings=ObjectiveSettings(repeats=opts.repeats, tolerance=opts.tolerance,
                                       multi_objective=opts.objective != "time", constraint_at=opts.constraint_at,
                                       backend=simulated if opts.verify_top or real is None else real),
            # verify_top: search simulated
            verify_top=opts.verify_top, verify_backend=real if opts.verify_top else None,
            transfer=opts.transfer,
            patience=opts.patience, race_settings=opts.race_settings, budget=opts.budget)

    @property
    def study_name(self) -> str:
        """The study the request tunes in: `--study`, else the cache key of its job, space, backend and
        constraint (`autosync.search.study.cache.study_name`)."""
        return self.study or study_name(self.job, self.space, self.settings.backend, self.settings.constraint_at)

    @property
    def directions(self) -> list[str]:
        """Its study's objective directions: the time to target, and with --objective time,metric the final
        metric too."""
        if not self.settings.multi_objective:
            return ["minimize"]
        return ["minimize", "maximize" if self.job.target.metric == "test_accuracy" else "minimize"]

    @property
    def metric_names(self) -> list[str]:
        """The names of its study's objectives (for optuna-dashboard)."""
        names = ["time to target (virtual s)"]
        return names + [f"final {self.job.target.metric}"] if self.settings.multi_objective else names

    def describe(self, study: "optuna.Study") -> None:
        """Store on `study` what it is about, writing only what changed: its objectives' names (for
        optuna-dashboard), the job, space and execution (for anyone reading the storage, and the siblings and
        ownership checks), the job's workload key and cluster features (where other jobs look for neighbours)."""
        job = self.job
        if study.metric_names != self.metric_names:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # set_metric_names is marked experimental
                study.set_metric_names(self.metric_names)
        describe_study(study, job.name, job.fingerprint(), self.space.name,
                       f"{job.target.metric} {job.target.threshold}", job.cluster.n_workers,
                       execution_name(self.settings.backend))
        describe_job(study, job)
