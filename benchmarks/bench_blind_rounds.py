"""The race's parts, each left out, judged on families the race was never developed or fitted on.

    python benchmarks/bench_blind_rounds.py --blind ridge decay --count 5 --out benchmarks/blind_rounds.md

`bench_race_rounds.py` ablates each part of the race leave-one-family-out on the committed families, the
families the race was developed on. Here each variant (the race, and the race without each part of
`race.ABLATABLE`) is fitted once on all the committed families' jobs (`race_fit.fit`, as `autosync fit` fits
the shipped settings: the race's own fit is autosync/data/race.yaml) and races jobs 0..count-1 of each
`--blind` family (`race_fit.race`, every run read from the table). Per job: the log of the answer's held-out
time over the grid's choice's and the cost in BSP trainings, the variant minus the race, averaged over jobs
with 90% bootstrap intervals (1000 draws, seed 0); by the search issue's rule a part earns its place where
either interval lies above 0.

`--tables` names each blind family's table, in order (`-`: a new one in a temporary folder, every run trained
into it); the committed table (results/table) holds ridge's jobs 0-4 and has no room for decay's. The fits on
all 64 jobs also ask for 181 runs the committed table lacks (2 MB as JSON lines, past its 20 MB packed), so
the script reads a copy of each table it is given and trains those into the copy, on every run. The whole
run took 10 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
from pathlib import Path

from autosync.catalog import label_of
from autosync.data import BASELINE_DIR
from autosync.experiments import race_fit
from autosync.race import ABLATABLE
from autosync.table import Table

from _report import Figures
from bench_lofo import COMMITTED_FAMILIES
from bench_race_rounds import WITHOUT, differing, paired, summary_table

FIT_COUNT = 8  # jobs of each committed family fitted on: all the committed table holds, as `autosync fit` fits


def raced(settings, jobs: list[tuple[Table, object]], leave_out: frozenset[str]) -> dict[str, dict]:
    """Per blind job: the race with `settings` (without what `leave_out` names), its answer named as
    `autosync tune` names it."""
    rows = {}
    for table, job in jobs:
        row = race_fit.race(table, job, settings, leave_out=leave_out)
        rows[job.job] = {**row, "answer": label_of(job.policies[row["answer"]])}
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blind", nargs="+", default=["ridge", "decay"], help="families never fitted on")
    parser.add_argument("--tables", nargs="+", default=["results/table", "-"],
                        help="each blind family's table, in order (-: a new one in a temporary folder)")
    parser.add_argument("--count", type=int, default=5, help="jobs 0..N-1 of each blind family")
    parser.add_argument("--families", nargs="+", default=list(COMMITTED_FAMILIES), help="the families fitted on")
    parser.add_argument("--fit-count", type=int, default=FIT_COUNT, help="jobs 0..N-1 of each family fitted on")
    parser.add_argument("--table", default="results/table", help="the fitted families' table")
    parser.add_argument("--out", default="benchmarks/blind_rounds.md")
    parser.add_argument("--json", default=None, help="also write the figures here (benchmarks/make_table.py)")
    args = parser.parse_args()
    if len(args.tables) != len(args.blind):
        parser.error(f"--tables names {len(args.tables)} tables for {len(args.blind)} --blind families")
    scratch = tempfile.TemporaryDirectory(prefix="blind-table-")
    copies: dict[str, Table] = {}  # a table given, copied once: the runs it lacks are trained into the copy

    def table_at(where: str, name: str) -> Table:
        if where == "-":
            return Table(Path(scratch.name) / name)
        if where not in copies:
            copies[where] = Table(shutil.copytree(where, Path(scratch.name) / f"copy-{len(copies)}"))
        return copies[where]

    blind = []
    for family, where in zip(args.blind, args.tables):
        table = table_at(where, family)
        blind += [(table, job) for job in race_fit.family_jobs(table, [BASELINE_DIR / f"family_{family}.yaml"],
                                                                args.count)]
    table = table_at(args.table, "fitted")
    fitted = race_fit.family_jobs(table, [BASELINE_DIR / f"family_{name}.yaml" for name in args.families],
                                  args.fit_count)
    variants = {name: frozenset({name}) for name in ABLATABLE}
    race = raced(race_fit.fit(table, fitted), blind, frozenset())
    ablated = {}
    for name, leave_out in variants.items():
        ablated[name] = raced(race_fit.fit(table, fitted, leave_out=leave_out), blind, leave_out)
        print(f"{WITHOUT[name]}: {len(blind)} blind jobs raced", flush=True)
    scratch.cleanup()
    names = [job.job for _, job in blind]
    lines = ["# The race's parts, each left out, on families never fitted on", "",
             f"`python benchmarks/bench_blind_rounds.py --blind {' '.join(args.blind)} --tables {' '.join(args.tables)} "
             f"--count {args.count}"
             + (f" --families {' '.join(args.families)}" if args.families != list(COMMITTED_FAMILIES) else "")
             + (f" --fit-count {args.fit_count}" if args.fit_count != FIT_COUNT else "") + "`", "",
             f"Each variant fitted on jobs 0-{args.fit_count - 1} of {', '.join(args.families)} (`race_fit.fit`) and "
             f"raced on jobs 0-{args.count - 1} of {', '.join(args.blind)} on the table (`race_fit.race`); ratios "
             "are the answer's held-out time over the grid's choice's.", "",
             *summary_table(names, race, ablated)]
    figures = Figures("bench_blind_rounds")
    for name, rows in ablated.items():
        short = WITHOUT[name].split(" (")[0]
        answer, cost, (low, high), (cost_low, cost_high) = paired(names, race, rows)
        lines += ["", f"## {short[0].upper()}{short[1:]}", "",
                  f"Minus the race, over {len(names)} blind jobs: mean log ratio to the grid's choice "
                  f"{statistics.fmean(answer):+.3f} [{low:+.3f}, {high:+.3f}] (above 0: slower answers without it); "
                  f"cost {statistics.fmean(cost):+.2f} [{cost_low:+.2f}, {cost_high:+.2f}] BSP trainings (90% "
                  "bootstrap intervals over jobs, 1000 draws, seed 0). The jobs whose answer differs:", "",
                  *differing(names, race, rows)]
        figures.add(f"{short}, on {len(names)} blind jobs: mean log ratio to the grid's choice minus the race's "
                    f"(90% interval {low:+.3f} to {high:+.3f})", statistics.fmean(answer), "")
        figures.add(f"{short}, on the blind jobs: mean cost minus the race's (90% interval {cost_low:+.2f} to "
                    f"{cost_high:+.2f})", statistics.fmean(cost), "BSP trainings")
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    figures.write(args.json)


if __name__ == "__main__":
    main()
