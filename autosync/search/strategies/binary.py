"""Sync-Switch's offline binary search for the switch point (its Algorithm 1, sec. IV-B1 and VI-C1).

The converged accuracy grows with the share of BSP training, so the smallest share s whose accuracy is
within beta of BSP's is found by bisection on [0, 1]: R runs per candidate, at most M candidates. A new
job first trains BSP R_bsp times to learn the target accuracy A; a recurring job already knows A and
skips those runs. (The published pseudo-code never resets its accumulator between candidates; we use
the mean of each candidate's R runs, which is what its text describes.)
"""

from __future__ import annotations

from typing import Callable


def target_from_bsp(run: Callable[[float], float], bsp_runs: int) -> float:
    """A new job's target accuracy A: the mean of `bsp_runs` BSP trainings (Algorithm 1, lines 1-4)."""
    if bsp_runs < 1:
        raise ValueError(f"a new job needs bsp_runs >= 1 to set the target accuracy, but got {bsp_runs}")
    return mean_of_runs(run, 1.0, bsp_runs)


def mean_of_runs(run: Callable[[float], float], s: float, repeats: int) -> float:
    """The mean converged accuracy of `repeats` trainings at switch point s."""
    accuracies = [run(s) for _ in range(repeats)]
    return sum(accuracies) / len(accuracies)


def binary_search(run: Callable[[float], float], threshold: float = 0.01, runs_per_candidate: int = 3,
                  max_settings: int = 4, bsp_runs: int = 3, target_accuracy: float | None = None) -> float:
    """Algorithm 1: `run(s)` trains s of the workload with BSP then ASP and returns the converged accuracy;
    returns the chosen switch point.

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
    target_accuracy = target_from_bsp(run, bsp_runs) if target_accuracy is None else target_accuracy
    upper, lower = 1.0, 0.0
    for _ in range(max_settings):
        s = (upper + lower) / 2
        mean = mean_of_runs(run, s, runs_per_candidate)
        if target_accuracy - threshold <= mean <= target_accuracy + threshold:
            upper = s
        else:
            lower = s
    return upper
