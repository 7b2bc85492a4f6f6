"""Switch-point runs share their prefix (`autosync.engine.forks.run_sharing_prefixes`): a Sync-Switch run of
one switch point continues from a prefix another switch point's run kept, bit for bit the run from the start."""

from __future__ import annotations

import pytest
import torch

from autosync.catalog import make_policy
from autosync.engine.forks import ForkStore, run_sharing_prefixes
from autosync.engine.simulator import Simulator
from tests.conftest import small_job, tune_request

FORMS = {  # every schedule with a switch point, alone and composed
    "sync_switch": ("sync_switch", {}),
    "sync_switch-none": ("sync_switch", {"config": "none", "asp_momentum": "zero"}),
    "sync_switch-sqrt": ("sync_switch", {"lr_rule": "sqrt", "asp_lr_rule": "sqrt_staleness"}),
    "asp_bsp": ("sync_switch", {"order": "asp_bsp"}),
    "greedy": ("sync_switch", {"stragglers": "greedy", "window_seconds": 2.0, "consecutive": 1}),
    "elastic": ("sync_switch", {"stragglers": "elastic", "window_seconds": 2.0, "consecutive": 1}),
    "compose-elastic-lbbsp-dana": ("compose", {"schedule": "elastic", "batch": "lbbsp", "update": "dana_zero"}),
    "compose-sync_switch-lwp": ("compose", {"schedule": "sync_switch", "update": "lwp"}),
}


def job(stop_at_target: bool = False):
    return small_job(target__threshold=0.99, budget__max_updates=80, budget__stop_at_target=stop_at_target,
                     workload__evaluation__every_seconds=1.0,
                     cluster__round_trip={"kind": "gamma", "v_task": 0.5, "heterogeneous": True})


def policy(form: str, switch_at: float):
    name, params = FORMS[form]
    return make_policy(name, {**params, "switch_at": switch_at})


def same_run(a, b) -> None:
    assert torch.equal(a.final_params, b.final_params)
    assert a.trace.arrivals == b.trace.arrivals and a.trace.evals == b.trace.evals
    assert [r[:2] + r[3:] for r in a.trace.updates] == [r[:2] + r[3:] for r in b.trace.updates]
    assert a.trace.extras == b.trace.extras
    assert a.metrics == b.metrics and a.status == b.status and a.policy == b.policy


@pytest.mark.parametrize("form", sorted(FORMS))
@pytest.mark.parametrize("first,then", [(0.7, 0.35), (0.35, 0.7)])
def test_a_switch_point_forked_from_another_s_prefix_equals_its_run_from_the_start(form, first, then):
    store = ForkStore()
    run_sharing_prefixes(job(), policy(form, first), store=store)
    heard: list[tuple[float, bool]] = []
    _, forked, forked_seconds = run_sharing_prefixes(
        job(), policy(form, then), lambda info: heard.append((info["time"], info.get("forked", False))), store=store)
    whole = Simulator(job(), policy(form, then), target_metric_only=True).run()
    assert forked_seconds > 0
    same_run(forked, whole)
    assert [t for t, _ in heard] == [e[1] for e in whole.trace.evals]  # every evaluation is heard, in order
    assert max(t for t, replayed in heard if replayed) == forked_seconds  # those kept are marked as such


def test_a_run_that_stops_at_the_target_forks_from_a_full_budget_run_s_prefix():
    store = ForkStore()
    reachable = {"target__threshold": 0.95}
    full = small_job(**reachable, budget__max_updates=80, workload__evaluation__every_seconds=1.0)
    stopping = full.model_copy(update={"budget": full.budget.model_copy(update={"stop_at_target": True})})
    run_sharing_prefixes(full, policy("sync_switch", 0.9), store=store)
    _, forked, forked_seconds = run_sharing_prefixes(stopping, policy("sync_switch", 0.8), store=store)
    whole = Simulator(stopping, policy("sync_switch", 0.8), target_metric_only=True).run()
    assert forked.status == "target_reached" and forked_seconds > 0
    same_run(forked, whole)


def test_prefixes_kept_after_the_target_serve_full_budget_runs_only():
    """A run that stops at the target would have stopped before a prefix kept past it: it forks from one
    kept before; a full-budget run (a candidate's check) forks from the longest, past the target."""
    store = ForkStore()
    full = small_job(target__threshold=0.95, budget__max_updates=80, workload__evaluation__every_seconds=1.0)
    stopping = full.model_copy(update={"budget": full.budget.model_copy(update={"stop_at_target": True})})
    run_sharing_prefixes(full, policy("sync_switch", 0.95), store=store)
    assert {k.past_target for k in store._kept.values()} == {False, True}
    _, stopped, forked = run_sharing_prefixes(stopping, policy("sync_switch", 0.9), store=store)
    assert 0 < forked < stopped.metrics["time_to_target"]
    same_run(stopped, Simulator(stopping, policy("sync_switch", 0.9), target_metric_only=True).run())
    _, whole, forked = run_sharing_prefixes(full, policy("sync_switch", 0.9), store=store)
    assert forked > whole.metrics["time_to_target"]
    same_run(whole, Simulator(full, policy("sync_switch", 0.9), target_metric_only=True).run())


def test_the_longest_prefix_below_the_switch_point_is_taken_and_none_above_it():
    store = ForkStore()
    run_sharing_prefixes(job(), policy("sync_switch", 0.7), store=store)
    key = next(iter(store._kept))[0]
    below_half = store.prefix(key, 0.5)
    assert below_half is not None and below_half.undecided_above < 0.5
    assert all(k.at_seconds <= below_half.at_seconds for (_, above), k in store._kept.items() if above < 0.5)
    assert store.prefix(key, 0.01) is None  # nothing kept before the first 1/32 of the workload
    assert max(above for _, above in store._kept) < 0.7  # no prefix after the switch


def test_policies_without_a_switch_point_keep_no_prefix_and_other_parameters_do_not_share():
    store = ForkStore()
    _, _, forked = run_sharing_prefixes(job(), make_policy("backup", {"k": 3}), store=store)
    assert forked == 0.0 and len(store) == 0
    run_sharing_prefixes(job(), policy("sync_switch", 0.7), store=store)
    _, _, forked = run_sharing_prefixes(job(), make_policy("sync_switch", {"switch_at": 0.3, "config": "none"}),
                                        store=store)
    assert forked == 0.0


def test_a_switched_run_refuses_to_continue_as_another_switch_point():
    sim = Simulator(job(), policy("sync_switch", 0.2))
    sim.run()
    with pytest.raises(ValueError, match="not the prefix of switch_at=0.5"):
        sim.continue_as(policy("sync_switch", 0.5))
    with pytest.raises(ValueError, match="differs in its switch point"):
        Simulator(job(), policy("sync_switch", 0.2)).continue_as(make_policy("sync_switch", {"switch_at": 0.5,
                                                                                              "config": "none"}))


@pytest.mark.slow
@pytest.mark.parametrize("stop_at_target", [True, False])
def test_a_switch_point_search_that_forks_finds_what_one_without_forks_finds_and_trains_less(tmp_path,
                                                                                               stop_at_target):
    """A tune over the switch_point space, forking and not (no snapshot kept): the same trials, the same
    values and the same answer; the forking one trains fewer virtual seconds and says so."""
    import optuna

    from autosync.engine.forks import FORKS, MAX_BYTES
    from autosync.search.space import SPACE_DIR, load_space
    from autosync.search.study.storage import open_storage
    from autosync.search.tune import tune

    job_ = small_job(budget={"max_updates": 40}, target={"metric": "test_accuracy", "threshold": 0.95},
                     workload__evaluation__every_seconds=1.0)
    space = load_space(SPACE_DIR / "switch_point.yaml", job_.cluster.n_workers)
    outcomes, studies = [], []
    for max_bytes in (0, MAX_BYTES):
        FORKS.clear()
        FORKS.max_bytes = max_bytes
        url = f"sqlite:///{tmp_path / f'{max_bytes}.db'}"
        try:
            outcomes.append(tune(tune_request(job_, space, n_trials=8, storage=url,
                                              settings={"stop_at_target": stop_at_target})))
        finally:
            FORKS.max_bytes = MAX_BYTES
            FORKS.clear()
        studies.append(optuna.load_study(study_name=outcomes[-1].study_name, storage=open_storage(url)))
    unforked, forked = outcomes
    assert forked.cache["best_policy"] == unforked.cache["best_policy"]
    assert [(t.params, t.state, t.value) for t in studies[1].trials] == \
        [(t.params, t.state, t.value) for t in studies[0].trials]
    assert forked.cache["search_cost_virtual_seconds"] < unforked.cache["search_cost_virtual_seconds"]
    assert forked.cache["search_breakdown"]["forked_trials"] > 0 == unforked.cache["search_breakdown"]["forked_trials"]


def test_a_prefix_serves_only_runs_of_the_same_budget():
    """Sync-Switch measures its quota in the budget: a run of another budget is another run from the start."""
    store = ForkStore()
    run_sharing_prefixes(job(), policy("sync_switch", 0.7), store=store)
    longer = small_job(target__threshold=0.99, budget__max_updates=120, workload__evaluation__every_seconds=1.0,
                       cluster__round_trip={"kind": "gamma", "v_task": 0.5, "heterogeneous": True})
    _, _, forked = run_sharing_prefixes(longer, policy("sync_switch", 0.35), store=store)
    assert forked == 0.0


def test_the_store_evicts_the_oldest_snapshots_beyond_its_bytes():
    store = ForkStore(max_bytes=10)
    store.put("a", b"1234", 1.0)
    store.put("b", b"1234", 1.0, undecided_above=0.1)
    store.put("a", b"12345", 2.0)  # replaces a's snapshot: 9 bytes kept
    assert len(store) == 2 and store.get("a").at_seconds == 2.0
    store.put("c", b"123", 1.0)  # 12 bytes: the oldest, b's prefix, goes
    assert store.prefix("b", 0.5) is None and store.get("a") is not None and store.get("c") is not None
    store.put("d", b"12345678901", 1.0)  # larger than the whole store: not kept
    assert store.get("d") is None and len(store) == 2
