"""Equivalent policies found by a check, not listed: two policies that run alike on a job are trained once.

`Policy.canonical` lists the equivalences known by construction (backup workers with k = n are BSP; the
DANA family without momentum is ASP). This module finds the others by running: each policy runs on a
*proxy* of the job, which keeps everything a policy decides on (the cluster and its round-trip draws,
the seed, the optimizer, the learning-rate schedule, the batch size, the budget, the number of training
samples, the link's model size) and replaces the model and data by a logistic regression on random
features, a few hundred parameters. Two policies are equivalent on the job when their proxy runs agree
bit for bit after every update (the virtual time, the parameters, the samples applied) and end alike.

A trial scored on several seeds is checked on each (a proxy per seed). The proxy runs of a pair advance
together and stop at the first update where they differ, so a pair that
differs costs a few updates of a small model; a pair that agrees costs its two proxy runs (about a fifth
of one run of the default job's CNN each) and saves a training. A run that agrees for a while (a switch
point's BSP phase against BSP) costs as far as they agree.

A check, not a proof: it holds for the proxy's gradients. Policies decide on the arrival times, the
version lags and the gradients' values (norms, variances, DC-ASGD's compensation); two policies that decide
alike on random features' gradients and differently on the model's would be merged.
"""

from __future__ import annotations

import hashlib
import json
import struct
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from autosync.core.job import JobSpec

if TYPE_CHECKING:
    from autosync.engine.simulator import Simulator
    from autosync.workloads.workload import Workload

PROXY_FEATURES = 16  # random input features of the proxy's logistic regression
PROXY_TEST_SAMPLES = 64  # its test set: evaluations cost next to nothing
MAX_KEPT_RUNS = 64  # proxy runs kept in memory for later checks (the oldest go first)
FIRST_CHUNK = 8  # updates compared before the runs advance further (doubling up to MAX_CHUNK)
MAX_CHUNK = 512


def proxy_of(job: JobSpec) -> "tuple[JobSpec, Workload]":
    """The job's proxy (see the module's docstring) and its workload: the job with a logistic regression on
    `PROXY_FEATURES` Gaussian features drawn from the job's seed, as many training samples and classes as the
    job's data, trained to the end of the budget (never stopped at the target)."""
    import torch

    from autosync.core.job import DatasetSpec, ModelSpec
    from autosync.workloads.datasets import load_dataset
    from autosync.workloads.models import build_model
    from autosync.workloads.tensors import Dataset
    from autosync.workloads.build import build_workload

    real = load_dataset(job.workload.dataset, job.source)
    classes = real.n_classes or 2
    server = job.cluster.server
    if server.bandwidth is not None and server.model_bytes is None:  # the link's cost stays the model's
        model = build_model(job.workload.model, real.input_shape, real.n_classes or 1, job.source)
        server = server.model_copy(update={"model_bytes": 4 * sum(p.numel() for p in model.parameters())})
    generator = torch.Generator().manual_seed(job.seed)

    def draw(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        return (torch.randn(n, PROXY_FEATURES, generator=generator),
                torch.randint(0, classes, (n,), generator=generator))

    data = Dataset(*draw(real.n_train), *draw(PROXY_TEST_SAMPLES), n_classes=classes)
    workload = job.workload.model_copy(update={
        "dataset": DatasetSpec(name="synthetic_classification", n_features=PROXY_FEATURES, n_classes=classes),
        "model": ModelSpec(name="logreg"), "loss": None})
    target = job.target if job.target.metric != "test_accuracy" or real.n_classes else \
        job.target.model_copy(update={"metric": "test_loss"})
    proxy = job.model_copy(update={
        "workload": workload, "target": target,
        "cluster": job.cluster.model_copy(update={"server": server}),
        "budget": job.budget.model_copy(update={"stop_at_target": False, "stop_at_seconds": None})})
    return proxy, build_workload(proxy, dataset=data)


class _ProxyRun:
    """One policy's proxy run, advanced on demand: a digest after each update, and how it ended."""

    def __init__(self, policy: dict[str, Any], sim: "Simulator"):
        self.policy = policy
        self.sim = sim
        self.digests: list[bytes] = []
        self.end: tuple[str, float] | None = None  # (status, virtual time) once the budget is spent

    def advance(self, updates: int) -> None:
        """Run on until `updates` digests are known, or the run has ended (`Simulator.run_until`)."""
        if self.end is not None or len(self.digests) >= updates:
            return
        sim = self.sim

        def enough() -> bool:  # asked after every event: an update's digest is taken right after it
            if len(sim.trace.updates) > len(self.digests):
                self.digests.append(_digest(sim))
            return len(self.digests) >= updates

        try:
            result = sim.run_until(enough)
        except Exception as exc:  # noqa: BLE001 - a run that fails ends there, as its twin's must to match it
            self.end = (f"failed: {type(exc).__name__}: {exc}", sim.now)
            return
        if result is not None:
            self.end = (result.status, sim.now)


def _digest(sim: "Simulator") -> bytes:
    """What an update leaves that a result can depend on: the time, the samples applied, the parameters
    and the model's buffers (the momentum and a look-ahead show up in the next update's parameters)."""
    h = hashlib.blake2b(struct.pack("<dq", sim.now, sim.samples_applied), digest_size=16)
    h.update(sim.params.detach().cpu().numpy().tobytes())
    if sim.buffers is not None:
        h.update(sim.buffers.detach().cpu().numpy().tobytes())
    return h.digest()


class EquivalenceCheck:
    """Finds, among policies already trained on a job, one whose runs a new policy's would repeat."""

    def __init__(self, job: JobSpec):
        self.job = job
        self._proxies: "dict[int, tuple[JobSpec, Workload]]" = {}  # by seed, built on the first check
        self._runs: OrderedDict[tuple[int, str], _ProxyRun] = OrderedDict()
        self.proxy_updates = 0  # updates the proxies have run, in all (what the checks cost)

    def find(self, policy: dict[str, Any], candidates: list[dict[str, Any]],
             seeds: list[int] | None = None) -> dict[str, Any] | None:
        """The first of `candidates` whose proxy runs are `policy`'s bit for bit to the end, on every one of
        `seeds` (default: the job's seed), the seeds a trial is scored on; None if none is."""
        alive = [c for c in _distinct(candidates) if c != policy]
        for seed in seeds if seeds is not None else [self.job.seed]:
            alive = self._agreeing(policy, alive, seed)
        return alive[0] if alive else None

    def _agreeing(self, policy: dict[str, Any], candidates: list[dict[str, Any]], seed: int) -> list[dict[str, Any]]:
        """The `candidates` whose proxy run on `seed` is `policy`'s to the end, in their order."""
        mine = self._run(policy, seed)
        alive = [self._run(c, seed) for c in candidates]
        checked, chunk = 0, FIRST_CHUNK
        while alive:
            upto = checked + chunk
            self._advance([mine, *alive], upto)
            alive = [r for r in alive if r.digests[checked:upto] == mine.digests[checked:upto]]
            if mine.end is not None and len(mine.digests) <= upto:
                self._advance(alive, len(mine.digests) + 1)  # a run paused right at mine's length may go on
                return [r.policy for r in alive if r.end == mine.end and len(r.digests) == len(mine.digests)]
            checked, chunk = upto, min(2 * chunk, MAX_CHUNK)
        return []

    def _advance(self, runs: list[_ProxyRun], updates: int) -> None:
        for run in runs:
            before = len(run.digests)
            run.advance(updates)
            self.proxy_updates += len(run.digests) - before

    def _run(self, policy: dict[str, Any], seed: int) -> _ProxyRun:
        from autosync.catalog import policy_from_dict
        from autosync.engine.simulator import Simulator

        key = (seed, json.dumps(policy, sort_keys=True))
        run = self._runs.get(key)
        if run is None:
            if seed not in self._proxies:
                self._proxies[seed] = proxy_of(self.job.model_copy(update={"seed": seed}))
            job, workload = self._proxies[seed]
            run = self._runs[key] = _ProxyRun(policy, Simulator(job, policy_from_dict(policy), workload=workload))
            while len(self._runs) > MAX_KEPT_RUNS:
                self._runs.popitem(last=False)
        self._runs.move_to_end(key)
        return run


def _distinct(policies: list[dict[str, Any]]) -> list[dict[str, Any]]:
    seen: dict[str, dict[str, Any]] = {}
    for p in policies:
        seen.setdefault(json.dumps(p, sort_keys=True), p)
    return list(seen.values())
