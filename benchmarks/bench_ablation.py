"""Ablation of the TPE search's mechanisms, judged on the table like the race (leave-one-family-out jobs).

    python benchmarks/bench_ablation.py --space static_k --families fresh quarry ... --count 2 --sampler-seeds 1

For each of the first `--count` jobs of each family, `autosync tune --sampler tpe --space SPACE` is replayed
on the table (`--table`: every run read from it, or trained into it once) with its defaults and with each
mechanism switched off (`VARIANTS`), from each sampler seed, in a fresh storage each time. A mechanism is
switched off by its own option (`--patience 0`), or, where it has none, by its field of the request's
`ObjectiveSettings` (`prune`), set on the request as `autosync tune`
builds it (`replayed`). Every answer is scored on the job's held-out seeds against the grid's choice on the
tune's search seeds (`autosync.experiments.lofo`, the race's scoring). Nothing of the TPE search is fitted,
so no family is held out: the families only name the jobs.

A mechanism earns its place where switching it off makes the answers worse, or the search dearer, by more
than the interval:
per variant the mean over jobs of log(answer's ratio without it / with it) and of the cost difference in BSP
trainings, each with a 90% bootstrap interval over jobs (paired by job and sampler seed). Each job's answers
are appended to `--results` as they finish; a re-run replays only what it lacks and scores again what it has.

`ablation_static_k_confirmation.md` (and its .jsonl) measured the defaults of their day, which ran a
confirmation step too (its leaders re-run on another seed), with and without it: worth less than its
interval in answer (+1.2% [0.0, 3.6]) for 0.25 BSP trainings a tune, so the TPE search has none.
`ablation_static_k.md` (and its .jsonl) measured the defaults of their day against each mechanism switched
off, among them a second-seed judge (a full-budget check near the final-metric rule's edge judged again over
the search's seed and the next): without it the answers were -0.7% [-2.0, 0.0] (no worse) for -0.12
[-0.37, 0.00] BSP trainings, so the TPE search has none either, and its "defaults" and "no second seed" rows
are those defaults': measure today's with a fresh `--results`.
`ablation_static_k_checks.md` (and its .jsonl; `--variants 'no repair' 'no check families'`) measured the
full-budget checks' two helpers against the defaults of their day (make_table.py's `bench_ablation_checks`):
without the repair the answers were +7.9% [0.0, 16.1] slower for -0.20 [-0.40, -0.06] BSP trainings, so it
stays; without check families (each policy its own family: a failed check neither reordered the other
checks nor ruled out its stale relatives) -1.8% [-5.5, +0.1] for +0.00 [0.00, +0.01], so the search has
none, and that variant is gone. `ablation_static_k.md` also measured a proxy equivalence check (a trial
first run on the job's proxy, a logistic regression on random features, against the policies already
tried, to be answered by one whose run it repeated): without it the answers were +0.000 [+0.000, +0.000]
for +0.00 [+0.00, +0.00] BSP trainings (it never fired), and bench_tune_cost found no equivalent with it on
7 jobs x 3 spaces, at the same median cost for 0.976x / 1.08x / 1.76x the wall time (static_k / policy /
switch_point, `benchmarks/README.md`), so the search has none, and its "no proxy check" variant is gone
too. A mechanism with no switch of its own is switched off for the measurement
by setting one name of its module (`patched`): the repair's rounds to 0, `tune`'s `RaceLimit` built with no
pace margin.
`ablation_static_k_final_round.md` (and its .jsonl; `--variants 'final round'`, run at commit aa866a9, whose
variant it is) measured the race's final round in place of the full-budget checks and the repair (issue 62):
the race's two finalists by time to target continued to the end of the budget on the two search seeds and
judged against BSP's runs there by the paired test (`race.keeps_paired`), BSP where neither kept it. Its
answers were +0.199 [+0.007, +0.410] slower (fleet-000 7.44 against 1.68 and mosaic-001 4.88 against 1.00 of
the grid's choice: both finalists broke the paired test and BSP answered, where the repair or the third check
found a k that kept the rule) for +1.81 [+1.63, +1.94] BSP trainings (each finalist's run on the second seed
and BSP's there), so the TPE search keeps its checks and repair, and the variant is gone; its runs on the
second search seed are not in the packed table (a re-run at that commit trains them, about 2 minutes).
`ablation_static_k_pruning.md` (and its .jsonl; `--variants 'no pace' 'no plateau'`) measured the pruning's
two predictions one at a time against the defaults of their day (the table held every run: none trained):
without the pace rule the answers were the same (+0.000 [+0.000, +0.000]) for +0.09 [+0.06, +0.13] BSP
trainings, so it stays; without plateau prediction (a proposal between tied trials of its policy pruned
untrained) the answers and the cost were the same (+0.000 [+0.000, +0.000], +0.00 [+0.00, +0.00]: on
`static_k` it found no plateau in 132 reads), so the search has none, and that variant is gone.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import importlib
import json
import math
import statistics
import tempfile
import time
from pathlib import Path

from autosync.api import quiet_optuna
from autosync.engine.forks import FORKS
from autosync.experiments import lofo
from autosync.lattice import lattice_points
from autosync.options import TuneOptions
from autosync.search.objective import ObjectiveSettings
from autosync.search.request import TuneRequest
from autosync.search.strategies.pruning import RaceLimit
from autosync.search.tune import tune
from autosync.table import KEPT, Table

from _report import Figures
from bench_lofo import jobs_of

# each variant: the option or the `ObjectiveSettings` field that switches one mechanism off (defaults otherwise)
VARIANTS = {
    "defaults": {},
    "no patience": {"patience": 0},  # --patience 0: every trial of --n-trials runs
    # no trial stops short of the target against the bar (bound, pace, a pruned twin), so no
    # full-budget check re-runs a pruned one (`autosync.search.strategies.pruning`)
    "no pruning": {"prune": False},
    # a candidate whose full-budget check failed is not repaired one step towards BSP
    # (`autosync.search.strategies.repair`: no repair round)
    "no repair": {"patch": ("autosync.search.strategies.repair", "MAX_REPAIR_ROUNDS", 0)},
    # no trial is pruned on its pace (`RaceLimit`'s pace margin None: only the bound prunes against the bar)
    "no pace": {"patch": ("autosync.search.tune", "RaceLimit", functools.partial(RaceLimit, pace_margin=None))},
}
PATCHES = ("patch",)  # a variant's (module, name, value): set while it runs, then restored
SETTINGS = {f.name for f in dataclasses.fields(ObjectiveSettings)}  # a variant's keys set there, not as options


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--space", default="static_k")
    parser.add_argument("--families", nargs="+", default=["fresh", "quarry", "crest", "fleet", "steady", "tiers",
                                                          "inverse", "mosaic"])
    parser.add_argument("--count", type=int, default=2, help="jobs 0..N-1 of each family")
    parser.add_argument("--sampler-seeds", type=int, default=1)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS),
                        help="the variants to run (defaults always runs: the others are judged against it)")
    parser.add_argument("--table", default="results/table")
    parser.add_argument("--results", default=None, help="default: benchmarks/ablation_<space>.jsonl")
    parser.add_argument("--out", default=None, help="default: benchmarks/ablation_<space>.md")
    parser.add_argument("--json", default=None, help="also write the figures here (benchmarks/make_table.py)")
    args = parser.parse_args()
    quiet_optuna()
    here = Path(__file__).parent
    results_path = Path(args.results or here / f"ablation_{args.space}.jsonl")
    out = Path(args.out or here / f"ablation_{args.space}.md")
    done = {}
    if results_path.exists():
        for line in results_path.read_text().splitlines():
            record = json.loads(line)
            done[(record["variant"], record["result"]["job"])] = lofo.JobResult(**record["result"])
    table = Table(args.table)
    variants = {name: VARIANTS[name] for name in VARIANTS if name == "defaults" or name in args.variants}
    results: dict[str, list[lofo.JobResult]] = {name: [] for name in variants}
    for family in args.families:
        for job in jobs_of(family, args.count):
            for name, options in variants.items():
                if (name, job.name) in done:
                    results[name].append(lofo.score_again(table, done[(name, job.name)], job, lattice_points))
                    continue
                start = time.perf_counter()
                answers = [replayed(job, Path(args.table), s, args.space, options)
                           for s in range(args.sampler_seeds)]
                result = lofo.score_job(table, family, job, lattice_points, answers)
                with results_path.open("a") as fh:
                    fh.write(json.dumps({"variant": name, "result": lofo.as_dict(result)}) + "\n")
                results[name].append(result)
                print(f"{family} {job.name} {name}: over grid's choice {result.ratios()}, cost "
                      f"{[round(a['cost'], 2) for a in result.answers]} ({time.perf_counter() - start:.0f} s)",
                      flush=True)
    command = (f"python benchmarks/bench_ablation.py --space {args.space} --families {' '.join(args.families)} "
               f"--count {args.count} --sampler-seeds {args.sampler_seeds}"
               + (f" --variants {' '.join(repr(v) for v in args.variants)}" if args.variants != list(VARIANTS) else "")
               + (f" --results {args.results}" if args.results else "") + (f" --out {args.out}" if args.out else ""))
    out.write_text(report(results, command, args.space))
    print(out.read_text())
    figures = Figures("bench_ablation")
    base = results["defaults"]
    for name, rs in results.items():
        s = lofo.summary(rs)
        if name == "defaults":
            figures.add(f"tpe on {args.space}, defaults: answer over grid's choice, median", s["median"], "x")
            figures.add(f"tpe on {args.space}, defaults: cost, median", s["median_cost"], "BSP trainings")
            continue
        logs, costs = differences(base, rs)
        figures.add(f"tpe on {args.space}, {name}: answer over grid's choice, mean log ratio to the defaults'",
                    statistics.fmean(logs), "", against="the defaults")
        figures.add(f"tpe on {args.space}, {name}: cost difference to the defaults', mean",
                    statistics.fmean(costs), "BSP trainings", against="the defaults")
    figures.write(args.json)


def replayed(job, table_dir: Path, sampler_seed: int, space: str, variant: dict) -> lofo.Answered:
    """`autosync tune --sampler tpe --space space --table table_dir --seed sampler_seed` on `job` with the
    `variant`'s options, in a storage of its own, as in a process of its own (nothing kept from the tune
    before: `autosync.engine.forks`, `autosync.table.KEPT`; as `bench_lofo.replayed_tune`), the request built
    as `autosync.api.tune` builds it and the variant's `ObjectiveSettings` fields then set on it."""
    settings = {k: v for k, v in variant.items() if k in SETTINGS}
    with patched([variant[k] for k in PATCHES if k in variant]):
        return _replayed(job, table_dir, sampler_seed, space, variant, settings)


@contextlib.contextmanager
def patched(patches: list[tuple[str, str, object]]):
    """Each (module, name, value) set while the block runs, then restored: a mechanism that has no switch of
    its own, switched off for the measurement (the search's code is unchanged)."""
    saved = []
    for module, name, value in patches:
        mod = importlib.import_module(module)
        saved.append((mod, name, getattr(mod, name)))
        setattr(mod, name, value)
    try:
        yield
    finally:
        for mod, name, value in reversed(saved):
            setattr(mod, name, value)


def _replayed(job, table_dir: Path, sampler_seed: int, space: str, variant: dict, settings: dict) -> lofo.Answered:
    FORKS.clear()
    KEPT.clear()
    with tempfile.TemporaryDirectory(prefix="ablation-") as tmp:
        options = TuneOptions(space=space, sampler="tpe", table=str(table_dir), seed=sampler_seed,
                              storage=f"sqlite:///{tmp}/study.db",
                              **{k: v for k, v in variant.items() if k not in SETTINGS and k not in PATCHES})
        request = TuneRequest.from_options(job, options)
        request = dataclasses.replace(request, settings=dataclasses.replace(request.settings, **settings))
        outcome = tune(request)
    return lofo.Answered(outcome.cache["best_policy"], float(outcome.cache["search_cost_bsp_trainings"]))


def differences(base: list[lofo.JobResult], other: list[lofo.JobResult]) -> tuple[list[float], list[float]]:
    """Per job and sampler seed: log(other's ratio / base's) and other's cost minus base's."""
    logs, costs = [], []
    for b, o in zip(base, other):
        assert b.job == o.job
        for ab, ao in zip(b.answers, o.answers):
            logs.append(math.log(ao["time"] / ab["time"]))
            costs.append(ao["cost"] - ab["cost"])
    return logs, costs


def report(results: dict[str, list[lofo.JobResult]], command: str, space: str) -> str:
    lines = [f"# Ablation: the TPE search's mechanisms on the `{space}` space", "", f"`{command}`", "",
             "Each answer is scored on the job's held-out seeds against the grid's choice on the tune's search "
             "seeds (as `lofo_race.md`). Against the defaults: the mean over jobs and sampler seeds of log(answer "
             "time without the mechanism / with it) (above 0: worse without it) and of the cost difference, with "
             "90% bootstrap intervals.", "",
             "| variant | jobs | median | 90th percentile | worst | answers breaking the rule | median cost "
             "| mean log ratio to the defaults [90%] | mean cost difference [90%] |",
             "|---|---|---|---|---|---|---|---|---|"]
    base = results["defaults"]
    for name, rs in results.items():
        s = lofo.summary(rs)
        if name == "defaults":
            versus = " | "
        else:
            logs, costs = differences(base, rs)
            (llo, lhi), (clo, chi) = lofo.bootstrap(logs, statistics.fmean), lofo.bootstrap(costs, statistics.fmean)
            versus = (f"{statistics.fmean(logs):+.3f} [{llo:+.3f}, {lhi:+.3f}] | "
                      f"{statistics.fmean(costs):+.2f} [{clo:+.2f}, {chi:+.2f}]")
        lines.append(f"| {name} | {s['jobs']} | {s['median']:.2f} | {s['p90']:.2f} | {s['worst']:.2f} | "
                     f"{s['breaking_the_rule']} | {s['median_cost']:.2f} | {versus} |")
    lines += ["", "| job | " + " | ".join(results) + " |", "|---|" + "---|" * len(results)]
    for i, r in enumerate(base):
        cells = []
        for name in results:
            a = results[name][i]
            cells.append(", ".join(f"{x:.2f} ({c['cost']:.1f})" for x, c in zip(a.ratios(), a.answers)))
        lines.append(f"| {r.job} | " + " | ".join(cells) + " |")
    lines += ["", "Per job: the answer's held-out time over the grid's choice (its cost in BSP trainings), per "
              "sampler seed."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
