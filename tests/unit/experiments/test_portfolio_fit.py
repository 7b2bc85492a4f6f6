"""The greedy portfolio (`autosync.experiments.portfolio_fit`): candidates that mean the same on any number
of workers, Feurer et al.'s greedy choice, and a family's answer from a portfolio fitted without it."""

from __future__ import annotations

from autosync.experiments import portfolio_fit
from autosync.experiments.portfolio_fit import JobTimes
from autosync.lattice import labelled_points


def times(family: str, name: str, search: dict[str, float]) -> JobTimes:
    both = {k: [v, v] for k, v in search.items()}
    return JobTimes(family, name, None, {}, both, {k: v for k, v in search.items()}, 1.0, 100.0, both)


def test_labels_resolve_static_k_as_a_share_of_the_workers_and_keep_every_other_grid_setting_once():
    small, large = labelled_points(4), labelled_points(32)
    only_large = large.keys() - small.keys()
    assert "backup:k=31,lr_rule=sqrt" in only_large  # a size's own static k: common to jobs of that size only
    assert all(label.startswith("backup:k=") and "n," not in label for label in only_large)
    assert small.keys() - large.keys() == set()
    assert large["backup:k=0.25n,lr_rule=linear"]["params"] == {"k": 8, "lr_rule": "linear"}
    assert small["backup:k=0.125n,lr_rule=fixed"]["params"]["k"] == 1  # at least 1
    assert small["backup:k=0.875n,lr_rule=fixed"]["params"]["k"] == 3  # at most n - 1
    assert "bsp" in small and any(label.startswith("dana_slim") for label in small)


def test_on_one_worker_no_label_is_a_static_k_and_the_lattice_holds_bsp_itself():
    """k = 1 of 1 worker waits for everyone under any rule: BSP, raced once as BSP (not as many static k)."""
    from autosync.lattice import BSP_POLICY, lattice_points

    assert not [label for label in labelled_points(1) if label.startswith("backup:")]
    assert [p for p in lattice_points(1) if p["policy"] in ("bsp", "backup")] == [BSP_POLICY]


def test_the_greedy_portfolio_adds_first_what_helps_most_jobs_then_what_covers_the_rest():
    jobs = [times("f", "a", {"x": 1.0, "y": 2.0, "z": 9.0}), times("f", "b", {"x": 1.0, "y": 2.0, "z": 9.0}),
            times("g", "c", {"x": 8.0, "y": 4.0, "z": 1.0})]
    assert portfolio_fit.greedy_portfolio(jobs, 1) == ["x"]
    assert portfolio_fit.greedy_portfolio(jobs, 2) == ["x", "z"]  # y is never best where x or z runs
    assert portfolio_fit.greedy_portfolio(jobs, 5) == ["x", "z", "y"]  # no more than the candidates
    assert portfolio_fit.greedy_portfolio(list(reversed(jobs)), 2) == ["x", "z"]  # the jobs' order is no input
    assert portfolio_fit.greedy_portfolio(jobs, 5, allowed={"y", "z", "w"}) == ["y", "z"]  # w is no job's


def _by_definition(jobs: list[JobTimes], size: int) -> list[str]:
    """Algorithm 1 as written: each candidate's loss recomputed over the whole portfolio it would make."""
    import math
    import statistics

    means = [{label: statistics.fmean(t) for label, t in j.search.items()} for j in jobs]
    labels = sorted(set.intersection(*(set(m) for m in means)))
    bests = [min(m.values()) for m in means]
    members: list[str] = []
    while len(members) < min(size, len(labels)):
        members.append(min((statistics.fmean(math.log(min(m[x] for x in members + [c]) / b)
                                             for m, b in zip(means, bests)), c) for c in labels if c not in members)[1])
    return members


def test_the_greedy_portfolio_keeping_each_jobs_best_member_is_algorithm_1_as_written():
    """`greedy_portfolio` keeps each job's best member so far rather than taking the minimum over the whole
    portfolio for every candidate: the same floats, so the same members, on random jobs with ties."""
    import random

    rng = random.Random(0)
    for _ in range(30):
        labels = [f"l{i}" for i in range(rng.randint(2, 12))]
        jobs = [times("f", str(i), {label: rng.choice([1.0, 2.0, rng.uniform(1, 9)]) for label in labels
                                    if rng.random() < 0.9}) for i in range(rng.randint(1, 6))]
        size = rng.randint(1, 8)
        assert portfolio_fit.greedy_portfolio(jobs, size) == _by_definition(jobs, size)
