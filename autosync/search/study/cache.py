"""The cache of recurring jobs: a finished study's `cache` user attribute, and reading, listing, clearing it.

The study is named by the job's fingerprint and the search space (`study_name`), so the study storage *is*
the cache: running `tune` again on the same job returns the record without a new trial.
"""

from __future__ import annotations

import datetime as dt
import math
from typing import TYPE_CHECKING, Any

from autosync.search.study import _optuna_internals as internals

from autosync import __version__
from autosync.core.errors import RuntimeFailure, UserError
from autosync.core.job import JobSpec
from autosync.search.cost import COST_UNIT, in_bsp_trainings
from autosync.search.study.records import (
    BSP_REFERENCE, BSP_TRAINING_SECONDS, BUDGET, CACHE, CONSTRAINT_AT, FINGERPRINT, FORKED,
    FULL_BUDGET_OF, GIVEN_UP, GIVEN_UP_PLACES, HORIZON, PRUNED_ON_PACE, POLICY,
    REACHED, REFERENCE_FROM, REPAIR_OF, RUNS, SAME_AS, STORED_RUNS, TIMED_OUT_OF,
    UNCHECKED, VIRTUAL_SECONDS, CacheRecord, StudyRecord, TrialRecord, damaged, final_pending, has_run,
    outside_budget, policy_key, validated, write_cache_record,
)
from autosync.search.study.storage import existing_storage, redact_url
from autosync.search.study.trials import counted_trials, feasible_trials

if TYPE_CHECKING:
    import optuna

    from autosync.engine.backends import BackendChoice
    from autosync.search.space import SearchSpace

__all__ = ["answer_trial", "best_policies", "bsp_training_seconds", "cached_studies", "check_owner", "clear_cache",
           "execution_name", "execution_of", "execution_tag", "read_cache", "refuse_damaged",
           "search_breakdown", "search_cost", "study_name", "tuned_policy", "write_cache"]


class NoFeasibleTrial(RuntimeFailure):
    """A search ended with no trial meeting the target within the tolerance: nothing to cache."""


def study_name(job: JobSpec, space: "SearchSpace", backend: "BackendChoice | None" = None,
               constraint_at: str = BUDGET) -> str:
    """The cache key: the job's fingerprint (workload, cluster, target), the search space's name, for a
    backend other than the simulator where the trials trained (a simulated result never answers for a
    real-backend tune, nor the reverse, unless `--study` names the other's study), and where the constraint
    is held when not at the budget's end (`tune --constraint-at bsp-target`: another answer)."""
    name = f"{job.fingerprint()}-{space.name}"
    where = execution_name(backend)
    name = name if where == "simulator" else f"{name}-{where}"
    return name if constraint_at == BUDGET else f"{name}-at-{constraint_at}"


def execution_name(backend: "BackendChoice | None") -> str:
    """'simulator', or the backend's execution tag: what a study records of where its trials trained."""
    return "simulator" if backend is None or backend.backend == "simulator" else execution_tag(backend)


def execution_tag(backend: "BackendChoice") -> str:
    """'processes-virtual-cpu', 'processes-real-model-0.01-cuda', ...: what makes two backends' results differ."""
    parts = [backend.backend, backend.clock]
    if backend.clock == "real":
        parts.append(backend.stragglers)
        if backend.stragglers == "model":
            parts.append(f"{backend.time_scale:g}")
    if backend.clock == "real" and backend.worker_cpus is not None:  # pinned processes are other stragglers
        parts.append("cpus" + "_".join(map(str, backend.worker_cpus)))
    return "-".join(parts + [backend.device.replace(":", "")])


def execution_of(backend: "BackendChoice | None") -> dict[str, Any]:
    """What a cache record says about where its trials trained."""
    return {"backend": "simulator", "device": "cpu"} if backend is None else backend.describe()


def search_cost(study: "optuna.Study", up_to: int | None = None) -> float:
    """Virtual seconds trained by every trial of the study (with `up_to`, by the trials of the search up to
    that number, the full-budget checks and the repairs: what finding the answer cost), the BSP reference
    runs (none when a sibling study trained them: `autosync.search.study.siblings`) and the full runs it stored
    beside its trials (`STORED_RUNS`).
    Summed exactly (`math.fsum`): the same runs cost the same to the last bit, whatever order their trials
    were numbered in by the processes that claimed them."""
    attrs = study.user_attrs
    reference = attrs.get(BSP_REFERENCE, {})
    terms = [0.0 if REFERENCE_FROM in reference else reference.get(VIRTUAL_SECONDS, 0.0)]
    stored = attrs.get(STORED_RUNS)
    terms += [run.get(VIRTUAL_SECONDS, 0.0) for run in stored.values()] if isinstance(stored, dict) else []
    terms += [TrialRecord(t).virtual_seconds for t in study.get_trials(deepcopy=False)
              if up_to is None or t.number <= up_to or outside_budget(t)]
    return math.fsum(terms)


def answer_trial(study: "optuna.Study", top: "optuna.trial.FrozenTrial") -> int:
    """The number of the search's trial that found the answer `top`: the candidate a full-budget check
    confirmed (`autosync.search.strategies.full_budget`), not the check itself, which runs after the search
    whenever its candidate was found; and for a trial
    answered by an equivalent, that equivalent's."""
    trials = study.get_trials(deepcopy=False)  # by number: a study's trials are numbered 0, 1, ...
    number = top.user_attrs.get(FULL_BUDGET_OF, top.number)
    while True:
        original = TrialRecord(trials[number]).same_as if number < len(trials) else None
        if not isinstance(original, int) or original >= number:
            return number
        number = original


def bsp_training_seconds(reference: dict[str, Any]) -> float:
    """The virtual seconds of one full BSP run of the job, the search cost's unit: its reference run's, or
    where that stopped at BSP's time to target (`tune --constraint-at bsp-target`) what it measured of one."""
    if BSP_TRAINING_SECONDS in reference:
        return float(reference[BSP_TRAINING_SECONDS])
    return reference[VIRTUAL_SECONDS] / max(1, reference[RUNS])


def cost_fields(study: "optuna.Study", reference: dict[str, Any], best_time: float | None) -> dict[str, Any]:
    """The record's search cost (virtual seconds and BSP trainings) and the recurrences of the job that
    the winner's saving over BSP (`reference`'s time to target) needs to pay for it (None: no saving, or no time
    to compare: `best_time` None)."""
    bsp_training = bsp_training_seconds(reference)
    cost = search_cost(study)
    saving = reference["time_to_target"] - best_time if best_time is not None else 0.0
    return {"search_cost_virtual_seconds": cost,
            "search_cost_bsp_trainings": in_bsp_trainings(cost, bsp_training),
            "search_cost_unit": f"{COST_UNIT} (one = {bsp_training:.1f} virtual s)",
            "recurrences_to_amortize": math.ceil(cost / saving) if saving > 0 else None}


def read_cache(study: "optuna.Study") -> CacheRecord | None:
    """The study's validated cache record (None before a search finished); a corrupt one is a clear error,
    and an attribute stored damaged (not JSON, which Optuna fails on with a traceback) a one-line error naming
    the study (`autosync cache clear` removes the study)."""
    record = StudyRecord(_attrs_if_json(study)).cache
    return None if record is None else validated(study.study_name, record)


def check_owner(study: "optuna.Study", job: JobSpec, adopt: bool = False, space: str | None = None) -> None:
    """A study named by `--study` that was made for another job (another fingerprint) is refused unless `adopt`: its
    cached answer (a policy for other workers) would answer this job, and the tune would overwrite that job's
    identity on it. One made over another search space than `space` is refused always: its cached answer, a
    point of that space, was returned as this space's. An attribute stored damaged (not JSON) is refused as
    `read_cache` says; a record that is JSON but unusable is not this check's (`--refresh` replaces it)."""
    owner = StudyRecord(_attrs_if_json(study))  # the record itself need not be usable: `--refresh` replaces it
    if space is not None and owner.space is not None and owner.space != space:  # its trials are another space's
        raise UserError(f"--study {study.study_name}: a study of space {owner.space}, not {space}: its trials and "
                        f"cached answer are points of that space; name another study, or tune --space {owner.space}")
    theirs = owner.fingerprint
    if adopt or theirs is None or theirs == job.fingerprint():
        return
    raise UserError(f"--study {study.study_name}: a study of job {owner.job_name} (fingerprint {theirs}, "
                    f"n_workers {owner.n_workers}), not of job {job.name} (fingerprint "
                    f"{job.fingerprint()}); name another study, or pass --adopt-study to tune that one for this job")


def _attrs_if_json(study: "optuna.Study") -> dict[str, Any]:
    """The study's user attributes where they are JSON (a damaged one raises as `read_cache` does)."""
    import json

    try:
        return study.user_attrs
    except (TypeError, ValueError) as exc:
        problem = f"not JSON: {str(exc).splitlines()[0]}" if isinstance(exc, json.JSONDecodeError) else str(exc)
        raise damaged(study.study_name, problem) from None


def write_cache(study: "optuna.Study", job: JobSpec, space: "SearchSpace", sampler: str, tolerance: float,
                reference: dict[str, Any], execution: dict[str, Any] | None = None,
                neighbours: list[dict[str, Any]] | None = None, timed_out_of: int | None = None,
                answer: dict[str, Any] | None = None) -> CacheRecord:
    """Write the cache record: best feasible policy, its score, provenance, the amortization report and
    the tuned jobs the search started from (`neighbours`, `autosync.search.recommend.neighbours`), and the
    budget its --timeout ended it short of (`timed_out_of`; None: it ran its budget). A search that decides
    its answer itself (the race: `autosync.search.race_trials`) passes it as `answer` (policy, value,
    final_metric, trial): the answer then needed every run the search made.

    Every number is finite (strict JSON): a figure that has no value (no saving to amortize) is None.
    """
    if answer is None:
        best = feasible_trials(study)
        if not best:
            raise NoFeasibleTrial(f"study {study.study_name}: no trial met the target within tolerance "
                                  f"{tolerance} of BSP's final {job.target.metric}; finished trials are kept: raise "
                                  "--n-trials, --tolerance or the job's budget and run again")
        top = best[0]
        answer = {"policy": TrialRecord(top).policy, "value": top.values[0],
                  "final_metric": TrialRecord(top).final_metric, "trial": top.number,
                  "cost": search_cost(study, up_to=answer_trial(study, top)),
                  REACHED: top.user_attrs.get(REACHED), RUNS: top.user_attrs.get(RUNS)}
    value = answer["value"]
    bsp_time = reference["time_to_target"]
    # a time to the target on every seed, the answer's and BSP's, or a figure that compares them has no value
    timed = all(side.get(REACHED) is None or side.get(REACHED) == side.get(RUNS) for side in (answer, reference))
    record: CacheRecord = {
        "best_policy": answer["policy"],
        "best_value": value,
        "best_final_metric": answer["final_metric"],
        "best_trial": answer["trial"],
        "trials": counted_trials(study) - _given_up_rows(study),  # the budget's trials the search ran
        "finished_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "autosync_version": __version__,
        "job_name": job.name,
        FINGERPRINT: job.fingerprint(),
        "execution": execution or execution_of(None),  # which backend, clock and device produced it
        "space": space.name,
        "sampler": sampler,
        "bsp_time_to_target": bsp_time,
        "bsp_final_metric": reference["final_metric"],
        CONSTRAINT_AT: reference.get(CONSTRAINT_AT, BUDGET),  # where the final metrics were read
        "best_reached": answer.get(REACHED),  # on how many of its seeds a run of the answer reached the target
        "best_runs": answer.get(RUNS),
        "bsp_reached": reference.get(REACHED),  # and BSP's
        "bsp_runs": reference.get(RUNS),
        **cost_fields(study, reference, value if timed else None),
        "speedup_vs_bsp": bsp_time / value if value > 0 and timed else None,
        "search_breakdown": search_breakdown(study),
        "cost_to_answer_bsp_trainings": in_bsp_trainings(answer["cost"] if "cost" in answer else search_cost(study),
                                                         bsp_training_seconds(reference)),
        "neighbour_jobs": neighbours or [],
        **({TIMED_OUT_OF: timed_out_of} if timed_out_of else {}),
        **{k: v for k, v in answer.items() if k not in ("policy", "value", "final_metric", "trial", "cost", REACHED,
                                                         RUNS)},
    }
    write_cache_record(study, record)
    return record


def search_breakdown(study: "optuna.Study") -> dict[str, Any]:
    """Where the search's cost went and what it saved: trials whose runs stopped at the target, trials
    answered by an equivalent without training (a twin's result, or BSP's reference), trials pruned (and of
    those, how many on their pace, `autosync.search.strategies.pruning`), and
    the full-budget checks of the candidates that could win (`autosync.search.strategies.full_budget`) and the
    faster candidates they left unchecked (at most `MAX_CHECKS` run, one more for each repair waiting for
    a check: `full_budget.check_candidates`), and how many
    of those continued from their candidate's run stopped at the target (`autosync.engine.forks`), and the
    trials that continued from another switch point's prefix (Sync-Switch's BSP phase trained once), and the
    queued trials not run because the search stopped improving (`--patience`)."""
    trials = study.get_trials(deepcopy=False)
    copied = [t for t in trials if SAME_AS in t.user_attrs]
    checks = [t for t in trials if FULL_BUDGET_OF in t.user_attrs and t.state.is_finished()
              and SAME_AS not in t.user_attrs]
    given_up = [t for t in trials if t.user_attrs.get(GIVEN_UP)]
    attrs = study.user_attrs
    places = attrs.get(GIVEN_UP_PLACES)  # the budget's trials never queued (one attribute)
    places = places if isinstance(places, dict) else {}
    return {
        "stopped_at_target": sum(1 for t in trials if final_pending(t) and SAME_AS not in t.user_attrs),
        "answered_by_equivalent": len(copied),
        "pruned": sum(1 for t in trials if t.state.name == "PRUNED" and SAME_AS not in t.user_attrs),
        "pruned_on_pace": sum(1 for t in trials if t.state.name == "PRUNED" and SAME_AS not in t.user_attrs
                              and t.user_attrs.get(PRUNED_ON_PACE)),
        "full_budget_checks": len(checks),
        "forked_checks": sum(1 for t in checks if t.user_attrs.get(FORKED)),
        "forked_trials": sum(1 for t in trials if t.user_attrs.get(FORKED) and FULL_BUDGET_OF not in t.user_attrs),
        "given_up": len(given_up) + int(places.get("places", 0)),
        "patience": max([t.user_attrs[GIVEN_UP] for t in given_up] + ([places["patience"]] if places else []),
                        default=None),  # what stopped it
        # where the checks stopped: BSP's time to target (`--constraint-at bsp-target`), None: the budget's end
        "checked_at": attrs.get(BSP_REFERENCE, {}).get(HORIZON),
        # faster candidates the bounded checks left unchecked (`full_budget.MAX_CHECKS`), fastest first
        "unchecked": [row for row in attrs.get(UNCHECKED) or [] if isinstance(row, dict)],
        # settings one step closer to BSP of a candidate whose check failed (`autosync.search.strategies.repair`)
        # (those that ran: reached the target, pruned or failed on their own; not one killed or given up)
        "repairs": [{"of": t.user_attrs[REPAIR_OF], "policy": t.user_attrs.get(POLICY)} for t in trials
                    if REPAIR_OF in t.user_attrs and has_run(t)],
    }


def _given_up_rows(study: "optuna.Study") -> int:
    """Queued trials failed as given up (`--patience`): counted by the budget, never run."""
    return sum(1 for t in study.get_trials(deepcopy=False) if t.user_attrs.get(GIVEN_UP))


def best_policies(study: "optuna.Study", count: int = 5) -> list[dict[str, Any]]:
    """The best feasible trials, one per distinct policy (its first trial at that score; policies that run
    alike, such as BSP and backup k = n, are one), best first."""
    rows: dict[str, dict[str, Any]] = {}
    for t in feasible_trials(study):
        key = policy_key(t)
        if key not in rows:
            rows[key] = TrialRecord(t).summary()
        if len(rows) == count:
            break
    return list(rows.values())


def cached_studies(storage_url: str, fingerprint: str | None = None, check: bool = False) -> list[dict[str, Any]]:
    """Every autosync study in the storage (optionally of one job), with its cache record if finished (one not
    stored as JSON: None, and `damaged` says why; with `check`, a record stored damaged or not usable raises
    its one-line error instead, `_check_record`); none for
    a storage that does not exist yet. Reading creates and changes nothing, and a file that is not a study
    storage is refused (`existing_storage`)."""
    with existing_storage(storage_url) as storage:
        found = [] if storage is None else _summaries(storage, fingerprint)
    for s in found if check else []:
        _check_record(s["study"], s.get("damaged"), s["cache"])
    return found


def refuse_damaged(storage: "optuna.storages.BaseStorage") -> None:
    """Raise the one-line error of the first study in `storage` whose cache record is damaged, as
    `cached_studies` does with `check`: for a command that reads every study's record in its own way
    (`recommend`)."""
    for frozen in internals.all_studies(storage):
        _check_record(frozen.study_name, frozen.damaged.get(CACHE), StudyRecord(frozen.user_attrs).cache)


def _check_record(study: str, problem: str | None, record: Any) -> None:
    """The one rule of the commands that read cache records (docs/reference/cli.md, 'The study storage'): a
    record stored damaged (`problem`: not JSON) or not usable (`validated`) is refused with its one-line
    error naming the study, by every command that reads it; never skipped, listed half or used. An
    unfinished study (no record) is no damage."""
    if problem is not None:
        raise damaged(study, problem)
    if record is not None:
        validated(study, record)


def _summaries(storage: "optuna.storages.BaseStorage", fingerprint: str | None) -> list[dict[str, Any]]:
    """Each study's name (of the job of `fingerprint`, or every one), trial count (the budget's trials its search
    ran, as its cache record counts them:
    not its full-budget checks nor the queued trials given up; every trial of a study with no record), cache
    record and first trial's start. The studies are read from their
    attributes and only the listed ones' trials are loaded (a study summary loads every study's trials:
    seconds in a storage of many jobs, for `run --policy tuned` or `cache show` of one)."""
    out = []
    for frozen in internals.all_studies(storage):
        name = frozen.study_name
        # the job's: named by its fingerprint, or named by `--study` and made for it (its fingerprint attribute)
        if fingerprint is not None and not name.startswith(f"{fingerprint}-") \
                and StudyRecord(frozen.user_attrs).fingerprint != fingerprint:
            continue
        trials = storage.get_all_trials(storage.get_study_id_from_name(name), deepcopy=False)
        started = [t.datetime_start for t in trials if t.datetime_start is not None]
        record = StudyRecord(frozen.user_attrs).cache
        ran = record.get("trials") if isinstance(record, dict) else None  # the budget's trials the search ran
        out.append({"study": name, "trials": ran if isinstance(ran, int) else len(trials), "cache": record,
                    "created": min(started).isoformat(timespec="seconds") if started else None,
                    **({"damaged": frozen.damaged[CACHE]} if CACHE in frozen.damaged else {})})
    return out


def tuned_policy(storage_url: str, job: JobSpec) -> dict[str, Any]:
    """The most recently cached best policy of `job` (any space), or a clear error when there is none."""
    records = [s["cache"] for s in cached_studies(storage_url, job.fingerprint(), check=True) if s["cache"] is not None]
    if not records:
        raise UserError(f"no cached policy for job {job.name} (fingerprint {job.fingerprint()}) "
                        f"in {redact_url(storage_url)}; run `autosync tune` on this job first")
    return max(records, key=lambda r: str(r.get("finished_at", "")))["best_policy"]


def clear_cache(storage_url: str, job: JobSpec) -> list[str]:
    """Delete every study of `job`; returns their names."""
    import optuna

    with existing_storage(storage_url) as storage:
        if storage is None:
            return []
        names = [s["study"] for s in _summaries(storage, job.fingerprint())]
        for name in names:
            optuna.delete_study(study_name=name, storage=storage)
        return names
