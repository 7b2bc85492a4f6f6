"""The progress the command line draws while a command runs: a bar over a run's budget, counting bars
(the leaderboard's runs, tune's trials), and the API's phases (`autosync.core.phases.Phase`) as spinners or
counting bars. Each is drawn on the console the command line gives it (its stderr console: stdout keeps the
results alone).
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator

Count = Callable[[int, int], None]  # called with (done, in all)


def counting_bar(label: str, console: Any, transient: bool = True) -> Any:
    """A rich progress bar 'label [bar] done/total description elapsed' on `console`."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn(f"[bold]{label}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.description}"),
                    TimeElapsedColumn(), console=console, transient=transient)


@contextlib.contextmanager
def leaderboard_progress(console: Any, total: int) -> Iterator[Callable[[dict[str, Any]], None]]:
    """`autosync leaderboard`'s bar (it stays on screen): gives the function to call with each finished run's
    summary, which advances it and names the run."""
    with counting_bar("leaderboard", console, transient=False) as bar:
        task = bar.add_task("", total=total)
        yield lambda run: bar.update(task, advance=1, description=f"last: {run['policy']['policy']} seed {run['seed']}")


@contextlib.contextmanager
def tune_progress(console: Any, n_trials: int, race: bool = False) -> Iterator[tuple[Count, Callable[[], None]]]:
    """`autosync tune`'s bar over the BSP reference runs, then the trials: gives (on_trial, start), the count
    called with (done, in all). The bar is drawn from `start` on, called once every check has passed
    (`api.tune`'s on_start), so that a refused input draws none. With `race` (the race on common seeds, which
    reads no trial budget and runs BSP in its last round) it counts the race's trials from the start, their
    number unknown until the first round is asked for."""
    bar = counting_bar("tuning", console)
    task = bar.add_task("trials", total=None) if race else bar.add_task("BSP reference runs", total=n_trials)

    def step(what: str) -> Count:
        return lambda done, total: bar.update(task, completed=done, total=total, description=what)

    started: list[bool] = []

    def start() -> None:
        started.append(True)
        bar.start()

    try:
        yield step("trials"), start
    finally:
        if started:  # rich's stop writes a closing newline where the console is not a terminal, drawn or not
            bar.stop()


def phases(label: str, console: Any, transient: bool = True) -> Callable[[str, int], Any]:
    """The API's phases as a spinner (no steps) or a counting bar (`label [bar] done/total what`; with
    `transient` False the bar stays on screen, its elapsed time with it, once the phase is done)."""

    @contextlib.contextmanager
    def phase(what: str, steps: int) -> Iterator[Callable[[], None]]:
        if not steps:
            with console.status(what):
                yield lambda: None
            return
        with counting_bar(label, console, transient) as bar:
            task = bar.add_task(what, total=steps)
            yield lambda: bar.advance(task)

    return phase


class BudgetBar:
    """A rich progress bar over a job's budget (virtual seconds, else updates, else epochs); entered, it
    gives the function to call with each evaluation record of the run."""

    def __init__(self, spec: Any, console: Any):
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        b = spec.budget
        if b.max_virtual_seconds is not None:
            self.key, self.total = "time", b.max_virtual_seconds
        elif b.max_updates is not None:
            self.key, self.total = "updates", b.max_updates
        else:
            self.key, self.total = "epoch", b.max_epochs
        self.bar = Progress(TextColumn("[bold]training"), BarColumn(), TextColumn("{task.description}"),
                            TimeElapsedColumn(), console=console, transient=False)

    def __enter__(self) -> Callable[[dict[str, Any]], None]:
        self.bar.start()
        self.task = self.bar.add_task("", total=self.total)

        def update(info: dict[str, Any]) -> None:
            acc = info.get("test_accuracy")
            desc = (f"virtual {info['time']:.1f} s | updates {info['updates']} | loss {info['train_loss']:.4f}"
                    + (f" | acc {acc:.3f}" if acc is not None else ""))
            self.bar.update(self.task, completed=min(info[self.key], self.total), description=desc)

        return update

    def __exit__(self, *exc: Any) -> None:
        self.bar.stop()
