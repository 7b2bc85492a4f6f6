"""The policy contract as a function users call: `check_policy(policy)`, as scikit-learn's `check_estimator`.

Every policy autosync ships passes it (tests/unit/policies/test_policy_contract.py), and a policy a user
adds should too: its parameters are plain data that round-trip through JSON, bad ones are refused before a
run in one line naming the parameter, a seeded run reproduces bit for bit, its decisions name only valid
workers, a run forked from its snapshot is the uninterrupted run, and worker processes compute it bit for
bit as the in-process engine does. A failed check raises `ContractError` naming the check.

It lives above the engine and the catalog (tests/unit/test_layers.py), which it runs and reads, rather than
in `autosync.policies`, which both of them import.
"""

from __future__ import annotations

import copy

import json
from collections.abc import Iterable, Mapping
from typing import Any

import torch

from autosync.catalog import policy_from_dict
from autosync.core.job import JobSpec, job_from_dict
from autosync.engine.drivers import PerWorkerDriver, ProcessDriver
from autosync.engine.simulator import RunResult, Simulator
from autosync.policies import Policy
from autosync.workloads.build import build_workload
from autosync.workloads.workload import Workload

__all__ = ["CHECKS", "ContractError", "check_decisions", "check_policy", "check_refuses_bad_parameters",
           "check_round_trip", "contract_job"]

# The checks, in the order check_policy runs them; a ContractError names one of these.
ROUND_TRIP = "round trip through JSON"
REFUSES = "bad parameters are refused in one line"
UNCHANGED = "a run leaves the policy unchanged"
SAME_SEED = "the same seed gives the same run"
OTHER_SEED = "another seed gives another run"
VALID_WORKERS = "decisions name only valid workers"
LOGGED = "every arrival is logged, in time order"
FORK = "fork equals run"
PROCESSES = "worker processes give bit-identical results"
CHECKS = (ROUND_TRIP, REFUSES, UNCHANGED, SAME_SEED, OTHER_SEED, VALID_WORKERS, LOGGED, FORK, PROCESSES)

# A value no parameter takes: every parameter must refuse it (a type check, not only a range check).
WRONG_TYPE: dict[str, str] = {"not": "a value"}


class ContractError(AssertionError):
    """A policy broke its contract: `check` is the check it failed (one of `CHECKS`).

    An AssertionError, as scikit-learn's `check_estimator` raises, so a test that calls `check_policy`
    reports it as a failure; it is raised explicitly, so it also fires under `python -O`.
    """

    def __init__(self, policy: Policy, check: str, detail: str):
        self.check = check
        super().__init__(f"{policy!r} fails the contract check '{check}': {detail}")


# the job `check_policy` runs by default, as a job file would hold it (the tests' small job starts from it)
CONTRACT_JOB: dict[str, Any] = {
    "name": "contract",
    "workload": {
        "dataset": {"name": "synthetic_classification", "n_samples": 600, "n_features": 10, "n_classes": 3},
        "model": {"name": "logreg"},
        "batch_size": 16,
        "optimizer": {"lr": 0.1, "momentum": 0.5},
        "evaluation": {"every_seconds": 5.0},
    },
    "cluster": {"n_workers": 4, "round_trip": {"kind": "shifted_exponential", "alpha": 0.7}},
    "target": {"metric": "test_accuracy", "threshold": 0.75},
    "budget": {"max_updates": 90, "max_virtual_seconds": 30.0},
    "seed": 3,
}


def contract_job(seed: int = 3) -> JobSpec:
    """The job `check_policy` runs by default (`CONTRACT_JOB`): 4 workers with shifted-exponential round
    trips training a logistic regression on synthetic data, 90 updates or 30 virtual seconds, whichever
    comes first, whose 0.75 test-accuracy target every shipped policy meets before the budget ends, by 17
    virtual seconds (so the fork check has a point to fork at). The seconds cap the local-update policies,
    whose updates each take several local steps (90 of them took 460 virtual seconds). Simulates in well
    under a second."""
    return job_from_dict({**copy.deepcopy(CONTRACT_JOB), "seed": seed}, "check_policy")


def check_policy(policy: Policy, job: JobSpec | None = None, *, bad_values: Mapping[str, Any] | None = None,
                 processes: bool = False) -> None:
    """Check that `policy` keeps the contract every policy keeps; raise ContractError naming the first
    check it fails (`CHECKS`), or return None.

    Args:
        policy: the policy to check, registered in the catalog under its `name` (exported in
            `autosync.policies.__all__`), since the JSON round trip finds it there.
        job: the job its runs train (default `contract_job()`); the fork check needs a target the policy
            meets before the budget ends, with room after it.
        bad_values: a value each named parameter must refuse, besides a value of the wrong type, which
            every parameter must refuse (e.g. `{"k": 0}` for backup workers).
        processes: also run it on two worker processes and compare with the in-process engine bit for
            bit. Off by default: it starts processes, which takes seconds.
    """
    job = job if job is not None else contract_job()
    n, batch = job.cluster.n_workers, job.workload.batch_size
    check_round_trip(policy)
    check_refuses_bad_parameters(policy, bad_values or {}, n_workers=n, batch_size=batch)
    workload = build_workload(job)  # one workload for every run below: building it is the slow part
    before = policy.to_json()
    first = Simulator(job, policy, workload=workload).run()
    if policy.to_json() != before:
        raise ContractError(policy, UNCHANGED, f"its parameters were {before}, and after a run {policy.to_json()}")
    _check_same_run(policy, SAME_SEED, first, Simulator(job, policy, workload=workload).run())
    # a few updates on another seed: its arrivals are a prefix of the first run's only if the seed is ignored
    other = job.model_copy(update={"seed": job.seed + 1, "budget": job.budget.model_copy(update={"max_updates": 5})})
    arrivals = Simulator(other, policy, workload=workload).run().trace.arrivals
    if arrivals == first.trace.arrivals[:len(arrivals)]:
        raise ContractError(policy, OTHER_SEED, f"seeds {job.seed} and {other.seed} gave the same arrivals")
    check_decisions(policy, first, n)
    _check_fork(policy, job, workload, first)
    if processes:
        _check_processes(policy, job, workload)


def check_round_trip(policy: Policy) -> None:
    """The policy read back from its JSON (`policy_from_dict`) equals it and writes the same JSON."""
    text = policy.to_json()
    try:
        again = policy_from_dict(json.loads(text))
    except ValueError as err:
        raise ContractError(policy, ROUND_TRIP, f"{text} does not read back: {err}") from err
    if again != policy or again.to_json() != text:
        raise ContractError(policy, ROUND_TRIP, f"{text} reads back as {again.to_json()}")


def check_refuses_bad_parameters(policy: Policy, bad_values: Mapping[str, Any], *, n_workers: int, batch_size: int,
                                 names: Iterable[str] | None = None) -> None:
    """The policy with one parameter changed to a bad value is refused before a run (when it is made, or
    bound to `n_workers` and `batch_size`) by a ValueError of one line naming that parameter: a value of
    the wrong type for each parameter in `names` (default: all of them), and each of `bad_values`."""
    params = policy.params()
    unknown = sorted(set(bad_values) - set(params))
    if unknown:
        raise ValueError(f"bad_values must name parameters of {policy.name} ({', '.join(params)}), "
                         f"but got {', '.join(unknown)}")
    tries = [(name, WRONG_TYPE) for name in (params if names is None else names)] + list(bad_values.items())
    for name, value in tries:
        data = {"policy": policy.name, "params": {**params, name: value}}
        try:
            policy_from_dict(data).bind(n_workers, batch_size)
        except ValueError as err:  # UserError, which the catalog raises, is a ValueError
            message = str(err)
            if name not in message or "\n" in message:
                raise ContractError(policy, REFUSES, f"{name}={value!r} is refused by {message!r}, which "
                                    f"should be one line naming {name}") from err
            continue
        raise ContractError(policy, REFUSES, f"{name}={value!r} is accepted")


def _check_same_run(policy: Policy, check: str, a: RunResult, b: RunResult) -> None:
    """The two runs are one run bit for bit: parameters, arrivals, updates (but for their wall time),
    evaluations, metrics and status."""
    without_wall = lambda updates: [u[:2] + u[3:] for u in updates]  # noqa: E731  # column 2 is wall time
    differs = [what for what, same in (
        ("final parameters", torch.equal(a.final_params, b.final_params)),
        ("arrivals", a.trace.arrivals == b.trace.arrivals),
        ("updates", without_wall(a.trace.updates) == without_wall(b.trace.updates)),
        ("evaluations", a.trace.evals == b.trace.evals),
        ("metrics", a.metrics == b.metrics),
        ("status", a.status == b.status)) if not same]
    if differs:
        raise ContractError(policy, check, f"the runs differ in their {', '.join(differs)}")


def check_decisions(policy: Policy, result: RunResult, n_workers: int) -> None:
    """`result`, a run of `policy` on `n_workers` workers, made updates, each from distinct valid workers at staleness >= 0, and every arrival is
    logged in time order, no more gradients used than accepted."""
    updates, arrivals = result.trace.updates, result.trace.arrivals
    if not updates:
        raise ContractError(policy, VALID_WORKERS, "the run made no update")
    for row in updates:
        workers, staleness = row[6], row[7]
        if not all(0 <= w < n_workers for w in workers) or len(set(workers)) != len(workers):
            raise ContractError(policy, VALID_WORKERS, f"an update used workers {workers} of {n_workers}")
        if not all(s >= 0 for s in staleness):
            raise ContractError(policy, VALID_WORKERS, f"an update used gradients of staleness {staleness}")
    for time, worker, task, version, batch, accepted in arrivals:
        if not 0 <= worker < n_workers or batch < 1:
            raise ContractError(policy, VALID_WORKERS, f"worker {worker} of {n_workers} pushed a batch of {batch}")
    times = [a[0] for a in arrivals]
    if times != sorted(times):
        raise ContractError(policy, LOGGED, "the arrivals are not logged in time order")
    used, accepted = sum(r[5] for r in updates), sum(1 for a in arrivals if a[5])
    if used > accepted:
        raise ContractError(policy, LOGGED, f"its updates used {used} gradients, but {accepted} arrived accepted")


def _check_fork(policy: Policy, job: JobSpec, workload: Workload, whole: RunResult) -> None:
    """A run stopped at the target, snapshotted and resumed to the full budget is `whole`, the run that
    never stopped (`autosync.engine.forks`)."""
    stop = job.model_copy(update={"budget": job.budget.model_copy(update={"stop_at_target": True})})
    stopping = Simulator(stop, policy, workload=workload)
    stopped = stopping.run()
    if stopped.status != "target_reached" or len(stopped.trace.updates) >= len(whole.trace.updates):
        raise ContractError(policy, FORK, f"the run never stopped at the target to fork from (status "
                            f"{stopped.status!r} after {len(stopped.trace.updates)} updates): give a job whose "
                            f"target it meets before its budget ends")
    forked = Simulator.resume(stopping.snapshot(), job, workload=workload).run_on()
    _check_same_run(policy, FORK, forked, whole)


def _check_processes(policy: Policy, job: JobSpec, workload: Workload) -> None:
    """Two worker processes compute the run bit for bit as the in-process per-worker kernel does on the
    workers' one torch thread (the fused in-process driver sums in another order)."""
    reference = Simulator(job, policy, workload=workload, driver=PerWorkerDriver(workload, job.seed), threads=1).run()
    driver = ProcessDriver(workload, processes=2)
    try:
        result = Simulator(job, policy, workload=workload, driver=driver).run()
    finally:
        driver.close()
    _check_same_run(policy, PROCESSES, result, reference)
