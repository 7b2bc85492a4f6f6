"""The parameter server in the cluster model: its links and update loop queue first come, first served."""

from __future__ import annotations

import pytest

from autosync.core.cluster import ServerModel
from autosync.engine import simulate
from autosync.core.job import ServerSpec, job_from_dict
from autosync.policies import ASP, BSP
from tests.conftest import small_job

TAU, COMPUTE = 0.25, 0.5  # seconds per transfer; seconds of compute (batch 16 at 1/32 s per sample)


def _job(n: int, server: dict, updates: int = 3, **cluster):
    # the server's transfers take TAU: model_bytes / bandwidth
    return small_job(cluster__n_workers=n, cluster__round_trip={"kind": "deterministic"},
                     cluster__server={"model_bytes": 1000, "bandwidth": 1000 / TAU, **server},
                     budget={"max_updates": updates}, **cluster)


def test_the_default_server_is_instant_and_leaves_fingerprints_alone():
    spec = job_from_dict({"name": "x"})
    assert spec.cluster.server == ServerSpec() and spec.cluster.server.instant
    assert "server" not in spec.cluster.model_dump(mode="json") or spec.fingerprint() == job_from_dict(
        {"name": "x", "cluster": {"server": {"shards": 1}}}).fingerprint()
    assert spec.fingerprint() != job_from_dict({"name": "x", "cluster": {"server": {"apply_seconds": 0.1}}}).fingerprint()
    model = ServerModel(ServerSpec(), model_bytes=10 ** 9)
    assert model.instant and model.pull(3.0) == 3.0 and model.push(2.0) == 2.0 and model.update(1.0) == 1.0


def test_one_push_costs_one_transfer_each_way():
    """One worker: the round trip is a pull, the compute, a push."""
    result = simulate(_job(1, {}), BSP())
    times = result.trace.column("updates", "time")
    assert times == pytest.approx([2 * TAU + COMPUTE, 2 * (2 * TAU + COMPUTE), 3 * (2 * TAU + COMPUTE)])


def test_n_pushes_at_one_barrier_queue_behind_each_other():
    """BSP with n equal workers: pulls leave one after another (the i-th at i TAU), so the last gradient is
    ready at n TAU + compute and in after one more transfer: an iteration takes compute + (n + 1) TAU (plus
    the update's cost), where an instant server takes compute."""
    n, apply = 6, 0.1
    result = simulate(_job(n, {"apply_seconds": apply}), BSP())
    iteration = COMPUTE + (n + 1) * TAU + apply
    assert result.trace.column("updates", "time") == pytest.approx([iteration, 2 * iteration, 3 * iteration])
    instant = simulate(small_job(cluster__n_workers=n, cluster__round_trip={"kind": "deterministic"},
                                 budget={"max_updates": 3}), BSP())
    assert instant.trace.column("updates", "time") == pytest.approx([COMPUTE, 2 * COMPUTE, 3 * COMPUTE])


def test_shards_split_the_transfer_and_the_update():
    n = 4
    one = simulate(_job(n, {"apply_seconds": 0.2}), BSP()).trace.column("updates", "time")[0]
    two = simulate(_job(n, {"apply_seconds": 0.2, "shards": 2}), BSP()).trace.column("updates", "time")[0]
    assert one == pytest.approx(COMPUTE + (n + 1) * TAU + 0.2)
    assert two == pytest.approx(COMPUTE + (n + 1) * TAU / 2 + 0.1)


def test_asp_is_bounded_by_the_link_and_by_the_update_loop():
    """Many workers: ASP's updates come at most one per transfer, or one per apply when that is longer."""
    n = 16
    link = simulate(_job(n, {}, updates=200), ASP()).trace.column("updates", "time")
    rate = (200 - 100) / (link[199] - link[99])
    assert rate == pytest.approx(1 / TAU, rel=0.02)  # 16 / (2 TAU + compute) = 10.7/s would need more link
    slow_apply = simulate(_job(n, {"apply_seconds": 0.5}, updates=200), ASP()).trace.column("updates", "time")
    assert (200 - 100) / (slow_apply[199] - slow_apply[99]) == pytest.approx(1 / 0.5, rel=0.02)


@pytest.mark.slow
def test_every_policy_runs_on_a_queueing_server():
    from autosync.catalog import POLICIES, make_policy

    for name in POLICIES:
        policy = make_policy(name, {"k": 3} if name == "backup" else {})
        result = simulate(_job(4, {"apply_seconds": 0.05}, updates=12), policy)
        times = result.trace.column("updates", "time")
        assert len(times) == 12 and times == sorted(times), name
