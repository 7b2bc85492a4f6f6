"""Leave-one-family-out: a search replayed on the table, scored family by family on seeds it never saw.

Each job of each family is scored three ways, all on the table (`autosync.table`), every run read from it
or trained into it once:

- **the grid's choice**: the fastest lattice point over the tune's own search seeds (job.seed and the next)
  whose final metric at the end of the budget keeps BSP's there by the race's paired test
  (`reference_grid.feasible_best`, the tune's rule):
  what the whole grid answers given the seeds the tune has, the honest reference;
- **the held-out best**: the same choice made on the held-out seeds themselves (a winner's-curse reference,
  reported beside the other);
- **the answer**: the tune replayed on the table from each sampler seed (`autosync tune --table`, which
  benchmarks/bench_lofo.py runs), its answer scored on the held-out seeds.

Times are means over seeds with a miss at twice the budget (`robustness.penalised_time`). A search whose
parts are fitted is fitted on the other families before it answers on a family's jobs; a search with
nothing fitted (the baseline) is scored as it is. The pooled figures carry bootstrap intervals over jobs
(`bootstrap`), and the spread over sampler seeds is each job's slowest answer over its fastest.
"""

from __future__ import annotations

import random
import statistics
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterable, TypeVar

from autosync.catalog import policy_from_dict
from autosync.core.job import JobSpec
from autosync.experiments.reference_grid import (BSP_POLICY, Finals, Scored, feasible_best, grid_twin,
                                                 held_out_seeds, keeps_constraint)
from autosync.experiments.robustness import penalised_time
from autosync.table import Table, cell_for
from autosync.table.build import HELD_OUT_SEEDS, SEARCH_SEEDS
from autosync.table.replay import full_budget, to_target

Lattice = Callable[[int], list[dict[str, Any]]]
T = TypeVar("T")


def search_seeds(job: JobSpec) -> list[int]:
    """The seeds a tune searches on (`autosync.table.build.table_seeds`' first ones)."""
    return [job.seed + i for i in range(SEARCH_SEEDS)]


def table_score(table: Table, job: JobSpec, policy: dict[str, Any], seeds: Iterable[int],
                fingerprint: str | None = None) -> Scored:
    """`policy`'s mean penalised time to the target over `seeds`, from its cells stopped at the target
    (`fingerprint`: `job.fingerprint()`, where the caller reads many policies of the job)."""
    seeds = list(seeds)
    policy_ = policy_from_dict(policy)
    fingerprint = fingerprint or job.fingerprint()
    runs = [cell_for(table, to_target(job.model_copy(update={"seed": s})), policy_, fingerprint) for s in seeds]
    times = [penalised_time({"time_to_target": r.scores["time_to_target"] if r.status == "target_reached" else None},
                            job) for r in runs]
    missed = [s for s, r in zip(seeds, runs) if r.status != "target_reached"]
    return Scored(policy, statistics.fmean(times), missed, times)


def table_finals(table: Table, job: JobSpec, seeds: Iterable[int]) -> Finals:
    """A policy's final target metric at the end of the budget on each of `seeds` (None where a run
    diverged), from its full-budget cells: trained only for the policies `feasible_best` asks about."""
    metric = f"final_{job.target.metric}"
    cells = _full_budget_cells(table, job, seeds)

    def finals(policy: dict[str, Any]) -> list[float | None]:
        return [None if run.status == "diverged" else run.scores.get(metric) for run in cells(policy)]

    return finals


def table_lengths(table: Table, job: JobSpec, seeds: Iterable[int]) -> Callable[[dict[str, Any]], list[float]]:
    """A policy's virtual seconds to the end of the budget on each of `seeds`, from its full-budget cells (a
    run that diverged stopped there): what a run to the end of the budget trains."""
    cells = _full_budget_cells(table, job, seeds)

    def lengths(policy: dict[str, Any]) -> list[float]:
        return [float(run.scores["virtual_time"]) for run in cells(policy)]

    return lengths


def _full_budget_cells(table: Table, job: JobSpec, seeds: Iterable[int]) -> Callable[[dict[str, Any]], list[Any]]:
    """A policy's full-budget cells on each of `seeds` (trained into the table where it lacks them)."""
    seeds = list(seeds)
    fingerprint = job.fingerprint()

    def cells(policy: dict[str, Any]) -> list[Any]:
        return [cell_for(table, full_budget(job.model_copy(update={"seed": s})), policy_from_dict(policy),
                         fingerprint) for s in seeds]

    return cells


def _by_time(table: Table, job: JobSpec, lattice: Lattice, seeds: list[int]) -> list[Scored]:
    """Every lattice point scored over `seeds`, fastest first."""
    fingerprint = job.fingerprint()
    return sorted((table_score(table, job, p, seeds, fingerprint) for p in lattice(job.cluster.n_workers)),
                  key=lambda s: s.time)


def choice(table: Table, job: JobSpec, lattice: Lattice, seeds: Iterable[int]) -> Scored:
    """The fastest lattice point over `seeds` that keeps the final-metric rule against BSP there."""
    seeds = list(seeds)
    return feasible_best(job, _by_time(table, job, lattice, seeds), table_finals(table, job, seeds))


def runner_up(table: Table, job: JobSpec, lattice: Lattice, seeds: Iterable[int]) -> Scored | None:
    """The grid's second choice over `seeds`: the fastest lattice point there that keeps the final-metric
    rule, of those slower there than the grid's choice (`choice`; a point as fast runs alike, as LB-BSP runs
    as BSP on equal workers). Scored on the held-out seeds against the grid's choice, it measures how far
    apart the two fastest candidates a search on `seeds` can tell land on seeds it never saw. None where no
    point is slower than the grid's choice."""
    seeds = list(seeds)
    scores, finals = _by_time(table, job, lattice, seeds), table_finals(table, job, seeds)
    first = feasible_best(job, scores, finals)
    slower = [s for s in scores if s.time > first.time]
    return feasible_best(job, slower, finals) if slower else None


def best_fixed(table: Table, jobs: list[JobSpec], grid_choice_times: list[float],
               labelled: Callable[[int], dict[str, dict[str, Any]]]) -> tuple[str, list[float]]:
    """The fixed policy a user would have done best to run on every job of a family, chosen with hindsight:
    of the labels every job's lattice has (`labelled`: label -> point on n workers, as
    `autosync.lattice.labelled_points`), the one whose held-out times over each job's grid's choice
    (`grid_choice_times`, held out too) have the lowest median, then the lowest worst; with those ratios. A
    search that answers worse than it on a family could as well not have searched there (the search issue's
    first table)."""
    points = [labelled(job.cluster.n_workers) for job in jobs]
    best: tuple[tuple[float, float], str, list[float]] | None = None
    for label in sorted(set.intersection(*(set(p) for p in points))):
        ratios = [table_score(table, job, p[label], held_out_seeds(job)).time / grid
                  for job, p, grid in zip(jobs, points, grid_choice_times)]
        key = (statistics.median(ratios), max(ratios))
        if best is None or key < best[0]:
            best = (key, label, ratios)
    if best is None:
        raise ValueError("best_fixed: the jobs' lattices share no label")
    return best[1], best[2]


def answer_keeps(table: Table, job: JobSpec, policy: dict[str, Any], seeds: Iterable[int]) -> bool:
    """Whether `policy`'s final metric at the end of the budget keeps BSP's over `seeds` (the tune's rule,
    judged where the answer is scored, by the same paired test: a fast answer that breaks it is reported, not
    hidden in its time)."""
    finals = table_finals(table, job, seeds)
    return keeps_constraint(job, finals(policy), finals(BSP_POLICY))


@dataclass(frozen=True)
class Answered:
    """What a tune answered on one job from one sampler seed."""

    policy: dict[str, Any]
    cost: float  # search cost in BSP trainings (the cache record's `search_cost_bsp_trainings`)


@dataclass(frozen=True)
class JobResult:
    """One job of a family: its references on the held-out seeds and each sampler seed's answer there."""

    family: str
    job: str
    grid_choice: dict[str, Any]
    grid_choice_time: float  # on the held-out seeds
    held_out_best: dict[str, Any]
    held_out_best_time: float
    bsp_missed: list[int]  # held-out seeds where BSP misses the target
    # per sampler seed: policy, cost, time and missed seeds held out, whether it keeps the final-metric rule there
    answers: list[dict[str, Any]] = field(default_factory=list)

    def ratios(self, against: str = "grid_choice") -> list[float]:
        reference = self.grid_choice_time if against == "grid_choice" else self.held_out_best_time
        return [a["time"] / reference for a in self.answers]

    @property
    def misses(self) -> int:
        """Answers missing the target on a held-out seed where BSP reaches it."""
        return sum(bool(set(a["missed"]) - set(self.bsp_missed)) for a in self.answers)

    @property
    def spread(self) -> float:
        """The slowest answer's held-out time over the fastest's, across sampler seeds."""
        times = [a["time"] for a in self.answers]
        return max(times) / min(times)


def score_job(table: Table, family: str, job: JobSpec, lattice: Lattice, answers: list[Answered],
              held_out: int = HELD_OUT_SEEDS) -> JobResult:
    """`answers` (one per sampler seed) on `job` against the grid's choice and the held-out best."""
    seeds = held_out_seeds(job, held_out)
    picked = choice(table, job, lattice, search_seeds(job))
    best = choice(table, job, lattice, seeds)
    scored = []
    for a in answers:
        ran_as = grid_twin(job, a.policy, lattice) or a.policy
        s = table_score(table, job, ran_as, seeds)
        scored.append({"policy": a.policy, "cost": a.cost, "time": s.time, "missed": s.missed,
                       "keeps": answer_keeps(table, job, ran_as, seeds)})
    return JobResult(family, job.name, picked.policy, table_score(table, job, picked.policy, seeds).time,
                     best.policy, best.time, table_score(table, job, BSP_POLICY, seeds).missed, scored)


def score_again(table: Table, result: JobResult, job: JobSpec, lattice: Lattice) -> JobResult:
    """A recorded result's answers (policy and cost per sampler seed) scored again on `job` by today's rules
    (`score_job`): the grid's choice, the held-out best and the final-metric test, whichever rules scored
    them when they were recorded. Reads the table only: nothing is replayed."""
    answers = [Answered(a["policy"], a["cost"]) for a in result.answers]
    return score_job(table, result.family, job, lattice, answers)


def percentile(values: list[float], q: float) -> float:
    """The `q` quantile (0..1) by linear interpolation between order statistics."""
    ordered = sorted(values)
    at = q * (len(ordered) - 1)
    low = int(at)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (at - low)


def bootstrap(results: list[T], statistic: Callable[[list[T]], float], draws: int = 1000,
              seed: int = 0, level: float = 0.9) -> tuple[float, float]:
    """A percentile bootstrap interval of `statistic` over `results`, drawn with replacement: jobs (each with all
    its sampler seeds), or any per-job values (benchmarks/bench_ablation.py's paired differences)."""
    rng = random.Random(seed)
    values = sorted(statistic([rng.choice(results) for _ in results]) for _ in range(draws))
    return percentile(values, (1 - level) / 2), percentile(values, (1 + level) / 2)


def summary(results: list[JobResult]) -> dict[str, Any]:
    """The pooled figures the search issue's goals read: answer over grid's choice (median, 90th
    percentile, worst, with intervals), over the held-out best, misses, median cost, sampler spread."""
    def ratios(rs: list[JobResult], against: str = "grid_choice") -> list[float]:
        return [r for j in rs for r in j.ratios(against)]

    return {
        "jobs": len(results), "answers": sum(len(j.answers) for j in results),
        "median": statistics.median(ratios(results)),
        "median_interval": bootstrap(results, lambda rs: statistics.median(ratios(rs))),
        "p90": percentile(ratios(results), 0.9),
        "p90_interval": bootstrap(results, lambda rs: percentile(ratios(rs), 0.9)),
        "worst": max(ratios(results)),
        "median_vs_held_out_best": statistics.median(ratios(results, "held_out_best")),
        "misses": sum(j.misses for j in results),
        "breaking_the_rule": sum(a.get("keeps") is False for j in results for a in j.answers),
        "jobs_breaking_the_rule": sum(any(a.get("keeps") is False for a in j.answers) for j in results),
        "median_cost": statistics.median(a["cost"] for j in results for a in j.answers),
        "median_spread": statistics.median(j.spread for j in results),
    }


def as_dict(result: JobResult) -> dict[str, Any]:
    return asdict(result)
