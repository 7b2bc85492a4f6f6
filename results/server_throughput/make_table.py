"""ASP's throughput over BSP's against the number of workers and the server's link (issue: the server in
the cluster model; Sync-Switch Fig. 4 measures ASP up to 6.59x BSP's throughput).

Run from the repository root: `python results/server_throughput/make_table.py` (about 2 minutes on 2
cores). Throughput is training samples applied per virtual second over the first 60 virtual seconds of
baselines/sync_switch.yaml, seed 0, with n workers and a server whose transfer of the model takes
tau = ratio x the mean compute of a batch (1 s for 32 samples): bandwidth = model_bytes / tau. The model
is ResNet-32's size, 1.86 MB (0.46 M parameters x 4 bytes); ratio 0.1 is, for example, that model over
a 1 Gb/s link (15 ms) against a 150 ms batch. Round trips without stragglers (alpha 0, deterministic)
and with the job's (alpha 0.7).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from autosync.catalog import make_policy
from autosync.engine import simulate
from autosync.core.job import job_from_dict, load_job

HERE = Path(__file__).parent
WORKERS = (4, 8, 16, 32)
RATIOS = (0.0, 0.05, 0.1, 0.2)
ALPHAS = (0.0, 0.7)
MODEL_BYTES = 1_860_000


def throughput(n: int, ratio: float, alpha: float) -> dict[str, float]:
    base = load_job("baselines/sync_switch.yaml").model_dump(mode="json")
    base["budget"] = {"max_virtual_seconds": 60}
    base["cluster"].update(n_workers=n, round_trip={"kind": "shifted_exponential", "alpha": alpha},
                           server={"model_bytes": MODEL_BYTES, "bandwidth": MODEL_BYTES / ratio if ratio else None})
    job = job_from_dict(base)
    return {p: simulate(job, make_policy(p)).summary()["samples_per_virtual_second"] for p in ("bsp", "asp")}


def main() -> None:
    torch.set_num_threads(1)
    rows = []
    for alpha in ALPHAS:
        for ratio in RATIOS:
            for n in WORKERS:
                t = throughput(n, ratio, alpha)
                rows.append({"alpha": alpha, "transfer_over_compute": ratio, "n_workers": n, "bsp": t["bsp"],
                             "asp": t["asp"], "asp_over_bsp": t["asp"] / t["bsp"]})
                print(rows[-1], flush=True)
    command = "python results/server_throughput/make_table.py"
    md = ["# ASP / BSP throughput with the server in the cluster model", "", f"Produced by `{command}`.", "",
          "Samples per virtual second over the first 60 s of `baselines/sync_switch.yaml` (the two-convolution CNN on "
          "digits, B = 32, 1 s mean compute per batch), seed 0; the server moves a model of ResNet-32's size "
          "(1.86 MB) in tau = ratio x 1 s per pull or push, first come, first served. Each cell is ASP's "
          "throughput over BSP's.", ""]
    for alpha in ALPHAS:
        md += [f"Round trips (1 - alpha) + alpha Exp(1), alpha = {alpha}"
               + (" (no stragglers)" if alpha == 0 else " (the job's stragglers)") + ":", "",
               "| tau / compute | " + " | ".join(f"n = {n}" for n in WORKERS) + " |",
               "|---|" + "---|" * len(WORKERS)]
        for ratio in RATIOS:
            cells = [r for r in rows if r["alpha"] == alpha and r["transfer_over_compute"] == ratio]
            md.append(f"| {ratio:g}" + ("  (instant server)" if ratio == 0 else "") + " | "
                      + " | ".join(f"{r['asp_over_bsp']:.2f}x" for r in cells) + " |")
        md.append("")
    md.append("![ASP over BSP throughput](throughput.png)")
    (HERE / "throughput.md").write_text("\n".join(md) + "\n")
    (HERE / "throughput.json").write_text(json.dumps({"command": command, "rows": rows}, indent=2) + "\n")
    plot(rows)


def plot(rows: list[dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(ALPHAS), figsize=(10, 3.8), sharey=True)
    for ax, alpha in zip(axes, ALPHAS):
        for i, ratio in enumerate(RATIOS):
            cells = [r for r in rows if r["alpha"] == alpha and r["transfer_over_compute"] == ratio]
            ax.plot([r["n_workers"] for r in cells], [r["asp_over_bsp"] for r in cells], marker="o",
                    color=f"C{i}", label=f"tau = {ratio:g} x compute")
        ax.set_xscale("log", base=2)
        ax.set_xticks(WORKERS, [str(n) for n in WORKERS])
        ax.set_xlabel("workers n")
        ax.set_title(f"alpha = {alpha}" + (" (no stragglers)" if alpha == 0 else ""), fontsize=9)
        ax.axhspan(1.6, 6.6, color="grey", alpha=0.15, lw=0)
    axes[0].set_ylabel("ASP samples/s over BSP's")
    axes[0].legend(fontsize=7)
    fig.suptitle("grey: Sync-Switch Fig. 4's range, 1.6-6.6x", fontsize=9)
    fig.tight_layout()
    fig.savefig(HERE / "throughput.png", dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
