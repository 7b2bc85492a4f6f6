"""The race on common seeds: the search procedure of `autosync tune --sampler race`, one ranking rule from
the first run to the answer (docs/concepts/tuning.md).

On a job of n workers the candidates are the lattice's labelled points (`autosync.lattice.labelled_points`),
and the race runs:

1. **Portfolio** (`RaceSettings.portfolio`, fitted on the table by `autosync fit`): each member on the first
   search seed (job.seed), stopped once it runs past `margin` times the fastest finished member's time on
   that seed: past it, it cannot survive the round whatever it does.
2. **Second seed**: the members within `margin` of the round's fastest, at most the faster half (successive
   halving's eta = 2: Jamieson and Talwalkar 2016, Algorithm 1), run on the second search seed (job.seed + 1),
   raced the same way. From here every candidate is ranked by its mean over both seeds: candidates are
   compared only on seeds they all ran. A member out on the second seed (stopped at its horizon there, or
   diverged) is out of the race, and the runs it stopped on the first seed are eliminated no longer: rounds 1
   and 2 are planned again without it, so those within `margin` times the fastest member still racing run
   again (from the start) to that horizon, and the members then within the margin go on. (Racing as irace does
   never takes a run back; here a member fast on the first seed by luck that diverged on the second left no
   candidate at all.) Leave-one-family-out on the table it answers alike for fewer BSP trainings
   (benchmarks/race_rounds.md): a lucky run no longer eliminates the rest, so the fit takes narrower margins.
   Taking a finalist that broke the final-metric rule out the same
   way (the rounds planned again without it) was tried too, on the same jobs: a mean log ratio of 0.1161
   against 0.0784, for a mean 14.79 BSP trainings against 10.19.
3. **Local step**: the leader's neighbours on the job's own lattice (`neighbours`: one parameter changed,
   static k by one worker) run on the first seed, then those not stopped there on the second, each stopped
   at `margin` times the leader's time on that seed. (A hill climb was tried on the table in its place: the
   final-metric round first, then the neighbours of the fastest candidate keeping the rule, those faster
   than it checked in turn, and again around each that kept it until none did. Of the 16 answers over 1.15
   of the grid's choice, 15 had never raced that choice, and the climb brought 5 within 1.02 of it; but
   leave-one-family-out it answered a mean log ratio only 0.013 lower (90% interval -0.090 to +0.068),
   since on the held-out seeds a closer fit to two search seeds is as often slower, for 0.95 more BSP
   trainings (0.50 to 1.38); one step around that candidate, without climbing, answered 0.037 higher for
   0.56 more. A composition, and a preset with no parameters such as NAG-ASGD, has no neighbour by this
   rule: the lattice's compositions differ from each other in two slots. Stepping in the composition's slots
   where the leader had no neighbour (one slot changed, the presets read as their slots) was tried too: with
   each fold's settings as they are, it changed one answer of the 64, 5.16 to 0.62 of the grid's choice, and
   cost more on 12 races that answered alike; with the settings fitted again, a mean log ratio 0.047 lower
   (-0.127 to +0.029) for 0.09 more BSP trainings (-0.25 to +0.43), within the noise. Stepping in the slots
   from every leader answered 0.025 higher (-0.062 to +0.115).)
4. **Final metric**: BSP's runs to the end of the budget on both seeds (the rule's reference), and the
   candidates ranked by mean, fastest first, each continued to the end of the budget on both seeds: the first
   that keeps BSP's final metric by the paired test (`keeps_paired`) is the answer, as the grid's choice is
   made over every lattice point (`autosync.experiments.reference_grid.feasible_best`), here over those raced.
   (Checking at most the 2 or 3 fastest, a number `autosync fit` chose, was the rule before: on the table,
   leave-one-family-out with margins 1.1-4 and sizes 4-12 chosen by their loss on the training jobs, checking
   every one answered a mean log ratio to the grid's choice of 0.1125 against 0.1393, for 0.3 more BSP
   trainings; 48 of the 64 races checked one.)
5. **Towards BSP**, only where every candidate checked broke the rule: a bisection on static k with BSP's learning
   rate (backup workers, `lr_rule` fixed) between waiting for none of the n workers and waiting for all of
   them (BSP), each k tried run to the end of the budget on both seeds, for the fewest workers that keep
   BSP's final metric (`_towards_bsp`). It rests on the premise of Sync-Switch's binary search for its
   switch point (sec. IV-A): the closer a run is to BSP, here the more workers an update waits for at the
   same learning rate, the closer its final metric is to BSP's, so the k that keep it are the upper end of
   1..n. That k is the answer where it reached the target faster than BSP over both seeds; BSP otherwise.
   The bisection has no constant to fit: at most ceil(log2 n) k tried, two runs each.
   (Running rounds 1-3 again without a finalist that failed, so that what it stopped runs again past it,
   was tried on the table: leave-one-family-out on the 16 committed jobs it answered a median 1.09 of the
   grid's choice against 1.00 here, for a median 5.28 BSP trainings against 4.89. A fitted fallback was
   tried too: where every finalist broke the rule, up to two labels, fitted greedily on the training jobs
   that fell back to BSP, each run whole on both seeds and answered if faster than BSP and keeping the rule.
   Leave-one-family-out it changed no held-out answer, the training jobs that fell back being one to three
   per fold, for a median 5.38 BSP trainings against 4.89. Planning the race again without the finalists
   where every one broke the rule, so that they set no round's best and no horizon and the runs stopped
   below the new horizon run again, was tried on the table with the shipped settings: once, it changed none
   of the 16 answers for about 4.5 more BSP trainings on each of the 4 jobs that fell back; as often as it
   took, it turned one of them from 7.4 to 1.02 of the grid's choice for 12.7 BSP trainings there, and
   13-17 on the other three, still BSP.)

Each of rounds 2, 3 and 5, the faster-half cut and running again is left out in turn, the race fitted
again on the other families, in benchmarks/race_rounds.md (`plan(leave_out=...)`), and fitted on those
families then raced on two never fitted on, in benchmarks/blind_rounds.md; the figures, and why the second
seed stays, are in docs/concepts/race.md.

With a budget in BSP trainings (`tune --budget`; none: the rounds above, as they are), it is the race's
stopping rule. BSP's two runs to the end of the budget come first (the **reference** round: the unit of the
budget and the final metric's reference, which the last round needs anyway); then each of rounds 1-3 (each
seed of the local step on its own) starts only while the cost so far is under the budget. Once it is spent
the race goes straight to round 4, its candidates ranked on the seeds they all ran (on the first seed alone
where the second never ran; a candidate never run is out). Round 4 (and round 5, where it fails) always
runs, since it keeps the answer safe, so the cost can pass the budget by those rounds; a round is never cut
in the middle (its runs are asked for together, and one with a run of it done is finished whatever the
cost: so are rounds 1 and 2 planned again without a member out), and the answer lists the rounds the budget
skipped (`Answer.cut_short`).

`plan` is the procedure as a function of the runs done so far: it returns the next runs, or the answer.
Whoever runs them (the tune's study, `autosync.search.race_trials`; the table, `autosync.experiments.race_fit`)
feeds back each run's penalised time (or the horizon it was stopped at) or final metric (a finalist's run
to the end of the budget gives its final metric only, BSP's its time too, so that a round the budget skipped
stays skipped) and, with a budget, the cost so far, and calls it again, so a resumed race picks up where it
stood and the answer does not depend on the order the runs finished in: a run stopped at a horizon set from
fewer finished runs is slower than `margin` times the round's fastest either way. How long a run may take
(`horizon`) is for the runner to ask when it starts.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import yaml

from autosync.core.errors import UserError
from autosync.data import RACE_SETTINGS
from autosync.lattice import BSP_LABEL, BSP_POLICY, family_of, is_label

__all__ = ["ABLATABLE", "Answer", "FASTER_HALF", "REFERENCE", "ROUNDS", "RUN_AGAIN", "RaceSettings", "Run", "Runs",
           "SEARCH_SEEDS", "WIDEST_ROUND", "horizon", "keeps_paired", "load_settings", "neighbours", "plan",
           "point_key", "portfolio_members", "race_settings", "times_of_full_run"]

SEARCH_SEEDS = 2  # seeds a race compares on (the table's search seeds: `autosync.table.build.SEARCH_SEEDS`)
# the runs of one round that never wait for each other, the most processes `--n-jobs` starts by default: the
# final-metric round's runs to the end of the budget, BSP's and a finalist's, on each search seed
WIDEST_ROUND = 2 * SEARCH_SEEDS
HALVING = 2  # successive halving's eta: the faster 1/eta of a round's survivors go on (Jamieson & Talwalkar)
ROUNDS = ("portfolio", "second seed", "local step", "final metric", "towards BSP")
EXPLORATION = ROUNDS[:3]  # the rounds a budget can skip (the final metric always runs)
REFERENCE = "reference"  # with a budget, the first round: BSP's two runs to the end of the budget
RUN_AGAIN = "run again"  # rounds 1-2 planned again without a member out on the second seed (`plan`)
FASTER_HALF = "faster half"  # successive halving's cut: at most the faster 1/HALVING of round 1's survivors go on
# what `plan(leave_out=...)` can leave out, each for its ablation (benchmarks/bench_race_rounds.py): the second
# seed (every candidate then ranked on the first alone), the local step, the faster-half cut, round 5, running again
ABLATABLE = (ROUNDS[1], ROUNDS[2], FASTER_HALF, ROUNDS[4], RUN_AGAIN)


@dataclass(frozen=True)
class RaceSettings:
    """What `autosync fit` fits on the table (autosync/data/race.yaml): the portfolio, in order, and the
    elimination margin."""

    portfolio: tuple[str, ...]
    margin: float
    fitted_on: dict[str, Any] = field(default_factory=dict)  # the table, jobs and families it was fitted on

    def to_dict(self) -> dict[str, Any]:
        return {"portfolio": list(self.portfolio), "margin": self.margin, "fitted_on": self.fitted_on}


def race_settings(path: str | Path | None = None) -> RaceSettings:
    """The race's settings: `path` (--race-settings), else the ones autosync ships (fitted by `autosync fit`)."""
    return load_settings(path or RACE_SETTINGS)


def load_settings(path: str | Path) -> RaceSettings:
    """The race's settings from `path`, each field checked (a bad file: one line naming it)."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise UserError(f"{path}: cannot read the race's settings: {exc}".splitlines()[0]) from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: must be a mapping with portfolio and margin, but got {type(data).__name__}")
    unknown = sorted(set(data) - {"portfolio", "margin", "fitted_on"})
    if unknown:
        raise UserError(f"{path}: unknown field {unknown[0]!r} (the race's settings are portfolio, margin and "
                        "fitted_on; fit them again with `autosync fit`)")
    portfolio, margin = data.get("portfolio"), data.get("margin")
    if not isinstance(portfolio, list) or not portfolio or not all(isinstance(m, str) and m for m in portfolio):
        raise UserError(f"{path}: portfolio must be a non-empty list of labels, but got {portfolio!r}")
    unknown = [m for m in portfolio if not is_label(m)]
    if unknown:
        raise UserError(f"{path}: portfolio label {unknown[0]!r} names no lattice point on jobs of any size (labels "
                        "as `autosync fit` writes them: bsp, backup:k=0.25n,lr_rule=sqrt, asp,lr_rule=staleness, ...)")
    if isinstance(margin, bool) or not isinstance(margin, (int, float)) or not margin >= 1.0:
        raise UserError(f"{path}: margin must be a number >= 1, but got {margin!r}")
    return RaceSettings(tuple(portfolio), float(margin), data.get("fitted_on") or {})


@dataclass(frozen=True)
class Run:
    """One run the race asks for: a label on search seed `seed` (0: job.seed, 1: the next), to the target
    raced against `against` (stopped past `margin` times the fastest of them on that seed; no one: not
    stopped), or with `full` to the end of the budget for its final metric."""

    label: str
    seed: int
    round: str
    against: tuple[str, ...] = ()
    full: bool = False


@dataclass(frozen=True)
class Runs:
    """The next runs: all of one round's that are missing."""

    round: str
    runs: list[Run]


@dataclass(frozen=True)
class Answer:
    """The race's answer: a label, its mean time and the candidates ranked by their mean, over the seeds they
    all ran (both, unless the budget cut the race short before the second, or its ablation left it out)."""

    label: str
    time: float
    ranked: list[tuple[str, float]]
    checked: list[str]  # the candidates whose final metric was checked, in order
    cut_short: list[str] = field(default_factory=list)  # the rounds the budget skipped (empty: none)
    towards_bsp: list[str] = field(default_factory=list)  # the static k round 5 tried, in order (empty: none)


def point_key(policy: dict[str, Any]) -> str:
    """One key per lattice point (two labels may name one point: a share of n and the k it resolves to)."""
    return policy["policy"] + repr(sorted(policy["params"].items()))


def times_of_full_run(label: str, times: dict[tuple[str, int], float],
                      full_times: dict[tuple[str, int], float]) -> dict[tuple[str, int], float]:
    """Where a run of `label` to the end of the budget gives its time to the target, as `plan` reads times:
    BSP's to the race's `times` (BSP's time), another's to `full_times` (round 5's only), so that a round the
    budget skipped is not taken for run where a finalist's runs for its final metric fill it. Its runners (the
    tune's study, `autosync.search.race_trials.observed`; the table, `autosync.experiments.race_fit.race`)
    both file such runs here."""
    return times if label == BSP_LABEL else full_times


def neighbours(leader: dict[str, Any], points: dict[str, dict[str, Any]]) -> list[str]:
    """The labels of the lattice points one step from `leader` on the job's own lattice (`points`: label ->
    point): the same policy with exactly one parameter changed, static k by one worker up or down. A point
    two labels stand for is named once."""
    out, seen = [], {point_key(leader)}
    for label, other in sorted(points.items()):
        if other["policy"] != leader["policy"] or other["params"].keys() != leader["params"].keys():
            continue
        changed = [k for k in leader["params"] if leader["params"][k] != other["params"][k]]
        if len(changed) != 1 or point_key(other) in seen:
            continue
        if changed[0] == "k" and abs(other["params"]["k"] - leader["params"]["k"]) != 1:
            continue  # static k moves one worker at a time
        seen.add(point_key(other))
        out.append(label)
    return out


def portfolio_members(settings: RaceSettings, points: dict[str, dict[str, Any]], source: str = "") -> list[str]:
    """The portfolio's labels that name a point of the job's lattice (`points`), each point once; none is a
    one-line UserError (prefixed by `source`, the settings file, where given)."""
    members = _distinct([m for m in settings.portfolio if m in points], points)
    if not members:
        raise UserError(f"{source}none of the race's portfolio labels {list(settings.portfolio)} names a point of "
                        "this job's lattice")
    return members


def keeps_paired(finals: list[float | None], bsp: list[float | None], tolerance: float, accuracy: bool) -> bool:
    """The final-metric rule as a test on paired seeds: the candidate's mean difference to BSP over the seeds
    both ran (`finals`, `bsp`: their final metrics per seed; None: diverged) is within `tolerance`, widened
    to BSP's own difference between those seeds where that is larger (a difference smaller than BSP's own
    seed-to-seed spread cannot be told from none). `accuracy`: higher is better."""
    if not finals or any(v is None for v in finals + bsp):
        return False
    sign = -1.0 if accuracy else 1.0  # positive: worse than BSP (`autosync.search.objective.constraint`)
    worse = statistics.fmean(sign * (o - b) for o, b in zip(finals, bsp))
    return worse <= max(tolerance, max(bsp) - min(bsp))


def plan(settings: RaceSettings, points: dict[str, dict[str, Any]], times: dict[tuple[str, int], float],
         stopped: dict[tuple[str, int], float], finals: dict[tuple[str, int], float | None], tolerance: float,
         accuracy: bool, *, budget: float | None = None, spent: float | None = None,
         full_times: dict[tuple[str, int], float] | None = None, leave_out: frozenset[str] = frozenset()
         ) -> Runs | Answer:
    """The race's next runs given those done (see the module's docstring), or its answer.

    `points`: the job's labelled lattice points; `times[(label, seed)]`: a run to the target's penalised
    time (BSP's run to the end of the budget gives BSP's; another's does not, so that a round the budget
    skipped is not taken for run where a finalist's runs for its final metric fill it);
    `stopped[(label, seed)]`: the horizon a run of it was stopped at, short of the target (out of the race
    on that seed); `finals[(label, seed)]`: a run to the end of the budget's final metric (None: diverged). `budget`: the cost cap in BSP trainings (None: every round runs); `spent`: the cost so far in
    BSP trainings, needed once BSP's two runs to the end of the budget are done (None before); `full_times`:
    the time to the target of round 5's runs to the end of the budget (`_towards_bsp`); `leave_out`, for the
    ablations (benchmarks/bench_race_rounds.py), of `ABLATABLE`: round 2 (rounds 2-3 then race on the first
    seed alone, and the candidates are ranked there), round 3 (no local step), `FASTER_HALF` (every member within
    the margin goes on), round 5 (BSP answering where every finalist broke the rule), `RUN_AGAIN` (a member out
    on the second seed still sets the first seed's horizons).
    Given the same runs and cost, the same next runs or answer whatever order
    the runs finished in."""
    full_times = full_times or {}
    towards_bsp = ROUNDS[4] not in leave_out
    raced_on = range(1 if ROUNDS[1] in leave_out else SEARCH_SEEDS)  # the seeds rounds 2-3 race on
    members = portfolio_members(settings, points)
    gate = _Gate(budget, spent, times, stopped)
    if budget is not None:
        reference = [Run(BSP_LABEL, s, REFERENCE, full=True) for s in range(SEARCH_SEEDS)
                     if (BSP_LABEL, s) not in finals]
        if reference:
            return Runs(REFERENCE, reference)
        if spent is None:
            raise ValueError("plan: a budget needs the cost spent once BSP's reference runs are done")
        gate.ask([BSP_LABEL], range(SEARCH_SEEDS))
    # a member out on the second seed sets no horizon on the first: the runs it stopped there, past margin x
    # its time but within margin x the fastest member still racing, run again against those still racing
    # (a run stopped there that ran to its end, its final metric known, would only run the same again)
    racing = [m for m in members if RUN_AGAIN in leave_out or not _out(m, 1, times, stopped)]
    best = min((times.get((m, 0), math.inf) for m in racing), default=math.inf)
    again = {m for m in racing if len(racing) < len(members) and (m, 0) in stopped and (m, 0) not in finals
             and stopped[(m, 0)] < settings.margin * best}
    missing = _missing(racing, 0, ROUNDS[0], tuple(racing), times, stopped, again)
    if gate.runs(missing, members, 0, stage=0):
        return Runs(ROUNDS[0], missing)
    # strictly within the margin: a run stopped at its horizon took at least margin x the round's fastest
    alive = sorted((m for m in racing if times.get((m, 0), math.inf) < settings.margin * best),
                   key=lambda m: (times[(m, 0)], members.index(m)))
    alive = alive[: max(1, math.ceil(len(alive) / (1 if FASTER_HALF in leave_out else HALVING)))]
    gate.ask(members, [0])
    missing = _missing(alive, 1, ROUNDS[1], tuple(alive), times, stopped) if len(raced_on) > 1 else []
    if gate.runs(missing, alive, 1, stage=1):
        return Runs(ROUNDS[1], missing)
    if gate.cut_short:
        return _final(points, times, finals, tolerance, accuracy, _ranked(alive, times, stopped),
                      gate.cut_short, full_times, towards_bsp)
    gate.ask(alive, [1])
    if not alive:  # every member out on the second seed: none to step from or to check
        return _final(points, times, finals, tolerance, accuracy, [], [], full_times, towards_bsp)
    leader = min(alive, key=lambda m: (_mean(times, m, raced_on), alive.index(m)))
    taken = {point_key(points[m]) for m in alive}
    steps = [] if ROUNDS[2] in leave_out else \
        [n for n in neighbours(points[leader], points) if point_key(points[n]) not in taken]
    for seed in raced_on:  # seed by seed: a neighbour stopped on one seed is out
        missing = _missing(steps, seed, ROUNDS[2], (leader,), times, stopped)
        if gate.runs(missing, steps, seed, stage=2 + seed):
            return Runs(ROUNDS[2], missing)
        if gate.cut_short:  # with the local step's candidates where they ran its first seed
            return _final(points, times, finals, tolerance, accuracy,
                          _ranked(alive + steps if seed else alive, times, stopped), gate.cut_short, full_times,
                          towards_bsp)
        gate.ask(steps, [seed])
        steps = [n for n in steps if (n, seed) in times]
    return _final(points, times, finals, tolerance, accuracy, _ranked(alive + steps, times, stopped), [],
                  full_times, towards_bsp)


def _final(points: dict[str, dict[str, Any]], times: dict[tuple[str, int], float],
           finals: dict[tuple[str, int], float | None], tolerance: float, accuracy: bool,
           ranked: list[tuple[str, float]], cut_short: list[str],
           full_times: dict[tuple[str, int], float], towards_bsp: bool) -> Runs | Answer:
    """The final-metric round on `ranked`, in order: the runs it lacks, or the answer (round 5's,
    `_towards_bsp`, where every candidate broke the rule; BSP's without `towards_bsp`)."""
    checked: list[str] = []
    for label, time in ranked:
        if point_key(points[label]) == point_key(BSP_POLICY):  # BSP keeps its own final metric: no check,
            # but its runs to the end of the budget are the answer's reference (its final metric, the cost's unit)
            missing = [Run(BSP_LABEL, s, ROUNDS[3], full=True) for s in range(SEARCH_SEEDS)
                       if (BSP_LABEL, s) not in finals]
            if missing:
                return Runs(ROUNDS[3], missing)
            return Answer(label, time, ranked, checked, cut_short)
        wanted = [Run(x, s, ROUNDS[3], full=True) for x in (BSP_LABEL, label) for s in range(SEARCH_SEEDS)]
        missing = [r for r in wanted if (r.label, r.seed) not in finals]
        if missing:
            return Runs(ROUNDS[3], missing)
        checked.append(label)
        if keeps_paired([finals[(label, s)] for s in range(SEARCH_SEEDS)],
                        [finals[(BSP_LABEL, s)] for s in range(SEARCH_SEEDS)], tolerance, accuracy):
            return Answer(label, time, ranked, checked, cut_short)
    if not towards_bsp:  # the ablation: BSP answers, without the runs only round 5 asks for
        return Answer(BSP_LABEL, _mean(times, BSP_LABEL), ranked, checked, cut_short)
    return _towards_bsp(points, times, finals, full_times, tolerance, accuracy, ranked, checked, cut_short)


def _towards_bsp(points: dict[str, dict[str, Any]], times: dict[tuple[str, int], float],
                 finals: dict[tuple[str, int], float | None], full_times: dict[tuple[str, int], float],
                 tolerance: float, accuracy: bool, ranked: list[tuple[str, float]], checked: list[str],
                 cut_short: list[str]) -> Runs | Answer:
    """Round 5 (see the module's docstring): the bisection's next static k's runs to the end of the budget on
    both seeds, or the answer, the fewest workers keeping BSP's final metric where that k is faster than BSP
    over both seeds (`full_times`), else BSP."""
    fixed = [label for label, p in sorted(points.items())  # the lr rule first: `family_of` builds the policy
             if p["params"].get("lr_rule") == "fixed" and "k" in p["params"] and family_of(p) == "static k"]
    static_ks = sorted(_distinct(fixed, points), key=lambda label: points[label]["params"]["k"])
    below, keeps = -1, len(static_ks)  # indices: -1 waits for no worker (breaks the rule), len(static_ks) is BSP
    tried: list[str] = []
    # BSP's own runs first: no finalist asked for them where every candidate was stopped on a seed
    missing = [Run(BSP_LABEL, s, ROUNDS[3], full=True) for s in range(SEARCH_SEEDS) if (BSP_LABEL, s) not in finals]
    if missing:
        return Runs(ROUNDS[3], missing)
    bsp = [finals[(BSP_LABEL, s)] for s in range(SEARCH_SEEDS)]
    while keeps - below > 1:
        middle = (below + keeps) // 2
        label = static_ks[middle]
        missing = [Run(label, s, ROUNDS[4], full=True) for s in range(SEARCH_SEEDS) if (label, s) not in finals]
        if missing:
            return Runs(ROUNDS[4], missing)
        tried.append(label)
        if keeps_paired([finals[(label, s)] for s in range(SEARCH_SEEDS)], bsp, tolerance, accuracy):
            keeps = middle
        else:
            below = middle
    bsp_time = _mean(times, BSP_LABEL)
    if keeps < len(static_ks):
        time = statistics.fmean(full_times.get((static_ks[keeps], s), math.inf) for s in range(SEARCH_SEEDS))
        if time < bsp_time:
            return Answer(static_ks[keeps], time, ranked, checked, cut_short, tried)
    return Answer(BSP_LABEL, bsp_time, ranked, checked, cut_short, tried)


class _Gate:
    """Which of the race's rounds 1-3 run under a budget (`plan`): all of them without one; with one, a
    round starts only while the cost spent is under the budget, and a round begun (a run of it done that no
    earlier round asked for) is finished. The first round it holds back ends the exploration
    (`cut_short`: that round and the later ones)."""

    def __init__(self, budget: float | None, spent: float | None, times: dict[tuple[str, int], float],
                 stopped: dict[tuple[str, int], float]):
        self.open = budget is None or (spent is not None and spent < budget)
        self.times, self.stopped = times, stopped
        self.asked: set[tuple[str, int]] = set()  # the runs the earlier rounds asked for
        self.cut_short: list[str] = []

    def ask(self, labels: list[str], seeds: "Iterable[int]") -> None:
        """Record a round's runs of `labels` on `seeds` as asked for, so that the later rounds' check of
        whether they have begun does not take them for their own."""
        self.asked.update((label, seed) for label in labels for seed in seeds)

    def runs(self, missing: list[Run], labels: list[str], seed: int, stage: int) -> bool:
        """Whether the round of `labels` on `seed` runs its `missing` runs now; where the budget holds it
        back, the race is cut short from it (`stage`: 0 portfolio, 1 second seed, 2 and 3 the local step's
        seeds)."""
        if not missing or self.cut_short:  # nothing to run, or the exploration already over
            return False
        begun = any(key not in self.asked and (key in self.times or key in self.stopped)
                    for key in ((label, seed) for label in labels))
        if self.open or begun:
            return True
        self.cut_short = list(EXPLORATION[stage:]) or [f"{EXPLORATION[-1]} on the second seed"]
        return False


def _ranked(order: list[str], times: dict[tuple[str, int], float],
            stopped: dict[tuple[str, int], float]) -> list[tuple[str, float]]:
    """The candidates of `order` not stopped on a seed, ranked by their mean time over the seeds all of them
    ran (both, unless the budget cut the race short before some ran the second, or its ablation left it out);
    ties in `order`."""
    left = [m for m in order if not any((m, s) in stopped and (m, s) not in times for s in range(SEARCH_SEEDS))]
    seeds = [s for s in range(SEARCH_SEEDS) if all((m, s) in times for m in left)]
    return sorted(((m, statistics.fmean(times[(m, s)] for s in seeds)) for m in left),
                  key=lambda mt: (mt[1], order.index(mt[0])))


def _missing(labels: list[str], seed: int, round_: str, against: tuple[str, ...], times: dict[tuple[str, int], float],
             stopped: dict[tuple[str, int], float], again: "set[str] | frozenset[str]" = frozenset()) -> list[Run]:
    """The runs of `labels` on `seed` that the round lacks: neither finished nor stopped there, or in `again`
    (stopped at a horizon that is one no longer: to run again, to a later one)."""
    return [Run(label, seed, round_, against) for label in labels
            if (label, seed) not in times and ((label, seed) not in stopped or label in again)]


def _out(label: str, seed: int, times: dict[tuple[str, int], float], stopped: dict[tuple[str, int], float]) -> bool:
    """Whether `label` is out of the race on `seed`: its run there stopped short of the target (at its horizon,
    or where it diverged)."""
    return (label, seed) in stopped and (label, seed) not in times


def horizon(run: Run, margin: float, times: dict[tuple[str, int], float]) -> float:
    """How long `run` may take before it is stopped: `margin` times the fastest finished run it races
    against on its seed (`math.inf`: none finished yet, or a run to the end of the budget)."""
    if run.full:
        return math.inf
    done = [times[(a, run.seed)] for a in run.against if (a, run.seed) in times and a != run.label]
    return margin * min(done) if done else math.inf


def _distinct(labels: list[str], points: dict[str, dict[str, Any]]) -> list[str]:
    """`labels` with each lattice point once (the first label naming it)."""
    seen, out = set(), []
    for label in labels:
        if point_key(points[label]) not in seen:
            seen.add(point_key(points[label]))
            out.append(label)
    return out


def _mean(times: dict[tuple[str, int], float], label: str, seeds: "Iterable[int]" = range(SEARCH_SEEDS)) -> float:
    """`label`'s mean time over `seeds`, both by default (`math.inf` where it was stopped on one)."""
    return statistics.fmean(times.get((label, s), math.inf) for s in seeds)
