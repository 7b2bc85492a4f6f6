"""What the online policies' own decisions cost, against the simulated iteration they steer.

    python benchmarks/bench_policies.py [--updates 150]

(1) DBW at n = 16 on the default job: wall time per update spent in DBW's decision (the gain estimators
    (10)-(16) and the least squares (17), solved every `solve_every` iterations) against the wall time
    of the whole simulated update, measured in the same run. Then the solve of (17) alone at n = 16,
    64 and 128, every iteration and amortised over solve_every = 10, with the structured solver (the
    default) and with cvxpy (Clarabel, the reference).
(2) LB-BSP CPU mode on baselines/lbbsp_cpu.yaml: wall time per update of Algorithm 1 with NARX (online
    training included) against the same with the last-value predictor, and against the whole update.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from autosync.engine import Simulator
from autosync.core.job import load_job
from autosync.policies import DBW, LBBSP
from autosync.policies.dbw import STRUCTURED, IterationTimeEstimator

from _report import Figures


def _timed(obj: Any, method: str, clock: dict[str, float]) -> None:
    """Wrap obj.method so its wall time accumulates in clock['seconds']."""
    inner: Callable[..., Any] = getattr(obj, method)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            clock["seconds"] += time.perf_counter() - start

    setattr(obj, method, wrapper)


def dbw_decision(updates: int, figures: Figures) -> None:
    job = load_job(None, overrides={"budget": {"max_updates": updates}})
    sim = Simulator(job, DBW())
    clock = {"seconds": 0.0}
    for method in ("accept", "after_update"):
        _timed(sim.strategies.barrier, method, clock)
    start = time.perf_counter()
    result = sim.run()
    total = time.perf_counter() - start
    n = len(result.trace.updates)
    print(f"DBW, n=16, default job: decision {1e3 * clock['seconds'] / n:.2f} ms per update; whole simulated "
          f"update {1e3 * total / n:.2f} ms; decision share {clock['seconds'] / total:.1%}")
    figures.add("DBW's decision per update (n = 16, default job)", 1e3 * clock["seconds"] / n, "ms",
                "the whole simulated update", clock["seconds"] / total)


def solve_cost(solver: str) -> None:
    rng = np.random.default_rng(0)
    for n in (16, 64, 128):
        est = IterationTimeEstimator(n, solver=solver)
        for _ in range(20 * n):
            h = int(rng.integers(1, n + 1))
            for i in range(1, h + 1):
                est.add(h, i, float(np.sort(rng.exponential(1.0, n))[i - 1]))
        start = time.perf_counter()
        est.solve()
        first = time.perf_counter() - start
        repeats = 3 if n >= 128 else 10
        start = time.perf_counter()
        for _ in range(repeats):
            est.add(n, 1, 0.5)
            est.solve()
        each = (time.perf_counter() - start) / repeats
        first_label = "first solve (compile)" if solver != STRUCTURED else "first solve (cold)"
        print(f"problem (17), {solver}, n={n:3d}: {first_label} {first * 1e3:8.1f} ms; re-solve {each * 1e3:8.1f} ms; "
              f"amortised over solve_every=10: {each * 100:7.1f} ms per iteration")


def narx_cost(updates: int, figures: Figures) -> None:
    job = load_job(Path(__file__).resolve().parents[1] / "baselines" / "lbbsp_cpu.yaml",
                   overrides={"budget": {"max_updates": updates}})
    costs = {}
    for predictor in ("last", "narx"):
        sim = Simulator(job, LBBSP(mode="cpu", predictor=predictor, warmup=50))
        clock = {"seconds": 0.0}
        _timed(sim.strategies.batching, "after_update", clock)
        start = time.perf_counter()
        result = sim.run()
        total = time.perf_counter() - start
        n = len(result.trace.updates)
        costs[predictor] = clock["seconds"] / n
        print(f"LB-BSP cpu, predictor={predictor}: Algorithm 1 {1e3 * costs[predictor]:.2f} ms per update; "
              f"whole update {1e3 * total / n:.2f} ms")
    print(f"NARX's online training costs {1e3 * (costs['narx'] - costs['last']):.2f} ms per update")
    figures.add("LB-BSP's Algorithm 1 per update (last-value predictor)", 1e3 * costs["last"], "ms")
    figures.add("LB-BSP's NARX online training per update", 1e3 * (costs["narx"] - costs["last"]), "ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--updates", type=int, default=150)
    parser.add_argument("--json", default=None, help="also write the figures here (benchmarks/make_table.py)")
    args = parser.parse_args()
    figures = Figures("bench_policies")
    solve_cost(STRUCTURED)
    solve_cost("CLARABEL")  # before DBW runs: cvxpy compiles (17) once per process and n, so this shows it
    dbw_decision(args.updates, figures)
    narx_cost(args.updates * 2, figures)
    figures.write(args.json)


if __name__ == "__main__":
    main()
