"""Neighbours from a committed robustness report (`autosync robustness`): its drawn jobs, each with the
fastest policy run on it, as `autosync recommend --grid DIR` reads them beside the storage's tuned jobs.

A report holds, per drawn job, the mean time to target of every static k (under the grid's learning-rate
rules), of every online policy the report ran and, with `--tuned-trials`, of the job's own tuned policy.
Each job of the report is a neighbour like a tuned job (`autosync.search.strategies.neighbours`): its
cluster features are computed from its drawn job file (`jobs/<job>.yaml` beside the report), and its
"winner" is the fastest of those policies by the report's mean time (`fastest`). The report names its online policies
by label only; the specs behind the labels are read back from the report's own command (`--policies`, or
the command's defaults), the static k's from the grid's rules.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

from autosync.core.errors import UserError
from autosync.core.job import JobSpec, load_job
from autosync.search.strategies.neighbours import WORKLOAD_PENALTY, Neighbour, cluster_features, distance, workload_key

REPORT_JSON = "robustness.json"


def read_report(path: Path) -> tuple[Path, dict[str, Any]]:
    """(the report's folder, its robustness.json); a missing or damaged one is a UserError naming it."""
    file = path / REPORT_JSON if path.is_dir() else path
    if not file.is_file():
        raise UserError(f"--grid {path}: no robustness report here (make one with `autosync robustness "
                        "FAMILY.yaml`)")
    try:
        data = json.loads(file.read_text())
        if not isinstance(data.get("jobs"), list) or not isinstance(data.get("command"), str):
            raise KeyError("jobs" if not isinstance(data.get("jobs"), list) else "command")
    except (ValueError, KeyError, AttributeError) as exc:
        raise UserError(f"--grid {file}: not a robustness report written by `autosync robustness` "
                        f"({type(exc).__name__}: {exc})") from None
    return file.parent, data


def online_specs(command: str) -> list[str]:
    """The `--policies` specs of a report's command (the command's default policies when it named none)."""
    from autosync.robustness import ONLINE_POLICIES

    words = shlex.split(command)
    specs = [words[i + 1] for i, w in enumerate(words[:-1]) if w == "--policies"]
    return specs or list(ONLINE_POLICIES)


def policies_by_label(data: dict[str, Any], job: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every label of `job`'s row in the report that names a policy: the static k's, the online policies
    of the report's command, and the job's tuned policy."""
    from autosync.leaderboard import label_of, parse_policy_spec
    from autosync.robustness import TUNED_LABEL, static_k_policies, static_label

    n = int(job["n_workers"])
    found = {static_label(p): p for p in static_k_policies(n, data.get("lr_rules", ("fixed", "proportional")))}
    found["bsp"] = {"policy": "bsp", "params": {}}
    for spec in online_specs(data["command"]):
        try:
            policy = parse_policy_spec(spec, n)
        except (ValueError, UserError):
            continue  # a spec this job's n cannot take: that row names nothing here
        found[label_of(policy)] = policy
    if isinstance(job.get("tuned_policy"), dict):
        found[TUNED_LABEL] = job["tuned_policy"]
    return found


def fastest(data: dict[str, Any], job: dict[str, Any]) -> tuple[dict[str, Any], float] | None:
    """The fastest policy run on `job` by the report's mean time over the seeds (a missed seed counts twice
    the budget there), and that time; an online policy that missed on any seed, and any policy whose mean
    is the penalty itself, are left out. None if none is left."""
    named = policies_by_label(data, job)
    budget = float(job["budget"])
    times = dict(job.get("static", {}))
    times.update({label: row["time"] for label, row in job.get("policies", {}).items() if not row.get("missed")})
    reached = [(t, label) for label, t in times.items() if label in named and t < 2 * budget]
    if not reached:
        return None
    t, label = min(reached)
    return named[label], t


def grid_neighbours(path: Path, job: JobSpec, features: list[float]) -> list[Neighbour]:
    """Every job of the report at `path` but `job` itself, as a neighbour of `job` (nearest first)."""
    folder, data = read_report(path)
    key, fingerprint = workload_key(job), job.fingerprint()
    found = []
    for row in data["jobs"]:
        if row.get("fingerprint") == fingerprint:
            continue
        file = folder / "jobs" / f"{row['job']}.yaml"
        if not file.is_file():
            raise UserError(f"--grid {folder}: the drawn job file {file} is missing (the report writes it)")
        drawn = load_job(file)
        best = fastest(data, row)
        if best is None:
            continue
        policy, time = best
        bsp = row.get("policies", {}).get("bsp", {})
        bsp_time = float(row["bsp_time"]) if not bsp.get("missed") and row["bsp_time"] < 2 * float(row["budget"]) \
            else None
        record = {"best_policy": policy, "best_value": time,
                  "speedup_vs_bsp": bsp_time / time if bsp_time is not None else None,
                  "bsp_time_to_target": bsp_time}
        mine = cluster_features(drawn)
        same = workload_key(drawn) == key
        far = distance(features, mine) + (0.0 if same else WORKLOAD_PENALTY)
        found.append(Neighbour(str(folder), row["job"], far, record, mine, same))
    return sorted(found, key=lambda nb: (nb.distance, nb.job_name))
