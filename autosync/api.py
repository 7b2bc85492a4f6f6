"""The Python API: load a job, train it under a policy, tune it, score policies side by side.

What the `autosync` command line does, as functions returning the structured results it prints; the
command line parses options, calls these and prints. Heavy libraries load when a function needs them.

    import autosync.api as autosync

    job = autosync.load_job("examples/sequences/job.yaml")          # or autosync.job_from_dict({...})
    result = autosync.run(job, "dbw", seed=1)                        # one training run
    print(result.metrics["time_to_target"])
    found = autosync.tune(job, space="policy", n_trials=10)         # an Optuna study; cached for next time
    print(found.cache["best_policy"], found.cache["best_value"])
    board = autosync.leaderboard(job, ["bsp", "asp", "dbw"], seeds=3)
    for row in board.rows:
        print(row["policy"], row["time_to_target"])

Errors a user can cause (a bad job, policy or option) raise `autosync.errors.UserError` with the
message the command line prints.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from autosync.errors import UserError
from autosync.job import JobSpec, job_from_dict, load_job

if TYPE_CHECKING:
    from autosync.engine import RunResult
    from autosync.engine.backends import BackendChoice
    from autosync.leaderboard import Entry
    from autosync.policies import Policy
    from autosync.search.tune import TuneOutcome

__all__ = [
    "JobSpec", "load_job", "job_from_dict", "backend", "make_policy", "tuned_policy", "check_workload", "run",
    "tune", "leaderboard", "Leaderboard",
]

def backend(name: str = "simulator", *, clock: str = "virtual", stragglers: str = "machine",
            time_scale: float = 0.01, device: str = "cpu", workers_per_device: int = 2,
            worker_timeout: float = 60.0) -> "BackendChoice":
    """Where runs train (the options `--backend`, `--clock`, ... of `autosync run` and `tune`), checked."""
    from autosync.engine.backends import BackendChoice

    choice = BackendChoice(name, clock, stragglers, time_scale, device, workers_per_device, worker_timeout)
    choice.check()
    return choice


def make_policy(policy: "str | Policy | dict[str, Any]", params: dict[str, Any] | None = None) -> "Policy":
    """A policy from its name (any spelling `autosync policies` accepts) or spec ('compose(barrier=ssp,
    update=dana_slim)', 'backup:k=8') and parameters, a dict {"policy": name, "params": {...}} as results
    store it, or a Policy itself."""
    from autosync.catalog import make_policy as from_name, policy_from_dict
    from autosync.policies import Policy

    if isinstance(policy, Policy):
        return policy
    if isinstance(policy, dict):
        return policy_from_dict({"policy": policy["policy"], "params": {**policy.get("params", {}), **(params or {})}})
    return from_name(policy, params or {})


def tuned_policy(job: JobSpec, storage: str | None = None, params: dict[str, Any] | None = None) -> "Policy":
    """The cached best policy of a job tuned before (UserError when it has none), with `params` changed."""
    from autosync.search.cache import tuned_policy as cached
    from autosync.search.storage import DEFAULT_STORAGE

    found = cached(storage or DEFAULT_STORAGE, job)
    found["params"].update(params or {})
    return make_policy(found)


def check_workload(job: JobSpec, device: str = "cpu") -> Any:
    """Build the job's workload once (datasets, model, loss; the user's factories imported, called and
    checked) and return it; a problem raises a one-line JobFileError naming the job file and field."""
    from autosync.workloads.workload import Workload

    return Workload(job, device=device)


def run(job: JobSpec, policy: "str | Policy | dict[str, Any]" = "bsp", params: dict[str, Any] | None = None, *,
        seed: int | None = None, on: "BackendChoice | None" = None, storage: str | None = None,
        progress: Callable[[dict[str, Any]], None] | None = None, workload: Any = None,
        on_ready: Callable[[], None] | None = None) -> "RunResult":
    """Train `job` once under `policy` and return the run's result (trace, metrics, final parameters).

    Args:
        policy: a name (`autosync policies`), "tuned" for the job's cached best (from `storage`), a dict
            {"policy", "params"} or a Policy.
        params: policy parameters to set (or, with "tuned", to change).
        seed: the run's seed instead of the job's.
        on: where to train (`backend(...)`; default: the in-process simulator).
        progress: called with each evaluation record (time, updates, epoch, losses, accuracy).
        workload: a workload built for this job already (`check_workload`), to skip building it again.
        on_ready: called once the backend's worker processes are up, before training starts.
    """
    from autosync.engine import backends, simulate

    if seed is not None:
        job = job.model_copy(update={"seed": seed})
    chosen = tuned_policy(job, storage, params) if policy == "tuned" else make_policy(policy, params)
    try:
        chosen.bind(job.cluster.n_workers, job.workload.batch_size)
    except ValueError as exc:
        raise UserError(f"policy {chosen.name}: {exc}") from None
    choice = on if on is not None else backend()
    if workload is None:
        workload = check_workload(job, choice.device)
    driver, clock = backends.build(choice, job, workload)
    try:
        if on_ready is not None and driver is not None:
            on_ready()
    except BaseException:  # Ctrl-C in the callback: the worker processes stop all the same
        driver.close()
        raise
    return simulate(job, chosen, workload=workload, progress=progress, driver=driver, clock=clock)


def tune(job: JobSpec, space: str | Path = "static_k", *, n_trials: int = 20, timeout: float | None = None,
         storage: str | None = None, study: str | None = None, sampler: str = "tpe", n_jobs: int = 1,
         seed: int = 0, repeats: int = 1, tolerance: float = 0.01, objective: str = "time", refresh: bool = False,
         verify_top: int = 0, confirm_top: int = 0, confirm_seeds: int = 2, on: "BackendChoice | None" = None,
         on_trial: Callable[[int, int], None] | None = None,
         on_confirm: Callable[[int, int], None] | None = None,
         on_start: Callable[[str], None] | None = None,
         on_resume: Callable[[int, list[int]], None] | None = None) -> "TuneOutcome":
    """Search `job`'s best policy in `space` with Optuna, or return the cached one of a recurring job.

    Args:
        space: a search-space YAML file or a shipped name (static_k, switch_point, batch_split, policy).
        storage: the study storage's SQLAlchemy URL (default: sqlite:///results/autosync-studies.db).
        on: where each trial trains (`backend(...)`; default: the simulator). With `verify_top` K > 0 the
            search is simulated and its K best candidates and BSP are re-run on `on` to verify it.
        confirm_top: K > 0 re-runs the search's K best candidates, the winners of the job's other studies
            that this space holds, and BSP on `confirm_seeds` more seeds, and answers with the best mean
            over all the seeds (`autosync.search.confirm`): the cure for a one-seed search's lucky winner.
        on_trial: called with (trials done, trials in all) as the search goes.
        on_confirm: called with (runs done, runs in all) as the confirmation goes.
        on_start: called with the storage URL once every option is checked, before the search starts.
        on_resume: called with (finished trials, numbers of dead trials re-queued) when the study already
            has trials (an interrupted or killed search is resumed), before any new trial.

    Returns the TuneOutcome the command prints: the study, whether the cache answered, the cache record
    (best policy and value, BSP's, provenance) and the best trials.
    """
    from autosync.search.objective import ObjectiveSettings
    from autosync.search.samplers import SAMPLERS, SWITCH_POINT_SAMPLERS
    from autosync.search.space import load_space, resolve_space_path
    from autosync.search.storage import DEFAULT_STORAGE
    from autosync.search.tune import TuneRequest, tune as run_tune

    if sampler not in SAMPLERS:
        raise UserError(f"--sampler must be one of {list(SAMPLERS)}, but got {sampler!r}")
    if objective not in ("time", "time,metric"):
        raise UserError(f"--objective must be time or time,metric, but got {objective!r}")
    choice = on if on is not None else backend()
    if choice.backend == "distributed":
        from autosync.engine.drivers.distributed import in_session

        if not in_session():
            raise UserError("--backend distributed tunes under torchrun, every rank running the same command, e.g. "
                            "torchrun --nproc-per-node 3 -m autosync.cli tune JOB.yaml --backend distributed")
        if n_jobs > 1:
            raise UserError(f"--n-jobs must be 1 with --backend distributed (the group's ranks serve one trial at "
                            f"a time), but got {n_jobs}")
    if verify_top and choice.backend == "simulator":
        raise UserError("--verify-top re-runs the simulated search's best candidates on a real backend: "
                        "it needs --backend processes (with --clock virtual or real)")
    if verify_top and objective != "time":
        raise UserError("--verify-top compares one objective's rankings: it needs --objective time")
    if confirm_top and objective != "time":
        raise UserError("--confirm-top ranks candidates by one objective: it needs --objective time")
    if confirm_top and sampler in SWITCH_POINT_SAMPLERS:
        raise UserError(f"--confirm-top re-runs a search's candidates on more seeds, but --sampler {sampler} already "
                        "trains each candidate on 3 seeds (Sync-Switch's R)")
    if confirm_top < 0 or confirm_seeds < 1:
        raise UserError(f"--confirm-top must be >= 0 and --confirm-seeds >= 1, but got {confirm_top} and "
                        f"{confirm_seeds}")
    if job.uses_user_code:  # the user's code fails here, in one line, rather than as every trial failing
        check_workload(job)  # (a built-in workload cannot; a cache hit then never imports torch)
    real = None if choice.backend == "simulator" else choice
    search_space = load_space(resolve_space_path(str(space), "static_k"), job.cluster.n_workers)
    request = TuneRequest(
        job=job, space=search_space, n_trials=n_trials, timeout=timeout, storage=storage or DEFAULT_STORAGE,
        study=study, sampler=sampler, seed=seed, n_jobs=n_jobs, refresh=refresh,
        settings=ObjectiveSettings(repeats=repeats, tolerance=tolerance, multi_objective=objective != "time",
                                   backend=None if verify_top else real),  # verify_top: search simulated
        verify_top=verify_top, verify_backend=real if verify_top else None, confirm_top=confirm_top,
        confirm_seeds=confirm_seeds)
    quiet_optuna()
    if on_start is not None:
        on_start(request.storage)
    return run_tune(request, on_trial=on_trial, on_confirm=on_confirm, on_resume=on_resume)


@dataclass
class Leaderboard:
    """Policies x seeds on one job: scored rows (best time-to-target first) and every run behind them."""

    job: JobSpec
    seeds: list[int]
    rows: list[dict[str, Any]]
    entries: list["Entry"]

    def write(self, directory: str | Path, command: str = "autosync.api.leaderboard") -> list[Path]:
        """Write leaderboard.md, .csv, .json and the plots into `directory`; returns the paths."""
        from autosync.report import write_leaderboard

        return write_leaderboard(self.rows, self.entries, self.job.model_dump(mode="json"), Path(directory), command)


def leaderboard(job: JobSpec, policies: Sequence[str | dict[str, Any]] = (), *, seeds: int = 5, n_jobs: int = 1,
                include_tuned: bool = False, storage: str | None = None,
                on_done: Callable[[dict[str, Any]], None] | None = None) -> Leaderboard:
    """Every policy with seeds 0..seeds-1 on `job`, scored MLPerf-style (trimmed mean time-to-target).

    Args:
        policies: specs "NAME" or "NAME:key=value,..." (or dicts {"policy", "params"}); default: bsp, asp,
            ssp, backup (k = 3n/4), dbw, bdbw.
        n_jobs: runs in parallel (joblib processes; -1: all cores).
        include_tuned: add the job's cached tuned policy (from `storage`).
        on_done: called with each finished run's summary.
    """
    from autosync.leaderboard import DEFAULT_POLICIES, parse_policy_spec, run_grid, score

    if n_jobs == 0 or n_jobs < -1:
        raise UserError(f"--n-jobs must be >= 1 or -1 (all cores), but got {n_jobs}")
    n = job.cluster.n_workers
    specs = [p if isinstance(p, dict) else parse_policy_spec(p, n) for p in (policies or DEFAULT_POLICIES)]
    if include_tuned:
        tuned = tuned_policy(job, storage).to_dict()
        if tuned not in specs:
            specs.append(tuned)
    if job.uses_user_code:  # one line here rather than a failure in every worker process
        check_workload(job)
    seed_list = list(range(seeds))
    entries = run_grid(job, specs, seed_list, n_jobs=n_jobs, on_done=on_done)
    return Leaderboard(job, seed_list, score(entries), entries)


def quiet_optuna() -> None:
    """Optuna logs only errors and no experimental-feature warnings: autosync reports trials itself (the
    command line uses this too)."""
    import warnings

    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
