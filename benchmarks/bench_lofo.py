"""Leave-one-family-out: the race replayed on the table, family by family, against the grid's choice.

    python benchmarks/bench_lofo.py --families fresh quarry ... --count 8 --sampler-seeds 3 \
        --table results/table --results benchmarks/lofo_race.jsonl --out benchmarks/lofo_race.md

For each of the first `--count` jobs of each family (`baselines/family_<name>.yaml`; `default` is the
default job), fits the race's settings on the other families' jobs (`autosync.experiments.race_fit.fit`, as
`autosync fit` fits the shipped ones on all of them), replays `autosync tune --sampler race` with them on
the table (`--table`: every run read from it, or trained into it once) from each sampler seed, and scores
the answer on the job's held-out seeds against the grid's choice on the tune's search seeds and against
the held-out best (`autosync.experiments.lofo`): the race judged leave-one-family-out through the tune's
own code. Each job's result is appended to `--results` as it finishes; a re-run replays only the jobs it
lacks, and scores the answers recorded for the others again by today's rules (the grid's choice and the
final-metric test may have changed since). Prints and writes per family and pooled figures with bootstrap
intervals. Beside them: the grid's second choice (`lofo.runner_up`) held out, and per family the one policy
that did best there with hindsight (`lofo.best_fixed`), which a search should not answer worse than.

The baseline the race was judged against, the family-by-family search with nothing fitted (`--sampler
portfolio`, no longer in autosync), is `benchmarks/lofo_baseline.{md,jsonl}`: its answers were replayed by
this script at commit 507b582, and `--rescore` scores them again by today's rules without replaying:

    python benchmarks/bench_lofo.py --families ... --count 2 --sampler-seeds 3 \
        --results benchmarks/lofo_baseline.jsonl --out benchmarks/lofo_baseline.md --rescore

`bench_race.py` reads it.

`--against FILE` adds the paired comparison with another run's results (a variant's ablation: the same jobs,
scored by today's rules): per job, the mean over sampler seeds of the log of the answer's ratio to the grid's
choice and of the cost, this run's minus FILE's, averaged over jobs with a 90% bootstrap interval, and the
jobs whose answer changed. (The race's round towards BSP is ablated on the table by bench_race_rounds.py.)

`--shipped` races with the shipped settings (autosync/data/race.yaml, fitted on the committed families)
rather than refitting: on a family the fit never saw, the race as a user gets it, judged the same way.
`benchmarks/blind_ridge.md` holds its run on the ridge family, which no race was developed or fitted on:

    python benchmarks/bench_lofo.py --families ridge --count 5 --shipped --table results/table \
        --results benchmarks/blind_ridge.jsonl --out benchmarks/blind_ridge.md

and `benchmarks/blind_decay.md` on the decay family, never developed or fitted on either, its table built
apart (its 0.6 MB would take results/table past the 20 MB it may hold when committed):

    autosync table baselines/family_decay.yaml --jobs 5 --out decay-table
    python benchmarks/bench_lofo.py --families decay --count 5 --shipped --table decay-table \
        --results benchmarks/blind_decay.jsonl --out benchmarks/blind_decay.md

`--timed` replays every job again, into a temporary file (`--results` and `--out` are left as they are), and
reports the whole replay's wall time (the folds' fits and every tune; the search issue's goal: at most 10
minutes on 2 cores once the table exists) and whether its answers and costs are those `--results` recorded.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from autosync.catalog import label_of
from autosync.core.family import load_family
from autosync.core.job import load_job
from autosync.data import BASELINE_DIR, DEFAULT_JOB_PATH, RACE_SETTINGS
from autosync.experiments import lofo, portfolio_fit, race_fit
from autosync.experiments.reference_grid import held_out_seeds
from autosync.lattice import labelled_points, lattice_points
from autosync.api import quiet_optuna, tune
from autosync.engine.forks import FORKS
from autosync.table import KEPT, Table

from _report import Figures

COMMITTED_FAMILIES = ("fresh", "quarry", "crest", "fleet", "steady", "tiers", "inverse", "mosaic")  # results/table
GOALS = {"median": 1.00, "p90": 1.15, "worst": 1.5, "median_cost": 3.0, "median_spread": 1.05}


def jobs_of(name: str, count: int) -> list:
    if name == "default":
        return [load_job(DEFAULT_JOB_PATH)]
    return load_family(BASELINE_DIR / f"family_{name}.yaml").jobs(count)


def load_results(path: Path) -> dict[str, lofo.JobResult]:
    if not path.exists():
        return {}
    out = {}
    for line in path.read_text().splitlines():
        data = json.loads(line)
        out[data["job"]] = lofo.JobResult(**data)
    return out


def short(policy: dict) -> str:
    """A policy as `autosync tune` names it: its parameters that differ from their defaults."""
    return label_of(policy)


def answered(policies: list[dict]) -> str:
    """The answers of a job's sampler seeds, one name for those that agree ("x (3 seeds)")."""
    names = [short(p) for p in policies]
    return f"{names[0]} ({len(names)} seeds)" if len(names) > 1 and len(set(names)) == 1 else "; ".join(names)


def listed(values) -> str:
    return ", ".join(f"{x:.2f}" for x in values)


def report(results: list[lofo.JobResult], families: list[str], command: str, title: str, note: str = "") -> str:
    lines = [f"# {title}", "", *([note, ""] if note else []), f"`{command}`", "",
             "Ratios are the answer's mean time to target on the held-out seeds over the reference's there; "
             "one row per job, its answers from every sampler seed. Grid's choice: the fastest lattice point "
             "on the tune's search seeds keeping BSP's final metric; held-out best: the same on the held-out "
             "seeds.", "",
             "| family | job | grid's choice | answers (per sampler seed) | over grid's choice | over held-out best "
             "| cost (BSP trainings) | misses | keeps the final-metric rule |", "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        answers = answered([a["policy"] for a in r.answers])
        lines.append(f"| {r.family} | {r.job} | {short(r.grid_choice)} | {answers} | "
                     f"{listed(r.ratios())} | {listed(r.ratios('held_out_best'))} | "
                     f"{listed(a['cost'] for a in r.answers)} | {r.misses} | "
                     f"{', '.join('yes' if a.get('keeps') else 'no' for a in r.answers)} |")
    lines += ["", "| family | jobs | median | 90th percentile | worst | over held-out best (median) | misses "
              "| answers breaking the rule | median cost | sampler spread (median) |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for name in families + ["pooled"]:
        rs = results if name == "pooled" else [r for r in results if r.family == name]
        if not rs:
            continue
        s = lofo.summary(rs)
        lines.append(f"| {name} | {s['jobs']} | {s['median']:.2f} [{s['median_interval'][0]:.2f}, "
                     f"{s['median_interval'][1]:.2f}] | {s['p90']:.2f} [{s['p90_interval'][0]:.2f}, "
                     f"{s['p90_interval'][1]:.2f}] | {s['worst']:.2f} | {s['median_vs_held_out_best']:.2f} | "
                     f"{s['misses']} | {s['breaking_the_rule']} | {s['median_cost']:.2f} | {s['median_spread']:.2f} |")
    lines += ["", "Brackets: 90% bootstrap intervals over jobs (1000 draws, seed 0)."]
    return "\n".join(lines) + "\n"


def paired(results: list[lofo.JobResult], baseline: dict[str, lofo.JobResult], specs: dict, table: Table,
           name: str) -> str:
    """The report's section comparing `results` with `baseline`'s answers on the same jobs (`specs`: each job by
    name), scored by today's rules (see `--against`)."""
    pairs = [(r, lofo.score_again(table, baseline[r.job], specs[r.job], lattice_points))
             for r in results if r.job in baseline]
    if not pairs:
        raise SystemExit(f"--against {name}: it records none of these jobs")

    def mean_log(r: lofo.JobResult) -> float:
        return statistics.fmean(math.log(x) for x in r.ratios())

    def mean_cost(r: lofo.JobResult) -> float:
        return statistics.fmean(a["cost"] for a in r.answers)

    answer = [mean_log(new) - mean_log(old) for new, old in pairs]
    cost = [mean_cost(new) - mean_cost(old) for new, old in pairs]
    low, high = lofo.bootstrap(answer, statistics.fmean)
    cost_low, cost_high = lofo.bootstrap(cost, statistics.fmean)
    lines = ["", f"## Against {name}", "",
             f"Over its {len(pairs)} jobs, the mean over jobs of this run's log ratio to the grid's choice minus "
             f"{name}'s: {statistics.fmean(answer):+.3f} [{low:+.3f}, {high:+.3f}] (negative: faster answers); "
             f"of the cost: {statistics.fmean(cost):+.2f} [{cost_low:+.2f}, {cost_high:+.2f}] BSP trainings "
             "(90% bootstrap intervals over jobs, 1000 draws, seed 0). The jobs whose answer changed:", "",
             "| job | answers here | there | over grid's choice here | there | cost here | there |",
             "|---|---|---|---|---|---|---|"]
    for new, old in pairs:
        if [a["policy"] for a in new.answers] != [a["policy"] for a in old.answers]:
            lines.append(f"| {new.job} | {answered([a['policy'] for a in new.answers])} | "
                         f"{answered([a['policy'] for a in old.answers])} | {listed(new.ratios())} | "
                         f"{listed(old.ratios())} | {listed(a['cost'] for a in new.answers)} | "
                         f"{listed(a['cost'] for a in old.answers)} |")
    return "\n".join(lines) + "\n"


def replayed_tune(job, table_dir: Path, sampler_seed: int, **options) -> lofo.Answered:
    """`autosync tune --table table_dir --seed sampler_seed` on `job`, in a storage of its own, as in a process
    of its own (nothing kept from the tune before: `autosync.engine.forks`, `autosync.table.KEPT`)."""
    FORKS.clear()
    KEPT.clear()
    with tempfile.TemporaryDirectory(prefix="lofo-") as tmp:
        outcome = tune(job, table=str(table_dir), seed=sampler_seed, storage=f"sqlite:///{tmp}/study.db", **options)
    return lofo.Answered(outcome.cache["best_policy"], float(outcome.cache["search_cost_bsp_trainings"]))


def family_times(table: Table, families: list[str], count: int) -> list[portfolio_fit.JobTimes]:
    """Every candidate's times on jobs 0..count-1 of each family, read from `table`, with the grid's choice."""
    return [t for family in families for t in race_fit.jobs_times(table, family, jobs_of(family, count))]


def race_folds(families: list[str], count: int, table_dir: Path) -> dict[str, Path]:
    """Per family, a settings file of the race fitted on the other families' jobs (`race_fit.fit`)."""
    table = Table(table_dir)
    times = family_times(table, families, count)
    folder = Path(tempfile.mkdtemp(prefix="race-folds-"))
    out = {}
    for family in families:
        settings = race_fit.fit(table, [t for t in times if t.family != family])
        out[family] = folder / f"without-{family}.yaml"
        out[family].write_text(race_fit.settings_text(settings, f"race.fit without {family}"))
        print(f"fold without {family}: {settings.portfolio}, margin {settings.margin}", flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", nargs="+", default=list(COMMITTED_FAMILIES))
    parser.add_argument("--count", type=int, default=8,
                        help="jobs 0..N-1 of each family (default: the 64 jobs the table holds; the race was developed "
                             "on jobs 0 and 1; runs a tune asks for that the table lacks are trained and kept)")
    parser.add_argument("--sampler-seeds", type=int, default=3)
    parser.add_argument("--table", default="results/table", help="the table's directory (built on demand)")
    parser.add_argument("--results", default="benchmarks/lofo_race.jsonl")
    parser.add_argument("--out", default="benchmarks/lofo_race.md")
    parser.add_argument("--json", default=None, help="also write the figures here (benchmarks/make_table.py)")
    parser.add_argument("--sampler", default="race", choices=["race"],
                        help="race: the race fitted on the other families (the baseline, the family-by-family "
                             "search, is no longer in autosync: benchmarks/lofo_baseline.md)")
    parser.add_argument("--rescore", action="store_true",
                        help="only score the answers recorded in --results again, by today's rules, and replay "
                             "nothing (the baseline: --results benchmarks/lofo_baseline.jsonl)")
    parser.add_argument("--against", default="",
                        help="another run's --results: add the paired comparison with it (see the docstring)")
    parser.add_argument("--shipped", action="store_true",
                        help="race with the shipped settings (autosync/data/race.yaml) rather than settings fitted on "
                             "the other families: the race on families it was never fitted on (see the docstring)")
    parser.add_argument("--timed", action="store_true",
                        help="replay every job again into a temporary file, and time it (see the docstring)")
    args = parser.parse_args()
    if args.timed:
        return timed(args)
    quiet_optuna()
    table_dir, results_path = Path(args.table), Path(args.results)
    done = load_results(results_path)
    results = []
    folds: dict[str, Path] = {}
    specs = {}
    table = Table(table_dir)  # for the recorded answers: a replayed tune writes into the directory, not into it
    for family in args.families:
        for job in jobs_of(family, args.count):
            specs[job.name] = job
            if job.name in done:  # its answers as recorded, scored by today's rules
                results.append(lofo.score_again(table, done[job.name], job, lattice_points))
                continue
            if args.rescore:
                raise SystemExit(f"--rescore: {results_path} records no answers for {job.name}")
            if not args.shipped:
                folds = folds or race_folds(args.families, args.count, table_dir)
            start = time.perf_counter()
            options = {"sampler": "race", "race_settings": str(RACE_SETTINGS if args.shipped else folds[family])}
            answers = [replayed_tune(job, table_dir, s, **options) for s in range(args.sampler_seeds)]
            result = lofo.score_job(Table(table_dir), family, job, lattice_points, answers)  # with the tune's runs
            with results_path.open("a") as fh:
                fh.write(json.dumps(lofo.as_dict(result)) + "\n")
            results.append(result)
            print(f"{family} {job.name}: over grid's choice {listed(result.ratios())}, "
                  f"cost {listed(a['cost'] for a in result.answers)} "
                  f"({time.perf_counter() - start:.0f} s)", flush=True)
    kept = {r.job for r in results}  # every result with its answers judged by the rule, for bench_race
    results_path.write_text("".join(json.dumps(lofo.as_dict(r)) + "\n" for r in results)
                            + "".join(json.dumps(lofo.as_dict(r)) + "\n" for r in done.values() if r.job not in kept))
    command = (f"python benchmarks/bench_lofo.py --families {' '.join(args.families)} --count {args.count} "
               f"--sampler-seeds {args.sampler_seeds}"
               + (f" --results {args.results} --out {args.out} --rescore" if args.rescore else
                  f" --sampler {args.sampler}") + (f" --against {args.against}" if args.against else "")
               + (f" --table {args.table} --results {args.results} --out {args.out} --shipped" if args.shipped else ""))
    title = ("Leave-one-family-out: the answers recorded in " + args.results + ", scored by today's rules"
             if args.rescore else "The shipped race (autosync/data/race.yaml) on families it was never fitted on"
             if args.shipped else "Leave-one-family-out: the race, fitted on the other families")
    note = (f"*The answers and their costs are as {args.results} recorded them, by the search whose run wrote it; "
            "this command scores them again and replays nothing.*" if args.rescore else "")
    text = report(results, args.families, command, title, note)
    table = Table(table_dir)  # every run the replays trained, read once
    floors = [race_fit.check_floor(table, specs[r.job], r.grid_choice) for r in results]
    text += (f"\nThe final-metric round alone for the grid's choice (BSP's and its runs to the end of the budget "
             f"on both search seeds: the least a race that checks it pays, `race_fit.check_floor`): median "
             f"{statistics.median(floors):.2f} BSP trainings, {min(floors):.2f} to {max(floors):.2f}.\n")
    fixed = fixed_rows(table, results, specs, args.families)
    text += ("\nThe race against the one policy that did best on each family, chosen with hindsight on its jobs "
             "(`lofo.best_fixed`: the lowest median held-out time over the grid's choice, then the lowest worst; "
             "the search issue's first table): median / worst over the grid's choice.\n\n"
             "| family | the race (first sampler seed) | best fixed policy | its median / worst |\n|---|---|---|---|\n"
             + "".join(f"| {f} | {statistics.median(race):.2f} / {max(race):.2f} | {label} | "
                       f"{statistics.median(ratios):.2f} / {max(ratios):.2f} |\n"
                       for f, (race, label, ratios) in fixed.items()))
    beaten = [f for f, (race, _, ratios) in fixed.items()
              if statistics.median(ratios) < statistics.median(race) and max(ratios) < max(race)]
    second = runner_up_ratios(table, results, specs)
    text += (f"\nThe grid's second choice (`lofo.runner_up`: the fastest point slower than the grid's choice on the "
             f"search seeds that keeps the rule), held out, over the grid's choice: median "
             f"{statistics.median(second):.2f}, 90th percentile {lofo.percentile(second, 0.9):.2f}, worst "
             f"{max(second):.2f}; over {GOALS['p90']} on {sum(r > GOALS['p90'] for r in second)} of {len(second)} "
             "jobs. A search that answers one place short of the grid's choice lands as far from it.\n")
    grid_breaking = sum(not lofo.answer_keeps(table, specs[r.job], r.grid_choice, held_out_seeds(specs[r.job]))
                        for r in results)
    s = lofo.summary(results)
    text += (f"\nThe final-metric rule on the held-out seeds: the answers break it on {s['jobs_breaking_the_rule']} "
             f"of {len(results)} jobs; the grid's choice, made by the same test on the search seeds, on "
             f"{grid_breaking}. A verdict on two seeds does not carry to two others.\n")
    if args.against:
        text += paired(results, load_results(Path(args.against)), specs, table, args.against)
    Path(args.out).write_text(text)
    print(json.dumps(s, indent=1))
    figures = Figures("bench_lofo")
    families = f"{len(args.families)} famil{'y' if len(args.families) == 1 else 'ies'}"
    figures.add(f"answer over grid's choice, median ({s['jobs']} jobs, {families})",
                s["median"], "x", goal="<= 1.00", met=s["median"] <= GOALS["median"])
    figures.add("answer over grid's choice, 90th percentile", s["p90"], "x", goal="<= 1.15",
                met=s["p90"] <= GOALS["p90"])
    figures.add("answer over grid's choice, worst", s["worst"], "x", goal="<= 1.5", met=s["worst"] <= GOALS["worst"])
    figures.add("answer over the held-out best, median", s["median_vs_held_out_best"], "x")
    figures.add("answers missing a held-out seed BSP reaches", s["misses"], "", goal="0", met=s["misses"] == 0)
    figures.add("answers whose final metric breaks the rule on the held-out seeds", s["breaking_the_rule"], "")
    figures.add("jobs with an answer whose final metric breaks the rule on the held-out seeds (any sampler seed)",
                s["jobs_breaking_the_rule"], "")
    figures.add("jobs whose grid's choice breaks the rule on the held-out seeds", grid_breaking, "")
    figures.add("search cost, median", s["median_cost"], "BSP trainings", goal="<= 3",
                met=s["median_cost"] <= GOALS["median_cost"])
    figures.add("the final-metric round alone for the grid's choice (the least a race that checks it pays), median",
                statistics.median(floors), "BSP trainings")
    figures.add("slowest over fastest answer across sampler seeds, median", s["median_spread"], "x", goal="<= 1.05",
                met=s["median_spread"] <= GOALS["median_spread"])
    figures.add("families where the best fixed policy, chosen with hindsight, beats the race's median and worst",
                len(beaten), f"of {len(fixed)}" + (f" ({', '.join(beaten)})" if beaten else ""))
    figures.add("the grid's second choice over its choice, held out, 90th percentile (one place short of it)",
                lofo.percentile(second, 0.9), "x")
    figures.add(f"jobs where the grid's second choice lands over {GOALS['p90']} of its choice, held out",
                sum(r > GOALS["p90"] for r in second) / len(second), "of the jobs")
    figures.write(args.json)


def fixed_rows(table: Table, results: list[lofo.JobResult], specs: dict,
               families: list[str]) -> dict[str, tuple[list[float], str, list[float]]]:
    """Per family: the race's ratios to the grid's choice (first sampler seed), and the best fixed policy's
    label and ratios (`lofo.best_fixed`), held out."""
    rows = {}
    for family in families:
        mine = [r for r in results if r.family == family]
        if mine:
            label, ratios = lofo.best_fixed(table, [specs[r.job] for r in mine],
                                            [r.grid_choice_time for r in mine], labelled_points)
            point = labelled_points(specs[mine[0].job].cluster.n_workers)[label]
            # a composition's label lists every slot: named as `autosync tune` names it (a share of n stays a share)
            rows[family] = ([r.ratios()[0] for r in mine], short(point) if point["policy"] == "compose" else label,
                            ratios)
    return rows


def runner_up_ratios(table: Table, results: list[lofo.JobResult], specs: dict) -> list[float]:
    """For each job, the grid's second choice (`lofo.runner_up`) over its choice, both on the held-out seeds:
    how far one place short of the grid's choice lands on seeds no search saw, the spread the 90th
    percentile goal must clear (jobs where no point is slower than the grid's choice are left out)."""
    ratios = []
    for result in results:
        job = specs[result.job]
        second = lofo.runner_up(table, job, lattice_points, lofo.search_seeds(job))
        if second is not None:
            ratios.append(lofo.table_score(table, job, second.policy, held_out_seeds(job)).time
                          / result.grid_choice_time)
    return ratios


def timed(args: argparse.Namespace) -> None:
    """`--timed`: the whole leave-one-family-out replay again, in a new process writing a temporary results
    file; its wall time, and whether its answers and costs match those recorded in `--results`."""
    with tempfile.TemporaryDirectory() as tmp:
        fresh = Path(tmp) / "lofo.jsonl"
        command = [sys.executable, __file__, "--families", *args.families, "--count", str(args.count),
                   "--sampler-seeds", str(args.sampler_seeds), "--table", args.table, "--results", str(fresh),
                   "--out", str(Path(tmp) / "lofo.md")]
        start = time.perf_counter()
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
        wall = time.perf_counter() - start
        now, recorded = load_results(fresh), load_results(Path(args.results))

    def answers(result: lofo.JobResult) -> list:
        return [(json.dumps(a["policy"], sort_keys=True), round(a["cost"], 6)) for a in result.answers]

    same = all(job in recorded and answers(r) == answers(recorded[job]) for job, r in now.items())
    print(f"the whole replay ({len(now)} jobs, {args.sampler_seeds} sampler seeds, the folds' fits): {wall:.0f} s; "
          f"answers and costs as {args.results} recorded them: {'yes' if same else 'NO'}")
    figures = Figures("bench_lofo_replay")
    figures.add(f"the whole leave-one-family-out replay ({len(now)} jobs x {args.sampler_seeds} sampler seeds, "
                "with the folds' fits): wall time", wall, "s", goal="<= 600 s", met=wall <= 600)
    figures.add(f"its answers and costs as {args.results} recorded them", float(same), "", goal="1", met=same)
    figures.write(args.json)


if __name__ == "__main__":
    main()
