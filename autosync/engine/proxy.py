"""A job's proxy: the same run of a policy with a model and data that cost next to nothing.

The proxy keeps everything a policy decides on (the cluster and its round-trip draws, the seed, the
optimizer, the learning-rate schedule, the batch size, the budget, the number of training samples, the
link's model size) and replaces the model and data by a logistic regression on random features, a few
hundred parameters. Two policies whose proxy runs agree bit for bit after every update (the virtual time,
the parameters, the samples applied) and end alike run alike on the job
(`autosync.search.equivalence`); `proxy_fingerprint` is that whole run in one hash, for a table that
records it (`autosync.table`).
"""

from __future__ import annotations

import hashlib
import struct
from typing import TYPE_CHECKING, Any

from autosync.core.job import DatasetSpec, JobSpec, ModelSpec

if TYPE_CHECKING:
    from autosync.engine.simulator import Simulator
    from autosync.policies import Policy
    from autosync.workloads.workload import Workload

PROXY_FEATURES = 16  # random input features of the proxy's logistic regression
PROXY_TEST_SAMPLES = 64  # its test set: evaluations cost next to nothing


def proxy_of(job: JobSpec) -> "tuple[JobSpec, Workload]":
    """The job's proxy (see the module's docstring) and its workload: the job with a logistic regression on
    `PROXY_FEATURES` Gaussian features drawn from the job's seed, as many training samples and classes as the
    job's data, trained to the end of the budget (never stopped at the target)."""
    import torch

    # not at the top: torch
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


class ProxyRun:
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
                self.digests.append(digest(sim))
            return len(self.digests) >= updates

        try:
            result = sim.run_until(enough)
        except Exception as exc:  # noqa: BLE001 - a run that fails ends there, as its twin's must to match it
            self.end = (f"failed: {type(exc).__name__}: {exc}", sim.now)
            return
        if result is not None:
            self.end = (result.status, sim.now)


def digest(sim: "Simulator") -> bytes:
    """What an update leaves that a result can depend on: the time, the samples applied, the parameters
    and the model's buffers (the momentum and a look-ahead show up in the next update's parameters)."""
    h = hashlib.blake2b(struct.pack("<dq", sim.now, sim.samples_applied), digest_size=16)
    h.update(sim.params.detach().cpu().numpy().tobytes())
    if sim.buffers is not None:
        h.update(sim.buffers.detach().cpu().numpy().tobytes())
    return h.digest()


def proxy_fingerprint(job: JobSpec, policy: "Policy") -> str:
    """`policy`'s whole proxy run on `job` (its seed) as one hash: every update's digest and how it ended. Two
    policies have equal fingerprints exactly when the chunked check (`autosync.search.equivalence`) finds
    their runs alike on that seed."""
    from autosync.engine.simulator import Simulator  # not at the top: torch

    proxy, workload = proxy_of(job)
    run = ProxyRun(policy.to_dict(), Simulator(proxy, policy, workload=workload))
    run.advance(2 ** 62)  # to the end of the budget
    h = hashlib.blake2b(repr(run.end).encode(), digest_size=16)
    for d in run.digests:
        h.update(d)
    return h.hexdigest()
