"""The race's parts, each ablated leave-one-family-out on the table: its second seed (round 2), its local
step (round 3), the faster-half cut, its round towards BSP (round 5) and its running again without a member
out.

    python benchmarks/bench_race_rounds.py --count 8 --out benchmarks/race_rounds.md

Without the second seed, rounds 2-3 race on the first seed alone and the candidates are ranked there (the
final-metric round still runs both seeds). Without the local step, no neighbour of the leader runs. Without
the faster-half cut (`race.FASTER_HALF`), every member within the margin goes on to the second seed.
Round 5 (`autosync.race`, `_towards_bsp`) runs only where every finalist broke the final-metric rule: it
bisects static k at BSP's learning rate for the fewest workers that keep BSP's final metric. Without it, BSP
answers there. Running again (`race.RUN_AGAIN`): a portfolio member out on the second seed sets no horizon on
the first, so the runs it stopped there run again against the members still racing. Without it, such a
member's first-seed time still eliminates the rest. For each family of `--families` (jobs 0..count-1 of
each), the race's settings are fitted on the other families' jobs for the race and for each ablation
(`race_fit.fit(..., leave_out=...)`, as `autosync fit` fits the shipped ones), and each variant races the
held-out family's jobs on the table (`race_fit.race`: every run read from it, stopped at its horizon as a
live one is). Per job: the log of the answer's held-out time over the grid's choice's and the cost in BSP
trainings, the ablation minus the race, averaged over jobs with 90% bootstrap intervals (1000 draws, seed 0):
an answer difference whose interval lies above 0, or a cost difference whose interval does, means the part
earns its place. The answers' interval is also given with whole families resampled, since the jobs of one
family are not independent.

Reads every run from the table; a run it lacks is trained into it (on the committed table, none).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path

from autosync.catalog import label_of
from autosync.data import BASELINE_DIR
from autosync.experiments import lofo, race_fit
from autosync.race import ABLATABLE, FASTER_HALF, ROUNDS, RUN_AGAIN
from autosync.table import Table

from _report import Figures
from bench_lofo import COMMITTED_FAMILIES


# each ablation's name in the report
WITHOUT = {ROUNDS[1]: "without the second seed (rounds 2-3 race on the first seed, ranked there)",
           ROUNDS[2]: "without the local step (no neighbour of the leader runs)",
           FASTER_HALF: "without the faster-half cut (every member within the margin goes on)",
           ROUNDS[4]: "without round 5 (BSP answers where every finalist broke the rule)",
           RUN_AGAIN: "without running again (a member out on the second seed still sets the first's horizons)"}


def folds(table: Table, jobs: list, leave_out: frozenset[str]) -> dict[str, dict]:
    """Per job: the race fitted on the other families (without what `leave_out` names) run on it
    (`race_fit.leave_one_family_out`), its answer named as `autosync tune` names it."""
    policies = {j.job: j.policies for j in jobs}
    rows = race_fit.leave_one_family_out(table, jobs, leave_out=leave_out)
    print(f"without {sorted(leave_out) or 'nothing'}: {len(rows)} jobs raced", flush=True)
    return {r["job"]: {**r, "answer": label_of(policies[r["job"]][r["answer"]])} for r in rows}


def family_interval(families: list[str], values: list[float]) -> tuple[float, float]:
    """The 90% bootstrap interval of the mean of `values` (one per job, of the family `families` names in
    the same place) with whole families resampled, since a family's jobs are not independent: the families
    drawn with replacement, each with all its jobs (`lofo.bootstrap`, 1000 draws, seed 0)."""
    grouped: dict[str, list[float]] = {}
    for family, value in zip(families, values):
        grouped.setdefault(family, []).append(value)
    return lofo.bootstrap(list(grouped.values()), lambda drawn: statistics.fmean(v for f in drawn for v in f))


def summary_line(name: str, rows: list[dict]) -> str:
    """One variant's row of the report: its answers over the grid's choice, the rule broken, the cost."""
    ratios = [r["ratio"] for r in rows]
    return (f"| {name} | {len(rows)} | {statistics.median(ratios):.2f} | {lofo.percentile(ratios, 0.9):.2f} | "
            f"{max(ratios):.2f} | {sum(not r['keeps'] for r in rows)} | "
            f"{statistics.median(r['cost'] for r in rows):.2f} | {statistics.fmean(r['cost'] for r in rows):.2f} |")


def summary_table(names: list[str], race: dict[str, dict], ablated: dict[str, dict[str, dict]]) -> list[str]:
    """The report's table of the race and each variant (`ablated`: part left out -> its rows) over `names`."""
    return ["| race | jobs | median | 90th percentile | worst | answers breaking the rule held out | median cost "
            "| mean cost |", "|---|---|---|---|---|---|---|---|",
            summary_line("the race", [race[n] for n in names]),
            *(summary_line(WITHOUT[name], [rows[n] for n in names]) for name, rows in ablated.items())]


def paired(names: list[str], race: dict[str, dict], rows: dict[str, dict]) -> tuple[list[float], list[float],
                                                                           tuple[float, float], tuple[float, float]]:
    """Per job of `names`, a variant's `rows` minus the `race`'s: the log of the answer's ratio to the grid's
    choice and the cost; and the 90% bootstrap intervals of their means over jobs."""
    answer = [math.log(rows[n]["ratio"]) - math.log(race[n]["ratio"]) for n in names]
    cost = [rows[n]["cost"] - race[n]["cost"] for n in names]
    return answer, cost, lofo.bootstrap(answer, statistics.fmean), lofo.bootstrap(cost, statistics.fmean)


def differing(names: list[str], race: dict[str, dict], rows: dict[str, dict]) -> list[str]:
    """The report's table of the jobs whose answer a variant's `rows` change from the `race`'s."""
    return ["| job | the race | over grid's choice | cost | without | over grid's choice | cost |",
            "|---|---|---|---|---|---|---|",
            *(f"| {n} | {a['answer']} | {a['ratio']:.2f} | {a['cost']:.2f} | {b['answer']} | {b['ratio']:.2f} | "
              f"{b['cost']:.2f} |" for n, a, b in ((n, race[n], rows[n]) for n in names) if a["answer"] != b["answer"])]


def agreement(rows: dict[str, dict], replayed: Path) -> list[str]:
    """How the race counted on the table (`race_fit.race`, with round 5) agrees with the tune replayed on the
    table (`replayed`: bench_lofo.py's results, its first sampler seed's answers): the same answers, and on how
    many jobs the same cost."""
    if not replayed.exists():
        return []
    recorded = {r["job"]: r["answers"][0] for r in map(json.loads, replayed.read_text().splitlines())}
    pairs = [(row, recorded[job]) for job, row in rows.items() if job in recorded]
    answers = sum(row["answer"] == label_of(a["policy"]) for row, a in pairs)
    gaps = [row["cost"] - a["cost"] for row, a in pairs if abs(row["cost"] - a["cost"]) > 1e-6]
    widest = max((abs(g) for g in gaps), default=0.0)
    elsewhere = (f"; elsewhere the cost counted here differs by {widest:.2f} BSP trainings at most (more on "
                 f"{sum(g > 0 for g in gaps)} jobs, less on {sum(g < 0 for g in gaps)})") if gaps else ""
    return [f"Against the tune replayed on the same jobs ({replayed}, fitted the same way): the same answer on "
            f"{answers} of {len(pairs)} jobs, the same cost on {len(pairs) - len(gaps)}{elsewhere}: the costs above "
            "are this count's."]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", nargs="+", default=list(COMMITTED_FAMILIES))
    parser.add_argument("--count", type=int, default=8, help="jobs 0..N-1 of each family (default: all the table holds)")
    parser.add_argument("--table", default="results/table")
    parser.add_argument("--out", default="benchmarks/race_rounds.md")
    parser.add_argument("--replayed", default="benchmarks/lofo_race.jsonl",
                        help="bench_lofo.py's results on these jobs: the tune replayed, to compare the costs with")
    parser.add_argument("--json", default=None, help="also write the figures here (benchmarks/make_table.py)")
    args = parser.parse_args()
    if set(WITHOUT) != set(ABLATABLE):  # before an hour of races, not after
        parser.error(f"WITHOUT names {sorted(WITHOUT)}, race.ABLATABLE {sorted(ABLATABLE)}")
    table = Table(args.table)
    jobs = race_fit.family_jobs(table, [BASELINE_DIR / f"family_{name}.yaml" for name in args.families], args.count)
    race = folds(table, jobs, frozenset())
    ablated = {name: folds(table, jobs, frozenset({name})) for name in ABLATABLE}
    names = [j.job for j in jobs]
    lines = ["# The race's parts, each ablated leave-one-family-out", "",
             f"`python benchmarks/bench_race_rounds.py --families {' '.join(args.families)} --count {args.count}`", "",
             "Each variant fitted on the other families (`race_fit.fit`) and raced on the held-out family's jobs "
             "on the table (`race_fit.race`); ratios are the answer's held-out time over the grid's choice's.", "",
             *summary_table(names, race, ablated)]
    figures = Figures("bench_race_rounds")
    for name, rows in ablated.items():
        short = WITHOUT[name].split(" (")[0]
        answer, cost, (low, high), (cost_low, cost_high) = paired(names, race, rows)
        families = {j.family for j in jobs}  # a family's jobs are not independent: resampled whole
        family_low, family_high = family_interval([j.family for j in jobs], answer)
        lines += ["", f"## {short[0].upper()}{short[1:]}", "",
                  f"Minus the race, over {len(names)} jobs: mean log ratio to the grid's choice "
                  f"{statistics.fmean(answer):+.3f} [{low:+.3f}, {high:+.3f}] (above 0: slower answers without it); "
                  f"cost {statistics.fmean(cost):+.2f} [{cost_low:+.2f}, {cost_high:+.2f}] BSP trainings (90% "
                  "bootstrap intervals over jobs, 1000 draws, seed 0). Resampling whole families instead (the "
                  f"{len(families)} families drawn with replacement, each with all its jobs), the answers' interval "
                  f"is [{family_low:+.3f}, {family_high:+.3f}]. The jobs whose answer differs:", "",
                  *differing(names, race, rows)]
        figures.add(f"{short}, mean log ratio to the grid's choice minus the race's ({len(names)} jobs; 90% interval "
                    f"{low:+.3f} to {high:+.3f})", statistics.fmean(answer), "")
        figures.add(f"{short}, mean cost minus the race's (90% interval {cost_low:+.2f} to {cost_high:+.2f})",
                    statistics.fmean(cost), "BSP trainings")
        # the search issue's rule: a part earns its place where leaving it out makes the answers slower, or the
        # race dearer, beyond the interval (over jobs): its answers' or its cost's interval lies above 0
        earns = low > 0 or cost_low > 0
        part = short.removeprefix("without ")
        figures.add(f"{part[0].upper()}{part[1:]} earns its place in the race (the answers' or the cost's interval "
                    "above 0 without it)",
                    float(earns), "", goal="1 (the search issue's rule)", met=earns)
    ran = [n for n in names if race[n]["towards_bsp"]]
    lines += ["", f"Round 5 ran on {len(ran)} jobs in the race.", "", *agreement(race, Path(args.replayed))]
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    figures.write(args.json)


if __name__ == "__main__":
    main()
