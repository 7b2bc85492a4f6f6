"""The scored leaderboard: leaderboard.md, .csv, .json and its plots (time to target, k_t over time)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from autosync.core import strict_json
from autosync.engine.metrics import time_at_k
from autosync.experiments.leaderboard import LEADERBOARD_JSON
from autosync.reporting.output import format_cell, times_faster


def leaderboard_columns(baseline: str = "bsp") -> tuple[tuple[str, str, Any], ...]:
    """(row key, header, format) of each leaderboard column; the speedup is against `baseline`, as scored."""
    return LEADERBOARD_COLUMNS[:5] + ((f"speedup_vs_{baseline}", f"vs {baseline.upper()}", times_faster),) \
        + LEADERBOARD_COLUMNS[5:]


def printed_columns(metric: str, baseline: str = "bsp") -> set[str]:
    """The row keys of the columns the printed leaderboard shows without --wide: the policy, its time to target
    with its spread over seeds and the runs that missed it, the speedup against `baseline`, and the final
    value of the target's `metric` (the training loss for a training-loss target, else the test accuracy)."""
    final = "final_train_loss" if metric == "train_loss" else "final_test_accuracy"
    return {"policy", "time_to_target", "std_time_to_target", "never_reached", f"speedup_vs_{baseline}", final}


# what `write_leaderboard` writes: the table as Markdown, CSV and JSON, and its two figures
LEADERBOARD_FILES = ("leaderboard.md", "leaderboard.csv", LEADERBOARD_JSON, "curves.png", "k_over_time.png")
LEADERBOARD_COLUMNS = (  # without the speedup column, whose key names the baseline: see leaderboard_columns
    ("policy", "policy", "{}"),
    ("time_to_target", "TTT s", "{:.1f}"),
    ("median_time_to_target", "median", "{:.1f}"),
    ("std_time_to_target", "std", "{:.1f}"),
    ("never_reached", "missed", "{}"),
    ("final_test_accuracy", "test acc", "{:.3f}"),
    ("final_train_loss", "train loss", "{:.3f}"),
    ("updates_to_target", "upd to T", "{:.0f}"),
    ("updates_per_virtual_second", "upd/s", "{:.2f}"),
    ("samples_per_virtual_second", "samples/s", "{:.0f}"),
    ("early_mean_k", "early k", "{:.1f}"),
    ("late_mean_k", "late k", "{:.1f}"),
    ("time_weighted_k", "k (time)", "{:.1f}"),
    ("mean_staleness", "stale", "{:.1f}"),
    ("batch_spread", "batch max/min", "{:.1f}"),
)
LEADERBOARD_LEGEND = (
    "TTT s: time to target in virtual seconds, MLPerf's score (mean after dropping the fastest and slowest "
    "run; a run that never reaches the target counts as infinitely slow); median over the seeds, std over those "
    "that reached it (- where fewer than two did); "
    "missed: runs that never reached the target; vs BSP: how many times faster (or slower) than BSP's TTT; "
    "test acc and train loss: final values, mean over seeds; upd to T: updates to target (statistical "
    "efficiency), mean over the runs that reached it (shown beside a TTT not reached where some did); "
    "upd/s: updates per virtual second (hardware efficiency); samples/s: training samples "
    "applied per virtual second (Sync-Switch's throughput); early k and late k: gradients per update over the "
    "first and the second half of each run's virtual time, mean over seeds; k (time): gradients per update "
    "weighted by the virtual time each update took (where a dynamic policy spends its time); stale: updates "
    "applied between a gradient's parameters and its own update, mean over each run's applied gradients, then "
    "over seeds; batch max/min: largest over smallest of the workers' newest batch sizes at the run's last "
    "update (LB-BSP's balance).")


def write_leaderboard(rows: list[dict[str, Any]], entries: list[Any], job_dump: dict[str, Any],
                      directory: Path, command: str, baseline: str = "bsp") -> list[Path]:
    """leaderboard.md / .csv / .json and the curve plots for one job, with the command that made them."""
    import csv

    columns = leaderboard_columns(baseline)
    directory.mkdir(parents=True, exist_ok=True)
    seeds = sorted({r["seed"] for e in entries for r in e.runs})
    md = [f"# Leaderboard: {job_dump['name']}", "",
          f"Produced by `{command}`", "",
          f"Target: {job_dump['target']['metric']} {'>=' if job_dump['target']['metric'] == 'test_accuracy' else '<='} "
          f"{job_dump['target']['threshold']}; seeds {seeds}; time is virtual seconds.", "",
          LEADERBOARD_LEGEND, "",
          "| " + " | ".join(h for _, h, _ in columns) + " |",
          "|" + "---|" * len(columns)]
    for r in rows:
        md.append("| " + " | ".join(format_cell(r.get(k), f) for k, _, f in columns) + " |")
    md += ["", "![loss against virtual time](curves.png)", "", "![gradients per update](k_over_time.png)", ""]
    paths = [directory / name for name in LEADERBOARD_FILES[:3]]
    paths[0].write_text("\n".join(md))
    with paths[1].open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow([k for k, _, _ in columns])
        for r in rows:
            writer.writerow([r.get(k) for k, _, _ in columns])
    runs = {e.label: [{k: v for k, v in run.items() if k not in ("curve", "k")} for run in e.runs]
            for e in entries}
    paths[2].write_text(strict_json.dumps({"command": command, "job": job_dump, "rows": rows, "runs": runs},
                                   indent=2, default=_json_number))
    paths += _plot_leaderboard(entries, directory)
    return paths


def _json_number(value: Any) -> Any:
    return float(value)


def _plot_leaderboard(entries: list[Any], directory: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for i, e in enumerate(entries):
        for j, run in enumerate(e.runs):
            ax.plot(run["curve"]["time"], run["curve"]["train_loss"], color=f"C{i % 10}", lw=1,
                    alpha=0.9 if j == 0 else 0.25, label=e.label if j == 0 else None)
    ax.set_yscale("log")
    ax.set_xlabel("virtual time (s)")
    ax.set_ylabel("training loss (evaluated)")
    ax.set_title("training loss against virtual time (one line per seed)", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    curves = directory / LEADERBOARD_FILES[3]
    fig.savefig(curves, dpi=110)
    plt.close(fig)

    fig, (ax, share_ax) = plt.subplots(1, 2, figsize=(11, 3.5), gridspec_kw={"width_ratios": [3, 2]})
    moves = [len(set(e.runs[0]["k"]["k"])) > 1 for e in entries]
    shown = [(i, e) for i, e in enumerate(entries) if moves[i] or not any(moves)]  # constant k_t: the table says it
    for i, e in shown:
        run = e.runs[0]
        # an update's k over the time it took, which ends at the update ("pre"; the first from time 0), as k
        # (time) weighs it
        times, ks = run["k"]["time"], run["k"]["k"]
        ax.step([0.0, *times], [*ks[:1], *ks], where="pre", color=f"C{i % 10}", lw=1, label=e.label)
    ax.set_xlabel("virtual time (s)")
    ax.set_ylabel("gradients per update (k_t)")
    ax.set_title(f"k_t over time, seed {entries[0].runs[0]['seed']}"
                 + (" (policies whose k_t varies)" if any(moves) and not all(moves) else ""), fontsize=9)
    ax.legend(fontsize=7)
    _plot_time_at_k(share_ax, [e for _, e in shown])
    fig.tight_layout()
    ks = directory / LEADERBOARD_FILES[4]
    fig.savefig(ks, dpi=110)
    plt.close(fig)
    return [curves, ks]


def _plot_time_at_k(ax: Any, entries: list[Any]) -> None:
    """One bar per policy: the share of its virtual time spent in updates of each k (seed of the left panel)."""
    import matplotlib.pyplot as plt

    spent = [time_at_k(e.runs[0]["k"]["time"], e.runs[0]["k"]["k"]) for e in entries]
    top = max((k for s in spent for k in s), default=1)
    colours = plt.get_cmap("viridis")
    for row, seconds in enumerate(spent):
        total, left = sum(seconds.values()) or 1.0, 0.0
        for k in sorted(seconds):
            width = seconds[k] / total
            ax.barh(row, width, left=left, color=colours((k - 1) / max(top - 1, 1)), edgecolor="white", lw=0.3)
            if width > 0.08:
                light = (k - 1) / max(top - 1, 1) > 0.6  # viridis turns yellow: dark text there
                ax.text(left + width / 2, row, str(k), ha="center", va="center", fontsize=6,
                        color="black" if light else "white")
            left += width
    ax.set_yticks(range(len(entries)), [e.label for e in entries], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlim(0, 1)
    ax.set_xlabel("share of virtual time")
    ax.set_title("time spent at each k (number in the bar)", fontsize=9)
