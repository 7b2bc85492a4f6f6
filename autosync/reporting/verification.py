"""A tune's verification (`tune --verify-top`): verify.md, verify.json and sim_vs_real.png."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Callable

from autosync.core import strict_json

if TYPE_CHECKING:
    from autosync.search.strategies.verify import Verification


def write_verification(verification: "Verification", directory: Path, command: str, label: Callable[[dict], str]
                       ) -> list[Path]:
    """verify.md / verify.json and sim_vs_real.png (simulated against real time, one point per candidate)."""
    directory.mkdir(parents=True, exist_ok=True)
    v = verification
    md = ["# Simulation verified", "", f"Produced by `{command}`", "",
          f"Real runs: {v.execution}, seeds {v.seeds}. Times are the job's virtual seconds (a missed target counts "
          "as the penalty times the time run).", "",
          "| policy | simulated time | real time | real / simulated | real final metric | feasible (real) |",
          "|---|---|---|---|---|---|"]
    fmt = lambda x, f: "-" if x is None else f.format(x)
    for r in v.rows:
        md.append(f"| {label(r['policy'])} | {fmt(r['simulated_time'], '{:.1f}')} | {fmt(r['real_time'], '{:.1f}')} | "
                  f"{fmt(r['real_over_simulated'], '{:.2f}')} | {fmt(r['real_final_metric'], '{:.3f}')} | "
                  f"{'yes' if r['real_feasible'] else 'no' + (': ' + r['reason'] if r.get('reason') else '')} |")
    md += ["", f"Kendall's tau of the two rankings: {fmt(v.kendall_tau, '{:.2f}')}; simulated winner "
               f"{label(v.simulated_winner)}, real winner {label(v.real_winner) if v.real_winner else 'none'} "
               f"({'the same' if v.same_winner else 'different'}); the simulated winner's real time over the real "
               f"winner's: {fmt(v.winner_gap, '{:.2f}')}.", "", "![simulated against real](sim_vs_real.png)", ""]
    paths = [directory / "verify.md", directory / "verify.json", directory / "sim_vs_real.png"]
    paths[0].write_text("\n".join(md))
    paths[1].write_text(strict_json.dumps({"command": command, **v.to_dict()}, indent=2))
    _plot(v, paths[2], label)
    return paths


def _plot(v: "Verification", path: Path, label: Callable[[dict], str]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = [r for r in v.rows if r["real_time"] is not None]
    fig, ax = plt.subplots(figsize=(5, 4.5))
    for i, r in enumerate(points):
        ax.scatter(r["simulated_time"], r["real_time"], color=f"C{i % 10}", label=label(r["policy"]))
    if points:
        low = min(min(r["simulated_time"], r["real_time"]) for r in points)
        high = max(max(r["simulated_time"], r["real_time"]) for r in points)
        ax.plot([low, high], [low, high], color="grey", lw=0.8, ls="--")
    ax.set_xlabel("simulated time-to-target (virtual s)")
    ax.set_ylabel("real time-to-target (virtual s)")
    tau = "-" if v.kendall_tau is None else f"{v.kendall_tau:.2f}"
    ax.set_title(f"simulated against real, Kendall's tau {tau}", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
