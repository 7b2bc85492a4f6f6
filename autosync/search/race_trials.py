"""The race (`autosync.race`) run in an Optuna study: `autosync tune --sampler race`.

Each run the race asks for is one trial of the study, queued with the run as its user attribute `RACE_RUN`
(label, seed, round, to the target or to the end of the budget) and run by `RaceObjective`, which trains it
through the simulator's code path (`autosync.search.objective.evaluate`: the table replays it under
`--table`). A run to the target stops at its horizon (`race.horizon`, from the study's runs queued before it
that it races on its seed) and is pruned there: eliminated. On the simulator it starts beside those rivals
and learns its horizon while it trains (`autosync.search.race_horizon`); elsewhere, or where it forks from
another run's prefix, it waits for them to finish first (`_queued_before`): either way the run one process
would have run. The race's state is the study's trials, so a killed or
interrupted tune resumes with the same command where the race stood, in a storage other processes and
machines share (SQLite, PostgreSQL), and optuna-dashboard shows each run with its round and seed.

A round's runs are queued together and run by this process and `--n-jobs` - 1 helper processes (spawned
once, before the storage opens: `race_helpers`), each claiming first a queued run that can start at once
(`_claim_order`), and BSP's reference runs are queued inside the portfolio round (`_with_reference`); the
answer and the cost do not depend on how many ran them (`race.plan`, and each run as one process runs it),
and a run to the end of the budget continues from the run to the target that any of them kept
(`autosync.engine.forks.sharing`).

BSP's runs to the end of the budget on both seeds are the final-metric rule's reference; the study's
`BSP_REFERENCE` is made from them, so the cache record reads like any other search's.

With `--budget` (BSP trainings) the race is told its cost so far (`spent`: the same figure the cache record
reports) before each round, and stops exploring once it is spent (`race.plan`); the record says whether it
cut the race short.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import multiprocessing as mp
import statistics
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterator

from autosync.core.errors import RuntimeFailure, UserError
from autosync.core.job import JobSpec
from autosync.catalog import policy_from_dict
from autosync.engine.backends import simulates_here
from autosync.engine.forks import FORKS, sharing, switch_param_of
from autosync.lattice import BSP_LABEL, labelled_points
from autosync.policy_score import STOPPED_EARLY, RunFailed, evaluate
from autosync.search.study.claim import process_tag, tag
from autosync.race import (REFERENCE, ROUNDS, SEARCH_SEEDS, Answer, RaceSettings, Run, Runs, horizon, plan,
                           race_settings, times_of_full_run)
from autosync.search.race_horizon import HorizonGate, ProgressBoard
from autosync.search.study import _optuna_internals as internals
from autosync.search.tune_options import RACE
from autosync.search.study.cache import bsp_training_seconds, search_cost
from autosync.search.study.helper_processes import Parent, follow_parent, start_helpers
from autosync.search.study.locking import storage_lock
from autosync.search.study.records import (BSP_REFERENCE, BSP_TRAINING_SECONDS, FAIL_REASON, FINAL_METRIC, FORKED,
                                           POLICY, RACE_FINAL, RACE_HORIZON, RACE_RUN, RACE_TIME, REACHED,
                                           ROLE, RUNS, TIME_TO_TARGET, VIRTUAL_SECONDS)
from autosync.search.study.trials import fail_dead_trials, run_queued_trial
from autosync.search.study.storage import open_storage

if TYPE_CHECKING:
    import optuna

    from autosync.search.request import TuneRequest

__all__ = ["Helpers", "Observed", "RaceObjective", "observed", "race_answer", "race_helpers", "race_search", "race_top",
           "rounds", "spent"]

RunKey = tuple[str, int, bool, tuple[str, ...]]  # `_key`: label, seed, whether to the budget's end, rivals
POLL_SECONDS = 0.25  # how often a process looks again for another's run of the round to finish, or a new round


class RaceObjective:
    """Runs the trial's `RACE_RUN` and records what the race reads of it (`RACE_TIME`, `RACE_FINAL`);
    `storage`: the study's URL (its lock held while the dead processes' trials are failed)."""

    def __init__(self, job: JobSpec, settings: RaceSettings, penalty: float, backend: Any, storage: str):
        self.job, self.settings, self.penalty, self.backend, self.storage = job, settings, penalty, backend, storage
        self.points = labelled_points(job.cluster.n_workers)
        self._forks_prefixes: dict[str, bool] = {}  # label -> whether its runs fork from others' prefixes
        # where its runs publish their progress: the directory the command's processes share (`race_helpers`
        # and `_helper` make the objective once it is shared); none for one process, where no one reads it
        self.board = ProgressBoard(None if FORKS.shared is None else FORKS.shared.directory)

    def __call__(self, trial: "optuna.Trial") -> float:
        import optuna

        run = _run_of(trial.user_attrs[RACE_RUN])
        policy = self.points[run.label]
        tag(trial)  # already tagged when the race claimed it (`claim.optimize_one`)
        internals.set_user_attrs(trial, {POLICY: policy, ROLE: "budget"})  # one write (one commit, not one each)
        gate = self._gate(trial, run) if self.learns_horizon(run) else None
        limit = math.inf if gate is not None else \
            horizon(run, self.settings.margin, _queued_before(trial.study, self.storage, trial.number, run).times)
        try:
            score = evaluate(self.job, policy, [self.job.seed + run.seed], self.penalty, backend=self.backend,
                             stop_at_target=not run.full, horizon=None if math.isinf(limit) else limit,
                             stop_at=gate.stop_at if gate is not None else None,
                             report=self._publish(trial) if not run.full and self.board.directory else None)
        except RunFailed as exc:  # diverged: slower than any run that reaches the target, and no final metric
            # (a run to the target that diverged did so before its horizon, where its run to the end of the budget
            # does too; a backend that failed, or a policy this job refuses, says nothing of that run)
            internals.set_user_attrs(trial, {FAIL_REASON: str(exc), RACE_HORIZON: math.inf,  # never run again
                                             RACE_TIME: None, VIRTUAL_SECONDS: exc.spent,
                                             **({RACE_FINAL: None} if run.full or exc.diverged else {}),
                                             **({FORKED: exc.forked} if exc.forked else {})})
            raise optuna.TrialPruned(str(exc)) from None
        value = score[TIME_TO_TARGET]
        if gate is not None:  # the horizon it learnt, or a bound below it that decides its outcome alike
            limit = gate.settle(value, bool(score[REACHED]), score[VIRTUAL_SECONDS])
            if score.get(STOPPED_EARLY) and not score[VIRTUAL_SECONDS] < limit:  # as `evaluate` counts it
                score[STOPPED_EARLY] = 0
        # a run stopped at its horizon is evaluated there once more: reaching the target only at that extra
        # evaluation is not reaching it on the job's evaluation schedule, where it would be past the horizon
        eliminated = not value < limit
        internals.set_user_attrs(trial, {**score, RACE_TIME: None if eliminated else value,
                                         **({RACE_HORIZON: limit} if eliminated else {}),
                                         **({RACE_FINAL: score[FINAL_METRIC]} if _whole(run, score, limit) else {})})
        if eliminated:
            raise optuna.TrialPruned(f"past {limit:.1f} virtual s: slower than {self.settings.margin:g} times "
                                     f"the fastest of its round on seed {self.job.seed + run.seed}")
        return value

    def learns_horizon(self, run: Run) -> bool:
        """Whether `run` starts before its horizon is known and learns it while it trains
        (`autosync.search.race_horizon`): a run to the target with rivals, on the simulator, of a policy that
        forks from no other run's prefix (a switch point's run starts from the longest prefix kept below its
        horizon, so it waits for the horizon, and for the rivals that keep those prefixes)."""
        if run.full or not set(run.against) - {run.label} or not simulates_here(self.backend):
            return False
        if run.label not in self._forks_prefixes:
            self._forks_prefixes[run.label] = switch_param_of(self.job, policy_from_dict(self.points[run.label])) \
                is not None
        return not self._forks_prefixes[run.label]

    def _gate(self, trial: "optuna.Trial", run: Run) -> HorizonGate:
        """The horizon `run` (trial `trial`) learns while it trains, from its rivals' runs and progress."""
        study, board, margin = trial.study, self.board, self.settings.margin

        def read() -> tuple[float | None, float]:
            trials = internals.fresh_trials(study)
            rivals = _rivals_before(run, trial.number, [t for t in trials if not t.state.is_finished()])
            times = observed(study, before=trial.number, trials=trials).times
            finished = horizon(run, margin, times)  # from the rivals done: the horizon once none is running
            if not rivals:
                return finished, 0.0
            return None, min(finished, margin * min(board.progress(t._trial_id) for t in rivals))

        def clear() -> None:
            with storage_lock(self.storage, study.study_name):
                fail_dead_trials(study)

        return HorizonGate(read, clear)

    def _publish(self, trial: "optuna.Trial") -> Callable[[dict[str, Any], int], None]:
        """`evaluate`'s report: each evaluation's virtual time, published for the runs raced against this one."""
        board, trial_id = self.board, trial._trial_id

        def report(info: dict[str, Any], step: int) -> None:
            board.publish(trial_id, info["time"])

        return report


@dataclass
class Observed:
    """The race's runs done so far, as `race.plan` reads them, by (label, seed): times to the target (of the
    runs to it, and of BSP's runs to the end of the budget), the longest horizon a run was stopped at short of
    it, final metrics at the end of the budget, and the times to the target of the other runs to the end of
    the budget (`full_times`, which only round 5, towards BSP, reads)."""

    times: dict[tuple[str, int], float] = field(default_factory=dict)
    stopped: dict[tuple[str, int], float] = field(default_factory=dict)
    finals: dict[tuple[str, int], float | None] = field(default_factory=dict)
    full_times: dict[tuple[str, int], float] = field(default_factory=dict)
    ended: set[RunKey] = field(default_factory=set)  # the runs (`_key`) a trial of which ended


def observed(study: "optuna.Study", before: int | None = None,
             trials: "list[optuna.trial.FrozenTrial] | None" = None) -> Observed:
    """The race's runs finished in `study` (`Observed`; with `before`, those of trials numbered below it); the
    first finished trial of a run stands. `trials`: the study's trials read already (None: read here)."""
    import optuna

    done = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
    trials = internals.fresh_trials(study, done) if trials is None else [t for t in trials if t.state in done]
    seen = Observed()
    for t in trials:
        if RACE_RUN not in t.user_attrs or RACE_TIME not in t.user_attrs or (before is not None and t.number >= before):
            continue
        run = _run_of(t.user_attrs[RACE_RUN])
        key, value = (run.label, run.seed), t.user_attrs[RACE_TIME]
        seen.ended.add(_key(run))
        if RACE_FINAL in t.user_attrs:  # a run to the end of the budget, or one to the target that was one
            seen.finals.setdefault(key, t.user_attrs[RACE_FINAL])
            whole_time = None if run.full else t.user_attrs.get(TIME_TO_TARGET)
            if whole_time is not None:  # filed as its runs to the end of the budget are
                times_of_full_run(run.label, seen.times, seen.full_times).setdefault(key, whole_time)
        if value is not None:
            filed = times_of_full_run(run.label, seen.times, seen.full_times) if run.full else seen.times
            filed.setdefault(key, value)
        elif not run.full:
            seen.stopped[key] = max(seen.stopped.get(key, 0.0), t.user_attrs.get(RACE_HORIZON) or 0.0)
    return seen


def _whole(run: Run, score: dict[str, Any], limit: float) -> bool:
    """Whether `run`, scored `score` under horizon `limit`, was a run to the end of the budget: asked as one,
    or a run to the target that missed it and ended before its horizon (the budget ran out). Its final metric
    is then the final-metric round's (`observed`), which does not train it again."""
    return run.full or (not score[REACHED] and score[VIRTUAL_SECONDS] + score.get(FORKED, 0.0) < limit)


def _queued_before(study: "optuna.Study", storage: str, number: int, run: Run) -> Observed:
    """The race's runs of the trials queued before trial `number` (`run`), once those of them it races
    against on its seed have finished: what one process would have run before it, so its horizon is the
    same however many processes run the round (a run to the end of the budget, or one that races no one,
    does not wait: its horizon is none). Another process's run that its process died in is not waited for."""
    while True:
        # one read for both, whether it waits and what it reads then, of the trials queued before it alone
        trials = internals.fresh_trials(study, before=number)
        if not _blocked(run, number, [t for t in trials if not t.state.is_finished()]):
            return observed(study, before=number, trials=trials)
        time.sleep(POLL_SECONDS)
        with storage_lock(storage, study.study_name):
            fail_dead_trials(study)


def _rivals_before(run: Run, number: int, unfinished: "list[optuna.trial.FrozenTrial]"
                   ) -> "list[optuna.trial.FrozenTrial]":
    """The trials of `unfinished` (the study's waiting and running ones) that `run` (trial `number`) races
    against on its seed and that were queued before it: what its horizon waits for."""
    rivals = set(run.against) - {run.label}
    if run.full or not rivals:
        return []
    return [t for t in unfinished if t.number < number and RACE_RUN in t.user_attrs
            and _run_of(t.user_attrs[RACE_RUN]).seed == run.seed and _run_of(t.user_attrs[RACE_RUN]).label in rivals]


def _blocked(run: Run, number: int, unfinished: "list[optuna.trial.FrozenTrial]", learns: bool = False) -> bool:
    """Whether `run` (trial `number`) cannot start now: it has rivals queued before it that have not finished
    (`_rivals_before`), or, for a run that learns its horizon while it trains (`learns`,
    `RaceObjective.learns_horizon`), that have not started."""
    import optuna

    rivals = _rivals_before(run, number, unfinished)
    if learns:
        return any(t.state == optuna.trial.TrialState.WAITING for t in rivals)
    return bool(rivals)


def _claim_order(study: "optuna.Study", only: set[RunKey] | None = None,
                 learns: Callable[[Run], bool] = lambda run: False,
                 ) -> Callable[["list[optuna.trial.FrozenTrial]"], "list[optuna.trial.FrozenTrial]"]:
    """The order a process claims the waiting race trials in (`claim.optimize_one`): those that can start now
    first (`_blocked`: one that cannot waits for its rivals, idle; `learns`: whether a run learns its horizon
    while it trains, `RaceObjective.learns_horizon`), each group oldest first. `only` (the runs
    of the round the planning process waits on, while helpers run beside it): those alone, so that it never
    trains a run queued ahead of the round that asks for it (BSP's reference runs, `_with_reference`) while the
    round it must plan next has finished."""

    def order(waiting: "list[optuna.trial.FrozenTrial]") -> "list[optuna.trial.FrozenTrial]":
        ours = [t for t in waiting if RACE_RUN in t.user_attrs
                and (only is None or _key(_run_of(t.user_attrs[RACE_RUN])) in only)]
        if not ours:
            return []
        unfinished = _unfinished(study)
        runs = {t.number: _run_of(t.user_attrs[RACE_RUN]) for t in ours}
        return sorted(ours, key=lambda t: (_blocked(runs[t.number], t.number, unfinished, learns(runs[t.number])),
                                           t.number))

    return order


def _oldest_first(waiting: "list[optuna.trial.FrozenTrial]") -> "list[optuna.trial.FrozenTrial]":
    """One process's claim order: the waiting trials as read, oldest first."""
    return waiting


def race_search(study: "optuna.Study", request: "TuneRequest", on_trial: Callable[[int, int], None] | None,
                mine: set[str], helpers: Helpers) -> tuple[Answer, dict[str, Any]]:
    """Run the race on `request.job` in `study` (see the module's docstring) to its answer; returns the answer
    and BSP's reference made from the race's BSP runs (stored as the study's `BSP_REFERENCE`). The process
    tags of the `--n-jobs` helpers join `mine` (the command's processes, whose trials are its new ones)."""
    job, settings_ = request.job, request.settings
    settings = race_settings(request.race_settings)
    objective = RaceObjective(job, settings, settings_.penalty, settings_.backend, request.storage)
    accuracy = job.target.metric == "test_accuracy"
    helpers.start_racing()  # those `race_helpers` started (none: one process)
    mine.update(process_tag(p.pid) for p in helpers.procs)
    try:
        step, seen = _race(study, request, settings, objective, accuracy, helpers, on_trial)
    except BaseException:  # before the caller reports what was kept: the helpers' runs in progress end first
        helpers.close()
        raise
    helpers.finish()  # idle: they end while this process writes its record (joined by `race_helpers`)
    reference = _reference(study, job, seen.finals, seen.times)
    study.set_user_attr(BSP_REFERENCE, reference)
    return step, reference


def _race(study: "optuna.Study", request: "TuneRequest", settings: RaceSettings, objective: RaceObjective,
          accuracy: bool, helpers: Helpers, on_trial: Callable[[int, int], None] | None) -> tuple[Answer, Observed]:
    """`race_search`'s rounds: plan, queue, run and wait, until the plan answers; the answer and the runs seen."""
    settings_, done = request.settings, 0
    while True:
        seen = observed(study)
        step = plan(settings, objective.points, seen.times, seen.stopped, seen.finals, settings_.tolerance,
                    accuracy, budget=request.budget,
                    spent=spent(study, request.job, seen) if request.budget is not None else None,
                    full_times=seen.full_times)
        if isinstance(step, Answer):
            break
        with storage_lock(request.storage, study.study_name):
            fail_dead_trials(study)
            _queue(study, _with_reference(step, request.budget))
        if on_trial is not None:  # the bar counts the runs this process ran, out of those asked for so far
            on_trial(done, done + len(_waiting(study)))
        # one process claims the oldest waiting run (the one that can start), as Optuna would, from the read
        # `run_queued_trial` makes anyway rather than one more of Optuna's (`claiming_in`: a race's trials carry
        # no parameters, which Optuna's cache would have to know, as the helpers' claims rely on too)
        order = _claim_order(study, {_key(r) for r in step.runs}, objective.learns_horizon) if helpers.procs \
            else _oldest_first
        while run_queued_trial(study, request.storage, objective, catch=(), order=order):
            done += 1
            if on_trial is not None:
                on_trial(done, done + len(_waiting(study)))
        _await_round(study, request, step.runs, order)
    return step, seen


def spent(study: "optuna.Study", job: JobSpec, seen: Observed) -> float | None:
    """The race's cost so far in BSP trainings, as its cache record reports it (`cache.cost_fields`: every
    trial's virtual seconds over one BSP training, its runs' own length); None until BSP's two runs to the end
    of the budget are done, which are that unit (BSP failing there ends the race: `_reference`)."""
    if any((BSP_LABEL, s) not in seen.finals for s in range(SEARCH_SEEDS)):
        return None
    return search_cost(study) / bsp_training_seconds(_reference(study, job, seen.finals, seen.times))


def race_answer(study: "optuna.Study", answer: Answer, job_seed: int, budget: float | None = None,
                settings: RaceSettings | None = None) -> dict[str, Any]:
    """The race's answer as the cache record takes it (`autosync.search.study.cache.write_cache`): its policy,
    mean time and final metric over the two seeds (its time over both where the budget cut the race before the
    second but its runs for the final metric ran there, as BSP's time it is compared with is), its first trial,
    on how many of the two seeds a run of it reached the target (`REACHED`, of `RUNS`), the race's rounds
    (`rounds`), and its `budget` in BSP trainings (None: none) with the rounds that budget skipped
    (`Answer.cut_short`), and the `settings` it raced with (portfolio and margin)."""
    trials = [t for t in internals.fresh_trials(study) if RACE_RUN in t.user_attrs]
    own = [t for t in trials if _run_of(t.user_attrs[RACE_RUN]).label == answer.label]
    by_seed: dict[int, float | None] = {}  # the first finished run that gave its final metric on each seed
    for t in sorted(own, key=lambda t: t.number):
        if RACE_FINAL in t.user_attrs:
            by_seed.setdefault(_run_of(t.user_attrs[RACE_RUN]).seed, t.user_attrs[RACE_FINAL])
    finals = list(by_seed.values())
    reached = {_run_of(t.user_attrs[RACE_RUN]).seed for t in own if _reached(t)}
    value = answer.time
    if answer.cut_short:  # ranked on the first seed alone, perhaps: its final-metric runs may give it both
        seeds: dict[int, float] = {}
        for t in sorted(own, key=lambda t: t.number):
            if t.user_attrs.get(RACE_TIME) is not None:
                seeds.setdefault(_run_of(t.user_attrs[RACE_RUN]).seed, t.user_attrs[RACE_TIME])
        value = statistics.fmean(seeds.values()) if len(seeds) == SEARCH_SEEDS else value
    return {"policy": own[0].user_attrs[POLICY], "value": value,
            "final_metric": statistics.fmean(finals) if finals and None not in finals else None,
            "trial": min(t.number for t in own), REACHED: len(reached), RUNS: SEARCH_SEEDS,
            "race": {"rounds": rounds(trials, job_seed), "ranked": [[label, t] for label, t in answer.ranked],
                     "checked": answer.checked, "answer": answer.label, "budget": budget,
                     "cut_short": answer.cut_short, "towards_bsp": answer.towards_bsp,
                     **({"settings": settings_record(settings)} if settings is not None else {})}}


def settings_record(settings: RaceSettings) -> dict[str, Any]:
    """The race settings as its cache record keeps them: the portfolio and the margin."""
    return {"portfolio": list(settings.portfolio), "margin": settings.margin}


def race_differences(record: dict[str, Any], request: "TuneRequest") -> list[str]:
    """How the race of a cache `record` differs from what `request` asks: another --budget, or other
    settings than --race-settings names (compared only where the command names a file: a recurring job's
    answer stands when autosync's shipped settings change); none for a record of no race."""
    race = record.get("race")
    if not isinstance(race, dict):
        return []
    differs = []
    if race.get("budget") != request.budget:
        differs.append(f"--budget {race.get('budget') if race.get('budget') is not None else 'none'} (this command: "
                       f"{request.budget if request.budget is not None else 'none'})")
    if request.race_settings is not None and isinstance(race.get("settings"), dict) \
            and race["settings"] != settings_record(race_settings(request.race_settings)):
        differs.append(f"other settings than {request.race_settings}")
    return differs


def refuse_another_race(record: dict[str, Any], request: "TuneRequest", study_name: str) -> None:
    """A cached race that `race_differences` tells from this command's is refused in one line: it was
    returned as this command's answer."""
    differs = race_differences(record, request)
    if differs:
        raise UserError(f"study {study_name} holds the race's answer made with {' and '.join(differs)}: name another "
                        "--study to race with these, or run the command as it was to read that answer")


def race_top(record: dict[str, Any], count: int = 5) -> list[dict[str, Any]]:
    """The race's best candidates as `best_policies` lists a search's (`autosync tune --json`'s `top`), from its
    cache record's race (`race_answer`): the `count` fastest by their mean time over both seeds, each with its
    first trial (None in a record from before runs named their trials), its mean final metric where the
    final-metric round ran it on both seeds, and on how many of its seeds a run reached the target."""
    runs: dict[str, list[dict[str, Any]]] = {}
    for group in record["rounds"]:
        for run in group["runs"]:
            runs.setdefault(run["label"], []).append({**run, "seed": group["seed"]})
    out = []
    for label, seconds in record["ranked"][:count]:
        own = runs[label]
        by_seed: dict[int, Any] = {}  # the first run that gave its final metric on each seed
        for r in own:
            if "final" in r:
                by_seed.setdefault(r["seed"], r["final"])
        finals = list(by_seed.values())
        trials = [r["trial"] for r in own if "trial" in r]
        out.append({"trial": min(trials) if trials else None, "policy": own[0]["policy"], "time_to_target": seconds,
                    "final_metric": statistics.fmean(finals) if len(finals) == SEARCH_SEEDS and None not in finals
                    else None, "runs": SEARCH_SEEDS,
                    "reached": len({r["seed"] for r in own if r["time"] is not None and not r.get("missed")})})
    return out


def rounds(trials: "list[optuna.trial.FrozenTrial]", job_seed: int) -> list[dict[str, Any]]:
    """The race's runs in the order they were queued, grouped by round and seed in the order each group's
    first run was queued (BSP's reference runs, queued inside the portfolio round, `_with_reference`, are a
    group of their own after it): each run's label, its time to the target (None: stopped at its horizon)
    or final metric, whether it ran to its end short of the target (`missed`: its time is then the miss's score,
    `policy_score.MISS_PENALTY` times the seconds it ran), whether the seed was new to it, and whether it runs
    again a run to the target it was stopped in (`again`: what stopped it went out of the race, `race.plan`)."""
    groups: dict[tuple[str, int], dict[str, Any]] = {}
    seen: set[tuple[str, int]] = set()
    raced: set[tuple[str, int]] = set()  # the runs to the target done
    for t in sorted(trials, key=lambda t: t.number):
        run = _run_of(t.user_attrs[RACE_RUN])
        if RACE_TIME not in t.user_attrs:
            continue  # not finished (a killed process's), re-run under another number
        row = groups.setdefault((run.round, job_seed + run.seed),
                                {"round": run.round, "seed": job_seed + run.seed, "runs": []})
        key = (run.label, run.seed)
        row["runs"].append({"label": run.label, "trial": t.number, "policy": t.user_attrs[POLICY],
                            "time": t.user_attrs[RACE_TIME], **({"missed": True} if _missed(t) else {}),
                            **({"final": t.user_attrs[RACE_FINAL]} if RACE_FINAL in t.user_attrs else {}),
                            "new_seed": key not in seen, **({"again": True} if key in raced and not run.full else {})})
        seen.add(key)
        if not run.full:
            raced.add(key)
    return list(groups.values())


def _with_reference(step: Runs, budget: float | None) -> list[Run]:
    """The runs to queue for `step`: its own and, with the portfolio round of a race without a budget, BSP's
    runs to the end of the budget on both seeds after the round's first run. The final-metric round asks for
    them whatever the race finds (they are its reference, and BSP's answer's), and the round's first run
    races no one yet, so a second process runs them while that run sets the round's horizons, rather than
    beside the finalists' runs at the end. `race.plan` is unchanged: the round does not wait for them, and
    they are the runs round 4 asks for (the same cost, the same answer). With a budget they are the race's
    first round already."""
    first = step.runs[:1]
    if budget is not None or step.round != ROUNDS[0] or not first:
        return step.runs
    reference = [Run(BSP_LABEL, s, REFERENCE, full=True) for s in range(SEARCH_SEEDS)]
    return first + reference + step.runs[1:]


def _queue(study: "optuna.Study", runs: list[Run]) -> None:
    """Queue the runs not yet queued, running or done (another process's, or before an interruption)."""
    import optuna

    taken = {_key(_run_of(t.user_attrs[RACE_RUN])) for t in internals.fresh_trials(study)
             if RACE_RUN in t.user_attrs and t.state != optuna.trial.TrialState.FAIL}
    for run in runs:
        if _key(run) not in taken:
            study.enqueue_trial({}, user_attrs={RACE_RUN: dataclasses.asdict(run)}, skip_if_exists=False)


def _await_round(study: "optuna.Study", request: "TuneRequest", runs: list[Run],
                 order: Callable[["list[optuna.trial.FrozenTrial]"], "list[optuna.trial.FrozenTrial]"] | None
                 ) -> None:
    """Wait until every run of the round has finished (another process may still run one), failing and
    re-queuing the trials of processes that died (and running them here: a waiting trial that `order`, if
    any, lets this process claim ends the wait, as does a run of the round left with no trial waiting or
    running, which the caller's next plan queues again)."""
    import optuna

    while True:
        seen = observed(study)
        if all(_finished(r, seen) for r in runs):
            return
        with storage_lock(request.storage, study.study_name):
            fail_dead_trials(study)
        unfinished = _unfinished(study)
        waiting = [t for t in unfinished if t.state == optuna.trial.TrialState.WAITING]
        if order(waiting) if order is not None else waiting:
            return  # a dead process's run was re-queued: the caller's loop runs it
        live = {_key(_run_of(t.user_attrs[RACE_RUN])) for t in unfinished if RACE_RUN in t.user_attrs}
        if any(not _finished(r, seen) and _key(r) not in live for r in runs):
            return  # a run whose trial failed, not re-queued (a helper's error): planned and queued again
        time.sleep(POLL_SECONDS)


def _unfinished(study: "optuna.Study") -> list[Any]:
    """The study's waiting and running trials, read from the database."""
    import optuna

    return internals.fresh_trials(study, (optuna.trial.TrialState.WAITING, optuna.trial.TrialState.RUNNING))


def _waiting(study: "optuna.Study") -> list[Any]:
    import optuna

    return internals.fresh_trials(study, (optuna.trial.TrialState.WAITING,))


def _reference(study: "optuna.Study", job: JobSpec, finals: dict[tuple[str, int], float | None],
               times: dict[tuple[str, int], float]) -> dict[str, Any]:
    """BSP's reference (`BspReference`) from the race's BSP runs to the end of the budget."""
    bsp_finals = [finals.get((BSP_LABEL, s)) for s in range(SEARCH_SEEDS)]
    bsp_times = [times.get((BSP_LABEL, s)) for s in range(SEARCH_SEEDS)]
    if any(v is None for v in bsp_finals + bsp_times):
        raise RuntimeFailure("BSP itself fails on this job, so there is no reference to tune against")
    runs = [(t, _run_of(t.user_attrs[RACE_RUN])) for t in internals.fresh_trials(study)
            if RACE_RUN in t.user_attrs and RACE_TIME in t.user_attrs]
    full = [t for t, run in runs if RACE_FINAL in t.user_attrs and run.label == BSP_LABEL]  # to the budget's end
    # each run's own length: what it trained and what it continued from its run to the target (forked)
    lengths = [t.user_attrs.get(VIRTUAL_SECONDS, 0.0) + t.user_attrs.get(FORKED, 0.0) for t in full]
    return {TIME_TO_TARGET: statistics.fmean(bsp_times), FINAL_METRIC: statistics.fmean(bsp_finals),
            REACHED: sum(t.user_attrs.get(REACHED, 0) for t in full), RUNS: SEARCH_SEEDS,
            VIRTUAL_SECONDS: 0.0,  # its runs are the race's trials, counted there
            "seeds": [job.seed + s for s in range(SEARCH_SEEDS)], BSP_TRAINING_SECONDS: statistics.fmean(lengths)}



def _reached(trial: "optuna.trial.FrozenTrial") -> bool:
    """Whether the trial's run reached the target (before its horizon: one stopped there has no time)."""
    return trial.user_attrs.get(RACE_TIME) is not None and not _missed(trial)


def _missed(trial: "optuna.trial.FrozenTrial") -> bool:
    """Whether the trial's run ended short of the target without being stopped at its horizon: at the end of the
    budget, its time the miss's penalised score."""
    return trial.user_attrs.get(RACE_TIME) is not None and not trial.user_attrs.get(REACHED, 1)


def _run_of(stored: dict[str, Any]) -> Run:
    """A trial's `RACE_RUN` (`Run`'s fields, as stored) as the run."""
    run = Run(**stored)
    return dataclasses.replace(run, against=tuple(run.against))


def _key(run: Run) -> RunKey:
    """A run's identity: one trial runs it (its round aside). A run to the target is told by its rivals too:
    one stopped at its horizon is asked again, against fewer rivals, once a rival that set that horizon is out
    of the race (`race.plan`)."""
    return run.label, run.seed, run.full, () if run.full else run.against


def _finished(run: Run, seen: Observed) -> bool:
    """Whether `run` is done as `race.plan` reads it: its final metric, or its time, or a trial of it ended."""
    key = (run.label, run.seed)
    if run.full:
        return key in seen.finals
    return key in seen.times or _key(run) in seen.ended


@dataclass
class Helpers:
    """The race's `--n-jobs` - 1 helper processes (`race_helpers`): `go` tells them the study exists; `raced`:
    the race ran with them, so they are stopped and joined at the end (terminated otherwise: still warming up,
    where the cache answered or the request was refused)."""

    procs: list[Any] = field(default_factory=list)
    go: Any = None  # the event set once the study exists (None: no helpers)
    stop: Any = None  # the event set once the race has its answer
    raced: bool = False
    closed: bool = False  # `close` has run (a second call would set `stop`, whose lock a killed helper may hold)

    def start_racing(self) -> None:
        """Let the helpers load the study and run its queued trials."""
        self.raced = True
        if self.go is not None:
            self.go.set()

    def finish(self) -> None:
        """Tell the helpers the race is over: each ends after its run, while this process writes its record."""
        if self.stop is not None:
            self.stop.set()

    def close(self) -> None:
        """Stop the helpers and wait for them: those that raced end after their run; those that no race used
        (the cache answered, or the request was refused) are killed at once, still warming up (they touch the
        storage only once the race starts: `start_racing`)."""
        if self.closed:  # the cache answered: closed there, and again on the way out
            return
        self.closed = True
        self.finish()
        for p in self.procs:
            if not self.raced:
                p.kill()  # it has touched no storage yet; SIGTERM, handled as Ctrl-C, waits for its imports
            p.join()


@contextlib.contextmanager
def race_helpers(request: "TuneRequest") -> Iterator[Helpers]:
    """Within: the race's helpers (`Helpers`), spawned as soon as the command knows it races in several
    processes, before it opens the storage, so that each imports torch and loads the job while the command
    opens the storage and plans the first round (seconds on either side); none for one process, or another
    search. They share this process's kept runs (`autosync.engine.forks.sharing`, entered here, before they
    start) and wait for `Helpers.start_racing` before they touch the storage, which the command creates."""
    if request.sampler != RACE or request.n_jobs <= 1:
        yield Helpers()
        return
    context = mp.get_context("spawn")
    go, stop = context.Event(), context.Event()
    with sharing(True):
        helpers = Helpers(start_helpers(request.storage, request.n_jobs - 1, _helper,
                                        lambda i: (request, request.study_name, go, stop)), go, stop)
        try:
            yield helpers
        finally:
            helpers.close()


def _helper(request: "TuneRequest", name: str, go: Any, stop: Any, parent: Parent) -> None:
    """A helper process: warm up, wait for the study (`go`), then run its queued race trials as they come,
    until `stop` is set."""
    import optuna

    follow_parent(parent)
    # not at the top: torch (seconds), which a tune answered from the cache does not load. Imported, and the
    # job's data loaded, while the command opens the storage and trains the round's first run, which this
    # one's first run races (training beside it up to its bound: `autosync.search.race_horizon`), rather than
    # inside that run
    from autosync.workloads.build import build_workload

    build_workload(request.job)
    objective = RaceObjective(request.job, race_settings(request.race_settings), request.settings.penalty,
                              request.settings.backend, request.storage)
    while not go.wait(POLL_SECONDS):
        if stop.is_set() or parent.gone():
            return
    study = optuna.load_study(study_name=name, storage=open_storage(request.storage),
                              pruner=optuna.pruners.NopPruner())  # as the command's (`tune.load_study`)
    order = _claim_order(study, learns=objective.learns_horizon)
    # Ctrl-C reaches the helpers too: `helper_processes._run_then_end` holds it out of writes and tags
    while not stop.is_set() and not parent.gone():  # a killed command's helper stops too
        if not (_waiting(study) and run_queued_trial(study, request.storage, objective, catch=(), order=order)):
            stop.wait(POLL_SECONDS)  # none queued (the next round not yet planned): look again
