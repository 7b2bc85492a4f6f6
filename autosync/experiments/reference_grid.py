"""The broad reference: a grid over every policy family, scored on seeds no search saw.

A tuned answer is judged against the best of this grid on the same job, not against another search: a
reference search with the same sampler and seed shares the tune's blind spots. The grid is the lattice (`autosync.lattice.lattice_points`): every policy family, continuous dimensions thinned,
static k exhaustive. Each run stops at the target and is cached
as a robustness cell (`autosync.experiments.robustness.run_cell`, cells.jsonl), so a grid computed once is read back.

Scoring seeds are held out: a tune searches on the job's seed and the next ones (`trial_seeds`, and the
one after them for a second seed); the grid and the answer are scored on `job.seed + 100`, `+ 101`, ...
(`held_out_seeds`), far from both.

The reference is judged by the rule the tune answers by: the fastest policy to the target whose final
metric at the end of the budget keeps BSP's by the race's test on paired seeds (`autosync.race.keeps_paired`:
the mean difference over the seeds both ran within the tune's `--tolerance`, 0.01 by default, or within BSP's
own spread between those seeds where that is wider), over the held-out seeds (`feasible_best`). Only the grid's fastest
policies are trained to the full budget for it, in order, until one keeps the constraint (`full_cell_key`:
cached beside the runs to the target); the fastest policy on time alone is kept too (`Judged.fastest`).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable

from autosync.catalog import policy_from_dict
from autosync.core import strict_json
from autosync.core.job import JobSpec
from autosync.experiments.robustness import CELLS_FILE, penalised_time
from autosync.experiments.run_records import cell_key
from autosync.lattice import BSP_POLICY, family_of, lattice_points
from autosync.policy_score import RunFailed, evaluate
from autosync.race import keeps_paired
from autosync.table.build import HELD_OUT_OFFSET, HELD_OUT_SEEDS

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["TOLERANCE", "Judged", "ReferenceGrid", "Scored", "answer_cells",
           "best_per_family", "cached_full_budget_finals",
           "feasible_best", "full_budget_finals", "full_cell_key", "grid_scores", "grid_twin", "held_out_seeds",
           "judge", "keeps_constraint", "run_full_cell", "score", "tune_seeds"]

# scoring seeds start HELD_OUT_OFFSET past the job's seed (room for 100 search seeds), HELD_OUT_SEEDS
# of them unless told otherwise: the seeds the table holds out too (`autosync.table.build`)
TOLERANCE = 0.01  # the final-metric constraint's tolerance against BSP's: the tune's default (`--tolerance`)
Finals = Callable[[dict[str, Any]], list["float | None"]]  # a policy -> its final metric per seed (None: failed)


def held_out_seeds(job: JobSpec, count: int = HELD_OUT_SEEDS, offset: int = HELD_OUT_OFFSET) -> list[int]:
    """The seeds a reference and a tuned answer are scored on: `job.seed + offset`, ... (`count` of them)."""
    if count < 1:
        raise ValueError(f"count must be >= 1, but got count={count}")
    if offset < 1:
        raise ValueError(f"offset must be >= 1 (offset 0 is the seed every search trains on), but got offset={offset}")
    return [job.seed + offset + i for i in range(count)]


def tune_seeds(job: JobSpec, repeats: int = 1) -> list[int]:
    """The seeds a tune with these options trains on: its trials' (`trial_seeds`: the job's seed and the next
    repeats - 1) and the next one (the race's second seed)."""
    return [job.seed + i for i in range(repeats + 1)]


# --------------------------------------------------------------------------- running and scoring

@dataclass
class ReferenceGrid:
    """The (job, policy, seed) cells of the broad reference on some jobs and seeds, with any extra policies
    per job (a tuned answer that runs like no grid policy), keyed as robustness cells (`cell_key`)."""

    jobs: list[JobSpec]
    seeds: list[int]
    extra: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # job fingerprint -> more policies
    policies: Callable[[int], list[dict[str, Any]]] = lattice_points  # the grid for n workers
    tasks: dict[str, tuple[JobSpec, dict[str, Any], int]] = field(default_factory=dict)  # by cell key

    def __post_init__(self) -> None:
        for job in self.jobs:
            fingerprint = job.fingerprint()
            for policy in self.policies(job.cluster.n_workers) + self.extra.get(fingerprint, []):
                for seed in self.seeds:
                    self.tasks.setdefault(cell_key(fingerprint, policy, seed), (job, policy, seed))

    def finished(self, cells: dict[str, dict[str, Any]]) -> int:
        """How many of the grid's cells `cells` already holds."""
        return len(self.tasks.keys() & cells.keys())


@dataclass(frozen=True)
class Scored:
    """A policy's time on a job over the scoring seeds: the mean, a miss counting as twice the budget."""

    policy: dict[str, Any]
    time: float
    missed: list[int]  # the seeds whose run missed the target (or failed)
    times: list[float]  # per seed, penalised


def score(job: JobSpec, policy: dict[str, Any], cells: dict[str, dict[str, Any]], seeds: Iterable[int]) -> Scored:
    """`policy`'s mean penalised time over `seeds`, from its cells (a KeyError when one is not run yet)."""
    seeds = list(seeds)
    records = [cells[cell_key(job.fingerprint(), policy, s)] for s in seeds]
    times = [penalised_time(r, job) for r in records]
    missed = [s for s, r in zip(seeds, records) if r.get("time_to_target") is None]
    return Scored(policy, statistics.fmean(times), missed, times)


def grid_scores(job: JobSpec, cells: dict[str, dict[str, Any]], seeds: Iterable[int],
                policies: Callable[[int], list[dict[str, Any]]] = lattice_points) -> list[Scored]:
    """Every grid policy of `job` (`policies` for its n) scored over `seeds`, fastest first."""
    seeds = list(seeds)
    return sorted((score(job, p, cells, seeds) for p in policies(job.cluster.n_workers)), key=lambda s: s.time)


def best_per_family(scores: list[Scored]) -> dict[str, Scored]:
    """The fastest scored policy of each family present in `scores`."""
    best: dict[str, Scored] = {}
    for s in scores:
        family = family_of(s.policy)
        if family not in best or s.time < best[family].time:
            best[family] = s
    return best


def grid_twin(job: JobSpec, policy: dict[str, Any],
              policies: Callable[[int], list[dict[str, Any]]] = lattice_points) -> dict[str, Any] | None:
    """The grid policy that runs exactly like `policy` on `job` (the same canonical form), or None."""
    n, optimizer = job.cluster.n_workers, job.workload.optimizer

    def canonical(p: dict[str, Any]) -> str:
        return policy_from_dict(p).canonical(n, optimizer).to_json()

    wanted = canonical(policy)
    return next((p for p in policies(n) if canonical(p) == wanted), None)


@dataclass(frozen=True)
class Judged:
    """A tuned answer against the reference grid on one job, both over the same held-out seeds."""

    job: str
    answer: Scored  # the answer's own policy, with its held-out time and missed seeds
    ran_as: dict[str, Any]  # the policy whose cells scored it: its grid twin, or the answer itself
    best: Scored  # the grid's fastest policy that keeps the final-metric constraint (the fastest, without one)
    families: dict[str, Scored]  # the fastest of each family
    fastest: Scored | None = None  # the grid's fastest policy on time alone, whatever its final metric
    answer_keeps: bool | None = None  # whether the answer keeps the constraint on the held-out seeds (None: not judged)

    @property
    def ratio(self) -> float:
        """The answer's held-out time over the grid best's (1.0: as fast as the best of every family)."""
        return self.answer.time / self.best.time


def answer_cells(job: JobSpec, answer: dict[str, Any],
                 policies: Callable[[int], list[dict[str, Any]]] = lattice_points) -> dict[str, Any]:
    """The policy whose cells score `answer` on `job`: the grid policy that runs like it, else itself (then
    its cells are trained beside the grid's: `ReferenceGrid.extra`)."""
    return grid_twin(job, answer, policies) or answer


def judge(job: JobSpec, answer: dict[str, Any], cells: dict[str, dict[str, Any]], seeds: Iterable[int],
          policies: Callable[[int], list[dict[str, Any]]] = lattice_points,
          finals: "Finals | None" = None, tolerance: float = TOLERANCE) -> Judged:
    """`answer` (a tuned policy) against the best of the grid on `job`, both scored on `seeds` from `cells`
    (run first: `ReferenceGrid` with the answer in `extra` when it has no grid twin). With `finals` (a
    policy's final metric at full budget on each of `seeds`, None where a run failed: `full_budget_finals`),
    the grid's best is the fastest that keeps the constraint (`feasible_best`), and the answer is judged
    by it too."""
    seeds = list(seeds)
    ran_as = answer_cells(job, answer, policies)
    scored = score(job, ran_as, cells, seeds)
    scores = grid_scores(job, cells, seeds, policies)
    best, keeps = scores[0], None
    if finals is not None:
        best = feasible_best(job, scores, finals, tolerance)
        keeps = keeps_constraint(job, finals(ran_as), finals(BSP_POLICY), tolerance)
    return Judged(job.name, Scored(answer, scored.time, scored.missed, scored.times), ran_as, best,
                  best_per_family(scores), scores[0], keeps)




def keeps_constraint(job: JobSpec, finals: list[float | None], bsp_finals: list[float | None],
                     tolerance: float = TOLERANCE) -> bool:
    """Whether final metrics `finals` keep BSP's `bsp_finals` (one each per seed, paired) by the race's test
    (`autosync.race.keeps_paired`, the tune's rule: within `tolerance`, or BSP's own spread between the seeds
    where wider); a failed run (None) does not."""
    return keeps_paired(finals, bsp_finals, tolerance, job.target.metric == "test_accuracy")


def feasible_best(job: JobSpec, scores: list[Scored], finals: "Finals", tolerance: float = TOLERANCE) -> Scored:
    """The fastest of `scores` (fastest first) whose final metric at full budget keeps the constraint against
    BSP's (`finals(policy)`: one per scoring seed, trained on demand: only the policies ahead of the first
    that keeps it are asked); BSP keeps it by definition, so the walk ends there at the latest."""
    bsp_finals = finals(BSP_POLICY)
    for s in scores:
        if s.missed:
            continue  # a policy that missed a seed is scored at twice the budget: never ahead of BSP's feasible time
        if keeps_constraint(job, finals(s.policy), bsp_finals, tolerance):
            return s
    return scores[0]


def full_cell_key(fingerprint: str, policy: dict[str, Any], seed: int) -> str:
    """The cache key of `policy`'s run to the full budget on `seed` (its final metric: the constraint's)."""
    return cell_key(fingerprint, policy, seed) + "|full"


def run_full_cell(job: JobSpec, policy: dict[str, Any], seed: int) -> dict[str, Any]:
    """One run of `policy` to the end of the budget on `seed`, as a tune's full-budget check trains it
    (`autosync.policy_score.evaluate`): its final target metric (None where the run failed or diverged)."""
    record = {"key": full_cell_key(job.fingerprint(), policy, seed), "job": job.name, "policy": policy, "seed": seed}
    try:
        run = evaluate(job, policy, [seed])
    except RunFailed as exc:
        return {**record, "final_metric": None, "time_to_target": None, "error": str(exc)}
    return {**record, "final_metric": run["final_metric"], "time_to_target": run["time_to_target"]
            if run.get("reached") else None}


def cached_full_budget_finals(job: JobSpec, seeds: Iterable[int], cells: dict[str, dict[str, Any]],
                              grid_dir: "Path") -> "Finals":
    """`full_budget_finals` whose runs are appended to the grid's cache (`grid_dir`/cells.jsonl) as they finish:
    a re-run, or the other benchmark on the same cache, trains none of them again."""
    def run(job: JobSpec, policy: dict[str, Any], seed: int) -> dict[str, Any]:
        record = run_full_cell(job, policy, seed)
        with (grid_dir / CELLS_FILE).open("a") as fh:
            fh.write(strict_json.dumps(record) + "\n")
        return record

    return full_budget_finals(job, seeds, cells, run)


def full_budget_finals(job: JobSpec, seeds: Iterable[int], cells: dict[str, dict[str, Any]],
                      run: "Callable[[JobSpec, dict[str, Any], int], dict[str, Any]]" = run_full_cell,
                       ) -> "Finals":
    """A policy's final metric at full budget on each of `seeds` (None where a run failed), read from `cells`
    (`full_cell_key`) or trained with `run` and added to `cells` (the caller persists them)."""
    seeds = list(seeds)

    def finals(policy: dict[str, Any]) -> list[float | None]:
        values = []
        for seed in seeds:
            key = full_cell_key(job.fingerprint(), policy, seed)
            if key not in cells:
                cells[key] = run(job, policy, seed)
            values.append(cells[key].get("final_metric"))
        return values

    return finals
