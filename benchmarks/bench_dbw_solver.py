"""Milliseconds per re-solve of DBW's problem (17): the structured solver DBW uses against the pure-Python
one and cvxpy.

    python benchmarks/bench_dbw_solver.py [--workers 16 64 128 256 512 1024 2048 4096] [--resolves 20]
                                          [--warmup 40] [--cvxpy-max-workers 128] [--solver CLARABEL]
                                          [--recorded-workers 128 [512]]

Runs from any working directory (it puts the repository on the import path).

The structured solver DBW uses is the compiled exact recursive partitioning (`_eq17_exact`) where
`pip install` built it, else the pure-Python structured solver (`_isotonic.PythonEq17Solver`: PAV + Dykstra,
warm-started, finished by the partitioning algorithm). Both are timed in the same run, on the same
samples, with cvxpy (Clarabel, the reference) up to --cvxpy-max-workers; the last column is the largest
difference between the first's solutions and the others', relative to max |x| (cvxpy's default
tolerances leave it around 1e-5 to 1e-3 on pairs that carry only the prior). The column `rows` times what
DBW calls each re-solve, `IterationTimeEstimator.times()`: the compiled solver on the distinct rows of the
data (the sampled rows and the prior row), T_k read from the merged rows, no n x n array built; the
others time `solve()`, which builds the dense data and answer.

Synthetic samples: what DBW feeds `IterationTimeEstimator` (sec. 3.2): after each iteration every arrival
of the n gradients of the version it published, late ones included, is a sample of T_{h,i} with h the k
of the iteration before and i the arrival's rank; round trips are the DBW paper's shifted exponential
0.3 + 0.7 Exp(1), and k walks near 0.6 n, so samples fill a few rows near the current k and every other
pair keeps its 1e-3 prior weight. After --warmup iterations, each of --resolves iterations adds one
iteration's samples and re-solves (solve_every = 1; cvxpy's first solve, the compile, is not timed).

Recorded instances: every (weights, targets) DBW hands its solver in bench_scale's job
(`recorded_instances`; nothing is stored), replayed in order by both structured solvers. Early in a run
k_t varies and scattered rows h get their first ranks sampled; Dykstra crawls there (a light pair passing
multiplier between heavy ones, the `_isotonic` module docstring), which the synthetic samples do not show.

Goals (issue 15): at most 5 ms per re-solve at n = 128 and 100 ms at n = 1024, so that DBW can re-solve
every iteration. History on this 2-core machine: cvxpy was 4.6 ms at n = 16, 114 ms at n = 64 and
1251 ms at n = 128 (about n^3, compiling for about 8 s at n = 128); the pure-Python structured solver
met both goals on the synthetic samples but took 36.5 ms a solve on the recorded n = 128 instances (72
Dykstra sweeps and 5.4 partition rounds a solve) and 1.8 s at n = 512. The compiled partition, measured
back to back with it (2026-11-26, quiet machine): on the recorded instances 1.9 ms against 37.8 at
n = 128, 6.8 against 126 at n = 256 and 24.2 against 706 at n = 512; on the synthetic samples 0.22,
0.64, 1.36, 2.0, 5.5 and 12.2 ms at n = 16, 64, 128, 256, 512 and 1024, 0.48x to 0.21x the Python
solver's, 0.91x at n = 1024 (the merged rows leave both little to do there).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from autosync.policies.dbw import (COMPILED, STRUCTURED, IterationTimeEstimator, PythonEq17Solver,  # noqa: E402
                                   structured_solver)

from _report import Figures


class Samples:
    """DBW-like samples of (h, i, time) for n workers, one iteration at a time."""

    def __init__(self, n: int, seed: int = 0, alpha: float = 0.7):
        self.n = n
        self.rng = np.random.default_rng(seed)
        self.alpha = alpha
        self.k = n  # k_0 = n: DBW waits for everyone before any estimate exists
        self.center = max(1, round(0.6 * n))

    def iteration(self) -> list[tuple[int, int, float]]:
        """The samples one iteration adds: the n arrivals of the version published with k = self.k."""
        times = np.sort((1 - self.alpha) + self.alpha * self.rng.exponential(size=self.n))
        samples = [(self.k, i + 1, float(t)) for i, t in enumerate(times)]
        drift = int(np.sign(self.center - self.k)) if abs(self.center - self.k) > 3 else 0
        self.k = int(np.clip(self.k + drift + self.rng.integers(-2, 3), 1, self.n))
        return samples


def _feed(estimators: list[IterationTimeEstimator], samples: list[tuple[int, int, float]]) -> None:
    for est in estimators:
        for h, i, t in samples:
            est.add(h, i, t)


def measure(n: int, resolves: int, warmup: int, cvxpy_solver: str | None, with_python: bool = True) -> dict[str, float]:
    """Mean and max ms per re-solve at n of the structured solver DBW uses (the compiled partition where it
    is built), of the pure-Python structured solver (warm-started) and of cvxpy, on the same samples, and
    the largest relative difference of the first's solutions from each other's."""
    source = Samples(n)
    structured = IterationTimeEstimator(n, solver=STRUCTURED)
    rows = IterationTimeEstimator(n, solver=STRUCTURED)  # times(): DBW's T_k, solved on the distinct rows
    python = IterationTimeEstimator(n, solver=STRUCTURED)
    python._structured = PythonEq17Solver()  # the fallback where the extension is not built
    reference = IterationTimeEstimator(n, solver=cvxpy_solver) if cvxpy_solver else None
    timed = {"structured": structured, "python": python} if with_python else {"structured": structured}
    timed["rows"] = rows
    if reference is not None:
        timed["cvxpy"] = reference
    for _ in range(warmup):
        _feed(list(timed.values()), source.iteration())
        if "python" in timed:
            python.solve()  # the warm start follows every iteration, as with solve_every = 1
    if reference is not None:
        reference.solve()  # compile
    times: dict[str, list[float]] = {name: [] for name in timed}
    difference = {name: 0.0 for name in timed}
    for _ in range(resolves):
        _feed(list(timed.values()), source.iteration())
        answers = {}
        for name, est in timed.items():
            start = time.perf_counter()
            answers[name] = est.times() if name == "rows" else est.solve()
            times[name].append(time.perf_counter() - start)
        for name, x in answers.items():
            reference = np.diag(answers["structured"]) if name == "rows" else answers["structured"]
            difference[name] = max(difference[name], float(np.abs(reference - x).max() / np.abs(x).max()))
    out = {f"{name}{suffix}": 1e3 * f(times[name]) for name in timed
           for suffix, f in (("", statistics.fmean), ("_max", max))}
    out.update({f"{name}_difference": difference[name] for name in timed if name != "structured"})
    out["fallbacks"] = structured.fallbacks + python.fallbacks + rows.fallbacks
    return out


def recorded_instances(n: int, updates: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """The (weights, targets) of every solve of (17) in one DBW run: bench_scale's job (seed 0) at n
    workers for `updates` updates, captured as dense arrays (`IterationTimeEstimator.targets`) each time DBW
    asks for T_k (`times`, which solves them on their distinct rows)."""
    import bench_scale

    captured: list[tuple[np.ndarray, np.ndarray]] = []
    original = IterationTimeEstimator.times

    def capture(self):
        if self.n_samples:
            captured.append(self.targets())
        return original(self)

    IterationTimeEstimator.times = capture
    try:
        bench_scale.per_update(n, "dbw", updates)
    finally:
        IterationTimeEstimator.times = original
    return captured


def replay(instances: list[tuple[np.ndarray, np.ndarray]], solver) -> dict[str, float]:
    """Solve the recorded instances in order with one solver (the pure-Python one warm-started, as in the
    run): ms per solve (mean, max), its sweeps and rounds per solve (mean, max: the Python solver's Dykstra
    sweeps and partition rounds; the compiled solver's merged problems) and the solves that did not
    converge (DBW's fallbacks to cvxpy)."""
    seconds, sweeps, rounds, capped = [], [], [], 0
    for weights, targets in instances:
        start = time.perf_counter()
        result = solver.solve(weights, targets)
        seconds.append(time.perf_counter() - start)
        sweeps.append(result.sweeps)
        rounds.append(result.rounds)
        capped += not result.converged
    return {"ms": 1e3 * statistics.fmean(seconds), "ms_max": 1e3 * max(seconds),
            "sweeps": statistics.fmean(sweeps), "sweeps_max": max(sweeps),
            "rounds": statistics.fmean(rounds), "rounds_max": max(rounds), "fallbacks": capped}


GOALS_MS = {128: 5.0, 1024: 100.0, 4096: 100.0}  # the scale issue: solve_every can be 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[16, 64, 128, 256, 512, 1024, 2048, 4096])
    parser.add_argument("--resolves", type=int, default=20, help="timed re-solves per n")
    parser.add_argument("--warmup", type=int, default=40, help="iterations of samples before timing")
    parser.add_argument("--cvxpy-max-workers", type=int, default=128, help="largest n timed with cvxpy")
    parser.add_argument("--python-max-workers", type=int, default=1024,
                        help="largest n timed with the pure-Python structured solver (minutes a solve beyond)")
    parser.add_argument("--solver", default="CLARABEL", help="the cvxpy solver of the reference")
    parser.add_argument("--recorded-workers", type=int, nargs="*", default=[128],
                        help="n of the instances recorded from a DBW run (none: skip them; 512 takes minutes)")
    parser.add_argument("--recorded-updates", type=int, default=60, help="updates of the recorded DBW run")
    parser.add_argument("--json", default=None, help="also write the figures here (benchmarks/make_table.py)")
    args = parser.parse_args()
    figures = Figures("bench_dbw_solver")
    name = "compiled partition" if COMPILED else "python (extension not built)"
    print(f"ms per re-solve of (17), {args.resolves} re-solves after {args.warmup} iterations of samples; "
          f"the structured solver DBW uses: {name}")
    print("rows: DBW's T_k by times() (the compiled solver on the distinct rows, the diagonal read from the "
          "merged rows), against the dense solve() of `structured`")
    print(f"{'n':>5} {'structured':>11} {'(max)':>8} {'rows':>8} {'rows/struct':>11} {'python':>9} {'py/struct':>10} "
          f"{'cvxpy':>10} {'cvxpy/struct':>13} {'max rel diff':>13} {'fallbacks':>9}")
    for n in args.workers:
        solver = args.solver if n <= args.cvxpy_max_workers else None
        r = measure(n, args.resolves, args.warmup, solver, with_python=n <= args.python_max_workers)
        cvxpy = f"{r['cvxpy']:10.1f}" if solver else f"{'skipped':>10}"
        ratio = f"{r['cvxpy'] / r['structured']:12.1f}x" if solver else f"{'-':>13}"
        diff = max(r.get("python_difference", 0.0), r.get("cvxpy_difference", 0.0))
        py = f"{r['python']:9.2f} {r['python'] / r['structured']:9.1f}x" if "python" in r else f"{'skipped':>9} {'-':>10}"
        diff = max(diff, r["rows_difference"])
        rows = f"{r['rows']:8.2f} {r['rows'] / r['structured']:10.2f}x"
        print(f"{n:5d} {r['structured']:11.2f} {r['structured_max']:8.1f} {rows} {py} {cvxpy} {ratio} {diff:13.1e} "
              f"{r['fallbacks']:9d}", flush=True)
        goal = GOALS_MS.get(n)
        figures.add(f"DBW's (17) at n = {n}: one re-solve for T_k (times(), on the distinct rows)", r["rows"], "ms",
                    "the dense solve() in the same run", r["rows"] / r["structured"],
                    None if goal is None else f"<= {goal:g} ms", None if goal is None else r["rows"] <= goal)
        if "python" in r:
            figures.add(f"DBW's (17) at n = {n}: one re-solve", r["structured"], "ms",
                        "the pure-Python structured solver (warm)", r["structured"] / r["python"],
                        None if goal is None else f"<= {goal:g} ms", None if goal is None else r["structured"] <= goal)
        else:
            figures.add(f"DBW's (17) at n = {n}: one re-solve", r["structured"], "ms", None, None,
                        None if goal is None else f"<= {goal:g} ms", None if goal is None else r["structured"] <= goal)
        if solver:
            figures.add(f"DBW's (17) at n = {n}: one re-solve", r["structured"], "ms", f"cvxpy ({args.solver})",
                        r["structured"] / r["cvxpy"])
    report_recorded(args.recorded_workers, args.recorded_updates, figures)
    figures.write(args.json)


def report_recorded(sizes: list[int], updates: int, figures: Figures) -> None:
    """Print and record the replay of instances recorded from a DBW run at each n (`recorded_instances`)
    by the structured solver DBW uses and by the pure-Python one."""
    if not sizes:
        return
    print(f"instances recorded from a DBW run (bench_scale's job, {updates} updates), replayed in order")
    print(f"{'n':>5} {'solver':>10} {'solves':>6} {'ms':>8} {'(max)':>8} {'sweeps':>7} {'(max)':>6} {'rounds':>7} "
          f"{'(max)':>6} {'fallbacks':>9}")
    for n in sizes:
        instances = recorded_instances(n, updates)
        results = {"structured": replay(instances, structured_solver()), "python": replay(instances, PythonEq17Solver())}
        for name, r in results.items():
            print(f"{n:5d} {name:>10} {len(instances):6d} {r['ms']:8.2f} {r['ms_max']:8.1f} {r['sweeps']:7.1f} "
                  f"{r['sweeps_max']:6d} {r['rounds']:7.1f} {r['rounds_max']:6d} {r['fallbacks']:9d}", flush=True)
        goal = GOALS_MS.get(n)
        ms = results["structured"]["ms"]
        figures.add(f"DBW's (17) at n = {n}, recorded from a DBW run: one re-solve", ms, "ms",
                    "the pure-Python structured solver (warm)", ms / results["python"]["ms"],
                    None if goal is None else f"<= {goal:g} ms", None if goal is None else ms <= goal)


if __name__ == "__main__":
    main()
