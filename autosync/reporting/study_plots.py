"""Plots of a study: optimization history, parameter importances and (multi-objective) the Pareto front; for a
race, the race itself (`autosync.reporting.race_figure`).

Optuna's matplotlib backend draws them; each is skipped, with the reason returned, when the study cannot
support it (too few completed trials; fewer than two parameters among the completed trials for the
importances, which then have nothing to rank). A race's study gets its own figure instead: its trials are
labelled lattice points with no parameters, and their values, runs on two seeds and runs to the end of the
budget, drawn as one history, mixed what the race compares apart.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from autosync.reporting.race_figure import draw_race

if TYPE_CHECKING:
    import optuna


RACE_FIGURE = "race.png"  # a race's figure, in place of the study's history


def write_study_plots(study: "optuna.Study | None", out_dir: Path,
                      race_record: dict[str, Any] | None = None) -> tuple[list[Path], list[str]]:
    """Write PNGs under `out_dir`; returns (written paths, skipped plots with reasons). `race_record`: the
    cache record of a race (its `race` and `best_policy`), drawn as race.png instead of the study's history
    (`study` unread: None where the cache answered without opening it)."""
    if race_record is not None:
        return [draw_race(race_record["race"], race_record["best_policy"], out_dir / RACE_FIGURE)], []
    import warnings

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import optuna.visualization.matplotlib as ovm

    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    skipped: list[str] = []
    multi = len(study.directions) > 1
    if multi:
        plots = [("pareto_front.png",
                  lambda: ovm.plot_pareto_front(study, target_names=["time to target", "final metric"]))]
    else:
        plots = [("optimization_history.png", lambda: ovm.plot_optimization_history(study))]
        ranked = _parameters(study)
        if len(ranked) >= 2:
            plots.append(("param_importances.png", lambda: ovm.plot_param_importances(study)))
        else:
            skipped.append(f"param_importances.png: {_count(len(ranked))} among the completed trials, none to "
                           "rank against another")
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


def _parameters(study: "optuna.Study") -> set[str]:
    """The names of the parameters the study's completed trials suggested."""
    import optuna

    return {name for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
            for name in t.params}


def _count(n: int) -> str:
    return "no parameter" if n == 0 else "1 parameter" if n == 1 else f"{n} parameters"
