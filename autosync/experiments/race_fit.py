"""The race (`autosync.race`) run on the table, its settings fitted there, and the fit judged
leave-one-family-out.

`race` runs the race's procedure on one job with every run read from the table (`portfolio_fit.JobTimes`):
a run to the target is stopped at its horizon as a live one is (it pays what its cell trained, to the target,
to where it diverged or to the budget's end, at most the horizon, and is eliminated past it), a run to the
end of the budget continues from the run to the target on the same seed that stopped at the target (it pays
the rest of its cell's length; one stopped at its horizon is trained again from the start), a run to the target
that ended before its horizon without reaching it is its run to the end of the budget too, and BSP's reference
runs are the race's own. Its cost is in BSP trainings (one BSP run to the end of
the budget); given a cap in them (`race(budget=...)`, as `tune --budget`), the race is told that cost as it
goes and stops exploring once it is spent. It answers and costs as the tune replayed on the table does
(benchmarks/race_rounds.md compares the two on the committed jobs: the same on all), but for two cases the
shipped race does not meet there: a run that meets the target only at the budget's last evaluation (a miss
here, reached in the tune), and a Sync-Switch candidate continued from a switch point's prefix, another's or
its own kept by a run of it stopped at its horizon and asked again (charged in full here).

`fit` chooses the race's settings on training jobs by cross-validation: the jobs are split into folds, one
per family (one per job where they are of one family; a single job is fitted on itself); for each fold the
greedy portfolio (`portfolio_fit.greedy_portfolio`) is fitted on the other folds' jobs, and the race runs on
the fold's jobs with each portfolio size in `SIZES` (the greedy portfolio's first members: it grows one at a
time) and each margin in `MARGINS`. A setting's loss is the mean over every job of the log of its answer's
held-out time over the grid's choice's, its cost the median BSP trainings. Of the settings whose median cost
is within `COST_GOAL`, the one with the lowest loss; where none is (the cost goal then reports as missed), the
cheapest whose loss is within one standard error of the lowest (the one-standard-error rule: Breiman et al.,
CART, 1984, ch. 3; Hastie, Tibshirani and Friedman, The Elements of Statistical Learning, sec. 7.10): a larger
portfolio or a wider margin costs more and is taken only where it answers better by more than the noise of
the estimate. The portfolio of the chosen size is then fitted on every training job. `autosync fit` writes
the result as autosync/data/race.yaml (`settings_text`).

Why cross-validated: the loss of a portfolio on the very jobs it was fitted on falls as it grows (its members
chosen for those jobs), so choosing by it took the largest size offered. Leave-one-family-out on the 64 table
jobs, choosing among sizes 4-20 and margins 1.1-6 by the training jobs' own loss answered a mean log ratio of
0.1348 to the grid's choice; cross-validated, 0.0778 (benchmarks/lofo_race.md has the figures as shipped).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import yaml

from autosync.core.errors import UserError
from autosync.core.family import load_family
from autosync.core.job import JobSpec
from autosync.experiments import lofo
from autosync.experiments.portfolio_fit import JobTimes, greedy_portfolio, job_times
from autosync.experiments.reference_grid import TOLERANCE, held_out_seeds
from autosync.lattice import BSP_LABEL, BSP_POLICY, lattice_points
from autosync.race import SEARCH_SEEDS, Answer, RaceSettings, horizon, plan, point_key, times_of_full_run
from autosync.table import Table

__all__ = ["COST_GOAL", "MARGINS", "SIZES", "SettingScore", "check_floor", "chosen", "cross_validated",
           "family_jobs", "fit", "fit_families", "jobs_times", "leave_one_family_out", "race", "setting_scores",
           "settings_text"]

COST_GOAL = 3.0  # the search issue's median cost goal, in BSP trainings
# portfolio sizes `fit` tries: a first round of 4 to 20 (a seventh of the 132 labels every table job has)
SIZES = (4, 6, 8, 12, 16, 20)
# elimination margins `fit` tries: from near a tie to six times the leader's time, past which a run is out
MARGINS = (1.1, 1.25, 1.5, 2.0, 3.0, 4.0, 6.0)


def race(table: Table, job: JobTimes, settings: RaceSettings, tolerance: float = TOLERANCE,
         budget: float | None = None, leave_out: frozenset[str] = frozenset()) -> dict[str, Any]:
    """The race on `job` from the table: its answer, the answer's held-out time over the grid's choice's,
    whether it keeps the final-metric rule on the held-out seeds, the cost in BSP trainings, and the rounds a
    `budget` in BSP trainings skipped (`race.plan`; None: no cap, every round runs). `leave_out`: what of
    `race.ABLATABLE` the race runs without (its ablations)."""
    seeds = lofo.search_seeds(job.spec)[:SEARCH_SEEDS]
    finals_on = [lofo.table_finals(table, job.spec, [s]) for s in seeds]
    lengths_on = [lofo.table_lengths(table, job.spec, [s]) for s in seeds]  # a run to the end: as long as its cell

    times: dict[tuple[str, int], float] = {}
    stopped: dict[tuple[str, int], float] = {}
    finals: dict[tuple[str, int], float | None] = {}
    full_times: dict[tuple[str, int], float] = {}
    # by lattice point and seed: two labels of one point are one run, kept for either (`forks.fork_key`)
    trained: dict[tuple[str, int], float] = {}
    seconds = 0.0
    accuracy = job.spec.target.metric == "test_accuracy"
    while not isinstance(step := plan(settings, job.policies, times, stopped, finals, tolerance, accuracy,
                                      budget=budget, spent=_spent(seconds, job, finals), full_times=full_times,
                                      leave_out=leave_out),
                         Answer):
        for run in step.runs:
            key, time, policy = (run.label, run.seed), job.search[run.label][run.seed], job.policies[run.label]
            time_of_full = times_of_full_run(run.label, times, full_times)
            if run.full:
                finals[key] = finals_on[run.seed](policy)[0]
                seconds += max(0.0, lengths_on[run.seed](policy)[0] - trained.get((point_key(policy), run.seed), 0.0))
                time_of_full.setdefault(key, time)
                continue
            limit = horizon(run, settings.margin, times)
            ran = job.trained[run.label][run.seed]
            seconds += min(ran, limit)
            stopped.pop(key, None)  # a run asked again, from the start: what stopped it is out of the race
            # ended before its horizon short of the target (at the budget's end, or where it diverged): it was its
            # run to the end of the budget too, whose final metric the race reads without training it
            # (`race_trials`). A run that reached the target trained up to its time; one that missed it is
            # scored past what it trained (`robustness.penalised_time`: twice the budget)
            whole = ran < limit and time > ran
            final = finals_on[run.seed](policy)[0] if whole else None
            if whole and final is None:  # diverged: out on this seed, never run again (`RaceObjective`)
                stopped[key] = math.inf
            elif time < limit:  # as `RaceObjective` reads it
                times[key] = time
            else:
                stopped[key] = limit
            if whole:
                finals[key] = final
                if final is not None:
                    time_of_full.setdefault(key, time)
            elif ran < limit:  # stopped at the target: a run to the end of the budget continues from there
                trained[(point_key(policy), run.seed)] = ran
    answer = step.label
    keeps = lofo.answer_keeps(table, job.spec, job.policies[answer], held_out_seeds(job.spec))
    return {"answer": answer, "ratio": job.held_out[answer] / job.grid_choice_time, "keeps": keeps,
            "cost": seconds / job.bsp_training, "checked": step.checked, "cut_short": step.cut_short,
            "towards_bsp": step.towards_bsp}


def check_floor(table: Table, job: JobSpec, answer: dict[str, Any]) -> float:
    """The least, in BSP trainings, that a race answering `answer` pays as `race` counts it: its final-metric
    round alone, BSP's runs and the answer's to the end of the budget on both search seeds (the answer's runs
    to the target included), none of the rounds that found it. 0 for BSP, which answers unchecked where it is
    the fastest finalist. On a budget of virtual seconds that BSP's runs fill, any other answer costs at least
    4: the search issue's cost goal of 3 is below it."""
    if point_key(answer) == point_key(BSP_POLICY):
        return 0.0
    lengths = lofo.table_lengths(table, job, lofo.search_seeds(job)[:SEARCH_SEEDS])
    bsp = lengths(BSP_POLICY)  # the unit: BSP's run on the job's own seed (`portfolio_fit.job_times`)
    return (sum(bsp) + sum(lengths(answer))) / bsp[0]


def _spent(seconds: float, job: JobTimes, finals: dict[tuple[str, int], float | None]) -> float | None:
    """The race's cost so far in BSP trainings, once BSP's runs to the end of the budget on both seeds (its
    unit, the first round under a budget) are done: None before, as `race.plan` takes it."""
    done = all((BSP_LABEL, s) in finals for s in range(SEARCH_SEEDS))
    return seconds / job.bsp_training if done else None


def fit(table: Table, jobs: list[JobTimes], budget: float | None = None,
        leave_out: frozenset[str] = frozenset()) -> RaceSettings:
    """The race's settings fitted on `jobs` by cross-validation (see the module's docstring), each race run
    under `budget` (BSP trainings, as `tune --budget`; None: none) and without what `leave_out` names
    (`race.ABLATABLE`)."""
    folds = _folds(jobs)
    best = chosen(setting_scores(cross_validated(table, jobs, budget, leave_out)))
    return RaceSettings(tuple(greedy_portfolio(jobs, best.size)), best.margin,
                        {"jobs": len(jobs), "families": sorted({j.family for j in jobs}),
                         "cross_validated": {"folds": len(folds), "loss": round(best.loss, 4),
                                             "median_cost": round(best.cost, 4)}})


@dataclass(frozen=True)
class SettingScore:
    """One setting's cross-validated figures: mean log ratio to the grid's choice, its standard error, median
    cost in BSP trainings."""

    loss: float
    error: float
    cost: float
    size: int
    margin: float


def chosen(scored: list[SettingScore]) -> SettingScore:
    """The setting `fit` takes: the lowest loss among those whose median cost is within `COST_GOAL`; where none
    is, the one-standard-error rule, the cheapest setting whose loss is within one standard error of the
    lowest. Ties go to the smaller portfolio, then the narrower margin."""
    within = [s for s in scored if s.cost <= COST_GOAL]
    if within:
        return min(within, key=lambda s: (s.loss, s.cost, s.size, s.margin))
    lowest = min(scored, key=lambda s: (s.loss, s.cost, s.size, s.margin))
    return min((s for s in scored if s.loss <= lowest.loss + lowest.error),
               key=lambda s: (s.cost, s.loss, s.size, s.margin))


def _folds(jobs: list[JobTimes]) -> list[list[JobTimes]]:
    """The cross-validation's folds: one per family, or one per job where the jobs are of one family (a single
    job is its own training job: nothing to hold out)."""
    families = sorted({j.family for j in jobs})
    if len(families) > 1:
        return [[j for j in jobs if j.family == family] for family in families]
    return [[j] for j in jobs]


def setting_scores(rows: dict[tuple[int, float], list[dict[str, Any]]]) -> list[SettingScore]:
    """Each setting's cross-validated figures (`SettingScore`) from its races (`cross_validated`)."""
    scored = []
    for (size, margin), raced in rows.items():
        logs = [math.log(row["ratio"]) for row in raced]
        error = statistics.stdev(logs) / math.sqrt(len(logs)) if len(logs) > 1 else 0.0
        scored.append(SettingScore(statistics.fmean(logs), error, statistics.median(row["cost"] for row in raced),
                                   size, margin))
    return scored


def cross_validated(table: Table, jobs: list[JobTimes], budget: float | None = None,
                    leave_out: frozenset[str] = frozenset(),
                    portfolio: Callable[[JobTimes, list[JobTimes]], list[str]] | None = None
                    ) -> dict[tuple[int, float], list[dict[str, Any]]]:
    """Each setting's races on every job of `jobs`' folds (`_folds`: a family each), its portfolio fitted on
    the other folds' jobs: the greedy portfolio of the largest size, whose first members are the portfolio of
    each smaller size. `portfolio(job, training_jobs)`: a job's own members instead
    (benchmarks/bench_knn_portfolio.py's nearest jobs'), of the largest size too."""
    rows: dict[tuple[int, float], list[dict[str, Any]]] = {}
    folds = _folds(jobs)
    for fold in folds:
        rest = [j for other in folds if other is not fold for j in other] or fold  # one job: fitted on itself
        shared = greedy_portfolio(rest, max(SIZES)) if portfolio is None else None
        for job in fold:
            members = shared if shared is not None else portfolio(job, rest)
            for size in SIZES:
                for margin in MARGINS:
                    rows.setdefault((size, margin), []).append(
                        race(table, job, RaceSettings(tuple(members[:size]), margin), budget=budget,
                             leave_out=leave_out))
    return rows


def leave_one_family_out(table: Table, jobs: list[JobTimes],
                         leave_out: frozenset[str] = frozenset()) -> list[dict[str, Any]]:
    """For each family: the race fitted on the other families, run on this one's (fitted and run without
    what `leave_out` names, `race.ABLATABLE`)."""
    rows = []
    for family in sorted({j.family for j in jobs}):
        settings = fit(table, [j for j in jobs if j.family != family], leave_out=leave_out)
        for job in (j for j in jobs if j.family == family):
            rows.append({"family": family, "job": job.job, "size": len(settings.portfolio),
                         "margin": settings.margin, **race(table, job, settings, leave_out=leave_out)})
    return rows


def fit_families(files: "Sequence[str | Path]", table_dir: str | Path, count: int,
                 read_only: bool = False) -> tuple[RaceSettings, int]:
    """The race's settings fitted on jobs 0..count-1 of each family file in `files`, their runs read from the
    table in `table_dir` (`fit`; `read_only`: a run it lacks is refused, not trained into it), and how many
    jobs that was."""
    if not str(table_dir).strip():
        raise UserError("--table: an empty path, but the table's directory is needed (build one with `autosync table`)")
    if Path(table_dir).exists() and not Path(table_dir).is_dir():
        raise UserError(f"--table {table_dir}: a file, but the table is a directory (build one with `autosync table`)")
    if not Path(table_dir).is_dir():
        raise UserError(f"--table {table_dir}: no such table directory (build it with `autosync table`)")
    table = Table(table_dir, read_only=read_only)
    jobs = family_jobs(table, files, count)
    return fit(table, jobs), len(jobs)


def family_jobs(table: Table, files: "Sequence[str | Path]", count: int) -> list[JobTimes]:
    """Every candidate's times on jobs 0..count-1 of each family file in `files` (`jobs_times`): what `fit`
    fits on."""
    families, seen = [], {}
    for path in files:  # each read and checked before any run is read
        family = load_family(path)
        if family.name in seen:  # its jobs twice (or two families as one): a held-out job in its training folds
            raise UserError(f"{path}: family {family.name!r} is given already ({seen[family.name]}): the fit holds "
                            "each family out in turn, so give each family once, under a name of its own")
        seen[family.name] = path
        families.append(family)
    return [times for family in families for times in jobs_times(table, family.name, family.jobs(count))]


def jobs_times(table: Table, family: str, jobs: "Sequence[JobSpec]") -> list[JobTimes]:
    """Every candidate's times on each of `jobs` (of `family`), read from `table`, with the grid's choice
    (`lofo.score_job`)."""
    out = []
    for job in jobs:
        grid_choice = lofo.score_job(table, family, job, lattice_points, [])
        out.append(job_times(table, family, job, grid_choice.grid_choice_time))
    return out


def settings_text(settings: RaceSettings, command: str) -> str:
    """`settings` as autosync/data/race.yaml holds them, with the command that fitted them."""
    return (f"# The race's settings (`autosync tune --sampler race`), fitted on the table by:\n#   {command}\n"
            "# Do not edit by hand: the tests run that command with --check against this file.\n"
            + yaml.safe_dump(settings.to_dict(), sort_keys=False))
