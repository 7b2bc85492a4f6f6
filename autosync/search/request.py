"""What one `autosync tune` invocation asks for (`TuneRequest`): the job, the space, the budget and how the
search runs. Its own module so that the search's strategies (`switch_point`) name it without importing the
driver (`tune`) that imports them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from autosync.core.job import JobSpec
from autosync.search.objective import ObjectiveSettings
from autosync.search.space import SearchSpace
from autosync.search.study.storage import DEFAULT_STORAGE

if TYPE_CHECKING:
    from autosync.engine.backends import BackendChoice


@dataclass
class TuneRequest:
    """Everything one `autosync tune` invocation asks for."""

    job: JobSpec
    space: SearchSpace
    n_trials: int = 20
    timeout: float | None = None
    storage: str = DEFAULT_STORAGE
    study: str | None = None
    adopt_study: bool = False  # --study may name a study made for another job (another fingerprint)
    sampler: str = "auto"  # resolved on the space (`samplers.sampler_for`): the portfolio search where it lists one
    seed: int = 0
    n_jobs: int = 1
    refresh: bool = False
    settings: ObjectiveSettings = ObjectiveSettings()
    binary_runs_per_candidate: int = 3  # Sync-Switch binary search: R (recorded as R seeds per trial)
    verify_top: int = 0  # re-run the K best feasible candidates and BSP on verify_backend after the search
    verify_backend: "BackendChoice | None" = None  # where the verification runs (processes, virtual or real clock)
    confirm_top: int = 0  # re-run the K best candidates (and the siblings' winners) on confirm_seeds more seeds
    confirm_seeds: int = 2
    transfer: bool = True  # a new study starts from the winners of the nearest tuned jobs like this one
    prior: bool = False  # with transfer, TPE also reads their trials as a prior (`autosync.search.strategies.prior`)
    patience: int | None = None  # stop once N trials in a row found nothing faster (0: the whole budget; None: the space's)

    def __post_init__(self) -> None:
        from autosync.search.strategies.samplers import sampler_for

        self.sampler = sampler_for(self.sampler, self.space)  # "auto": the search this space is shipped for
