"""`autosync scaling`'s report: scaling.md (policy x worker count), scaling.json and scaling.png."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from autosync.core import strict_json

SCALING_FILES = ("scaling.md", "scaling.json", "scaling.png")  # what `write` writes

if TYPE_CHECKING:
    from autosync.experiments.scaling import Scaling


def table_rows(scaling: "Scaling") -> list[tuple[str, list[str]]]:
    """(policy, one 'mean ± std' cell per worker count, '-' where the policy was not run)."""
    rows = []
    for policy, series in scaling.points.items():
        by_n = {p.n_workers: p for p in series}
        rows.append((policy, [f"{by_n[n].mean:.3f} ± {by_n[n].std:.3f}" if n in by_n else "-"
                              for n in scaling.worker_counts]))
    return rows


def markdown(scaling: "Scaling", command: str) -> str:
    """A policy x n table of mean ± std over seeds, the leaderboards' commands underneath."""
    counts = scaling.worker_counts
    lines = [f"# {scaling.metric} against the number of workers", "", f"Produced by `{command}` from:", ""]
    lines += [f"- n = {n}: `{folder}`, made by `{made_by}`" for n, folder, made_by in sorted(scaling.sources)]
    lines += ["", f"Mean ± standard deviation over seeds of {scaling.metric}.", "",
              "| policy | " + " | ".join(f"n = {n}" for n in counts) + " |",
              "|---|" + "---:|" * len(counts)]
    lines += [f"| {policy} | " + " | ".join(cells) + " |" for policy, cells in table_rows(scaling)]
    lines += ["", "![metric against workers](scaling.png)", ""]
    return "\n".join(lines)


def plot(scaling: "Scaling", path: Path) -> Path:
    """The metric against n (log2 axis) per policy, with one standard deviation as error bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for i, (policy, series) in enumerate(scaling.points.items()):
        ax.errorbar([p.n_workers for p in series], [p.mean for p in series], yerr=[p.std for p in series],
                    color=f"C{i % 10}", marker="o", ms=4, capsize=3, lw=1.2, label=policy)
    ax.set_xscale("log", base=2)
    ax.set_xticks(scaling.worker_counts, [str(n) for n in scaling.worker_counts])
    ax.set_xlabel("workers n")
    ax.set_ylabel(scaling.metric)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write(scaling: "Scaling", directory: Path, command: str) -> list[Path]:
    """scaling.md, scaling.json and scaling.png in `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    md, js = (directory / name for name in SCALING_FILES[:2])
    md.write_text(markdown(scaling, command))
    js.write_text(strict_json.dumps({
        "command": command, "metric": scaling.metric,
        "sources": [{"n_workers": n, "folder": f, "command": c} for n, f, c in sorted(scaling.sources)],
        "policies": {policy: [{"n_workers": p.n_workers, "mean": p.mean, "std": p.std, "values": p.values}
                              for p in series] for policy, series in scaling.points.items()},
    }, indent=2))
    return [md, js, plot(scaling, directory / SCALING_FILES[2])]
