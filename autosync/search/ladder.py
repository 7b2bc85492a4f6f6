"""A cost-ordered search for the switch point: try the cheapest candidates first, stop at the first that holds.

Sync-Switch's binary search (Algorithm 1) starts at 50% BSP, then 25%, ...: its first candidates are the
most expensive to train, because BSP is the slow protocol (6.6x ASP's time per epoch in the paper's
setup 1) and the switch points it ends up choosing are small (6.25% and 12.5% in sec. VI). The ladder
walks a geometric ladder of BSP shares upwards instead (1/32, 1/16, ..., 1/2 by default), with R runs per
rung, and returns the first rung whose mean accuracy is at least A - beta (BSP, s = 1, when none is).
Because accuracy grows with the BSP share (the paper's premise for bisection), the first rung that holds
is the cheapest one on the ladder that holds. Its runs are trials of the same Optuna study as every other
strategy's; `autosync replay` measures both strategies on the published logs.
"""

from __future__ import annotations

from typing import Callable

from autosync.search.binary import BinarySearchResult, mean_of_runs, target_from_bsp

DEFAULT_RUNGS = (1 / 32, 1 / 16, 1 / 8, 1 / 4, 1 / 2)


def ladder_search(run: Callable[[float], float], threshold: float = 0.01, runs_per_candidate: int = 3,
                  rungs: tuple[float, ...] = DEFAULT_RUNGS, bsp_runs: int = 3,
                  target_accuracy: float | None = None) -> BinarySearchResult:
    """Try `rungs` in increasing order; `run(s)` trains s of the workload with BSP then ASP.

    Args:
        threshold: beta; a rung holds when its mean accuracy is >= A - beta (more accurate than BSP is fine).
        runs_per_candidate: R, runs averaged per rung.
        rungs: the BSP shares to try, each in (0, 1).
        bsp_runs: BSP trainings that set A for a new job (none when `target_accuracy` is given).
    """
    if runs_per_candidate < 1 or not rungs or any(not 0.0 < s < 1.0 for s in rungs):
        raise ValueError(f"ladder_search needs runs_per_candidate >= 1 and rungs in (0, 1), but got "
                         f"{runs_per_candidate} and {rungs}")
    runs: list[float] = []
    target = target_from_bsp(run, bsp_runs, runs) if target_accuracy is None else target_accuracy
    candidates = []
    for s in sorted(rungs):
        mean = mean_of_runs(run, s, runs_per_candidate, runs)
        ok = mean >= target - threshold
        candidates.append((s, mean, ok))
        if ok:
            return BinarySearchResult(s, target, candidates, runs)
    return BinarySearchResult(1.0, target, candidates, runs)
