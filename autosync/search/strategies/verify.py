"""Simulation verified: the best simulated candidates and BSP re-run on a real backend, rankings compared.

After a simulated search, the K best feasible candidates (one per policy) and BSP train `repeats` times
on the backend `autosync run` would build (worker processes, the virtual or the real clock). Each gets its
real time-to-target beside the simulated one; Kendall's tau compares the two rankings, and the real
winner (the fastest candidate whose real final metric stays within the tolerance of BSP's real one) is
what the cache then answers with.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from autosync.core.job import JobSpec
from autosync.policy_score import RunFailed, constraint, evaluate
from autosync.search.objective import BSP, trial_seeds

if TYPE_CHECKING:
    from autosync.engine.backends import BackendChoice


@dataclass
class Verification:
    """Each candidate's simulated and real scores, the rank agreement and the two winners."""

    execution: dict[str, Any]  # the backend, clock and device of the real runs
    seeds: list[int]
    rows: list[dict[str, Any]] = field(default_factory=list)  # one per candidate, simulated best first
    kendall_tau: float | None = None  # rank agreement of simulated and real times (None with < 2 candidates)
    simulated_winner: dict[str, Any] | None = None
    real_winner: dict[str, Any] | None = None
    same_winner: bool = False
    winner_gap: float | None = None  # the simulated winner's real time over the real winner's

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "answer": self.answer()}

    def answer(self) -> dict[str, Any] | None:
        """The policy the cache answers with after the verification (the real winner) and BSP, each on
        both clocks, with the speedup over BSP on each; None when no candidate was feasible for real."""
        if self.real_winner is None:
            return None
        winner = next(r for r in self.rows if r["policy"] == self.real_winner)
        bsp = next(r for r in self.rows if r["policy"] == BSP)
        def speedup(clock: str) -> float | None:  # none where a run missed the target: its time is a miss's score
            timed = all(r.get(f"{clock}_reached") in (None, r.get("runs")) for r in (winner, bsp))
            a, b = bsp[f"{clock}_time"], winner[f"{clock}_time"]
            return a / b if timed and a is not None and b else None

        return {"policy": self.real_winner, "real_time": winner["real_time"], "simulated_time": winner["simulated_time"],
                "bsp_real_time": bsp["real_time"], "bsp_simulated_time": bsp["simulated_time"],
                "real_speedup": speedup("real"), "simulated_speedup": speedup("simulated")}


def verify(job: JobSpec, top: list[dict[str, Any]], bsp_simulated: dict[str, Any], backend: "BackendChoice",
           repeats: int, penalty: float, tolerance: float) -> Verification:
    """Re-run `top` (best_policies rows: policy, time_to_target, final_metric) and BSP on `backend`."""
    candidates = [dict(row) for row in top]
    if all(row["policy"] != BSP for row in candidates):
        candidates.append({"policy": BSP, "time_to_target": bsp_simulated["time_to_target"],
                           "final_metric": bsp_simulated["final_metric"], "reached": bsp_simulated.get("reached"),
                           "runs": bsp_simulated.get("runs")})
    seeds = trial_seeds(job, repeats)
    result = Verification(backend.describe(), seeds)
    for row in candidates:
        real: dict[str, Any] = {}
        try:
            real = evaluate(job, row["policy"], seeds, penalty, backend=backend)
        except RunFailed as exc:
            real = {"time_to_target": None, "final_metric": None, "reason": str(exc)}
        result.rows.append({"policy": row["policy"], "simulated_time": row["time_to_target"],
                            "simulated_final_metric": row.get("final_metric"),
                            "simulated_reached": row.get("reached") if row.get("runs") == len(seeds) else None,
                            "real_time": real.get("time_to_target"), "real_final_metric": real.get("final_metric"),
                            "real_reached": real.get("reached"), "runs": len(seeds), "reason": real.get("reason")})
    bsp_real = next(r for r in result.rows if r["policy"] == BSP)
    for r in result.rows:
        ok = r["real_time"] is not None and bsp_real["real_final_metric"] is not None
        r["real_feasible"] = ok and constraint(job, r["real_final_metric"], bsp_real["real_final_metric"],
                                               tolerance) <= 0
        r["real_over_simulated"] = r["real_time"] / r["simulated_time"] if r["real_time"] is not None else None
    result.kendall_tau = _kendall_tau([(r["simulated_time"], r["real_time"]) for r in result.rows
                                       if r["real_time"] is not None])
    simulated = min(result.rows, key=lambda r: r["simulated_time"])
    feasible = [r for r in result.rows if r["real_feasible"]]
    real = min(feasible, key=lambda r: r["real_time"]) if feasible else None
    result.simulated_winner = simulated["policy"]
    result.real_winner = real["policy"] if real else None
    result.same_winner = real is not None and real["policy"] == simulated["policy"]
    if real is not None and simulated["real_time"] is not None:
        result.winner_gap = simulated["real_time"] / real["real_time"]
    return result


def _kendall_tau(pairs: list[tuple[float, float]]) -> float | None:
    """Kendall's tau-b of the two orderings (ties count as neither concordant nor discordant)."""
    if len(pairs) < 2:
        return None
    concordant = discordant = ties_x = ties_y = 0
    for i in range(len(pairs)):
        for j in range(i + 1, len(pairs)):
            dx, dy = pairs[i][0] - pairs[j][0], pairs[i][1] - pairs[j][1]
            if dx == 0 and dy == 0:
                continue
            if dx == 0:
                ties_x += 1
            elif dy == 0:
                ties_y += 1
            elif (dx > 0) == (dy > 0):
                concordant += 1
            else:
                discordant += 1
    denominator = math.sqrt((concordant + discordant + ties_x) * (concordant + discordant + ties_y))
    return (concordant - discordant) / denominator if denominator else None


def with_verification(record: dict[str, Any], verification: Verification) -> dict[str, Any]:
    """The cache record answering with the real winner (the simulated best is kept beside it)."""
    updated = dict(record)
    updated["verified"] = {k: v for k, v in verification.to_dict().items() if k != "rows"}
    if verification.real_winner is not None and verification.real_winner != record["best_policy"]:
        updated["simulated_best_policy"] = record["best_policy"]
        updated["best_policy"] = verification.real_winner
        row = next(r for r in verification.rows if r["policy"] == verification.real_winner)
        updated["best_value"] = row["simulated_time"]
        updated["best_reached"] = updated["best_runs"] = None  # the search's count was of the policy it answered
        bsp_timed = updated.get("bsp_reached") in (None, updated.get("bsp_runs"))  # not a miss's score
        if updated.get("bsp_time_to_target") is not None and row["simulated_time"] and bsp_timed:
            updated["speedup_vs_bsp"] = updated["bsp_time_to_target"] / row["simulated_time"]
    return updated
