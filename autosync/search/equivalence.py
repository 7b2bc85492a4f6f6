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

import json
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Callable

from autosync.core.job import JobSpec
from autosync.engine.proxy import ProxyRun, proxy_of
from autosync.catalog import policy_from_dict

if TYPE_CHECKING:
    from autosync.workloads.workload import Workload

MAX_KEPT_RUNS = 64  # proxy runs kept in memory for later checks (the oldest go first)
FIRST_CHUNK = 8  # updates compared before the runs advance further (doubling up to MAX_CHUNK)
MAX_CHUNK = 512


class EquivalenceCheck:
    """Finds, among policies already trained on a job, one whose runs a new policy's would repeat."""

    def __init__(self, job: JobSpec, recorded: "Callable[[dict[str, Any], int], str] | None" = None):
        """`recorded(policy, seed)`, where given, is the policy's whole proxy run on the seed as one hash
        (`autosync.engine.proxy.proxy_fingerprint`, read from the table a search replays on): runs alike to
        the end are then found by comparing those, with the same answers as the runs compared in chunks."""
        self.job = job
        self.recorded = recorded
        self._proxies: "dict[int, tuple[JobSpec, Workload]]" = {}  # by seed, built on the first check
        self._runs: OrderedDict[tuple[int, str], ProxyRun] = OrderedDict()
        self.proxy_updates = 0  # updates the proxies have run, in all (what the checks cost)

    def find(self, policy: dict[str, Any], candidates: list[dict[str, Any]],
             seeds: list[int] | None = None) -> dict[str, Any] | None:
        """The first of `candidates` whose proxy runs are `policy`'s bit for bit to the end, on every one of
        `seeds` (default: the job's seed), the seeds a trial is scored on; None if none is."""
        alive = [c for c in _distinct(candidates) if c != policy]
        for seed in seeds if seeds is not None else [self.job.seed]:
            if self.recorded is not None and alive:
                mine = self.recorded(policy, seed)
                alive = [c for c in alive if self.recorded(c, seed) == mine]
            else:
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

    def _advance(self, runs: list[ProxyRun], updates: int) -> None:
        for run in runs:
            before = len(run.digests)
            run.advance(updates)
            self.proxy_updates += len(run.digests) - before

    def _run(self, policy: dict[str, Any], seed: int) -> ProxyRun:
        from autosync.engine.simulator import Simulator  # not at the top: torch (a tune's request loads this module)

        key = (seed, json.dumps(policy, sort_keys=True))
        run = self._runs.get(key)
        if run is None:
            if seed not in self._proxies:
                self._proxies[seed] = proxy_of(self.job.model_copy(update={"seed": seed}))
            job, workload = self._proxies[seed]
            run = self._runs[key] = ProxyRun(policy, Simulator(job, policy_from_dict(policy), workload=workload))
            while len(self._runs) > MAX_KEPT_RUNS:
                self._runs.popitem(last=False)
        self._runs.move_to_end(key)
        return run


def _distinct(policies: list[dict[str, Any]]) -> list[dict[str, Any]]:
    seen: dict[str, dict[str, Any]] = {}
    for p in policies:
        seen.setdefault(json.dumps(p, sort_keys=True), p)
    return list(seen.values())
