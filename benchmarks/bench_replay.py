"""A tune replayed on the table against the same tune trained live: the same trials, answer and cost, in
how much of the live tune's wall time.

    python benchmarks/bench_replay.py [--jobs default quarry:0 crest:0 fleet:0] [--table DIR] [--replays 5]

Each job (`default`, or FAMILY:INDEX for job INDEX of baselines/family_FAMILY.yaml) is tuned
with the shipped defaults (`autosync.api.tune`, the `policy` space), each in a storage of its own and with
nothing kept from the tune before (as processes of their own): live; on the table, which trains and stores each
run it lacks (the table filling up, with the cells of a full budget: what building
the table costs for those runs); and on the table again, every run read from it, `--replays` times (their
median: a replay takes about a second, which a busy moment of the machine moves by a fifth). The trials
(number, state, parameters, values, every recorded attribute) and the cache record are compared, and the
wall times printed with their ratios to the live tune's. The issue's goal: one replayed tune at most 1 s.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import optuna

from autosync.api import load_job, quiet_optuna, tune
from autosync.core.family import load_family
from autosync.data import BASELINE_DIR, DEFAULT_JOB_PATH
from autosync.engine.forks import FORKS
from autosync.table import KEPT, Table

from _report import Figures

COMPARED = ("best_policy", "best_value", "search_cost_bsp_trainings", "cost_to_answer_bsp_trainings")


def job_of(name: str):
    if name == "default":
        return load_job(DEFAULT_JOB_PATH)
    family, index = name.split(":")
    return load_family(BASELINE_DIR / f"family_{family}.yaml").job(int(index))


def trials(storage: str) -> list[tuple]:
    (summary,) = optuna.get_all_study_summaries(storage)
    study = optuna.load_study(study_name=summary.study_name, storage=storage)
    return [(t.number, t.state.name, t.params, t.values, {k: v for k, v in t.user_attrs.items() if k != "process"})
            for t in study.get_trials()]


def timed_tune(job, storage: str, table: str | None) -> tuple[object, float]:
    FORKS.clear()  # as a process of its own
    KEPT.clear()
    start = time.perf_counter()
    outcome = tune(job, storage=storage, **({"table": table} if table else {}))
    return outcome, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", nargs="+", default=["default", "quarry:0", "crest:0", "fleet:0"])
    parser.add_argument("--table", default=None, help="the table to fill and replay on (default: a new one)")
    parser.add_argument("--replays", type=int, default=5, help="replayed tunes per job (their median is reported)")
    parser.add_argument("--json", default=None, help="also write the figures here (benchmarks/make_table.py)")
    args = parser.parse_args()
    quiet_optuna()
    work = Path(tempfile.mkdtemp(prefix="bench_replay-"))
    table = args.table or str(work / "table")
    figures = Figures("bench_replay")
    print("| job | trials | same trials | same answer and cost | live | filling | replayed (median) | replayed / live |")
    print("|---|---|---|---|---|---|---|---|")
    for name in args.jobs:
        job = job_of(name)
        runs = {}
        replays = [f"replayed {i}" for i in range(args.replays)]
        for what, on in (("live", None), ("filling", table), *((r, table) for r in replays)):
            url = f"sqlite:///{work / name.replace(':', '-')}-{what.replace(' ', '-')}.db"
            outcome, wall = timed_tune(job, url, on)
            runs[what] = (url, outcome, wall)
        live = trials(runs["live"][0])
        same = all(trials(runs[w][0]) == live for w in ("filling", *replays))
        answers = all(runs[w][1].cache[k] == runs["live"][1].cache[k] for w in ("filling", *replays)
                      for k in COMPARED)
        t_live, t_fill = runs["live"][2], runs["filling"][2]
        t_replay = statistics.median(runs[r][2] for r in replays)
        print(f"| {name} | {len(live)} | {'yes' if same else '**no**'} | {'yes' if answers else '**no**'} | "
              f"{t_live:.1f} s | {t_fill:.1f} s | {t_replay:.2f} s | {t_replay / t_live:.3f}x |")
        figures.add(f"{name}: replayed tune (median of {args.replays})", t_replay, "s", "the live tune", t_replay / t_live, "<= 1 s",
                    t_replay <= 1.0 and same and answers)
    cells = Table(table)
    size = sum(p.stat().st_size for p in Path(table).iterdir())
    print(f"\ntable: {len(cells)} cells, {size / 2 ** 20:.2f} MiB unpacked in {table}")
    figures.write(args.json)
    print(json.dumps({"table": table, "cells": len(cells)}))


if __name__ == "__main__":
    main()
