"""Plots of a study: optimization history, parameter importances and (multi-objective) the Pareto front.

Optuna's matplotlib backend draws them; each is skipped, with the reason returned, when the study cannot
support it (too few completed trials, a single parameter for importances).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import optuna


def write_study_plots(study: "optuna.Study", out_dir: Path) -> tuple[list[Path], list[str]]:
    """Write PNGs under `out_dir`; returns (written paths, skipped plots with reasons)."""
    import warnings

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import optuna.visualization.matplotlib as ovm

    out_dir.mkdir(parents=True, exist_ok=True)
    written, skipped = [], []
    multi = len(study.directions) > 1
    plots = [("pareto_front.png", lambda: ovm.plot_pareto_front(study, target_names=["time to target", "final metric"]))] \
        if multi else [("optimization_history.png", lambda: ovm.plot_optimization_history(study)),
                       ("param_importances.png", lambda: ovm.plot_param_importances(study))]
    for name, draw in plots:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ax = draw()
            fig = ax.figure if hasattr(ax, "figure") else ax[0].figure
            fig.set_size_inches(8, 5)
            fig.tight_layout()
            fig.savefig(out_dir / name, dpi=100)
            plt.close(fig)
            written.append(out_dir / name)
        except (ValueError, RuntimeError, ZeroDivisionError) as exc:
            skipped.append(f"{name}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")
            plt.close("all")
    return written, skipped
