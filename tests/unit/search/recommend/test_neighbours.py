"""Tuned jobs near a new one: the transfer that starts a search from their winners, and `recommend`."""

from __future__ import annotations

import optuna
import pytest

from autosync.core.errors import UserError
from autosync.search.recommend.neighbours import cluster_features, distance, neighbours, workload_key
from autosync.search.recommend.vote import adapt, recommend
from autosync.search.space import SPACE_DIR, load_space
from autosync.search.study.storage import open_storage
from autosync.search.tune import tune
from tests.conftest import autosync, no_traceback, small_job, tune_request


def _job(alpha: float, n: int = 4, lr: float = 0.1, name: str = "small"):
    return small_job(name=name, cluster__n_workers=n, cluster__round_trip={"kind": "shifted_exponential", "alpha": alpha},
                     budget={"max_virtual_seconds": 30}, workload__optimizer={"lr": lr, "momentum": 0.5})


def _tune(job, url: str, transfer: bool = True):
    space = load_space(SPACE_DIR / "static_k.yaml", job.cluster.n_workers)
    return tune(tune_request(job, space, n_trials=4, sampler="random", storage=url, transfer=transfer,
                             tolerance=0.05))


def test_cluster_features_measure_what_decides_the_policy():
    base = cluster_features(_job(0.7))
    assert cluster_features(_job(0.7)) == base  # the same every time
    assert cluster_features(_job(0.7, lr=0.3)) == base and workload_key(_job(0.7, lr=0.3)) != workload_key(_job(0.7))
    near, far = distance(base, cluster_features(_job(0.6))), distance(base, cluster_features(_job(0.7, n=16)))
    assert 0 < near < far
    assert cluster_features(_job(0.0))[1] == pytest.approx(0.0)  # equal round trips: no tail


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    """One storage with two tuned jobs: the same workload on a nearby cluster, and another workload."""
    url = f"sqlite:///{tmp_path_factory.mktemp('near') / 'near.db'}"
    same = _tune(_job(0.7, name="same_workload"), url)
    other = _tune(_job(0.6, lr=0.3, name="other_workload"), url)
    return url, same, other


@pytest.mark.slow  # two more tunes beside the module's two: 2-4 s on 2 cores
def test_a_new_job_starts_from_its_nearest_tuned_neighbour_and_ignores_another_workload(tuned):
    url, same, other = tuned
    assert same.cache["neighbour_jobs"] == []  # the first job of the storage starts from nothing
    job = _job(0.6, name="new")
    outcome = _tune(job, url)
    near = outcome.cache["neighbour_jobs"]
    assert [nb["job"] for nb in near] == ["same_workload"] and near[0]["policy"] == same.cache["best_policy"]
    study = optuna.load_study(study_name=outcome.study_name, storage=open_storage(url))
    space = load_space(SPACE_DIR / "static_k.yaml", 4)
    first = [t.params for t in sorted(study.trials, key=lambda t: t.number)[:4]]
    assert space.trial_params(same.cache["best_policy"]) in first  # queued ahead of the sampler's choices
    assert outcome.cache["cost_to_answer_bsp_trainings"] <= outcome.cache["search_cost_bsp_trainings"]
    alone = _tune(_job(0.6, name="alone"), url.replace("near.db", "alone.db"), transfer=False)
    assert alone.cache["neighbour_jobs"] == []


def test_recommend_answers_from_the_neighbours_without_training(tuned):
    url, same, other = tuned
    job = _job(0.65, name="asked")
    answer = recommend(open_storage(url), job, url)
    assert [nb["job"] for nb in answer.neighbours][0] == "same_workload"
    assert answer.neighbours[0]["same_workload"] and not answer.neighbours[-1]["same_workload"]
    assert answer.policy in (same.cache["best_policy"], other.cache["best_policy"])
    if answer.policy == same.cache["best_policy"] and same.cache["speedup_vs_bsp"]:
        assert answer.predicted_time == pytest.approx(answer.predicted_bsp_time / same.cache["speedup_vs_bsp"])
    assert neighbours(open_storage(url), job, count=1)[0].job_name == "same_workload"


def test_a_neighbour_whose_bsp_missed_the_target_predicts_no_time(tuned, monkeypatch):
    """A BSP that missed on a seed has a score, not a time, in `bsp_time_to_target`: the prediction read it
    as BSP's time on this job."""
    import dataclasses

    from autosync.search.recommend import vote

    url, same, other = tuned
    job = _job(0.65, name="asked")
    found = neighbours(open_storage(url), job, count=2, other_workloads=True)
    missed = [dataclasses.replace(nb, record={**nb.record, "bsp_reached": 1, "bsp_runs": 2}) for nb in found]
    monkeypatch.setattr(vote, "neighbours", lambda *args, **kwargs: missed)
    answer = recommend(open_storage(url), job, url)
    assert answer.predicted_bsp_time is None and answer.predicted_time is None


def test_a_winner_is_adapted_to_the_new_jobs_n():
    job = _job(0.7, n=8)
    assert adapt({"policy": "backup", "params": {"k": 3, "lr_rule": "fixed"}}, 4, job)["params"]["k"] == 6
    assert adapt({"policy": "backup", "params": {"k": 16}}, 16, job)["params"]["k"] == 8
    composed = {"policy": "compose", "params": {"barrier": "backup", "k": 8, "batch": "lbbsp"}}
    assert adapt(composed, 16, job)["params"]["k"] == 4


def test_a_composition_under_another_barrier_keeps_its_unused_k_and_still_fits_another_n():
    """The race's answer on the default job (16 workers) is such a composition, carrying k at its default: the
    k scaled to 20 workers was refused ('k is a parameter of barrier backup'), so `recommend` found no winner
    that fits."""
    from autosync.catalog import POLICIES

    winner = POLICIES["compose"](barrier="asp", update="dana_slim", asp_lr_rule="sqrt_staleness").to_dict()
    adapted = adapt(winner, 16, _job(0.7, n=20))
    assert adapted is not None and adapted["params"] == winner["params"]


def test_recommend_with_no_tuned_job_is_one_line_and_exit_2(tiny_job, tmp_path):
    proc = autosync("recommend", str(tiny_job), "--storage", f"sqlite:///{tmp_path}/none.db", cwd=tmp_path)
    no_traceback(proc)
    assert proc.returncode == 2 and "no tuned job in sqlite:///" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and not (tmp_path / "none.db").exists()
    with pytest.raises(UserError, match="no tuned job"):
        recommend(open_storage(f"sqlite:///{tmp_path}/empty.db"), _job(0.7), "empty")


def test_recommend_on_a_job_tuned_in_the_storage_alone_points_to_its_own_cached_policy(tmp_path):
    """The job's own study is no neighbour: with no other it said "tune this job", which it was."""
    url = f"sqlite:///{tmp_path}/one.db"
    job = small_job()
    tune(tune_request(job, load_space(SPACE_DIR / "static_k.yaml", 4), n_trials=2, sampler="random", storage=url))
    with pytest.raises(UserError, match=r"this job is tuned in one already, and no other job there is: its own "
                                        r"cached policy answers it \(autosync run JOB.yaml --policy tuned"):
        recommend(open_storage(url), job, "one")


def test_transferred_winners_are_queued_after_bsp_scaled_to_this_n_and_before_a_papers_static_setting():
    from autosync.search.tune import _queued_first

    job = _job(0.7, n=8)
    space = load_space(SPACE_DIR / "static_k.yaml", 8)
    request = tune_request(job, space, storage="sqlite://")
    won = {"policy": "backup", "params": {"k": 2, "lr_rule": "fixed"}}
    near = [{"study": "s", "job": "four_workers", "distance": 0.1, "policy": won, "n_workers": 4}]
    queued, fresh_only = _queued_first(optuna.create_study(), request, [], near)

    def backup(k: int, rule: str) -> dict:
        return space.trial_params({"policy": "backup", "params": {"k": k, "lr_rule": rule}})

    assert fresh_only
    assert queued == [backup(8, "fixed"),  # BSP's form: its reference answers it
                      backup(4, "fixed"), backup(2, "fixed"),  # the neighbour's k scaled from n = 4, then as won
                      backup(6, "proportional")]  # the DBW paper's static k = 3n/4, raced against the winners
    alone, _ = _queued_first(optuna.create_study(), request, [], [])
    assert alone == [backup(8, "fixed"), backup(6, "proportional")]


@pytest.mark.slow
def test_recommend_from_a_robustness_report_votes_with_its_other_jobs_fastest_policies(tmp_path):
    """`--grid`: the drawn jobs of a report are neighbours (each with the fastest policy run on it, its
    online policies' specs read back from the report's command); a job of the report is not its own
    neighbour; no study storage is needed."""
    import json

    from autosync.search.recommend.grid import fastest, online_specs
    from tests.unit.experiments.test_robustness import TINY

    family = tmp_path / "tiny.yaml"
    family.write_text(TINY)
    report = tmp_path / "report"
    done = autosync("robustness", str(family), "--jobs", "3", "--seeds", "1", "--policies", "dbw",
                    "--policies", "backup:k=2,lr_rule=proportional", "--out", str(report), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    data = json.loads((report / "robustness.json").read_text())
    assert online_specs(data["command"]) == ["dbw", "backup:k=2,lr_rule=proportional"]
    assert set(data["online_policies"]) == {"dbw", "backup(k=2,lr_rule=proportional)"}  # kept by the report
    asked = report / "jobs" / "tiny-001.yaml"
    proc = autosync("recommend", str(asked), "--grid", str(report), "--storage", f"sqlite:///{tmp_path}/none.db",
                    "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    answer = json.loads(proc.stdout)
    assert {nb["job"] for nb in answer["neighbours"]} <= {"tiny-000", "tiny-002"}  # never itself
    assert answer["neighbours"] and not (tmp_path / "none.db").exists()
    winners = {row["job"]: fastest(data, row) for row in data["jobs"]}
    for nb in answer["neighbours"]:  # each votes with the fastest policy on its job by the report's mean time
        policy, time = winners[nb["job"]]
        row = next(r for r in data["jobs"] if r["job"] == nb["job"])
        assert time == min(t for t in [*row["static"].values(), *(p["time"] for p in row["policies"].values())]
                           if t < 2 * row["budget"])
        assert nb["policy"] == policy or nb["policy"] is None

    for bad, says in (([str(tmp_path / "nothing")], "no robustness report here"),
                      ([str(family)], "not a robustness report")):
        refused = autosync("recommend", str(asked), "--grid", *bad, cwd=tmp_path)
        no_traceback(refused)
        assert refused.returncode == 2 and says in refused.stderr and len(refused.stderr.strip().splitlines()) == 1
