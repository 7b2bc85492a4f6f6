"""Calibration: a job's simulation held against short real runs of two update rates, and the server's
costs fitted from them.

A real parameter server pays for every update (the rule's apply, the parameters copied out, the policy's
decision) and for every gradient (received, added to the aggregate, the policy's decision on the arrival).
`autosync profile` times the update and the copy on an idle machine; under the workers' load, with the
server sharing the machine's cores, both cost more, and the two cannot be told apart from one kind of
run. So the job is run for real twice, for the same number of updates, at two update rates:
- BSP: n gradients per update, the fewest updates per second;
- backup k = 1: one gradient per update, the most.
Each real run's time is compared with the simulated time of the same run (`RateRun.error`): the check.
To fit, the simulated time is linear in the server model's two costs up to queueing,
T(a, g) ~ T(a0, g0) + U (a - a0) + A (g - g0) with U updates and A arrivals in the run, so the two runs
give two equations in (a, g) = (`ServerSpec.apply_seconds`, `ServerSpec.gradient_seconds`), solved by
non-negative least squares for a first guess. Queueing makes T far from linear (a cost hidden behind the
stragglers in BSP's rounds is the bottleneck of the one-gradient updates), so the guess is refined by
Gauss-Newton steps on log(real / simulated), re-simulating both runs, until both are within
`CLOSE_ENOUGH` or `MAX_ROUNDS` steps have passed. The fitted costs are what the server really
pays per update and per gradient on this machine under this load, in the job's seconds: with
`--stragglers model` and a time scale, real seconds over the scale.

Before the fit, a job whose cluster has no compute units gets the worker processes as compute units
(`measure_units`), also where the job as given fits both runs: the real runs compute several workers'
gradients in one process, one after another, and a queue per process is what no server cost can stand in
for (one server queue against two process queues overcharges the one-gradient updates and, with a slow
process, undercharges BSP; a barrier between the two runs' rates leaves work queued that only the units
model).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Callable

import numpy as np

from autosync.catalog import label_of, policy_from_dict
from autosync.core.errors import RuntimeFailure
from autosync.core.job import ComputeUnitsSpec, JobSpec
from autosync.core.phases import Phase, no_phase
from autosync.engine import backends, simulate
from autosync.measure.profile import fit_units, measure, measure_server

#: The two runs: the slowest update rate (BSP) and the fastest (one gradient per update).
RATE_POLICIES: tuple[tuple[str, dict[str, Any]], ...] = (
    ("bsp", {"policy": "bsp", "params": {}}),
    ("backup k=1", {"policy": "backup", "params": {"k": 1, "lr_rule": "fixed"}}),
)
TOLERANCE = 0.15  # a run fits when real / simulated is within 1 +- this (the sim-to-real goal's 0.85-1.15)
CLOSE_ENOUGH = 0.02  # the fit stops refining once both runs are this close
MAX_ROUNDS = 6  # Gauss-Newton steps of the fit at most
UNIT_ROUNDS = 3  # rounds of one task per worker that time the worker processes as compute units


@dataclass(frozen=True)
class RateRun:
    """One of the two runs: its real and simulated time for the same number of updates."""

    name: str
    updates: int
    arrivals: int  # gradients the simulated run's server received (discarded ones too)
    real_seconds: float  # the job's seconds the real run took (the time of its last update)
    simulated_seconds: float

    @property
    def ratio(self) -> float:
        """Real over simulated time."""
        return self.real_seconds / self.simulated_seconds

    @property
    def ratio_text(self) -> str:
        """The ratio as printed: two decimals, or one significant digit below 0.1 (0.003, not 0.00)."""
        return f"{self.ratio:.2f}" if self.ratio >= 0.095 else f"{self.ratio:.1g}"

    @property
    def fits(self) -> bool:
        return abs(self.ratio - 1.0) <= TOLERANCE


@dataclass
class Calibration:
    """The check of a job against real runs, and with a fit, the server costs that make it hold."""

    execution: dict[str, Any]  # where the real runs ran (backend, device, clock, stragglers, time scale)
    updates: int
    before: list[RateRun]  # the job as given
    server: dict[str, float] | None = None  # fitted apply_seconds and gradient_seconds (None: only checked)
    after: list[RateRun] = field(default_factory=list)  # the job with the fitted server (and compute units)
    units: dict[str, Any] | None = None  # the compute units timed and given to the job (`measure_units`)

    @property
    def final(self) -> list[RateRun]:
        return self.after or self.before

    @property
    def fits(self) -> bool:
        """Whether every run's real / simulated time is within 1 +- TOLERANCE (after the fit, if any)."""
        return all(run.fits for run in self.final)

    def verdict(self) -> str:
        """One line: whether the simulation predicts the real runs, and by how much it misses."""
        worst = max(self.final, key=lambda run: abs(run.ratio - 1.0))
        ratios = ", ".join(f"{run.name} {run.ratio_text}" for run in self.final)
        # after a fit the ratios are the fitted simulation's (the table's "real / fitted"), not the job's as given
        ratio = "real / fitted" if self.after else "real / simulated"
        if self.fits:
            return f"the simulation fits the real runs ({ratio}: {ratios}; within 1 +- {TOLERANCE})"
        return (f"the simulation does not fit the real runs: {worst.name}'s real time is {worst.ratio_text}x the "
                f"simulated one ({ratio}: {ratios}; wanted within 1 +- {TOLERANCE})")

    def to_dict(self) -> dict[str, Any]:
        runs = lambda rows: [{**asdict(r), "ratio": r.ratio, "fits": r.fits} for r in rows]  # noqa: E731
        return {"execution": self.execution, "updates": self.updates, "tolerance": TOLERANCE,
                "before": runs(self.before), "server": self.server, "units": self.units, "after": runs(self.after),
                "fits": self.fits, "verdict": self.verdict()}


def short_job(job: JobSpec, updates: int) -> JobSpec:
    """`job` trained for exactly `updates` updates, evaluated only at the end (off the clock anyway)."""
    budget = job.budget.model_copy(update={"max_updates": updates, "max_epochs": None, "max_virtual_seconds": None,
                                           "stop_at_target": False})
    evaluation = job.workload.evaluation.model_copy(update={"every_seconds": 1e12})
    workload = job.workload.model_copy(update={"evaluation": evaluation})
    return job.model_copy(update={"budget": budget, "workload": workload})


def with_units(job: JobSpec, units: dict[str, Any] | None) -> JobSpec:
    """`job` whose workers share the compute units `units` (a `ComputeUnitsSpec` mapping; None: unchanged)."""
    if units is None:
        return job
    cluster = job.cluster.model_copy(update={"compute_units": ComputeUnitsSpec.model_validate(units)})
    return job.model_copy(update={"cluster": cluster})


def measure_units(job: JobSpec, choice: Any, workload: Any, rounds: int = 3,
                  on_round: Callable[[], None] | None = None) -> dict[str, Any]:
    """The worker processes of `choice` (`BackendChoice`) as compute units in the job's seconds: `rounds`
    rounds of one task per worker at the job's batch size, fitted by `autosync.measure.profile.fit_units`."""
    driver, _ = backends.build(choice, job, workload)
    try:
        samples = measure(driver, job.cluster.n_workers, [job.workload.batch_size], rounds, workload.init_params(),
                          on_round=on_round, buffers=workload.init_buffers())
    finally:
        driver.close()
    transfer = measure_server(job, workload.init_params()).transfer_seconds
    scale = choice.time_scale if choice.clock == "real" and choice.stragglers == "model" else 1.0
    return fit_units(samples, choice.processes, transfer, scale)


def with_server(job: JobSpec, apply_seconds: float, gradient_seconds: float) -> JobSpec:
    """`job` whose server charges `apply_seconds` per update and `gradient_seconds` per gradient."""
    server = job.cluster.server.model_copy(update={"apply_seconds": apply_seconds,
                                                   "gradient_seconds": gradient_seconds})
    return job.model_copy(update={"cluster": job.cluster.model_copy(update={"server": server})})


#: Runs `policy` on a job and returns (the time of its last update, gradients its server received).
Runner = Callable[[JobSpec, dict[str, Any]], "tuple[float, int]"]


def simulated_runner(workload: Any = None) -> Runner:
    """The job's simulation (virtual clock, in-process gradients; `workload` reused if given)."""
    def run(job: JobSpec, policy: dict[str, Any]) -> tuple[float, int]:
        result = simulate(job, policy_from_dict(policy), workload=workload)
        return _last_update(_whole(result, job, policy)), len(result.trace.arrivals)

    return run


def backend_runner(choice: Any, workload: Any) -> Runner:
    """Real runs on `choice` (`BackendChoice`: worker processes, the real clock), started and ended per run."""
    def run(job: JobSpec, policy: dict[str, Any]) -> tuple[float, int]:
        driver, clock = backends.build(choice, job, workload)
        result = simulate(job, policy_from_dict(policy), workload=workload, driver=driver, clock=clock)
        return _last_update(_whole(result, job, policy)), len(result.trace.arrivals)

    return run


def measure_real(job: JobSpec, real: Runner, updates: int,
                 on_run: Callable[[str], None] | None = None) -> dict[str, float]:
    """The real time of each of the two runs (`RATE_POLICIES`) of `updates` updates, by name."""
    short = short_job(job, updates)
    times = {}
    for name, policy in RATE_POLICIES:
        times[name] = real(short, policy)[0]
        if on_run is not None:
            on_run(name)
    return times


def compare(job: JobSpec, real_seconds: dict[str, float], updates: int, simulated: Runner) -> list[RateRun]:
    """Each run's real time beside the simulated time of the same run of `job`."""
    short = short_job(job, updates)
    rows = []
    for name, policy in RATE_POLICIES:
        seconds, arrivals = simulated(short, policy)
        rows.append(RateRun(name, updates, arrivals, real_seconds[name], seconds))
    return rows


def calibrate(job: JobSpec, real_seconds: dict[str, float], updates: int, execution: dict[str, Any],
              simulated: Runner | None = None, fit: bool = True,
              units: dict[str, Any] | None = None) -> tuple[Calibration, JobSpec]:
    """The check of `job` against the real times of its two runs and, with `fit` and a run that does not
    fit, the job with the server costs fitted to them (see the module docstring), its workers on the
    compute units `units` when given (`measure_units`); returns the calibration and the job to use (`job`
    itself when nothing was fitted)."""
    simulated = simulated or simulated_runner()
    before = compare(job, real_seconds, updates, simulated)
    result = Calibration(execution, updates, before)
    # measured units are kept even where the job as given fits both runs: the two runs are the extreme
    # update rates, and a barrier between them (backup k = n / 2) leaves work queued on the units that only
    # the units model
    if not fit or (units is None and all(abs(run.ratio - 1.0) <= CLOSE_ENOUGH for run in before)):
        return result, job
    job, result.units = with_units(job, units), units
    server, shared = job.cluster.server, job.cluster.compute_units is not None
    # the fitted parameters: the server's two costs, and with compute units a factor on the units' times
    start = np.array([server.apply_seconds, server.gradient_seconds] + ([1.0] if shared else []))
    measured = np.array([real_seconds[name] for name, _ in RATE_POLICIES])

    def job_at(costs: np.ndarray) -> JobSpec:
        fitted = with_server(job, float(costs[0]), float(costs[1]))
        return scale_units(fitted, float(costs[2])) if shared else fitted

    def runs_at(costs: np.ndarray) -> list[RateRun]:
        return compare(job_at(costs), real_seconds, updates, simulated)

    def miss(rows: list[RateRun]) -> float:
        return max(abs(np.log(run.ratio)) for run in rows)

    # first guesses: the job as it is (with its compute units), the linear model around it, and each cost
    # alone explaining the slower run
    start_rows = before if units is None else runs_at(start)
    design = np.array([[run.updates, run.arrivals] for run in start_rows], dtype=float)
    base = np.array([run.simulated_seconds for run in start_rows]) - design @ start[:2]
    excess = max(0.0, float(np.max(measured - base)))
    guesses = [np.concatenate([costs, start[2:]]) for costs in (
        _nonnegative_least_squares(design, measured - base), np.array([excess / updates, 0.0]),
        np.array([0.0, excess / design[:, 1].max()]))]
    best = min([(miss(start_rows), start, start_rows)]
               + [(miss(rows), costs, rows) for costs in guesses for rows in [runs_at(costs)]], key=lambda t: t[0])
    # a finite-difference step that moves a run's time by about 5% were the costs simply added up (the
    # units' factor: 5% of it)
    scale = np.concatenate([0.05 * measured.min() / np.array([updates, design[:, 1].max()]), [0.05] if shared else []])
    for _ in range(MAX_ROUNDS):  # Gauss-Newton on log(real / simulated), the Jacobian by finite differences
        if best[0] <= CLOSE_ENOUGH:
            break
        costs, rows = best[1], best[2]
        steps = np.maximum(0.1 * costs, scale)
        residual = np.log([run.ratio for run in rows])
        jacobian = np.empty((len(rows), len(costs)))
        for j in range(len(costs)):
            moved = costs.copy()
            moved[j] += steps[j]
            jacobian[:, j] = (np.log([run.ratio for run in runs_at(moved)]) - residual) / steps[j]
        delta = np.linalg.lstsq(jacobian, -residual, rcond=None)[0]  # the smallest step, with the units' factor
        for damping in (1.0, 0.5, 0.25):  # the first step along it that misses less, kept non-negative
            trial = np.maximum(costs + damping * delta, np.concatenate([[0.0, 0.0], [0.05] if shared else []]))
            trial_rows = runs_at(trial)
            if miss(trial_rows) < best[0]:
                best = (miss(trial_rows), trial, trial_rows)
                break
        else:
            break
    _, costs, rows = best
    result.server = {"apply_seconds": float(costs[0]), "gradient_seconds": float(costs[1])}
    if shared:
        result.server["units_factor"] = float(costs[2])
    result.after = rows
    return result, job_at(costs)


def calibrate_real(job: JobSpec, choice: Any, workload: Any, updates: int, fit: bool = True,
                   phase: Phase = no_phase) -> tuple[Calibration, JobSpec]:
    """`calibrate` on real runs of `job` on `choice`'s worker processes (`BackendChoice`, the real clock):
    with `fit` and no compute units in the job, the processes timed as compute units first (the fit starts
    from their queues), then the two real runs of `updates` updates, then their simulation and the fit.
    `phase`: called around each of the three (the real runs: one step each)."""
    units = None
    if fit and job.cluster.compute_units is None:  # the processes' queues, which the fit starts from
        with phase(f"timing the {choice.processes} worker processes as compute units", UNIT_ROUNDS) as advance:
            units = measure_units(job, choice, workload, UNIT_ROUNDS, on_round=advance)
    with phase(f"real runs of {updates} updates (BSP, backup k = 1)", 2) as advance:
        real = measure_real(job, backend_runner(choice, workload), updates, on_run=lambda _: advance())
    with phase("simulating them" + (" and fitting the server's costs" if fit else ""), 0):
        return calibrate(job, real, updates, choice.describe(), simulated_runner(workload), fit, units)


def scale_units(job: JobSpec, factor: float) -> JobSpec:
    """`job` whose compute units take `factor` times as long per task (the calibration fits it)."""
    units = job.cluster.compute_units
    compute = units.compute.model_copy(update={
        key: getattr(units.compute, key) * factor for key in ("seconds_per_sample", "launch_overhead")
        if hasattr(units.compute, key)})
    cluster = job.cluster.model_copy(update={"compute_units": units.model_copy(update={"compute": compute})})
    return job.model_copy(update={"cluster": cluster})


def _nonnegative_least_squares(design: np.ndarray, target: np.ndarray) -> np.ndarray:
    """argmin ||design x - target|| over x >= 0 (scipy's NNLS)."""
    from scipy.optimize import nnls

    solution, _ = nnls(design, target)
    return solution


def _whole(result: Any, job: JobSpec, policy: dict[str, Any]) -> Any:
    """`result`, a run of `short_job`'s updates that trained them all: one that stopped short (diverged) timed
    fewer updates than the rate is computed over, and was reported and fitted as a whole run."""
    wanted, done = job.budget.max_updates, len(result.trace.updates)
    if wanted is not None and done < wanted:
        raise RuntimeFailure(f"{label_of(policy)}: the run stopped after {done} of its {wanted} updates "
                             f"({result.summary().get('status')}): the rates compare whole runs (where it "
                             "diverged, lower the job's learning rate)")
    return result


def _last_update(result: Any) -> float:
    """The time of a run's last update (the run ends there when its budget is a number of updates)."""
    return float(result.trace.updates[-1][1]) if result.trace.updates else 0.0
