"""`autosync tune`'s options, declared once: the command line's flags, the API's keywords and the search's
defaults (`autosync.search.request.TuneRequest`, `ObjectiveSettings`) all come from `TuneOptions`, and so do
the rules between its fields, checked in one place (`__post_init__`) however the options are built.

Declared in the search layer, below the command line, so that the search reads its defaults from here
rather than keeping copies; `autosync.options` lists it with the other commands' options.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional

from autosync.core.declare import Url, option
from autosync.core.errors import UserError
from autosync.core.limits import MAX_SEED
from autosync.engine.backends import ExecutionOptions
from autosync.search.study.records import BSP_TARGET, BUDGET

__all__ = ["AUTO", "DEFAULT_N_TRIALS", "DEFAULT_TUNE_SPACE", "MIN_BUDGET", "RACE", "SAMPLERS", "SWITCH_POINT_SAMPLERS",
           "TuneOptions"]

SAMPLERS = ("race", "tpe", "gp", "random", "grid", "binary", "ladder")  # --sampler's choices besides AUTO
AUTO = "auto"  # the race on the policy space, else TPE (`samplers.sampler_for`)
SWITCH_POINT_SAMPLERS = ("binary", "ladder")  # strategies that run candidates of their own choosing
RACE = "race"  # the race on common seeds (`autosync.race`): runs candidates of its own choosing too
# --budget's least value, in BSP trainings: the race's first round under a budget is BSP's full run on each of
# its two search seeds (`autosync.race.SEARCH_SEEDS`: the final-metric rule's reference and the budget's unit),
# so a smaller cap could not be kept (the race's module is not imported here: it loads the lattice, 0.3 s of --help)
MIN_BUDGET = 2.0
# --n-trials when it is not given (the race takes none: it runs to its answer, `TuneRequest._refuse_for_the_race`)
DEFAULT_N_TRIALS = 20

# `autosync tune` answers "which policy" unless told otherwise, by the race on common seeds (`autosync.race`); its
# cost and wall time on the default job are benchmarks/README.md's (bench_race, bench_default_tune).
DEFAULT_TUNE_SPACE = "policy"


@dataclass(frozen=True, kw_only=True)
class TuneOptions(ExecutionOptions):
    """`autosync tune`: an Optuna search of a job's policy, or the cached answer of a recurring job."""

    space: str = option(DEFAULT_TUNE_SPACE, "Search space: a YAML file or a shipped name (policy: which policy, "
                        "by the race on common seeds; static_k; switch_point, batch_split, composed).")
    n_trials: Optional[int] = option(None, f"Trial budget, global across processes (default: {DEFAULT_N_TRIALS}; the "
                                     "race takes none: it runs to its answer, and --budget caps its cost).", ge=1)
    timeout: Optional[float] = option(None, "Stop the search after S seconds: no trial starts after it, and a "
                                      "trial still training stops at its next evaluation (not counted; the same "
                                      "command resumes it).", ge=0.0)
    storage: Optional[Url] = option(None, "SQLAlchemy URL of the study storage "
                                    "(default: sqlite:///results/autosync-studies.db).")
    study: Optional[str] = option(None, "Study name (default: <fingerprint>-<space>).")
    adopt_study: bool = option(False, "Let --study name a study made for another job (another fingerprint): its "
                               "trials and cached answer then stand for this job.")
    sampler: str = option("auto", "auto (race on the policy space, else tpe) | race (the lattice of every policy "
                          "raced on common seeds: a fitted portfolio, then halving, a local step and the "
                          "final-metric rule on the finalists; --space policy only, no --n-trials) | tpe | "
                          "gp | random | grid | binary (Sync-Switch) | ladder (cheapest switch point first).")
    n_jobs: Optional[int] = option(None, "Processes running trials on this machine, at most one per usable core "
                                   "(default: one per core for the race on the simulator, whose answer and cost "
                                   "do not depend on it, up to "
                                   "the 4 runs its widest round has; else 1).", ge=1)
    seed: int = option(0, "Sampler seed (tpe, gp, random; the race has none: its runs are on the job's seed and "
                       "the next, and its answer is the same for every --seed).", ge=0, le=MAX_SEED)
    repeats: int = option(1, "Seeds per trial (the objective is noisy; the race runs two and takes 1 only).", ge=1)
    tolerance: float = option(0.01, "Allowed final-metric shortfall against BSP (the constraint).", ge=0.0)
    objective: str = option("time", "time | time,metric (Pareto front).")
    refresh: bool = option(False, "Search again, warm-started from the cached best.")
    verify_top: int = option(0, "After a simulated search, re-run the K best feasible candidates and BSP "
                             "--repeats times on --backend and compare (0: off).", ge=0)
    transfer: bool = option(True, "A new study starts from the winners of the nearest tuned jobs in the storage "
                            "with this job's workload and target (--no-transfer: from nothing; the race starts from its portfolio and "
                            "takes no --no-transfer).")
    patience: Optional[int] = option(None, "Stop the search once N trials in a row found nothing faster; the rest of "
                                     "the budget is not run (0: run the whole budget; default: the space's "
                                     "`patience`, 5 for static_k, else 0; 0 with --sampler grid; not the race's).", ge=0)

    table: Optional[str] = option(None, "Replay the search's simulator runs from this table directory (built by "
                                  "`autosync table`) instead of training them; a run it lacks is trained and stored "
                                  "there. The same trials and answer as without it.")
    race_settings: Optional[str] = option(None, "With the race (--sampler race, the default on --space policy): its "
                                          "settings file (`autosync fit --out FILE`; default: the settings autosync "
                                          "ships, fitted on the committed table).")
    budget: Optional[float] = option(None, "With the race: the search's cost cap in BSP trainings; BSP's two full "
                                     "runs come first, each later round starts only while the cost is under it, "
                                     "then the final-metric check runs anyway (so the cost can pass it by that "
                                     "round). At least 2 (BSP's two runs; default: every round runs).")
    constraint_at: str = option(BUDGET, "Where a candidate's final metric must stay within --tolerance of BSP's: "
                                "budget (at the end of the budget, Sync-Switch's rule) | bsp-target (at the time "
                                "BSP reaches the target: neither BSP nor the winner's check trains past it; for "
                                "jobs trained to the target; the race takes budget only).")

    def races(self) -> bool:
        """Whether these options run the race: `--sampler race`, or `auto` on the shipped `policy` space (a space
        file is resolved by the name inside it later, `samplers.sampler_for`: this answers for a shipped name)."""
        return self.sampler == RACE or (self.sampler == AUTO and self.space == DEFAULT_TUNE_SPACE)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.constraint_at not in (BUDGET, BSP_TARGET):
            raise UserError(f"--constraint-at must be {BUDGET} or {BSP_TARGET}, but got {self.constraint_at!r}")
        if self.constraint_at != BUDGET and self.objective != "time":
            raise UserError(f"--constraint-at {self.constraint_at} needs --objective time (a Pareto front compares "
                            f"final metrics at the budget's end), but got --objective {self.objective}")
        if self.constraint_at != BUDGET and self.sampler in SWITCH_POINT_SAMPLERS:
            raise UserError(f"--constraint-at {self.constraint_at} needs a sampler whose trials stop at the target, "
                            f"but --sampler {self.sampler} trains each candidate whole to compare final metrics")

        if self.table is not None and self.backend != "simulator" and not self.verify_top:
            raise UserError(f"--table replays simulator runs: it needs --backend simulator (or --verify-top, whose "
                            f"search is simulated), but got --backend {self.backend}")
        if self.table is not None and (not self.table.strip() or os.path.isfile(self.table)):
            raise UserError(f"--table must be a directory, but got {self.table!r}")
        if self.sampler not in (AUTO, *SAMPLERS):
            raise UserError(f"--sampler must be one of {[AUTO, *SAMPLERS]}, but got {self.sampler!r}")
        if self.objective not in ("time", "time,metric"):
            raise UserError(f"--objective must be time or time,metric, but got {self.objective!r}")
        if self.backend == "distributed" and (self.n_jobs or 1) > 1:
            raise UserError(f"--n-jobs must be 1 with --backend distributed (the group's ranks serve one trial at "
                            f"a time), but got {self.n_jobs}")
        if self.verify_top and self.backend == "simulator":
            raise UserError("--verify-top re-runs the simulated search's best candidates on a real backend: "
                            "it needs --backend processes (with --clock virtual or real)")
        if self.verify_top and self.objective != "time":
            raise UserError("--verify-top compares one objective's rankings: it needs --objective time")
        if self.race_settings is not None and self.sampler not in (AUTO, RACE):
            raise UserError(f"--race-settings is read by --sampler race only, but got --sampler {self.sampler}")
        if self.budget is not None and self.sampler not in (AUTO, RACE):
            raise UserError(f"--budget is read by --sampler race only, but got --sampler {self.sampler}")
        if self.budget is not None and not self.budget >= MIN_BUDGET:
            raise UserError(f"--budget must be >= {MIN_BUDGET:g} BSP trainings (BSP's two full runs, the final-metric "
                            f"rule's reference, are its unit and its first round), but got {self.budget:g}")

