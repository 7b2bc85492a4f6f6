"""Renderings of a robustness report: robustness.md / .csv / .json and regret.png."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from autosync.core import strict_json
from autosync.experiments.compare import FAMILY_COLUMNS
from autosync.policy_grid import REPORT_FILE, SPREAD_FOR_BALANCE, WITHIN
from autosync.reporting.output import format_cell, times_faster

# (key, header, format) of the summary table, shared by the Markdown file and the CLI's table.
# what `write_robustness` writes: the report as Markdown, CSV and JSON (what its readers read), and its figure
ROBUSTNESS_FILES = ("robustness.md", "robustness.csv", REPORT_FILE, "regret.png")
SUMMARY_COLUMNS = (
    ("policy", "policy", "{}"),
    ("median_regret", "median", "{:.2f}x"),  # regrets: multiples of the best static k's time
    ("p90_regret", "p90", "{:.2f}x"),
    ("worst_regret", "worst", "{:.2f}x"),
    ("within", f"<= {WITHIN}x", "{:.0%}"),
    ("slower_than_bsp", "> BSP", "{}"),
    ("median_vs_bsp", "vs BSP", times_faster),
    ("min_vs_bsp_spread", "vs BSP, spread", times_faster),
    ("median_overall_regret", "vs best overall", "{:.2f}x"),
    ("missed_runs", "missed", "{}"),
    ("errors", "failed", "{}"),
)
# The summary columns the printed table shows only with --wide (the regret's tail and the other references)
SUMMARY_WIDE = {"p90_regret", "within", "min_vs_bsp_spread", "median_overall_regret"}

def summary_legend(rules: list[str] | tuple[str, ...] = ("fixed", "proportional")) -> str:
    """What the summary table's columns mean, naming the static-k grid's learning-rate rules."""
    return (
        "Regret = the policy's mean time-to-target over the seeds / the best static k's (the best of backup k = "
        f"1..n-1 under the lr rules {', '.join(rules)} and BSP, chosen per job in hindsight); a missed target "
        "counts as twice the job's time budget. median, p90, worst: of the regret over the jobs; <= 1.1x: share "
        "of jobs within 1.1x; > BSP: jobs where it is slower than BSP; vs BSP: median speedup (BSP's time / the "
        "policy's), as how many times faster or slower; vs BSP, spread: the smallest speedup on jobs whose worker "
        f"speeds spread {SPREAD_FOR_BALANCE:g}x "
        "or more; vs best overall: median of the time over the best of every policy run on the job, static or "
        "online; missed: runs that missed the target; failed: runs that raised.")


def write_robustness(result: dict[str, Any], directory: Path, command: str, family: str) -> list[Path]:
    """The summary and per-job tables with the command that made them, and the regret figure."""
    directory.mkdir(parents=True, exist_ok=True)
    jobs, summary = result["jobs"], result["summary"]
    labels = [row["policy"] for row in summary]
    md = [f"# Robustness: family {family}", "", f"Produced by `{command}`", "",
          f"{len(jobs)} jobs, seeds {result['seeds']}; times are virtual seconds. "
          f"{summary_legend(result.get('lr_rules', ('fixed', 'proportional')))}", "",
          *(["Reference: broad. vs best overall divides by the best of every policy family's grid on the job "
             "(autosync.experiments.reference_grid: static k = 1..n under four lr rules, ASP, SSP, the DANA family, DBW, "
             "B-DBW, LB-BSP, Sync-Switch, compositions) as well as the policies above; each job's fastest "
             "is in the jobs table.", ""] if result.get("reference") == "broad" else []),
          "| " + " | ".join(h for _, h, _ in SUMMARY_COLUMNS) + " |", "|" + "---|" * len(SUMMARY_COLUMNS)]
    md += ["| " + " | ".join(format_cell(row.get(k), f) for k, _, f in SUMMARY_COLUMNS) + " |" for row in summary]
    md += ["", "![regret per policy](regret.png)", "", "## Jobs (regret per policy)", "",
           "| job | n | round trips | slow workers (spread) | slowdowns | workload | momentum | best static k "
           "| its time | best overall | its time | " + " | ".join(labels) + " |",
           "|" + "---|" * (11 + len(labels))]
    for j in jobs:
        cells = [j["job"], str(j["n_workers"]), j["round_trip"], f"{j['slow_workers']} ({j['speed_spread']:.1f}x)",
                 str(j["slowdowns"]), j["workload"], f"{j['momentum']:g}", j["best_static"],
                 f"{j['best_static_time']:.1f}", f"`{j.get('best_overall', j['best_static'])}`",
                 f"{j.get('best_overall_time', j['best_static_time']):.1f}"]
        cells += [f"{j['policies'][label]['regret']:.2f}" for label in labels]
        md.append("| " + " | ".join(cells) + " |")
    paths = [directory / name for name in ROBUSTNESS_FILES[:3]]
    paths[0].write_text("\n".join(md) + "\n")
    with paths[1].open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["job", "fingerprint", "policy", "time_to_target", "regret", "speedup_vs_bsp", "missed_runs",
                         "best_static", "best_static_time"])
        for j in jobs:
            for label, p in j["policies"].items():
                writer.writerow([j["job"], j["fingerprint"], label, p["time"], p["regret"], p["vs_bsp"], p["missed"],
                                 j["best_static"], j["best_static_time"]])
    paths[2].write_text(strict_json.dumps({"command": command, "family": family, **result}, indent=2))
    paths.append(_plot_regret(summary, jobs, directory / ROBUSTNESS_FILES[3], family))
    return paths


def _plot_regret(summary: list[dict[str, Any]], jobs: list[dict[str, Any]], path: Path, family: str) -> Path:
    """One column per policy: every job's regret as a dot over a box of their distribution (log scale)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    labels = [row["policy"] for row in summary]
    data = [[j["policies"][label]["regret"] for j in jobs] for label in labels]
    fig, ax = plt.subplots(figsize=(1.2 * len(labels) + 2, 4.2))
    ax.boxplot(data, showfliers=False, widths=0.5)
    jitter = np.random.default_rng(0)
    for i, values in enumerate(data, start=1):
        ax.scatter(i + jitter.uniform(-0.15, 0.15, len(values)), values, s=12, alpha=0.7, color=f"C{(i - 1) % 10}")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.axhline(WITHIN, color="grey", lw=0.8, ls="--")
    ax.set_yscale("log")
    ax.set_xticks(range(1, len(labels) + 1), labels, rotation=20, fontsize=8)
    ax.set_ylabel("regret: time / best static k's (log)")
    ax.set_title(f"family {family}: {len(jobs)} jobs (dashed: {WITHIN}x)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def comparison_document(comparison: Any) -> dict[str, Any]:
    """The comparison as `autosync robustness-compare --json` prints it: the reports, whether their grids
    differ, the table's columns and rows, and the policies run on some families only."""
    return {"developed_on": comparison.developed_on,
            "reports": [{"family": r.family, "path": str(r.path)} for r in comparison.reports],
            "grids_differ": comparison.grids_differ(), "columns": comparison_header(comparison),
            "rows": [[label, *values] for label, values in comparison.rows()], "not_compared": comparison.partial}


def comparison_header(comparison: Any, roles: bool = True, between: str = ": ") -> list[str]:
    """The comparison's column headers: 'policy', then each family's columns named after the family (with
    `roles`, the family changes were developed on marked 'dev', the others 'held out', when one is named)."""
    def role(family: str) -> str:
        if not roles or comparison.developed_on is None:
            return ""
        return " (dev)" if family == comparison.developed_on else " (held out)"

    return ["policy"] + [f"{r.family}{role(r.family)}{between}{header}" for r in comparison.reports
                         for _, header in FAMILY_COLUMNS]


def comparison_cells(values: list[Any]) -> list[str]:
    """One row's values formatted: regrets as multiples to two decimals ("1.23x"), counts as integers ('-'
    where missing)."""
    formats = ["{:.2f}x" if key.endswith("regret") else "{}" for key, _ in FAMILY_COLUMNS] * (
        len(values) // len(FAMILY_COLUMNS))
    return [format_cell(v, f) for v, f in zip(values, formats)]


def write_comparison(comparison: Any, path: Path, command: str) -> Path:
    """The comparison as Markdown at `path`: the command, each report it read, the table and the policies
    left out (run on some families only)."""
    header = comparison_header(comparison)
    lines = ["# Robustness on several families", "", f"Produced by `{command}` from:", ""]
    lines += [f"- `{r.path}`: family {r.family}, {r.jobs} jobs, seeds {r.seeds} (`{r.command}`)"
              for r in comparison.reports]
    lines += ["", "Regret against each job's best static k, as in each family's robustness.md: median and worst "
              "over the family's jobs, jobs where the policy is slower than BSP, runs that missed the target.", "",
              "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join([label, *comparison_cells(values)]) + " |" for label, values in comparison.rows()]
    if comparison.grids_differ():
        lines += ["", comparison.grids_differ()]
    if comparison.partial:
        lines += ["", "Run on some of the families only (not compared): " +
                  ", ".join(f"`{label}`" for label in comparison.partial) + "."]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path
