"""Sync-Switch's offline binary search for the switch point (its Algorithm 1, sec. IV-B1 and VI-C1).

The converged accuracy grows with the share of BSP training, so the smallest share s whose accuracy is
within beta of BSP's is found by bisection on [0, 1]: R runs per candidate, at most M candidates. A new
job first trains BSP R_bsp times to learn the target accuracy A; a recurring job already knows A and
skips those runs. (The published pseudo-code never resets its accumulator between candidates; we use
the mean of each candidate's R runs, which is what its text describes.)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable


@dataclass
class BinarySearchResult:
    """The chosen switch point and every run the search paid for."""

    switch_at: float
    target_accuracy: float
    candidates: list[tuple[float, float, bool]] = field(default_factory=list)  # (s, mean accuracy, within beta)
    runs: list[float] = field(default_factory=list)  # the switch point of every training run, BSP = 1.0


def binary_search(run: Callable[[float], float], threshold: float = 0.01, runs_per_candidate: int = 3,
                  max_settings: int = 4, bsp_runs: int = 3, target_accuracy: float | None = None,
                  ) -> BinarySearchResult:
    """Algorithm 1: `run(s)` trains s of the workload with BSP then ASP and returns the converged accuracy.

    Args:
        threshold: beta, the accuracy margin.
        runs_per_candidate: R.
        max_settings: M, the number of candidate switch points tried.
        bsp_runs: BSP trainings that set A when `target_accuracy` is not given (a new job).
        target_accuracy: A, known for a recurring job (then no BSP run is made).
    """
    if runs_per_candidate < 1 or max_settings < 1:
        raise ValueError(f"runs_per_candidate and max_settings must be >= 1, but got "
                         f"{runs_per_candidate} and {max_settings}")
    runs: list[float] = []
    if target_accuracy is None:
        if bsp_runs < 1:
            raise ValueError(f"a new job needs bsp_runs >= 1 to set the target accuracy, but got {bsp_runs}")
        accuracies = []
        for _ in range(bsp_runs):
            accuracies.append(run(1.0))
            runs.append(1.0)
        target_accuracy = sum(accuracies) / len(accuracies)
    upper, lower = 1.0, 0.0
    candidates = []
    for _ in range(max_settings):
        s = (upper + lower) / 2
        accuracies = []
        for _ in range(runs_per_candidate):
            accuracies.append(run(s))
            runs.append(s)
        mean = sum(accuracies) / len(accuracies)
        ok = target_accuracy - threshold <= mean <= target_accuracy + threshold
        candidates.append((s, mean, ok))
        if ok:
            upper = s
        else:
            lower = s
    return BinarySearchResult(upper, target_accuracy, candidates, runs)
