"""One cell of the table: a simulator run recorded as a search sees it, and the shorter runs it answers for.

A cell is one policy on one job and seed, trained the way a search trains (evaluating only what the
target reads, `autosync.engine.forks.run_sharing_prefixes`), recorded as:

- every evaluation the progress callback heard, in order (the metric and the virtual seconds trained at
  each point where a race can decide);
- how the run ended (`status`) and the scores a search reads of it (`SCORES`): the time to the target or
  a miss, the final metric and the virtual seconds at the end of the budget;
- the prefixes a switch-point run (Sync-Switch) keeps for runs of other switch points (`Prefix`).

The simulator is deterministic and a run stopped at the target is the full run up to there, bit for bit
(`autosync.engine.forks`), so a full-budget cell also answers for the run that stops at the target, and
for a run stopped at a horizon it ended before. A run stopped at a horizon inside its budget ends with an
evaluation the full run never made: that one is a cell of its own (`Variant`). A table holds each lattice
point stopped at the target (`TO_TARGET`), which costs a fraction of the full budget where the target is
reached early, and trains the full run only where a search asks for it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace
from typing import Any

from autosync.core.job import JobSpec, TargetSpec
from autosync.core.loader import short_repr
from autosync.core.record_checks import expect, expect_numbers, is_number

# what `autosync.policy_score.evaluate` and the reports read of a run's metrics (`run_metrics`)
SCORES = ("virtual_time", "updates", "epochs", "reached_target", "time_to_target", "updates_to_target",
          "final_train_loss", "final_test_loss", "final_test_accuracy")
# an evaluation replayed from a snapshot carries only what the trace keeps (`Simulator.run_on`)
_TRACED = ("train_loss", "test_loss", "test_accuracy")


@dataclass(frozen=True)
class Variant:
    """Where a run stops besides its budget's end: at the target, at a horizon (virtual seconds), both or
    neither (the full run: what the table holds for every lattice point)."""

    stop_at_target: bool = False
    stop_at_seconds: float | None = None

    @classmethod
    def of(cls, job: JobSpec) -> "Variant":
        return cls(job.budget.stop_at_target, job.budget.stop_at_seconds)

    @property
    def full(self) -> bool:
        return not self.stop_at_target and self.stop_at_seconds is None


FULL = Variant()
TO_TARGET = Variant(stop_at_target=True)  # what a table builds for every lattice point (a full cell on demand)


@dataclass(frozen=True)
class Prefix:
    """A prefix a switch-point run kept (`autosync.engine.forks.ForkStore.put`): the virtual time it stood
    at, the quota above which every switch point runs alike (`Schedule.undecided_above`), and whether the
    target was already met."""

    at_seconds: float
    undecided_above: float
    past_target: bool


@dataclass(frozen=True)
class Cell:
    """One recorded run (see the module's docstring)."""

    fingerprint: str  # the job's (`JobSpec.fingerprint`)
    seed: int
    policy: dict[str, Any]  # `Policy.to_dict()` of the run's policy
    variant: Variant
    status: str  # "completed", "target_reached" or "diverged" (`RunResult.status`)
    evaluations: list[dict[str, Any]]  # what the progress callback heard, in order
    scores: dict[str, Any]  # `SCORES` of the run's metrics
    prefixes: list[Prefix] = field(default_factory=list)

    def to_record(self, key: str) -> dict[str, Any]:
        """The cell as a table file holds it (`from_json` reads it back)."""
        return {"key": key, "fingerprint": self.fingerprint, "seed": self.seed, "policy": self.policy,
                "variant": [self.variant.stop_at_target, self.variant.stop_at_seconds], "status": self.status,
                "evaluations": self.evaluations, "scores": self.scores,
                "prefixes": [[p.at_seconds, p.undecided_above, p.past_target] for p in self.prefixes]}

    def to_json(self, key: str) -> str:
        """One line of a table's open file: the same bytes for the same run (keys sorted, floats as repr)."""
        return json.dumps(self.to_record(key), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Cell":
        """The cell a table file's record holds; KeyError naming a field it lacks, TypeError or ValueError naming
        one that is not as `to_record` writes it (a replay computed with it: a text score was a traceback
        mid-search)."""
        _check_record(data)
        return cls(data["fingerprint"], data["seed"], data["policy"], Variant(*data["variant"]), data["status"],
                   data["evaluations"], data["scores"], [Prefix(*p) for p in data["prefixes"]])

    # ------------------------------------------------------------------ the other runs a cell answers for
    def as_run(self, variant: Variant, target: TargetSpec) -> "Cell | None":
        """The run of this cell's policy that stops as `variant` says, derived from this one; None where it
        cannot be. A full cell answers for every run stopped earlier except one stopped at a horizon inside
        the budget short of the target (it ends with an evaluation the full run never made). A cell stopped
        at the target that never reached it is the full run, bit for bit; one that reached it answers only
        for runs that stop at the target no earlier."""
        if variant == self.variant:
            return self
        if self.variant == TO_TARGET and self.status != "target_reached":
            return replace(self, variant=FULL).as_run(variant, target)
        if self.variant == TO_TARGET:
            horizon = variant.stop_at_seconds
            reached_by = horizon is None or self.scores["virtual_time"] <= horizon
            return replace(self, variant=variant) if variant.stop_at_target and reached_by else None
        if not self.variant.full:
            return None
        if variant.full:
            return self
        horizon = variant.stop_at_seconds
        if variant.stop_at_target:
            hit = next((i for i, e in enumerate(self.evaluations) if target.reached(e.get(target.metric))), None)
            if hit is not None and (horizon is None or self.evaluations[hit]["time"] <= horizon):
                return self._stopped_at(hit, variant, target)
        if horizon is None or self.scores["virtual_time"] <= horizon:
            return replace(self, variant=variant)
        return None

    def _stopped_at(self, index: int, variant: Variant, target: TargetSpec) -> "Cell":
        """The run that stopped at its `index`-th evaluation, the first that met the target (`run_metrics` of
        a trace whose last evaluation followed its last update)."""
        hit = self.evaluations[index]
        scores = {"virtual_time": hit["time"], "updates": hit["updates"], "epochs": hit["epoch"],
                  "reached_target": True, "time_to_target": hit["time"], "updates_to_target": hit["updates"],
                  **{f"final_{m}": hit.get(m) for m in _TRACED}}
        return replace(self, variant=variant, status="target_reached", evaluations=self.evaluations[:index + 1],
                       scores=scores, prefixes=[p for p in self.prefixes if p.at_seconds <= hit["time"]])


def cell_key(fork_key: str, variant: Variant) -> str:
    """A cell's key: the run (`autosync.engine.forks.fork_key`: the job, its budget and seed, the policy)
    and where it stops, hashed."""
    text = json.dumps([fork_key, variant.stop_at_target, variant.stop_at_seconds])
    return hashlib.sha256(text.encode()).hexdigest()


def as_forked(evaluation: dict[str, Any]) -> dict[str, Any]:
    """An evaluation as a run continued from a kept state hears it again (`Simulator.run_on`)."""
    return {"time": evaluation["time"], "updates": evaluation["updates"], "epoch": evaluation["epoch"],
            "forked": True, **{k: evaluation[k] for k in _TRACED if evaluation.get(k) is not None}}


def scores_of(metrics: dict[str, Any]) -> dict[str, Any]:
    """What a cell keeps of a run's metrics."""
    return {k: metrics.get(k) for k in SCORES}


STATUSES = ("completed", "target_reached", "diverged")  # how a run ends (`RunResult.status`)


def _check_record(data: Any) -> None:
    """TypeError or ValueError naming the first field of a cell's record that is not as `Cell.to_record`
    writes it: text, a seed, a policy object, a known status, evaluations of numbers with their time, scores
    of numbers (or null), and prefixes of [seconds, quota, past the target]."""
    expect(data, dict, "the record")
    expect(data["fingerprint"], str, "fingerprint")
    expect(data["seed"], int, "seed")
    expect(data["policy"], dict, "policy")
    variant = data["variant"]
    if not (isinstance(variant, list) and len(variant) == 2 and isinstance(variant[0], bool)
            and (variant[1] is None or is_number(variant[1]))):
        raise TypeError(f"variant must be [stop at the target, seconds or null], but got {short_repr(variant)}")
    if data["status"] not in STATUSES:
        raise ValueError(f"status must be one of {list(STATUSES)}, but got {short_repr(data['status'])}")
    for i, evaluation in enumerate(expect(data["evaluations"], list, "evaluations")):
        # the common case at the cost of one pass (a table's read checks every evaluation of every cell)
        if type(evaluation) is not dict or type(evaluation.get("time")) not in _NUMBER_TYPES \
                or not all(type(v) in _VALUE_TYPES for v in evaluation.values()):
            expect_numbers(evaluation, f"evaluations.{i}", required=("time",), flags=True)
    expect_numbers(data["scores"], "scores", required=("virtual_time",), flags=True)  # flags: reached_target
    for i, prefix in enumerate(expect(data["prefixes"], list, "prefixes")):
        if not (isinstance(prefix, list) and len(prefix) == 3 and all(is_number(x) for x in prefix[:2])
                and isinstance(prefix[2], bool)):
            raise TypeError(f"prefixes.{i} must be [seconds, quota, past the target], but got {short_repr(prefix)}")


_NUMBER_TYPES = (int, float)
_VALUE_TYPES = (int, float, type(None))  # an evaluation's values: numbers, or null (a metric not measured)
