"""Scores of one run: time-to-target, final quality, statistical and hardware efficiency."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from autosync.engine.trace import Trace

if TYPE_CHECKING:  # an annotation only: the job schema (pydantic) is not loaded for `autosync --help`
    from autosync.core.job import TargetSpec


def run_metrics(trace: Trace, target: TargetSpec, virtual_time: float) -> dict[str, Any]:
    """Summarise a trace: time/updates to target (first evaluation meeting it), final metrics, rates."""
    evals = trace.records("evals")
    hit = next((e for e in evals if target.reached(e[target.metric])), None)
    last = evals[-1] if evals else {}
    n_updates = len(trace.updates)
    accepted = sum(trace.column("arrivals", "accepted"))
    return {
        "target_metric": target.metric,
        "target_threshold": target.threshold,
        "reached_target": hit is not None,
        "time_to_target": hit["time"] if hit else None,
        "updates_to_target": hit["update"] if hit else None,
        "final_train_loss": last.get("train_loss"),
        "final_test_loss": last.get("test_loss"),
        "final_test_accuracy": last.get("test_accuracy"),
        "updates": n_updates,
        "virtual_time": virtual_time,
        "updates_per_virtual_second": n_updates / virtual_time if virtual_time > 0 else 0.0,
        "samples_per_virtual_second": (sum(sum(b) for b in trace.column("updates", "batch_sizes")) / virtual_time
                                       if virtual_time > 0 else 0.0),  # Sync-Switch's throughput
        "gradients_arrived": len(trace.arrivals),
        "gradients_discarded": len(trace.arrivals) - accepted,
        "mean_iteration_time": virtual_time / n_updates if n_updates else None,
        "epochs": trace.column("updates", "epoch")[-1] if trace.updates else 0.0,
        **mean_k_per_half(trace, virtual_time),
        "time_weighted_k": time_weighted_k(trace),
        "mean_staleness": mean_staleness(trace),
        "batch_spread": batch_spread(trace),
    }


def mean_staleness(trace: Trace) -> float | None:
    """Updates applied between a gradient's parameters being sent and its own update, over every applied
    gradient (0 under BSP; what DANA's look-ahead and SSP's bound act on)."""
    lags = [s for row in trace.column("updates", "staleness") for s in row]
    return sum(lags) / len(lags) if lags else None


def batch_spread(trace: Trace) -> float | None:
    """Largest over smallest of the workers' newest batch sizes up to the run's last update (1 for equal
    batches; where LB-BSP settled); None for a run of one-gradient updates on equal batches, which has no
    split."""
    last = trace.column("updates", "time")[-1] if trace.updates else float("-inf")
    newest: dict[int, int] = {}
    for time, worker, size in zip(trace.column("arrivals", "time"), trace.column("arrivals", "worker"),
                                  trace.column("arrivals", "batch_size")):
        if time <= last:
            newest[worker] = size
    if not newest:
        return None
    spread = max(newest.values()) / min(newest.values())
    if spread == 1.0 and all(len(sizes) == 1 for sizes in trace.column("updates", "batch_sizes")):
        return None
    return spread


def time_weighted_k(trace: Trace) -> float | None:
    """Gradients per update weighted by the virtual time each update took (from the previous update, the
    first from 0): where a dynamic policy spends its time. An average over updates hides it: DBW that
    alternates k = 1 (fast) and k = n (slow) averages about n/2 per update but spends most of its time at n."""
    times, ks = trace.column("updates", "time"), trace.column("updates", "n_aggregated")
    spans = [t - previous for previous, t in zip([0.0] + times[:-1], times)]
    total = sum(spans)
    return sum(k * span for k, span in zip(ks, spans)) / total if total > 0 else None


def time_at_k(times: list[float], ks: list[int]) -> dict[int, float]:
    """Virtual seconds spent in updates that aggregated k gradients, for each k (the k_t plot's second panel)."""
    spent: dict[int, float] = {}
    for previous, t, k in zip([0.0] + times[:-1], times, ks):
        spent[k] = spent.get(k, 0.0) + (t - previous)
    return spent


def mean_k_per_half(trace: Trace, virtual_time: float) -> dict[str, float | None]:
    """Gradients per update averaged over the updates of each half of the run's virtual time
    (`early_mean_k`, `late_mean_k`): how a dynamic policy moves and where it settles (DBW Figs. 4 and 9:
    k_t rises as training progresses; near n/2 after half of the workers slow down)."""
    halves: tuple[list[int], list[int]] = ([], [])
    for t, k in zip(trace.column("updates", "time"), trace.column("updates", "n_aggregated")):
        halves[t >= virtual_time / 2].append(k)
    early, late = (sum(ks) / len(ks) if ks else None for ks in halves)
    return {"early_mean_k": early, "late_mean_k": late}
