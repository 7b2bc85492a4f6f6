"""Neighbours from a committed robustness report (`autosync robustness`): its drawn jobs, each with the
fastest policy run on it, as `autosync recommend --grid DIR` reads them beside the storage's tuned jobs.

A report holds, per drawn job, the mean time to target (a missed seed counted at twice the budget) of
every static k under the grid's learning-rate rules, of every online policy the report ran and, with
`--tuned-trials`, of the job's own tuned policy. Each job of the report is a neighbour like a tuned job
(`autosync.search.recommend.neighbours`): its cluster features are computed from its drawn job file
(`jobs/<job>.yaml` beside the report), and its vote is the fastest of those policies that fits the asked
job (`fastest`). A report keeps its online policies' specs (`online_policies`); one written before it did
has them read back from its own command (`--policies`, or the command's defaults).
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any, Callable

from autosync.core.errors import UserError
from autosync.core.job import JobSpec, load_job
from autosync.search.recommend.neighbours import WORKLOAD_PENALTY, Neighbour, cluster_features, distance, workload_key
from autosync.catalog import label_of, parse_policy_spec
from autosync.policy_score import MISS_PENALTY
from autosync.policy_grid import (BSP_LABEL, ONLINE_POLICIES, STATIC_K_RULES, TUNED_LABEL, load_report,
                                  static_k_policies, static_label)

__all__ = ["fastest", "grid_neighbours", "online_specs", "policies_by_label"]


def online_specs(command: str) -> list[str]:
    """The `--policies` specs of a report's command (the command's default policies when it names none or
    cannot be split)."""
    try:
        words = shlex.split(command)
    except ValueError:  # an unbalanced quote in a recorded command line
        words = command.split()
    specs = [words[i + 1] for i, w in enumerate(words[:-1]) if w == "--policies"]
    specs += [w.split("=", 1)[1] for w in words if w.startswith("--policies=")]
    return specs or list(ONLINE_POLICIES)


def online_by_label(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The report's online policies by label: kept by the report, or parsed from its command at the
    family's smallest n, as the report parsed them (a spec that names no policy is left out)."""
    online = data.get("online_policies")
    if isinstance(online, dict):
        return online
    smallest = min(int(row["n_workers"]) for row in data["jobs"])
    found = {}
    for spec in online_specs(data["command"]):
        try:
            policy = parse_policy_spec(spec, smallest)
        except (ValueError, UserError):
            continue  # its row is not read
        found[label_of(policy)] = policy
    return found


def policies_by_label(data: dict[str, Any], job: dict[str, Any],
                      online: dict[str, dict[str, Any]] | None = None) -> dict[str, dict[str, Any]]:
    """Every label of `job`'s row in the report that names a policy: the static k's, BSP, the online
    policies (`online_by_label`, unless given) and the job's tuned policy."""
    found = {static_label(p): p for p in static_k_policies(int(job["n_workers"]),
                                                           data.get("lr_rules", STATIC_K_RULES))}
    found["bsp"] = found[BSP_LABEL]
    found.update(online if online is not None else online_by_label(data))
    if isinstance(job.get("tuned_policy"), dict):
        found[TUNED_LABEL] = job["tuned_policy"]
    return found


def fastest(data: dict[str, Any], job: dict[str, Any],
            fits: Callable[[dict[str, Any]], bool] = lambda policy: True,
            online: dict[str, dict[str, Any]] | None = None) -> tuple[dict[str, Any], float] | None:
    """The fastest policy run on `job` by the report's mean time over the seeds, among those `fits` keeps,
    and that time; a mean at the penalty itself (every seed missed), a null one (not measured) or one of 0 (no
    speedup can be told against it) never counts. None if none is left."""
    named = policies_by_label(data, job, online)
    budget = float(job["budget"])
    times = dict(job["static"])
    times.update({label: row["time"] for label, row in job["policies"].items()})
    ranked = sorted((t, label) for label, t in times.items()
                    if label in named and t is not None and 0 < t < MISS_PENALTY * budget)  # null: not run
    return next(((named[label], t) for t, label in ranked if fits(named[label])), None)


def grid_neighbours(path: Path, job: JobSpec, features: list[float],
                    fits: Callable[[dict[str, Any], int], bool] = lambda policy, n: True) -> list[Neighbour]:
    """Every job of the report at `path` but `job` itself, as a neighbour of `job` (nearest first), voting
    with its fastest policy that `fits(policy, its n)` keeps."""
    folder, data = load_report(path, "--grid")
    key, fingerprint = workload_key(job), job.fingerprint()
    online = online_by_label(data)
    found = []
    for row in data["jobs"]:
        if row["fingerprint"] == fingerprint:
            continue
        file = folder / "jobs" / f"{row['job']}.yaml"
        if not file.is_file():
            raise UserError(f"--grid {folder}: the drawn job file {file} is missing (the report writes it)")
        n = int(row["n_workers"])
        best = fastest(data, row, lambda policy: fits(policy, n), online)
        if best is None:
            continue
        policy, time = best
        budget = float(row["budget"])
        bsp_time = float(row["bsp_time"]) if not row["policies"].get("bsp", {}).get("missed") \
            and row["bsp_time"] is not None and row["bsp_time"] < MISS_PENALTY * budget else None
        record = {"best_policy": policy, "best_value": time,
                  "speedup_vs_bsp": bsp_time / time if bsp_time is not None else None,
                  "bsp_time_to_target": bsp_time}
        drawn = load_job(file)
        mine = cluster_features(drawn)
        same = workload_key(drawn) == key
        far = distance(features, mine) + (0.0 if same else WORKLOAD_PENALTY)
        found.append(Neighbour(str(folder), row["job"], far, record, mine, same, row["fingerprint"]))
    return sorted(found, key=lambda nb: (nb.distance, nb.job_name))
