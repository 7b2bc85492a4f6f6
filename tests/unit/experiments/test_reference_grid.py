"""The broad reference grid (every policy family) and its held-out scoring seeds."""

from __future__ import annotations

import pytest

from autosync.catalog import make_policy
from autosync.core.job import load_job
from autosync.core.family import FamilySpec
from autosync.experiments.reference_grid import ReferenceGrid, grid_twin, held_out_seeds, judge, score, tune_seeds
from autosync.lattice import ALL_LR_RULES, DBW_WINDOWS, FAMILIES, family_of, lattice_points
from autosync.experiments.robustness import CELLS_FILE, read_cells, run_grid
from autosync.search.objective import trial_seeds
from tests.unit.experiments.test_robustness import TINY


def _named(grid, name):
    return [p["params"] for p in grid if p["policy"] == name]


def test_the_grid_holds_every_family_and_every_static_k_under_the_four_rules():
    n = 5
    grid = lattice_points(n)
    backups = {(p["k"], p["lr_rule"]) for p in _named(grid, "backup")}
    # k = 1 under "sqrt" and "linear" is k = 1 under "fixed" (a factor of 1 on eta), k = n at "fixed" BSP
    assert ({(k, r) for k in range(2, n) for r in ALL_LR_RULES} | {(1, "fixed"), (1, "proportional")}
            | {(n, "sqrt"), (n, "linear")}) == backups
    assert _named(grid, "bsp") == [{}]
    assert {p["lr_rule"] for p in _named(grid, "asp")} == {"fixed", "sqrt_staleness", "staleness"}
    assert sorted(p["staleness"] for p in _named(grid, "ssp")) == list(range(9))
    assert {p["dc_lambda"] for p in _named(grid, "dana_dc")} == {0.2, 1.0, 2.0}
    for name in ("dana_zero", "dana_slim", "nag_asgd", "multi_asgd", "dc_asgd", "lwp"):
        assert len(_named(grid, name)) == 1, name
    assert {(p["window"], p["lr_rule"]) for p in _named(grid, "dbw")} == {
        (w, r) for w in DBW_WINDOWS for r in ALL_LR_RULES}
    assert {p["lr_rule"] for p in _named(grid, "bdbw")} == set(ALL_LR_RULES)
    assert {(p["mode"], p["lr_rule"]) for p in _named(grid, "lbbsp")} == {
        (m, r) for m in ("auto", "gpu", "cpu") for r in ("fixed", "sqrt", "linear")}
    assert {p["switch_at"] for p in _named(grid, "sync_switch")} == {1 / 16, 1 / 8, 1 / 4, 1 / 2}
    composed = _named(grid, "compose")
    assert {"lbbsp"} <= {c["batch"] for c in composed} and "dana_slim" in {c["update"] for c in composed}
    assert {p["period"] for p in _named(grid, "local_sgd")} == {2, 4, 8, 16}
    for name in ("adacomm", "async_local_sgd", "easgd"):
        assert len(_named(grid, name)) == 1, name
    assert {family_of(p) for p in grid} == set(FAMILIES)
    assert len({make_policy(p["policy"], p["params"]).canonical(n).to_json() for p in grid}) == len(grid)


def test_every_grid_policy_runs_on_its_n():
    for n in (1, 3, 12):
        for p in lattice_points(n):
            make_policy(p["policy"], p["params"]).bind(n, 32)


@pytest.mark.parametrize("seed", [0, 7, 1000])
def test_held_out_seeds_never_overlap_what_a_tune_searches_on(seed):
    job = load_job(None).model_copy(update={"seed": seed})
    held = set(held_out_seeds(job))
    assert len(held) == 2 and min(held) == seed + 100
    for repeats in (1, 3, 10):
        assert set(trial_seeds(job, repeats)) < set(tune_seeds(job, repeats)) and not held & set(tune_seeds(job, repeats))
    with pytest.raises(ValueError, match="offset"):
        held_out_seeds(job, offset=0)


def test_an_answer_is_scored_on_held_out_seeds_against_the_grid_and_cached(tmp_path):
    job = FamilySpec.model_validate(__import__("yaml").safe_load(TINY)).job(0)
    two = lambda n: [make_policy("bsp").to_dict(), make_policy("asp").to_dict()]  # noqa: E731
    seeds = held_out_seeds(job)
    # an answer that runs as a grid policy (the composition ASP is) is scored from the grid's cells
    as_asp = make_policy("compose", {"barrier": "asp"}).to_dict()
    assert grid_twin(job, as_asp, two) == make_policy("asp").to_dict()
    cells = run_grid(ReferenceGrid([job], seeds, policies=two), tmp_path)
    assert {c["seed"] for c in cells.values()} == set(seeds) and len(cells) == 4
    judged = judge(job, as_asp, cells, seeds, two)
    assert judged.best.time == min(judged.families["static k"].time, judged.families["asp"].time)
    assert judged.ratio == pytest.approx(judged.answer.time / judged.best.time) and judged.ratio >= 1.0
    # one that runs like none is trained beside it, once
    slim = make_policy("dana_slim").to_dict()
    assert grid_twin(job, slim, two) is None
    grid = ReferenceGrid([job], seeds, extra={job.fingerprint(): [slim]}, policies=two)
    cells = run_grid(grid, tmp_path)
    assert grid.finished(read_cells(tmp_path)) == len(grid.tasks) == 6
    lines = (tmp_path / CELLS_FILE).read_text().splitlines()
    run_grid(grid, tmp_path)
    assert (tmp_path / CELLS_FILE).read_text().splitlines() == lines  # nothing trained again
    assert judge(job, slim, cells, seeds, two).answer.time > 0


@pytest.mark.slow  # the broad reference trains every lattice point: 3-6 s on 2 cores
def test_robustness_with_the_broad_reference_divides_by_the_best_of_every_family(tmp_path):
    from autosync import api

    family = tmp_path / "tiny.yaml"
    family.write_text(TINY)
    common = dict(jobs=1, seeds=1, policies=["dbw"])
    static = api.robustness(family, tmp_path / "report", **common).result
    broad = api.robustness(family, tmp_path / "report", reference="broad", **common)
    job, before = broad.result["jobs"][0], static["jobs"][0]
    assert broad.result["reference"] == "broad" and static["reference"] == "static"
    assert broad.reused > 0  # the static report's runs are read back, not trained again
    cells = read_cells(tmp_path / "report")
    fastest = min(score(broad.jobs[0], p, cells, [0]).time for p in lattice_points(3))
    assert job["best_overall_time"] == pytest.approx(min(fastest, before["best_overall_time"]))
    assert job["policies"]["dbw"]["overall_regret"] >= before["policies"]["dbw"]["overall_regret"]
    assert "Reference: broad" in "".join(p.read_text() for p in broad.write() if p.suffix == ".md")


def test_robustness_scores_on_seeds_from_the_offset(tmp_path):
    from autosync import api

    family = tmp_path / "tiny.yaml"
    family.write_text(TINY)
    found = api.robustness(family, tmp_path / "report", jobs=1, seeds=2, seed_offset=100, policies=["asp"])
    assert found.result["seeds"] == [100, 101]
    assert {c["seed"] for c in read_cells(tmp_path / "report").values()} == {100, 101}


def test_the_grid_best_is_the_fastest_that_keeps_bsp_final_metric_and_only_the_ones_ahead_train_to_the_end():
    """The rule the tune answers by: a policy fast to the target that ends short of BSP's final metric is not
    the reference; the final metrics are asked for the fastest policies in turn, up to the first that keeps
    it (BSP, at the latest)."""
    from autosync.experiments.reference_grid import Scored, feasible_best, keeps_constraint

    job = FamilySpec.model_validate(__import__("yaml").safe_load(TINY)).job(0)  # train_loss: lower is better
    asp, ssp, backup, bsp = ({"policy": name, "params": {}} for name in ("asp", "ssp", "backup", "bsp"))
    scores = [Scored(asp, 5.0, [], [5.0]), Scored(ssp, 6.0, [7], [6.0]), Scored(backup, 7.0, [], [7.0]),
              Scored(bsp, 9.0, [], [9.0])]
    finals = {"asp": 0.9, "ssp": 0.5, "backup": 0.505, "bsp": 0.5}
    asked = []

    def final(policy):  # one scoring seed
        asked.append(policy["policy"])
        return [finals[policy["policy"]]]

    assert feasible_best(job, scores, final, tolerance=0.01).policy == backup  # SSP missed a seed: not judged
    assert asked == ["bsp", "asp", "backup"]
    assert feasible_best(job, scores, final, tolerance=0.5).policy == asp
    finals["backup"] = None  # a run that failed at full budget keeps nothing
    assert feasible_best(job, scores, final, tolerance=0.01).policy == bsp
    assert keeps_constraint(job, [0.5], [0.5]) and not keeps_constraint(job, [None], [0.5])


def test_the_grid_judges_by_the_paired_test_widened_to_bsp_s_own_spread_between_seeds():
    """The race's rule (`autosync.race.keeps_paired`): a mean shortfall over the paired seeds past the
    tolerance still keeps BSP's final metric where BSP itself moves more than that between the seeds."""
    from autosync.experiments.reference_grid import keeps_constraint

    job = FamilySpec.model_validate(__import__("yaml").safe_load(TINY)).job(0)  # train_loss: lower is better
    assert keeps_constraint(job, [0.56, 0.58], [0.50, 0.55])  # 0.045 worse, BSP's spread 0.05
    assert not keeps_constraint(job, [0.56, 0.58], [0.50, 0.51])  # 0.065 worse, BSP's spread 0.01
    assert keeps_constraint(job, [0.505, 0.505], [0.50, 0.50])  # within the tolerance (0.01)


def test_full_budget_cells_train_the_whole_budget_once_and_are_read_back(tmp_path):
    from autosync.experiments.reference_grid import full_budget_finals, full_cell_key, run_full_cell

    job = FamilySpec.model_validate(__import__("yaml").safe_load(TINY)).job(0)
    seeds = held_out_seeds(job)
    cells, runs = {}, []

    def run(job, policy, seed):
        runs.append(seed)
        return run_full_cell(job, policy, seed)

    final = full_budget_finals(job, seeds, cells, run)
    bsp = make_policy("bsp").to_dict()
    value = final(bsp)
    assert runs == seeds and value == [cells[full_cell_key(job.fingerprint(), bsp, s)]["final_metric"] for s in seeds]
    assert final(bsp) == value and runs == seeds  # read back, not trained again
