"""The race's procedure (`autosync.race.plan`) on hand-made runs: each round asks for what it lacks,
eliminates by the margin, halves, steps on the lattice seed by seed and checks the candidates' final metric
in the order of their times."""

from __future__ import annotations

import math

import pytest

from autosync.core.errors import UserError
from autosync.race import (FASTER_HALF, ROUNDS, RUN_AGAIN, Answer, RaceSettings, Run, Runs, horizon, keeps_paired,
                           load_settings, plan)


def backup(k: int, rule: str = "sqrt") -> dict:
    return {"policy": "backup", "params": {"k": k, "lr_rule": rule}}


BSP = {"policy": "bsp", "params": {}}
POINTS = {"bsp": BSP, "a": {"policy": "asp", "params": {"lr_rule": "fixed"}}, "k3": backup(3), "k4": backup(4),
          "k5": backup(5), "k4lin": backup(4, "linear"), "share": backup(4), "d": {"policy": "dana_slim", "params": {}}}
SETTINGS = RaceSettings(("a", "k4", "d", "share", "bsp"), margin=1.5)


LENGTH = 100.0  # one run to the end of the budget, in the runs' virtual seconds: one BSP training


def run_all(times: dict, finals: dict, truth: dict, true_finals: dict, settings: RaceSettings = SETTINGS,
            order=lambda runs: runs, stopped: dict | None = None,
            budget: float | None = None, points: dict | None = None,
            leave_out: frozenset = frozenset()) -> tuple[Answer, list[Runs]]:
    """Plays the race with `truth[(label, seed)]` as each run's time (stopped at its horizon) and
    `true_finals` as its final metric; `order` reorders each round's runs (another process finishing first).
    With a `budget`, each run pays what it trained (a run to the target up to its horizon, a run to the end
    of the budget the rest of `LENGTH`), and the race is told its cost in BSP trainings."""
    steps, stopped, trained, full_times = [], {} if stopped is None else stopped, {}, {}

    def spent():
        done = all(("bsp", s) in finals for s in range(2))
        return sum(trained.values()) / LENGTH if done else None

    while not isinstance(step := plan(settings, points or POINTS, times, stopped, finals, 0.01, accuracy=True,
                                      budget=budget, spent=spent(), full_times=full_times,
                                      leave_out=leave_out), Answer):
        steps.append(step)
        for run in order(step.runs):
            key = (run.label, run.seed)
            if run.full:
                finals[key] = true_finals[key]
                if run.label == "bsp":  # BSP's gives its time; another's is for its final metric and round 5
                    times.setdefault(key, truth[key])
                else:
                    full_times.setdefault(key, truth[key])
                trained[key, "full"] = LENGTH - trained.get(key, 0.0)
            else:
                limit = horizon(run, settings.margin, times)
                trained[key] = min(truth[key], limit)
                if truth[key] < limit:
                    times[key] = truth[key]
                else:
                    stopped[key] = limit
    return step, steps


TRUTH = {("a", 0): 30.0, ("a", 1): 34.0, ("k4", 0): 20.0, ("k4", 1): 26.0, ("d", 0): 29.0, ("d", 1): 20.0,
         ("bsp", 0): 60.0, ("bsp", 1): 62.0, ("k3", 0): 19.0, ("k3", 1): 25.0, ("k5", 0): 40.0, ("k5", 1): 21.0,
         ("k4lin", 0): 29.0, ("k4lin", 1): 30.0}
FINALS = {("bsp", 0): 0.95, ("bsp", 1): 0.96, ("k3", 0): 0.90, ("k3", 1): 0.91, ("k4", 0): 0.95, ("k4", 1): 0.955,
          ("d", 0): 0.96, ("d", 1): 0.96, ("k4lin", 0): 0.90, ("k4lin", 1): 0.90}


def test_each_round_runs_what_it_lacks_on_the_seeds_every_candidate_of_it_runs():
    answer, steps = run_all({}, {}, TRUTH, FINALS)
    assert [s.round for s in steps] == ["portfolio", "second seed", "local step", "local step", "final metric",
                                        "final metric"]
    first, second, step0, step1, check1, check2 = steps
    assert [r.label for r in first.runs] == ["a", "k4", "d", "bsp"]  # "share" names k4's point: run once
    assert all(r.seed == 0 and not r.full for r in first.runs)
    # strictly within 1.5 x the fastest (20): k4 and d (a at 30 is not; bsp was stopped at d's 1.5 x 20);
    # the faster half of the two goes on
    assert [(r.label, r.seed) for r in second.runs] == [("k4", 1)]
    # k4 leads; its neighbours k3, k5, k4lin run on seed 0 ("share" is k4's own point), stopped past 1.5 x 20
    assert sorted(r.label for r in step0.runs) == ["k3", "k4lin", "k5"] and {r.seed for r in step0.runs} == {0}
    assert sorted(r.label for r in step1.runs) == ["k3", "k4lin"]  # k5 (40) was stopped on seed 0
    # ranked by mean: k3 (22), k4 (23), k4lin (29.5): k3 is checked first and breaks the rule, then k4 keeps it
    assert [(r.label, r.seed, r.full) for r in check1.runs] == [("bsp", 0, True), ("bsp", 1, True), ("k3", 0, True),
                                                                 ("k3", 1, True)]
    assert [r.label for r in check2.runs] == ["k4", "k4"]
    assert (answer.label, answer.time, answer.checked) == ("k4", 23.0, ["k3", "k4"])


def test_left_out_for_its_ablation_the_second_seed_races_rounds_2_3_on_the_first_seed_alone():
    answer, steps = run_all({}, {}, TRUTH, FINALS, leave_out=frozenset({ROUNDS[1]}))
    assert [s.round for s in steps] == ["portfolio", "local step", "final metric", "final metric"]
    assert all(r.seed == 0 for s in steps if not s.round.startswith("final") for r in s.runs)
    # ranked on seed 0 alone: k3 (19), k4 (20); k3 breaks the rule, k4 keeps it
    assert (answer.label, answer.time, answer.checked) == ("k4", 20.0, ["k3", "k4"])


def test_left_out_for_its_ablation_the_local_step_runs_no_neighbour():
    answer, steps = run_all({}, {}, TRUTH, FINALS, leave_out=frozenset({ROUNDS[2]}))
    assert [s.round for s in steps] == ["portfolio", "second seed", "final metric"]
    assert (answer.label, answer.checked) == ("k4", ["k4"])


def test_left_out_for_its_ablation_every_member_within_the_margin_goes_on_to_the_second_seed():
    _, halved = run_all({}, {}, TRUTH, FINALS)
    _, whole = run_all({}, {}, TRUTH, FINALS, leave_out=frozenset({FASTER_HALF}))
    assert [(r.label, r.seed) for r in halved[1].runs] == [("k4", 1)]
    assert [(r.label, r.seed) for r in whole[1].runs] == [("k4", 1), ("d", 1)]  # both within 1.5 x 20


def test_the_answer_is_the_same_whatever_order_a_round_s_runs_finish_in():
    forward, _ = run_all({}, {}, TRUTH, FINALS)
    backward, _ = run_all({}, {}, TRUTH, FINALS, order=lambda runs: list(reversed(runs)))
    assert (forward.label, forward.time, forward.ranked) == (backward.label, backward.time, backward.ranked)


def test_bsp_answers_when_no_candidate_keeps_the_rule_each_checked_in_the_order_of_its_mean_time():
    finals = {**FINALS, ("k4", 0): 0.90, ("k4", 1): 0.90}
    answer, steps = run_all({}, {}, TRUTH, finals)
    assert answer.label == "bsp" and answer.checked == ["k3", "k4", "k4lin"]  # every one ranked, fastest first
    assert answer.time == 61.0  # BSP's mean over its reference runs


STATIC_KS = {f"f{k}": backup(k, "fixed") for k in range(1, 8)}  # static k at BSP's learning rate, n = 8
TOWARDS_BSP_POINTS = {"bsp": BSP, "d": POINTS["d"], **STATIC_KS}


def towards_bsp_race(keeps_from: int, k_time: float) -> tuple[Answer, list[Runs]]:
    """A race of d alone, which breaks the rule, on 8 workers whose static k keep it from `keeps_from` workers up,
    each reaching the target in `k_time` + k s (BSP: 60 and 62)."""
    truth = {("d", 0): 10.0, ("d", 1): 12.0, ("bsp", 0): 60.0, ("bsp", 1): 62.0}
    finals = {("bsp", 0): 0.95, ("bsp", 1): 0.96, ("d", 0): 0.80, ("d", 1): 0.82}
    for label, point in STATIC_KS.items():
        k = point["params"]["k"]
        truth.update({(label, s): k_time + k for s in range(2)})
        finals.update({(label, s): 0.95 if k >= keeps_from else 0.90 for s in range(2)})
    return run_all({}, {}, truth, finals, RaceSettings(("d", "bsp"), margin=1.5), points=TOWARDS_BSP_POINTS)


def test_where_every_finalist_breaks_the_rule_static_k_is_bisected_towards_bsp_for_the_fewest_workers_keeping_it():
    answer, steps = towards_bsp_race(keeps_from=5, k_time=20.0)
    bisection = [s for s in steps if s.round == "towards BSP"]
    assert [[(r.label, r.seed, r.full) for r in s.runs] for s in bisection] == [
        [(label, 0, True), (label, 1, True)] for label in ("f4", "f6", "f5")]  # 4 breaks, 6 keeps, 5 keeps
    assert (answer.label, answer.time, answer.checked, answer.towards_bsp) == ("f5", 25.0, ["d"], ["f4", "f6", "f5"])


def test_bsp_answers_where_the_fewest_workers_keeping_the_rule_are_no_faster_or_no_static_k_keeps_it():
    slow, _ = towards_bsp_race(keeps_from=5, k_time=60.0)  # k = 5 reaches the target in 65 s: slower than BSP's 61
    assert (slow.label, slow.time, slow.towards_bsp) == ("bsp", 61.0, ["f4", "f6", "f5"])
    none, _ = towards_bsp_race(keeps_from=8, k_time=20.0)  # no static k keeps it
    assert (none.label, none.towards_bsp) == ("bsp", ["f4", "f6", "f7"])
    no_static_k, _ = run_all({}, {}, TRUTH, {**FINALS, ("k4", 0): 0.90, ("k4", 1): 0.90})  # no static k at BSP's rate
    assert (no_static_k.label, no_static_k.towards_bsp) == ("bsp", [])


def test_where_every_candidate_was_stopped_on_a_seed_round_5_asks_for_bsp_s_own_runs_before_it_reads_them():
    """No finalist asked for BSP's runs to the end of the budget (the one candidate diverged on the second
    seed, so nothing is ranked): the bisection towards BSP asks for them first (it read them unasked)."""
    truth = {("d", 0): 10.0, ("bsp", 0): 60.0, ("bsp", 1): 62.0,
             **{(label, s): 20.0 + p["params"]["k"] for label, p in STATIC_KS.items() for s in range(2)}}
    finals = {("bsp", 0): 0.95, ("bsp", 1): 0.96, **{(label, s): 0.955 for label in STATIC_KS for s in range(2)}}
    answer, steps = run_all({}, {}, truth, finals, RaceSettings(("d",), margin=1.5),
                            stopped={("d", 1): math.inf}, points=TOWARDS_BSP_POINTS)
    first_full = next(s for s in steps if any(r.full for r in s.runs))
    assert [(r.label, r.seed) for r in first_full.runs] == [("bsp", 0), ("bsp", 1)]
    assert (answer.label, answer.checked, answer.towards_bsp) == ("f1", [], ["f4", "f2", "f1"])


def test_without_a_budget_the_race_runs_every_round_and_is_not_cut_short():
    answer, steps = run_all({}, {}, TRUTH, FINALS)
    assert steps[0].round == "portfolio" and answer.cut_short == []
    unbounded, _ = run_all({}, {}, TRUTH, FINALS, budget=math.inf)  # a budget never reached: the same race
    assert (unbounded.label, unbounded.time, unbounded.ranked, unbounded.cut_short) == \
        (answer.label, answer.time, answer.ranked, [])


def test_with_a_budget_bsp_s_two_full_runs_come_first_and_its_portfolio_run_is_theirs():
    answer, steps = run_all({}, {}, TRUTH, FINALS, budget=100.0)
    assert steps[0].round == "reference"
    assert [(r.label, r.seed, r.full) for r in steps[0].runs] == [("bsp", 0, True), ("bsp", 1, True)]
    assert [r.label for r in steps[1].runs] == ["a", "k4", "d"]  # BSP's time on seed 0 is its reference run's
    assert [s.round for s in steps[2:]] == ["second seed", "local step", "local step", "final metric",
                                            "final metric"]
    assert (answer.label, answer.time, answer.checked, answer.cut_short) == ("k4", 23.0, ["k3", "k4"], [])


def test_a_budget_spent_by_the_portfolio_skips_to_the_final_metric_ranked_on_the_first_seed():
    # reference 2 BSP trainings + portfolio a 30 + k4 20 + d 29 = 2.79 >= 2.5: no second seed, no local step
    answer, steps = run_all({}, {}, TRUTH, FINALS, budget=2.5)
    assert [s.round for s in steps] == ["reference", "portfolio", "final metric"]
    assert [(r.label, r.seed, r.full) for r in steps[2].runs] == [("k4", 0, True), ("k4", 1, True)]  # BSP's are done
    assert answer.ranked == [("k4", 20.0)]  # the survivor of the halving, on the seed it ran
    assert (answer.label, answer.time, answer.checked, answer.cut_short) == \
        ("k4", 20.0, ["k4"], ["second seed", "local step"])


def test_a_budget_cut_after_the_local_step_s_first_seed_ranks_its_candidates_on_that_seed():
    # 2.79 + k4 on seed 1 (26) + k3 19, k4lin 29, k5 stopped at 30 = 3.83: the local step's second seed is skipped
    answer, steps = run_all({}, {}, TRUTH, FINALS, budget=3.5)
    assert [s.round for s in steps] == ["reference", "portfolio", "second seed", "local step", "final metric",
                                        "final metric"]
    assert answer.ranked == [("k3", 19.0), ("k4", 20.0), ("k4lin", 29.0)]  # k5 was stopped: out
    assert answer.cut_short == ["local step on the second seed"] and answer.label == "k4"


def test_a_budget_of_bsp_s_own_runs_answers_bsp():
    answer, steps = run_all({}, {}, TRUTH, FINALS, budget=2.0)
    assert [s.round for s in steps] == ["reference"]
    assert (answer.label, answer.time, answer.checked) == ("bsp", 61.0, [])
    assert answer.cut_short == ["portfolio", "second seed", "local step"]


@pytest.mark.parametrize("budget", [2.5, 3.5, 100.0])
def test_under_a_budget_the_answer_is_the_same_whatever_order_a_round_s_runs_finish_in(budget):
    forward, _ = run_all({}, {}, TRUTH, FINALS, budget=budget)
    backward, _ = run_all({}, {}, TRUTH, FINALS, budget=budget, order=lambda runs: list(reversed(runs)))
    assert (forward.label, forward.time, forward.ranked, forward.cut_short) == \
        (backward.label, backward.time, backward.ranked, backward.cut_short)


def test_a_round_begun_is_finished_whatever_the_budget_and_bsp_s_reference_does_not_begin_one():
    reference = {("bsp", 0): 0.95, ("bsp", 1): 0.96}
    times = {("bsp", 0): 60.0, ("bsp", 1): 62.0, ("a", 0): 30.0, ("k4", 0): 20.0}  # a resumed portfolio round
    step = plan(SETTINGS, POINTS, times, {}, dict(reference), 0.01, accuracy=True, budget=2.5, spent=2.5)
    assert (step.round, [r.label for r in step.runs]) == ("portfolio", ["d"])
    # bsp leads the portfolio: its seed-1 run is its reference run's, so the second seed has not begun
    fast = {**times, ("bsp", 0): 18.0, ("d", 0): 25.0}
    answer = plan(SETTINGS, POINTS, fast, {}, dict(reference), 0.01, accuracy=True, budget=2.5, spent=2.6)
    assert isinstance(answer, Answer) and answer.cut_short == ["second seed", "local step"]
    assert answer.ranked == [("bsp", 18.0), ("k4", 20.0)] and answer.label == "bsp"


def test_runs_stopped_by_a_member_out_on_the_second_seed_run_again_against_those_still_racing():
    """k4 leads the portfolio (10) and stops a and BSP at 1.5 x 10, then diverges on the second seed: it is out,
    so a and BSP run on the first seed again, raced against a, d and BSP only (horizon 1.5 x d's 14), and the
    race goes on without k4: a run stays eliminated only against candidates still racing."""
    truth = {**TRUTH, ("k4", 0): 10.0, ("k4", 1): math.inf, ("a", 0): 18.0, ("d", 0): 14.0}
    answer, steps = run_all({}, {}, truth, FINALS, settings=RaceSettings(("k4", "a", "d", "bsp"), margin=1.5))
    assert [s.round for s in steps] == ["portfolio", "second seed", "portfolio", "second seed", "final metric"]
    first, second, again, second_again, _ = steps
    assert [r.label for r in first.runs] == ["k4", "a", "d", "bsp"] and [r.label for r in second.runs] == ["k4"]
    assert [(r.label, r.seed, r.against) for r in again.runs] == [("a", 0, ("a", "d", "bsp")),
                                                                   ("bsp", 0, ("a", "d", "bsp"))]
    assert [(r.label, r.seed) for r in second_again.runs] == [("d", 1)]  # d (14) and a (18): the faster half
    assert answer.label == "d" and [label for label, _ in answer.ranked] == ["d"]


def test_a_run_stopped_by_a_member_out_that_ran_to_its_end_is_not_run_again():
    """a's first-seed run missed the target and ran to the end of the budget (its final metric known) before
    k4's horizon stopped it: once k4 is out, only BSP's run, stopped short, is asked again."""
    times, finals = {("k4", 0): 10.0, ("d", 0): 14.0}, {("a", 0): 0.9}
    stopped = {("a", 0): 15.0, ("bsp", 0): 15.0, ("k4", 1): math.inf}
    step = plan(RaceSettings(("k4", "a", "d", "bsp"), margin=1.5), POINTS, times, stopped, finals, 0.01,
                accuracy=True)
    assert step.round == "portfolio" and [(r.label, r.seed) for r in step.runs] == [("bsp", 0)]


def test_left_out_for_its_ablation_the_race_steps_around_a_leader_out_on_the_second_seed_and_runs_nothing_again():
    truth = {**TRUTH, ("k4", 0): 10.0, ("k4", 1): math.inf, ("a", 0): 18.0, ("d", 0): 14.0}
    settings = RaceSettings(("k4", "a", "d", "bsp"), margin=1.5)
    answer, steps = run_all({}, {}, truth, FINALS, settings=settings, leave_out=frozenset({RUN_AGAIN}))
    assert [s.round for s in steps][:3] == ["portfolio", "second seed", "local step"]
    assert sorted(r.label for r in steps[2].runs) == ["k3", "k4lin", "k5"]  # k4's neighbours
    asked = [(r.label, r.seed, r.full) for s in steps for r in s.runs]
    assert len(asked) == len(set(asked)) and "k4" not in [label for label, _ in answer.ranked]


def test_without_a_member_out_on_the_second_seed_no_run_is_asked_again():
    _, steps = run_all({}, {}, TRUTH, FINALS)
    asked = [(r.label, r.seed, r.full) for s in steps for r in s.runs]
    assert len(asked) == len(set(asked))


def test_a_resumed_race_asks_only_for_the_runs_it_lacks():
    times = {("a", 0): 30.0, ("k4", 0): 20.0}
    step = plan(SETTINGS, POINTS, times, {}, {}, 0.01, accuracy=True)
    assert [r.label for r in step.runs] == ["d", "bsp"]


def test_a_run_races_the_fastest_finished_run_of_its_round_on_its_seed():
    run = Run("d", 0, "portfolio", ("a", "k4", "d"))
    assert horizon(run, 1.5, {}) == math.inf  # the first run of a round is not stopped
    assert horizon(run, 1.5, {("a", 0): 30.0, ("k4", 0): 20.0, ("k4", 1): 1.0}) == 30.0
    assert horizon(Run("d", 0, "final metric", full=True), 1.5, {("a", 0): 1.0}) == math.inf


@pytest.mark.parametrize("finals, bsp, tolerance, kept", [
    ([0.95, 0.95], [0.955, 0.96], 0.01, True),  # within the tolerance
    ([0.90, 0.92], [0.955, 0.96], 0.01, False),
    ([0.90, 0.92], [0.90, 0.99], 0.01, True),  # within BSP's own spread between the seeds (0.09)
    ([0.95, None], [0.95, 0.95], 0.01, False),  # a diverged run never keeps it
])
def test_the_final_metric_rule_is_a_paired_test_widened_to_bsp_s_own_spread(finals, bsp, tolerance, kept):
    assert keeps_paired(finals, bsp, tolerance, accuracy=True) is kept
    assert keeps_paired([2 - f if f else None for f in finals], [2 - b for b in bsp], tolerance,
                        accuracy=False) is kept  # a loss: lower is better


@pytest.mark.parametrize("text, field", [
    ("portfolio: []\nmargin: 1.5\n", "portfolio"),
    ("portfolio: [bsp]\nmargin: 0.5\n", "margin"),
    ("portfolio: [bsp]\nmargin: 1.5\nfinalists: 2\n", "finalists"),  # a setting the race no longer has
    ("- just a list\n", "mapping"),
    ("portfolio: [bsp\n", "cannot read"),
    ("portfolio: [bsp, bsp_typo]\nmargin: 1.5\n", "portfolio label 'bsp_typo' names no lattice point"),
    ("portfolio: [asp]\nmargin: 1.5\n", "portfolio label 'asp' names no lattice point"),  # asp,lr_rule=... are
])
def test_a_bad_settings_file_is_one_line_naming_the_file_and_field(tmp_path, text, field):
    path = tmp_path / "race.yaml"
    path.write_text(text)
    with pytest.raises(UserError) as err:
        load_settings(path)
    assert str(path) in str(err.value) and field in str(err.value) and "\n" not in str(err.value)


def test_a_settings_file_of_bytes_that_are_not_text_is_one_line(tmp_path):
    path = tmp_path / "race.yaml"
    path.write_bytes(b"\xff\xfeportfolio")
    with pytest.raises(UserError, match=f"{path}: cannot read the race's settings: 'utf-8' codec can't decode"):
        load_settings(path)


def test_every_label_of_a_job_of_any_size_is_a_label_and_a_static_k_of_a_larger_size_too():
    from autosync.lattice import is_label, labelled_points

    assert all(is_label(label) for n in (1, 2, 3, 5, 16, 40) for label in labelled_points(n))
    assert is_label("backup:k=300,lr_rule=sqrt") and not is_label("backup:k=0,lr_rule=sqrt")
    assert not is_label("backup:k=3,lr_rule=cubic") and not is_label("dana_slim,momentum=0.3")


def test_the_shipped_settings_load_and_name_points_of_every_job_size():
    from autosync.data import RACE_SETTINGS
    from autosync.lattice import labelled_points

    settings = load_settings(RACE_SETTINGS)
    for n in (3, 8, 32):
        assert all(label in labelled_points(n) for label in settings.portfolio)


def test_settings_whose_labels_name_no_point_on_this_jobs_workers_are_refused_before_the_storage(tmp_path):
    """`backup:k=300` is a label (of a job of 300 workers or more), but on 4 workers the race would have no
    member: refused when the request is made, before any study is (it was, after making one)."""
    from autosync.search.space import SPACE_DIR, load_space
    from tests.conftest import small_job, tune_request

    path = tmp_path / "race.yaml"
    path.write_text("portfolio: ['backup:k=300,lr_rule=sqrt']\nmargin: 1.5\n")
    db = tmp_path / "s.db"
    with pytest.raises(UserError, match=f"^{path} on n_workers=4: none of the race's portfolio labels "
                                        r"\['backup:k=300,lr_rule=sqrt'\] names a point of this job's lattice$"):
        tune_request(small_job(), load_space(SPACE_DIR / "policy.yaml", 4), sampler="race",
                     race_settings=str(path), storage=f"sqlite:///{db}")
    assert not db.exists()


@pytest.mark.parametrize("sampler", ["binary", "ladder"])
def test_a_switch_point_search_of_a_space_without_one_is_refused_before_the_storage(tmp_path, sampler):
    """`--sampler binary` on static_k was refused inside the search, after its study was made (and without
    --storage, results/autosync-studies.db): now with the other sampler checks, when the request is made."""
    from autosync.search.space import SPACE_DIR, load_space
    from tests.conftest import small_job, tune_request

    db = tmp_path / "s.db"
    with pytest.raises(UserError, match=f"^--sampler {sampler} searches the switch point: the space must have one "
                                        "policy sync_switch with a switch_at dimension, but .*static_k.yaml has "
                                        r"\['backup'\]$"):
        tune_request(small_job(), load_space(SPACE_DIR / "static_k.yaml", 4), sampler=sampler,
                     storage=f"sqlite:///{db}")
    assert not db.exists()
