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
here, reached in the tune), and a Sync-Switch candidate continued from another switch point's prefix (charged
in full here).

`fit` chooses the race's settings on training jobs: the greedy portfolio (`portfolio_fit.greedy_portfolio`)
of each size in `SIZES`, each margin in `MARGINS` and each number of finalists in `FINALISTS`; the setting
with the lowest mean log ratio of the answer's held-out time to the grid's choice's among those whose
median cost is within `COST_GOAL` (or, where none is, the lowest ratio among all: the cost goal then
reports as missed). `autosync fit` writes the result as autosync/data/race.yaml (`settings_text`).
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any, Sequence

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

__all__ = ["COST_GOAL", "FINALISTS", "MARGINS", "SIZES", "check_floor", "family_jobs", "fit", "fit_families",
           "jobs_times", "leave_one_family_out", "race", "settings_text"]

COST_GOAL = 3.0  # the search issue's median cost goal, in BSP trainings
SIZES = (4, 6, 8, 12)  # portfolio sizes `fit` tries (a first round of at most a third of a 36-label lattice)
MARGINS = (1.1, 1.25, 1.5, 2.0)  # elimination margins `fit` tries (from near a tie to twice the leader's time)
# finalists `fit` tries: the search issue's "at most the 2-3 finalists" (offering 1 as well was tried: the fit
# on one fold's training families took it, and leave-one-family-out went from a median 1.00 to 1.09)
FINALISTS = (2, 3)


def race(table: Table, job: JobTimes, settings: RaceSettings, tolerance: float = TOLERANCE,
         budget: float | None = None, towards_bsp: bool = True) -> dict[str, Any]:
    """The race on `job` from the table: its answer, the answer's held-out time over the grid's choice's,
    whether it keeps the final-metric rule on the held-out seeds, the cost in BSP trainings, and the rounds a
    `budget` in BSP trainings skipped (`race.plan`; None: no cap, every round runs). `towards_bsp`: False runs
    the race without its round 5 (its ablation)."""
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
                                      towards_bsp=towards_bsp),
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


def fit(table: Table, jobs: list[JobTimes], budget: float | None = None, towards_bsp: bool = True) -> RaceSettings:
    """The race's settings fitted on `jobs` (see the module's docstring), each race run under `budget` (BSP
    trainings, as `tune --budget`; None: none) and, with `towards_bsp` False, without its round 5."""
    scored = []
    for size in SIZES:
        members = tuple(greedy_portfolio(jobs, size))
        for margin in MARGINS:
            for finalists in FINALISTS:
                settings = RaceSettings(members, margin, finalists)
                rows = [race(table, j, settings, budget=budget, towards_bsp=towards_bsp) for j in jobs]
                cost = statistics.median(row["cost"] for row in rows)
                loss = statistics.fmean(math.log(row["ratio"]) for row in rows)
                scored.append((cost > COST_GOAL, loss, cost, size, margin, finalists, settings))
    _, _, cost, *_, best = min(scored, key=lambda s: s[:6])
    return RaceSettings(best.portfolio, best.margin, best.finalists,
                        {"jobs": len(jobs), "families": sorted({j.family for j in jobs}), "median_cost": round(cost, 4)})


def leave_one_family_out(table: Table, jobs: list[JobTimes], towards_bsp: bool = True) -> list[dict[str, Any]]:
    """For each family: the race fitted on the other families, run on this one's (with `towards_bsp` False,
    fitted and run without its round 5)."""
    rows = []
    for family in sorted({j.family for j in jobs}):
        settings = fit(table, [j for j in jobs if j.family != family], towards_bsp=towards_bsp)
        for job in (j for j in jobs if j.family == family):
            rows.append({"family": family, "job": job.job, "size": len(settings.portfolio),
                         "margin": settings.margin, "finalists": settings.finalists,
                         **race(table, job, settings, towards_bsp=towards_bsp)})
    return rows


def fit_families(files: "Sequence[str | Path]", table_dir: str | Path, count: int) -> tuple[RaceSettings, int]:
    """The race's settings fitted on jobs 0..count-1 of each family file in `files`, their runs read from the
    table in `table_dir` (`fit`), and how many jobs that was."""
    if not Path(table_dir).is_dir():
        raise UserError(f"--table {table_dir}: no such table directory (build it with `autosync table`)")
    table = Table(table_dir)
    jobs = family_jobs(table, files, count)
    return fit(table, jobs), len(jobs)


def family_jobs(table: Table, files: "Sequence[str | Path]", count: int) -> list[JobTimes]:
    """Every candidate's times on jobs 0..count-1 of each family file in `files` (`jobs_times`): what `fit`
    fits on."""
    jobs = []
    for path in files:
        family = load_family(path)
        jobs += jobs_times(table, family.name, family.jobs(count))
    return jobs


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
