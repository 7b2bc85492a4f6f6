"""`autosync tune`: search a job's best policy in an Optuna study, or return the cached one of a recurring job.

The study is named by the job's fingerprint and the search space (`autosync.search.study.cache`), and lives in
a storage (`autosync.search.study.storage`) that several processes or machines may share: its trial budget is
global and exact (`autosync.search.study.trials`), a killed process's trial is failed and re-run, and an
interrupted search resumes with the same command.

Why this module is over 500 lines: it is the one place that orders a search's steps (the study, BSP's
reference, the queued first trials, the trials in this and the helper processes, the full-budget checks,
the verification) and passes them the state they share (the request, the study, its
sibling studies). What each step does lives in `study/` and `strategies/`; what stays here are their order
and the glue between them, read top to bottom as one command.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import time
from typing import TYPE_CHECKING, Any, Callable

from autosync.catalog import policy_from_dict
from autosync.policies import SEED_POLICIES, Composed, composition_of, cross_paper_variants
from autosync.search.recommend.vote import adapt
from autosync.search.strategies.full_budget import MAX_CHECKS, check_candidates, check_finished, queue_check, waiting
from autosync.search.strategies.repair import queue_repairs, repair_points, repairs_finished
from autosync.search.strategies.switch_point import run_switch_point_search
from autosync.search.strategies.verify import verify, with_verification
from autosync.search.study._optuna_internals import fresh_trials
from autosync.core.errors import Interrupted, RuntimeFailure, UserError
from autosync.core.job import JobSpec
from autosync.engine.backends import replays_table
from autosync.engine.forks import sharing
from autosync.search.study.cache import (
    best_policies, check_owner, execution_name, execution_of, read_cache, write_cache,
)
from autosync.policy_score import DETAILS, STOPPED_EARLY, RunFailed, evaluate, refuse_a_target_met_at_start
from autosync.search.outcome import TuneOutcome
from autosync.search.objective import (
    Objective, TimeToTargetBound, canonical_on, process_tag, trial_scoring, trial_seeds,
)
from autosync.search.strategies.patience import give_up_queued, patience_of, trials_without_improvement
from autosync.search.strategies.pruning import RaceLimit, thinned
from autosync.search.study.running_twins import Resampled
from autosync.search.strategies.samplers import RACE, SWITCH_POINT_SAMPLERS, make_sampler
from autosync.race import SEARCH_SEEDS, race_settings
from autosync.search.race_trials import Helpers, race_answer, race_helpers, race_search, race_top, refuse_another_race
from autosync.search.study.records import (
    BSP_REFERENCE, BSP_TARGET, BSP_TRAINING_SECONDS, CURVE, FORKED, HORIZON, NEIGHBOUR_JOBS, REPAIR_OF, TIME_TO_TARGET,
    TIMED_OUT_OF, VIRTUAL_SECONDS, StudyRecord, write_cache_record,
)
from autosync.search.study.siblings import sibling_reference, sibling_studies
from autosync.search.space import SearchSpace
from autosync.search.study.helper_processes import Parent, follow_parent, start_helpers
from autosync.search.study.interrupts import interrupted, storage_calls_finish_first
from autosync.search.study.locking import storage_lock
from autosync.search.study.outage import report_to
from autosync.search.recommend.neighbours import neighbours as nearest
from autosync.search.study.storage import open_storage, redact_url
from autosync.search.request import TuneRequest
from autosync.search.study.trials import (
    budget_used, counted_trials, fail_dead_trials, kept_line, retries_in_place, roles, run_queued_trial,
    top_up, trials_run_by,
)

if TYPE_CHECKING:
    import optuna

__all__ = ["baseline_policies", "load_study", "run_trials", "tune"]

POLL_SECONDS = 1.0  # how often a process with nothing queued checks whether others' trials died


def baseline_policies(job: JobSpec) -> list[dict[str, Any]]:
    """Policies enqueued first when they lie in the space: BSP and ASP, or their equivalents in a family,
    as each policy declares them (`Policy.search_baselines`), in `SEED_POLICIES` order, then the composed
    policy's."""
    n = job.cluster.n_workers
    return [{"policy": cls.name, "params": params}
            for cls in (*SEED_POLICIES, Composed) for params in cls.search_baselines(n)]


def load_study(request: TuneRequest, storage: Any) -> "optuna.Study":
    """Create the request's study in `storage`, or load it; its objective directions must match."""
    import optuna

    directions, name = request.directions, request.study_name
    sampler = make_sampler(request.sampler, request.seed, request.space, request.settings.multi_objective,
                           request.n_trials)
    try:
        with storage_lock(request.storage, name):
            study = optuna.create_study(storage=storage, study_name=name, directions=directions, sampler=sampler,
                                        pruner=optuna.pruners.NopPruner(), load_if_exists=True)
    except ValueError as exc:
        raise UserError(f"--study {name}: {exc}") from None
    if [d.name.lower() for d in study.directions] != directions:
        raise UserError(f"study {name} was created with objective directions "
                        f"{[d.name.lower() for d in study.directions]}, but this run asks for {directions}; "
                        "use another --study name or the same --objective")
    check_owner(study, request.job, adopt=request.adopt_study, space=request.space.name)  # before it is (over)written
    request.describe(study)
    return study


def tune(request: TuneRequest, on_trial: Callable[[int, int], None] | None = None,
         on_resume: Callable[[int, list[int]], None] | None = None,
         on_wait: Callable[[str], None] | None = None) -> TuneOutcome:
    """Search (or re-use the cache) for the best policy of `request.job` in `request.space`.

    A study with trials or BSP's reference already (an interrupted or killed search) is resumed:
    `on_resume(finished trials, numbers of the dead trials re-queued)` says so first (the numbers'
    `reference`: BSP's reference runs were found too). Ctrl-C raises `Interrupted` saying what is kept.
    `TuneOutcome.new_trials` counts the trials this command's processes ran, not other processes'. A storage
    server that stops answering is waited for, saying so through `on_wait` (`autosync.search.study.outage`)."""
    with race_helpers(request) as helpers:  # spawned first: they warm up while the storage opens
        return _tune(request, helpers, on_trial, on_resume, on_wait)


def _tune(request: TuneRequest, helpers: Helpers, on_trial: Callable[[int, int], None] | None,
          on_resume: Callable[[int, list[int]], None] | None, on_wait: Callable[[str], None] | None) -> TuneOutcome:
    """`tune`, with the race's `--n-jobs` helpers started (`race_helpers`; none for another search)."""
    report_to(request.storage, on_wait)
    storage = open_storage(request.storage)
    if _new_study(storage, request.study_name) and not replays_table(request.settings.backend):  # checked first
        refuse_a_target_met_at_start(request.job, trial_seeds(request.job, SEARCH_SEEDS if request.sampler == RACE
                                                              else request.settings.repeats))
    study = load_study(request, storage)
    cache = read_cache(study) if not request.refresh else None
    if cache is not None and request.sampler == RACE:
        refuse_another_race(cache, request, study.study_name)
    if cache is not None and _timed_out_short(cache, study, request):
        cache = None  # a search its --timeout ended before the budget: the same command resumes it
    if cache is not None:
        helpers.close()  # no race will use them
        outcome = TuneOutcome(study.study_name, request.storage, True, 0, cache, _top(cache, study), study)
        return _elsewhere(_verified(outcome, request), request.job, sibling_studies(study, storage))
    with storage_lock(request.storage, study.study_name):
        requeued = fail_dead_trials(study)
    before = counted_trials(study)
    requeued.reference = BSP_REFERENCE in study.user_attrs
    if on_resume is not None and (before or requeued or requeued.reference):
        on_resume(before, requeued)
    mine = {process_tag()}  # the processes of this command: the trials they ran are its new trials
    try:  # the helpers share this process's kept runs (`autosync.engine.forks.sharing`)
        with storage_calls_finish_first(), sharing(request.n_jobs > 1):
            siblings = sibling_studies(study, storage)
            # the race starts from its fitted portfolio: tuned neighbours are for the other searches
            near = [] if request.sampler == RACE else _neighbour_jobs(study, request, storage,
                                                                      fresh=not before and not requeued)
            answer = None  # the race's (the other searches' answer is their best feasible trial)
            if request.sampler == RACE:
                answer, reference = race_search(study, request, on_trial, mine, helpers)
            else:
                reference = bsp_reference(study, request, siblings)
                _search(study, request, reference, siblings, before, on_trial, mine, near)
    except (KeyboardInterrupt, Exception) as exc:  # Ctrl-C, or Ctrl-C as Optuna passed it on (`interrupted`)
        if not isinstance(exc, KeyboardInterrupt) and not interrupted():
            raise
        raise Interrupted(f"interrupted: {kept_line(study)} of study {study.study_name} kept in "
                          f"{redact_url(request.storage)}; a trial cut short is run again when the search resumes "
                          "with the same command") from None
    short = request.timeout is not None and request.sampler not in (*SWITCH_POINT_SAMPLERS, RACE) \
        and counted_trials(study) < budget_of(request, before)
    cache = write_cache(study, request.job, request.space, request.sampler, request.settings.tolerance, reference,
                        execution=execution_of(request.settings.backend), neighbours=near,
                        timed_out_of=budget_of(request, before) if short else None,
                        answer=race_answer(study, answer, request.job.seed, request.budget,
                                           race_settings(request.race_settings)) if answer is not None
                        else None)
    outcome = TuneOutcome(study.study_name, request.storage, False, len(trials_run_by(study, mine)), cache,
                          _top(cache, study), study, roles=roles(study))
    return _elsewhere(_verified(outcome, request), request.job, siblings)


def _new_study(storage: Any, name: str) -> bool:
    """Whether the storage holds no study `name` yet (nothing of this search has run or been cached)."""
    try:
        storage.get_study_id_from_name(name)
    except KeyError:
        return True
    return False


def _top(cache: dict[str, Any], study: "optuna.Study") -> list[dict[str, Any]]:
    """The study's best candidates, best first: the race's by their mean over both seeds (`race_top`), another
    search's best feasible trials (`best_policies`)."""
    race = cache.get("race")
    return race_top(race) if isinstance(race, dict) else best_policies(study)


def budget_of(request: TuneRequest, before: int) -> int:
    """The trials of the budget the search ends with: --n-trials, or `before` (the finished ones) plus
    --n-trials on --refresh; with the grid sampler, no more than the space's points."""
    budget = before + request.n_trials if request.refresh else request.n_trials
    return min(budget, request.space.size()) if request.sampler == "grid" else budget


def _timed_out_short(cache: dict[str, Any], study: "optuna.Study", request: TuneRequest) -> bool:
    """Whether the study's answer is of a search that its --timeout ended before this request's budget
    (`timed_out_of`): the same command then resumes the search rather than answering from the cache."""
    return bool(cache.get(TIMED_OUT_OF)) and request.sampler not in SWITCH_POINT_SAMPLERS \
        and counted_trials(study) < budget_of(request, counted_trials(study))


FASTER_BY = 1.05  # another space's answer is reported when it is at least this many times faster


def _elsewhere(outcome: TuneOutcome, job: JobSpec, siblings: "list[optuna.Study]") -> TuneOutcome:
    """The outcome with the cached answers of this job's other spaces (its `siblings`, the same backend) that
    are at least `FASTER_BY` times faster than its own, with another policy, fastest first
    (`TuneOutcome.faster_elsewhere`): the search answers within its space, and the user should know where
    another space did better."""
    mine = outcome.cache
    found = []
    for sibling, record in _sibling_records(siblings) if mine.get("best_value") else []:
        if not record.get("best_value") \
                or canonical_on(record["best_policy"], job) == canonical_on(mine["best_policy"], job):
            continue
        theirs, ours = record["best_value"], mine["best_value"]
        if theirs and ours and theirs * FASTER_BY <= ours:
            found.append({"space": StudyRecord(sibling.user_attrs).space, "study": sibling.study_name,
                          "policy": record["best_policy"], "time": theirs, "times_faster": ours / theirs})
    outcome.faster_elsewhere = sorted(found, key=lambda f: f["time"])
    return outcome


def _neighbour_jobs(study: "optuna.Study", request: TuneRequest, storage: Any, fresh: bool) -> list[dict[str, Any]]:
    """The nearest tuned jobs like this one (`autosync.search.recommend.neighbours`) whose winners a new study starts
    from, as {study, job, distance, policy}; chosen once, when the study starts, and kept on it."""
    attrs = study.user_attrs
    if NEIGHBOUR_JOBS in attrs or not fresh or not request.transfer or request.refresh:
        return attrs.get(NEIGHBOUR_JOBS, [])
    found = nearest(storage, request.job, execution=execution_name(request.settings.backend),
                    features=StudyRecord(attrs).features)  # `describe_job` stored them
    near = [{"study": nb.study_name, "job": nb.job_name, "distance": round(nb.distance, 4),
             "policy": nb.record["best_policy"], "n_workers": nb.n_workers} for nb in found]
    study.set_user_attr(NEIGHBOUR_JOBS, near)
    return near


def _search(study: "optuna.Study", request: TuneRequest, reference: dict[str, Any],
            siblings: "list[optuna.Study]", before: int, on_trial: Callable[[int, int], None] | None,
            mine: set[str], near: list[dict[str, Any]] | None = None) -> None:
    """Run the request's trials: the switch-point strategies' own candidates, or the budget's queued and
    sampled trials in this process and its `--n-jobs` helpers (whose process tags join `mine`), until the
    budget is spent or, with `--patience`, the search stops improving (`autosync.search.strategies.patience`)."""
    deadline = time.monotonic() + request.timeout if request.timeout is not None else None
    if request.sampler in SWITCH_POINT_SAMPLERS:
        run_switch_point_search(study, request, reference, deadline, on_trial)
        return
    budget = budget_of(request, before)
    top_up(study, request.storage, budget, *_queued_first(study, request, siblings, near or []))
    remaining = deadline - time.monotonic() if deadline is not None else None  # each helper its own sampler seed
    helpers = start_helpers(request.storage, request.n_jobs - 1, _helper, lambda i: (
        dataclasses.replace(request, seed=request.seed + 1000 * (i + 1)), study.study_name, budget, remaining))
    mine.update(process_tag(p.pid) for p in helpers)
    try:
        objective = run_trials(study, request, reference, budget, deadline, on_trial, siblings)
    finally:
        for p in helpers:
            p.join()
    if request.settings.stop_at_target and not request.settings.multi_objective:
        _check_at_full_budget(study, request, objective)


def _check_at_full_budget(study: "optuna.Study", request: TuneRequest, objective: Objective) -> None:
    """Re-run at full budget the fastest candidates whose runs stopped at the target, until the fastest
    (the K fastest with --verify-top K) are known to keep the final-metric constraint
    (`autosync.search.strategies.full_budget`), `MAX_CHECKS` checks at most (K with --verify-top K above it:
    the K it re-runs must have been checked), and one more for each repair of a candidate whose check failed
    (`autosync.search.strategies.repair`)."""
    check_candidates(study, functools.partial(_run_check, study, request, objective), wanted=places(request),
                     limit=max(MAX_CHECKS, places(request)),
                     repair=functools.partial(_run_repairs, study, request, objective))


def _run_check(study: "optuna.Study", request: TuneRequest, objective: Objective, number: int) -> None:
    """Queue the full-budget check of trial `number` and run queued trials here until it has finished."""
    queue_check(study, number)
    _run_queued_until(study, request, objective, lambda: check_finished(study, number))


def _run_repairs(study: "optuna.Study", request: TuneRequest, objective: Objective, number: int) -> int:
    """Queue the repairs of trial `number`, whose check failed, where it has any left, and run them here to
    the target (trials queued before them, other processes', run first; those another process took are
    waited for); how many of them then wait for a check (none diverged, none behind a feasible answer)."""
    with storage_lock(request.storage, study.study_name):
        points = repair_points(fresh_trials(study), number, request.space, request.job)
        queue_repairs(study, number, points)
    if not points:
        return 0
    _run_queued_until(study, request, objective, lambda: repairs_finished(study, number))
    return sum(1 for t in waiting(study, places(request)) if t.user_attrs.get(REPAIR_OF) == number)


def _run_queued_until(study: "optuna.Study", request: TuneRequest, objective: Objective,
                      done: Callable[[], bool]) -> None:
    """Run queued trials here until `done()` (trials queued before the ones awaited, other processes', run
    first; one another process took is waited for)."""
    while not done():
        if not run_queued_trial(study, request.storage, objective, catch=(RunFailed, Resampled)):
            time.sleep(POLL_SECONDS)


def places(request: TuneRequest) -> int:
    """How many of the fastest candidates the search keeps: the answer, or the K that --verify-top re-runs.
    Trials race against the slowest of them (`autosync.search.strategies.pruning`)."""
    return max(1, request.verify_top)


def _verified(outcome: TuneOutcome, request: TuneRequest) -> TuneOutcome:
    """With --verify-top: the best candidates and BSP re-run on the verification backend (unless this
    study's record already holds a verification on that backend), and the cache answering with the real
    winner."""
    if not request.verify_top or request.verify_backend is None:
        return outcome

    done = outcome.cache.get("verified")
    if done is not None and done.get("execution") == request.verify_backend.describe():
        return outcome
    study = outcome.study
    reference = study.user_attrs[BSP_REFERENCE]
    verification = verify(request.job, best_policies(study, count=request.verify_top), reference,
                          request.verify_backend, request.settings.repeats, request.settings.penalty,
                          request.settings.tolerance)
    record = with_verification(outcome.cache, verification)
    write_cache_record(study, record)
    outcome.cache = record
    outcome.verification = verification
    return outcome


def _queued_first(study: "optuna.Study", request: TuneRequest, siblings: "list[optuna.Study]",
                  near: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], bool]:
    """What a search queues ahead of the sampler's choices, and whether only on a fresh study: the
    cached best on --refresh (a warm start), else BSP and ASP or their equivalents in the space (BSP's
    costs nothing: its reference answers it), then the best policy each sibling study of the job found,
    where this space holds it (a tune over `composed` after one over `policy` starts from the policy tune's
    winner, scored from it without training), then the winners of the nearest tuned jobs like this one
    (`near`, a transfer; a backup count k scaled to this job's n first, as `recommend` scales it, then as it
    won), then those winners with another paper's strategy added (`cross_paper_variants`), then the
    other baselines (a static setting a paper starts from, such as k = 3n/4: trained after the transferred
    winners, it is raced against them rather than against BSP)."""
    old = StudyRecord(study.user_attrs).cache
    if request.refresh and isinstance(old, dict) and isinstance(old.get("best_policy"), dict):
        params = request.space.trial_params(old["best_policy"])
        return ([params] if params is not None else []), False

    job = request.job
    seen, first = set(), []
    baselines = [(policy, params) for policy in baseline_policies(job)
                 if (params := request.space.trial_params(policy)) is not None]
    anchors = {_canonical_key({"policy": name, "params": {}}, job) for name in ("bsp", "asp")}
    bsp_asp = [b for b in baselines if _canonical_key(b[0], job) in anchors]  # BSP's and ASP's forms
    bests = [record["best_policy"] for _, record in _sibling_records(siblings)] \
        + [policy for nb in near for policy in _as_here(nb, job)]
    variants = [{"policy": Composed.name, "params": variant} for best in bests
                if (slots := _slots(best)) is not None for variant in cross_paper_variants(slots)]
    found = [(policy, _in_space(request.space, policy, job)) for policy in bests + variants]
    rest = [b for b in baselines if b not in bsp_asp]
    for policy, params in bsp_asp + found + rest:  # one of each class that runs alike
        key = _canonical_key(policy, job)
        if params is not None and key not in seen:
            seen.add(key)
            first.append(params)
    return first, True


def _canonical_key(policy: dict[str, Any], job: JobSpec) -> str:
    """The class of policies that run alike on `job` (`canonical_on`), as a hashable key."""
    return json.dumps(canonical_on(policy, job), sort_keys=True)


def _as_here(neighbour: dict[str, Any], job: JobSpec) -> list[dict[str, Any]]:
    """A tuned neighbour's winner for `job`: with a backup count k scaled to this job's n (where the
    neighbour's n is known and differs), then as it won there."""
    won = neighbour["policy"]
    scaled = adapt(won, neighbour["n_workers"], job) if "n_workers" in neighbour else None
    return [scaled, won] if scaled is not None and scaled != won else [won]


def _sibling_records(siblings: "list[optuna.Study]") -> "list[tuple[optuna.Study, dict[str, Any]]]":
    """(sibling, its cache record) of each sibling study with a usable one (a corrupt or stale one is skipped:
    it is that study's to report)."""
    found = []
    for sibling in siblings:
        try:
            record = read_cache(sibling)
        except UserError:
            continue
        if record is not None:
            found.append((sibling, record))
    return found


def _slots(policy: dict[str, Any]) -> dict[str, Any] | None:
    """`policy`'s composition slots: its own parameters for a composition, those of the composition a seed
    policy is a preset of, or None for one that is not."""
    made = policy_from_dict(policy)
    return dict(policy["params"]) if isinstance(made, Composed) else composition_of(made)


def _in_space(space: SearchSpace, policy: dict[str, Any], job: JobSpec) -> dict[str, Any] | None:
    """The trial parameters of `policy` in `space`, as itself or as the composition it is a preset of,
    provided the space samples from them a policy that runs exactly like it; else None."""
    import optuna

    target = canonical_on(policy, job)

    slots = _slots(policy)
    composed = {"policy": Composed.name, "params": slots}
    forms = [policy] + ([composed] if slots is not None and composed != policy else [])
    for form in forms:
        params = space.trial_params(form)
        if params is None:
            continue
        try:
            sampled = space.suggest(optuna.trial.FixedTrial(params))
        except ValueError:
            continue
        if target is not None and canonical_on(sampled, job) == target:
            return params
    return None


def bsp_reference(study: "optuna.Study", request: TuneRequest,
                  siblings: "list[optuna.Study] | None" = None) -> dict[str, Any]:
    """BSP's score on the job (R seeds), measured once per study (or taken from a sibling study that
    measured it on the same seeds): the constraint's reference.

    No lock is held while BSP trains (on SQLite the storage lock is the whole database's): processes
    that start together on a new study may each train it, and they get the same runs.
    """
    ref = study.user_attrs.get(BSP_REFERENCE)
    settings = request.settings
    seeds = trial_seeds(request.job, settings.repeats)
    scoring = trial_scoring(request.job, seeds, settings.penalty, settings.constraint_at)
    if ref is None:
        ref = sibling_reference(siblings or [], scoring)
        if ref is not None:  # `reference_from` keeps the sibling's training out of this study's search cost
            study.set_user_attr(BSP_REFERENCE, ref)
    if ref is None:
        bound = TimeToTargetBound(request.job)  # BSP's curve: the pace rule's bar until a trial beats BSP
        try:
            ref = _bsp_runs(request, seeds, report=lambda info, step: bound.update(info))
        except RunFailed as exc:
            raise RuntimeFailure(f"BSP itself fails on this job, so there is no reference to tune against: "
                                 f"{exc}") from None
        ref = {**ref, **scoring}
        if bound.curve:
            ref[CURVE] = thinned(bound.curve)  # up to the target, or the whole run where BSP missed it
        study.set_user_attr(BSP_REFERENCE, ref)
    return ref


def _bsp_runs(request: TuneRequest, seeds: list[int], report: Callable[[dict[str, Any], int], None]) -> dict[str, Any]:
    """BSP's reference runs: at full budget, or under `--constraint-at bsp-target` to its time to target
    (the latest of its seeds': the horizon, `HORIZON`) with its metric there, plus what one full BSP
    training takes (`bsp_training_seconds`, the search cost's unit: the budget's virtual seconds, or its
    updates or epochs at BSP's rate to the target). Where a seed misses the target, the runs train the
    whole budget as under `budget` (the horizon is then the budget's end)."""
    job, settings, bsp = request.job, request.settings, {"policy": "bsp", "params": {}}
    if settings.constraint_at != BSP_TARGET:
        return evaluate(job, bsp, seeds, settings.penalty, report=report, backend=settings.backend)
    to_target = evaluate(job, bsp, seeds, settings.penalty, report=report, backend=settings.backend,
                         stop_at_target=True, details=True)
    if not to_target["reached"]:  # every run missed the target, so each trained the whole budget already
        return _without_details(to_target)
    reached = to_target["reached"] == to_target["runs"]
    horizon = max(to_target["seed_times"]) if reached else None
    if reached and min(to_target["seed_times"]) == horizon:  # every run stopped at the horizon (one seed)
        at_horizon = {**to_target, VIRTUAL_SECONDS: 0.0}
    else:  # to the horizon (a run stopped at the target continues from there), or the whole budget
        at_horizon = evaluate(job, bsp, seeds, settings.penalty, backend=settings.backend, horizon=horizon,
                              details=True)
    trained = to_target[VIRTUAL_SECONDS] + at_horizon[VIRTUAL_SECONDS]
    ref = {**_without_details(at_horizon), TIME_TO_TARGET: to_target[TIME_TO_TARGET], VIRTUAL_SECONDS: trained}
    if reached:
        ref[HORIZON] = horizon
        ref[BSP_TRAINING_SECONDS] = _full_run_seconds(job, horizon, at_horizon)
    else:  # some seeds missed: every run now trained its whole budget (those that reached it forked)
        ref[BSP_TRAINING_SECONDS] = (at_horizon[VIRTUAL_SECONDS] + at_horizon.get(FORKED, 0.0)) / len(seeds)
    return ref


def _without_details(score: dict[str, Any]) -> dict[str, Any]:
    """An `evaluate` score without what `details` and stopping at the target added: what a reference keeps."""
    return {k: v for k, v in score.items() if k not in (*DETAILS, STOPPED_EARLY)}


def _full_run_seconds(job: JobSpec, horizon: float, at_horizon: dict[str, Any]) -> float:
    """The virtual seconds of one full BSP run of `job`, from its runs to `horizon`: the budget's virtual
    seconds, or the time its updates or epochs take at the rate BSP kept to the horizon, whichever is first."""
    b = job.budget
    ends = [b.max_virtual_seconds] if b.max_virtual_seconds is not None else []
    if b.max_updates is not None and at_horizon.get("updates"):
        ends.append(horizon * b.max_updates / at_horizon["updates"])
    if b.max_epochs is not None and at_horizon.get("epochs"):
        ends.append(horizon * b.max_epochs / at_horizon["epochs"])
    return min(ends) if ends else horizon


def run_trials(study: "optuna.Study", request: TuneRequest, reference: dict[str, Any], budget: int,
               deadline: float | None, on_trial: Callable[[int, int], None] | None = None,
               siblings: "list[optuna.Study] | None" = None, orphaned: Callable[[], bool] = lambda: False) -> Objective:
    """Run queued trials until `budget` trials count and none is queued or running in any process (or the
    deadline passes, or the last `request.patience` trials found nothing faster, or, in a helper, `orphaned()`:
    its command has ended).

    Returns the objective it ran (the full-budget checks run with it). With nothing queued, top the queue up
    again (a trial that failed without a reason of its own, or whose re-runs ran out, left the budget short);
    with trials still running elsewhere, wait: a process that dies there has its trial re-queued
    (`fail_dead_trials`), and this one runs it.
    """
    objective = Objective(request.job, request.space, request.settings, reference["final_metric"], reference,
                          siblings, storage_url=request.storage,
                          race=functools.partial(RaceLimit, places=places(request)))
    objective.deadline = deadline  # a trial still training when the --timeout passes stops (`TimedOut`)
    while True:
        done, pending = budget_used(study)
        if on_trial is not None:
            on_trial(done, max(budget, done + pending))
        if (deadline is not None and time.monotonic() >= deadline) or orphaned():
            return objective
        if _stopped_improving(study, request, budget):
            return objective
        if run_queued_trial(study, request.storage, objective, catch=(RunFailed, Resampled), order=retries_in_place):
            continue
        if top_up(study, request.storage, budget):
            continue
        if not budget_used(study)[1]:  # nothing queued or running elsewhere
            return objective
        time.sleep(POLL_SECONDS)  # run_queued_trial re-queues a trial whose process died meanwhile


def _stopped_improving(study: "optuna.Study", request: TuneRequest, budget: int) -> bool:
    """Whether the last `--patience` trials (by default the space's `patience`) found nothing faster; if so,
    the rest of the `budget` is given up (its queued trials failed with that reason, and one such for each
    place not queued yet, under the storage lock: no process takes or queues one meanwhile)."""
    patience = patience_of(request.patience, request.sampler, request.space)
    if not patience or trials_without_improvement(study) < patience:
        return False
    with storage_lock(request.storage, study.study_name):
        give_up_queued(study, patience, budget)
    return True


def _helper(request: TuneRequest, name: str, budget: int, deadline_in: float | None, parent: Parent) -> None:
    """A second process working on the same study (`--n-jobs`), with the parent's Optuna log level, warning
    filters (whatever the caller chose; the library changes neither) and shared kept runs."""
    follow_parent(parent)
    deadline = time.monotonic() + deadline_in if deadline_in is not None else None
    sub = dataclasses.replace(request, study=name)
    storage = open_storage(sub.storage)
    study = load_study(sub, storage)
    # Ctrl-C reaches the helpers too: `helper_processes._run_then_end` holds it out of writes and tags
    run_trials(study, sub, study.user_attrs[BSP_REFERENCE], budget, deadline,
               siblings=sibling_studies(study, storage), orphaned=parent.gone)  # a killed command's helper stops
