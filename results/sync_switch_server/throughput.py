"""ASP's throughput over BSP's with the server of sync_switch_server.yaml, against n and the link.

Run from the repository root: `python results/sync_switch_server/throughput.py` (about 2 minutes on 2
cores). Samples applied per virtual second over the first 30 virtual seconds of the job, seed 0, for
n = 4, 8, 16, 32 workers and a link of 0.5, 1 (the job's) and 10 Gb/s or an instant server, with the job's
round trips (shifted exponential, alpha = 0.7) and without stragglers (alpha = 0: every batch takes its
mean, the job's compute per batch). BSP here is Sync-Switch's (sync_switch:switch_at=1.0); its timing is that of plain BSP.
Writes throughput.json and throughput.md next to this file.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from joblib import Parallel, delayed

HERE = Path(__file__).parent
JOB = "results/sync_switch_server/sync_switch_server.yaml"
WORKERS = (4, 8, 16, 32)
LINKS_GBPS = (0.5, 1.0, 10.0, None)  # None: the instant server (no transfer cost, no queue)
ALPHAS = (0.7, 0.0)
POLICIES = {"bsp": ("sync_switch", {"switch_at": 1.0}), "asp": ("asp", {})}


def samples_per_second(n: int, gbps: float | None, alpha: float, which: str) -> float:
    from autosync.catalog import make_policy
    from autosync.engine import simulate
    from autosync.core.job import job_from_dict, load_job

    torch.set_num_threads(1)
    base = load_job(JOB).model_dump(mode="json")
    base["budget"] = {"max_virtual_seconds": 30.0}
    base["workload"]["evaluation"]["every_seconds"] = 30.0  # throughput only: evaluate as little as possible
    base["cluster"]["n_workers"] = n
    base["cluster"]["round_trip"] = {"kind": "shifted_exponential", "alpha": alpha}
    base["cluster"]["server"]["bandwidth"] = None if gbps is None else gbps * 1e9 / 8
    name, params = POLICIES[which]
    return simulate(job_from_dict(base), make_policy(name, params)).summary()["samples_per_virtual_second"]


def main() -> None:
    from autosync.core.job import load_job

    job = load_job(JOB)
    compute = job.cluster.compute.seconds_per_sample * job.workload.batch_size
    model_bytes = job.cluster.server.model_bytes
    cells = [(n, g, a) for a in ALPHAS for g in LINKS_GBPS for n in WORKERS]
    values = Parallel(n_jobs=2)(delayed(samples_per_second)(n, g, a, w) for n, g, a in cells for w in POLICIES)
    rows = []
    for i, (n, g, a) in enumerate(cells):
        bsp, asp = values[2 * i], values[2 * i + 1]
        tau = None if g is None else model_bytes / (g * 1e9 / 8)
        rows.append({"alpha": a, "link_gbps": g, "transfer_seconds": tau, "n_workers": n, "bsp": bsp, "asp": asp,
                     "asp_over_bsp": asp / bsp})
    command = "python results/sync_switch_server/throughput.py"
    md = ["# ASP / BSP throughput of sync_switch_server.yaml against n and the link", "",
          f"Produced by `{command}`.", "",
          "Samples per virtual second over the first 30 virtual seconds, seed 0: the digits CNN's gradients on "
          f"the job's clock ({compute:.3f} s of compute per batch of {job.workload.batch_size}, one parameter server "
          f"moving ResNet-32's {model_bytes:,} bytes per pull or push). Each cell is ASP's throughput over BSP's; the transfer time tau "
          "of one pull or push is the model's bytes over the link.", ""]
    for a in ALPHAS:
        md += [f"Round trips (1 - alpha) + alpha Exp(1) times the compute, alpha = {a:g}"
               + (" (the job's)" if a == 0.7 else " (no stragglers)") + ":", "",
               "| link | tau | " + " | ".join(f"n = {n}" for n in WORKERS) + " |", "|---|---|" + "---|" * len(WORKERS)]
        for g in LINKS_GBPS:
            cell = [r for r in rows if r["alpha"] == a and r["link_gbps"] == g]
            link = "instant" if g is None else f"{g:g} Gb/s"
            tau = "0" if g is None else f"{cell[0]['transfer_seconds'] * 1e3:.1f} ms"
            md.append(f"| {link} | {tau} | " + " | ".join(f"{r['asp_over_bsp']:.2f}x" for r in cell) + " |")
        md.append("")
    (HERE / "throughput.md").write_text("\n".join(md))
    (HERE / "throughput.json").write_text(json.dumps({"command": command, "rows": rows}, indent=2) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
