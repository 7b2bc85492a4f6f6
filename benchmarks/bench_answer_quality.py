"""What a tune's answer is worth: its time against the best of a broad grid of every policy family, both
scored on seeds the tune never searched on.

    python benchmarks/bench_answer_quality.py [--family baselines/family_heldout.yaml] [--count 8]
                                              [--jobs default quick:0 ...] [--space policy] [--trials N]
                                              [--seeds 2] [--seed-offset 100] [--choice-seeds 2] [--out DIR]
                                              [--fresh]
                                              [--grid-only] [--shared-storage] [--md FILE] [--json FILE]

Jobs: the first `--count` jobs of `--family`, or named ones (`--jobs`: `default` is the embedded default
job, `FAMILY:I` job I of baselines/family_FAMILY.yaml). Per job:
- the reference: every policy of `autosync.lattice.lattice_points(n)` (static k = 1..n under
  the four lr rules, ASP, SSP, the DANA family, DBW, B-DBW, LB-BSP, Sync-Switch, compositions), each run
  stopped at the target on the held-out seeds job.seed + 100, + 101 (`--seed-offset`, `--seeds`), cached
  in DIR/cells.jsonl: a re-run trains only what is missing;
- the tune: `autosync.api.tune(job, space)` with the defaults of `autosync tune` (`--trials` changes
  n_trials only, and the race on the policy space refuses it: it takes no trial budget), its storage DIR/studies-<space>/<job>.db (one per job, so no tune transfers from another
  job of the run; `--shared-storage`: one for all, as a user tuning them in turn), reused on a re-run unless
  `--fresh`;
- its answer scored on the same held-out seeds: from its grid twin's cells when it runs exactly like a grid
  policy (the same canonical form), else trained and cached the same way. A held-out seed whose run misses
  the target counts twice the budget, and as a miss;
- the rule the tune answers by: the grid's best is the fastest policy whose final metric at full budget
  stays within `--tolerance` of BSP's over the held-out seeds (`reference_grid.feasible_best`: the fastest
  policies trained to the full budget in order until one keeps it, cached as `...|full` cells), and the
  answer's own final metric is judged the same way; the fastest on time alone is printed beside it;
- the grid as a tuner (`--choice-seeds`, default 2; 0: not run): the grid also runs on the seeds after the
  held-out ones, the policy it would answer with there (its feasible best on them) is scored on the
  held-out seeds like the answer, and its ratio to the grid's best says what choosing costs at all. The
  grid's best on the held-out seeds is the least of a few hundred noisy means on the very seeds it is
  scored on (the winner's curse): no choice made on other seeds, not even the whole grid's, expects 1.0;
Printed per job: the answer, its held-out time, the grid's best (policy, time), their ratio, missed
seeds, the search's cost in BSP trainings (its cache record), wall seconds of the tune (measured when it
ran; a re-run reuses it); then the median and worst ratio, the misses, the median cost, and the same
ratio for fixed policies (no tuning). Every ratio's baseline is the grid measured (or read back) in the
same run. A Markdown table goes to --md (default benchmarks/answer_quality_<family>_<space>.md).
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from autosync.api import quiet_optuna, tune
from autosync.core.job import JobSpec, load_job
from autosync.core.family import load_family
from autosync.catalog import label_of
from autosync.options import TuneOptions
from autosync.experiments.reference_grid import (TOLERANCE, ReferenceGrid, answer_cells, cached_full_budget_finals,
                                                 feasible_best, grid_scores, held_out_seeds, judge,
                                                 score, tune_seeds)
from autosync.lattice import lattice_points
from autosync.experiments.robustness import read_cells, run_grid

from _report import Figures

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
TUNES_FILE = "tunes.json"  # each tune's answer, cost and wall, by job fingerprint and space


def fixed_policies(job: JobSpec) -> dict[str, dict[str, Any]]:
    """Policies a user could run without tuning, each as the grid policy that runs like it on `job` (at
    n = 3, backup k = ceil(3n/4) = 3 is BSP, whose cells the grid holds under BSP): what tuning must beat."""
    from autosync.catalog import make_policy

    n_workers = job.cluster.n_workers
    policies = {"asp:lr_rule=sqrt_staleness": make_policy("asp", {"lr_rule": "sqrt_staleness"}).to_dict(),
                "dana_slim": make_policy("dana_slim").to_dict(),
                "backup:k=ceil(3n/4)": make_policy("backup", {"k": math.ceil(3 * n_workers / 4)}).to_dict()}
    return {label: answer_cells(job, policy) for label, policy in policies.items()}


def jobs_named(names: list[str]) -> list[JobSpec]:
    """`default` or `FAMILY:I` (job I of baselines/family_FAMILY.yaml)."""
    out = []
    for name in names:
        if name == "default":
            out.append(load_job(None))
            continue
        family, index = name.split(":")
        out.append(load_family(REPO / "baselines" / f"family_{family}.yaml").jobs(int(index) + 1)[int(index)])
    return out


def selected_jobs(names: list[str] | None, family_path: str, count: int,
                  out: str | None) -> tuple[str, list[JobSpec], Path]:
    """The jobs a run reads (`--jobs` NAMES, else the family's first COUNT), their set's name and the grid's
    cache folder (`out`, default results/answer_quality/<name>)."""
    if names:
        name, jobs = "jobs", jobs_named(names)
    else:
        family = load_family(family_path)
        name, jobs = family.name, family.jobs(count)
    return name, jobs, Path(out) if out else REPO / "results" / "answer_quality" / name


def grid_choice(job: JobSpec, cells: dict[str, dict[str, Any]], choice_seeds: list[int], seeds: list[int],
                best_time: float, out: Path, tolerance: float) -> tuple[dict[str, Any], float] | None:
    """The policy the grid itself answers with when it chooses on `choice_seeds` (its fastest there that keeps
    the final-metric rule, full-budget runs cached in `out`) and its time on the scoring `seeds` over the grid
    best's `best_time`; None without choice seeds."""
    if not choice_seeds:
        return None
    choice = feasible_best(job, grid_scores(job, cells, choice_seeds),
                           cached_full_budget_finals(job, choice_seeds, cells, out), tolerance)
    return choice.policy, score(job, choice.policy, cells, seeds).time / best_time


def by_seed_list(jobs: list[JobSpec], seeds_of: dict[str, list[int]]) -> dict[tuple[int, ...], list[JobSpec]]:
    """The jobs grouped by their seed list (one grid per list; a job without seeds in none)."""
    groups: dict[tuple[int, ...], list[JobSpec]] = {}
    for job in jobs:
        if seeds_of[job.fingerprint()]:
            groups.setdefault(tuple(seeds_of[job.fingerprint()]), []).append(job)
    return groups


def run_tune(job: JobSpec, space: str, storage: Path, trials: int | None) -> dict[str, Any]:
    """`autosync tune` through the API with the command's defaults; its cache record and wall seconds."""
    storage.parent.mkdir(parents=True, exist_ok=True)
    fields = {"n_trials": trials} if trials is not None else {}
    start = time.perf_counter()
    outcome = tune(job, space, storage=f"sqlite:///{storage}", **fields)
    return {**outcome.cache, "wall_seconds": time.perf_counter() - start, "answered_from_cache": outcome.cached}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", default=str(REPO / "baselines" / "family_heldout.yaml"))
    parser.add_argument("--count", type=int, default=8, help="the family's first COUNT jobs")
    parser.add_argument("--jobs", nargs="+", default=None, help="named jobs instead: default, quick:0, ...")
    parser.add_argument("--space", default="policy")
    parser.add_argument("--trials", type=int, default=None, help="n_trials of the tune (default: tune's own)")
    parser.add_argument("--seeds", type=int, default=2, help="held-out scoring seeds per job")
    parser.add_argument("--seed-offset", type=int, default=100, help="scoring seeds start at job.seed + this")
    parser.add_argument("--choice-seeds", type=int, default=2,
                        help="seeds after the scoring ones that the grid chooses its own answer on (0: none)")
    parser.add_argument("--out", default=None, help="cache folder (default results/answer_quality/<name>)")
    parser.add_argument("--fresh", action="store_true", help="tune again in new storages (the grid stays cached)")
    parser.add_argument("--grid-only", action="store_true", help="run the reference grid only, no tune")
    parser.add_argument("--shared-storage", action="store_true", help="one storage for every job's tune")
    parser.add_argument("--n-jobs", type=int, default=1, help="grid runs in parallel (joblib processes)")
    parser.add_argument("--tolerance", type=float, default=TOLERANCE,
                        help="the final-metric constraint the grid's best must keep (the tune's --tolerance)")
    parser.add_argument("--md", default=None, help="Markdown table (default benchmarks/answer_quality_<name>_<space>.md)")
    parser.add_argument("--json", default=None, help="also write the figures here (benchmarks/make_table.py)")
    args = parser.parse_args()
    quiet_optuna()

    name, jobs, out = selected_jobs(args.jobs, args.family, args.count, args.out)
    out.mkdir(parents=True, exist_ok=True)
    seeds_of = {job.fingerprint(): held_out_seeds(job, args.seeds, args.seed_offset) for job in jobs}
    choice_of = {job.fingerprint(): held_out_seeds(job, args.choice_seeds, args.seed_offset + args.seeds)
                 if args.choice_seeds else [] for job in jobs}
    defaults = TuneOptions()
    for job in jobs:  # the scoring seeds must be ones no tune with these options trains on
        searched = set(tune_seeds(job, defaults.repeats))
        if searched & set(seeds_of[job.fingerprint()] + choice_of[job.fingerprint()]):
            sys.exit(f"--seed-offset {args.seed_offset} scores {job.name} on seeds its tune searches on")

    # 1. the reference grid, per job on its held-out seeds (one seed list when every job has seed 0)
    start = time.perf_counter()
    by_seeds = by_seed_list(jobs, seeds_of)
    grids = [ReferenceGrid(group, list(seeds))
             for seeds, group in [*by_seeds.items(), *by_seed_list(jobs, choice_of).items()]]
    cached = sum(g.finished(read_cells(out)) for g in grids)
    total = sum(len(g.tasks) for g in grids)
    print(f"reference grid: {total} runs ({len(jobs)} jobs x {args.seeds} held-out + {args.choice_seeds} choice "
          f"seeds), {cached} cached in "
          f"{out / 'cells.jsonl'}", flush=True)
    for grid in grids:
        run_grid(grid, out, n_jobs=args.n_jobs)
    grid_wall = time.perf_counter() - start
    print(f"reference grid done in {grid_wall:.0f} s", flush=True)
    if args.grid_only:  # what a tune must beat: each job's grid best, and the fixed policies against it
        cells = read_cells(out)
        for job in jobs:
            seeds = seeds_of[job.fingerprint()]
            scores = grid_scores(job, cells, seeds)
            best = feasible_best(job, scores, cached_full_budget_finals(job, seeds, cells, out), args.tolerance)
            fixed = {label: score(job, p, cells, seeds).time / best.time
                     for label, p in fixed_policies(job).items()}
            choice = grid_choice(job, cells, choice_of[job.fingerprint()], seeds, best.time, out, args.tolerance)
            chose = "" if choice is None else (f"; chosen on seeds {choice_of[job.fingerprint()]} "
                                                f"{label_of(choice[0])} {choice[1]:.2f}x")
            print(f"{job.name} (n={job.cluster.n_workers}): grid best {label_of(best.policy)} {best.time:.1f} s "
                  f"(fastest on time alone {label_of(scores[0].policy)} {scores[0].time:.1f} s); "
                  + ", ".join(f"{label} {ratio:.2f}x" for label, ratio in fixed.items()) + chose, flush=True)
        return

    # 2. the tunes, as a user runs them (cached: their records in tunes.json, their studies beside it)
    tunes_path = out / TUNES_FILE
    tunes = {} if args.fresh or not tunes_path.exists() else json.loads(tunes_path.read_text())
    studies = out / f"studies-{args.space}"
    if args.fresh and studies.exists():
        shutil.rmtree(studies)
    for job in jobs:
        key = f"{job.fingerprint()}/{args.space}/{args.trials}"
        if key not in tunes:
            storage = studies / ("shared.db" if args.shared_storage else f"{job.name}.db")
            tunes[key] = run_tune(job, args.space, storage, args.trials)
            tunes_path.write_text(json.dumps(tunes, indent=1, sort_keys=True))
            print(f"{job.name}: tuned in {tunes[key]['wall_seconds']:.0f} s", flush=True)

    # 3. each answer on the held-out seeds (from its grid twin's cells, else trained beside the grid)
    answers = {job.fingerprint(): tunes[f"{job.fingerprint()}/{args.space}/{args.trials}"]["best_policy"]
               for job in jobs}
    for seeds, group in by_seeds.items():
        extra = {j.fingerprint(): [answers[j.fingerprint()]] for j in group
                 if answer_cells(j, answers[j.fingerprint()]) is answers[j.fingerprint()]}
        if extra:
            run_grid(ReferenceGrid(group, list(seeds), extra=extra, policies=lambda n: []), out, n_jobs=args.n_jobs)
    cells = read_cells(out)

    # 4. the table
    rows = []
    for job in jobs:
        fp = job.fingerprint()
        record = tunes[f"{fp}/{args.space}/{args.trials}"]
        judged = judge(job, answers[fp], cells, seeds_of[fp], finals=cached_full_budget_finals(job, seeds_of[fp], cells, out),
                       tolerance=args.tolerance)
        fixed = {label: score(job, p, cells, seeds_of[fp]).time / judged.best.time
                 for label, p in fixed_policies(job).items()}
        choice = grid_choice(job, cells, choice_of[fp], seeds_of[fp], judged.best.time, out, args.tolerance)
        rows.append({"job": job.name, "n": job.cluster.n_workers, "answer": label_of(judged.answer.policy),
                     "answer_time": judged.answer.time, "missed": judged.answer.missed,
                     "best": label_of(judged.best.policy), "best_time": judged.best.time, "ratio": judged.ratio,
                     "fastest": label_of(judged.fastest.policy), "fastest_time": judged.fastest.time,
                     "keeps": judged.answer_keeps,
                     "cost": record.get("search_cost_bsp_trainings"), "wall": record.get("wall_seconds"),
                     "fixed": fixed, "grid_size": len(lattice_points(job.cluster.n_workers)),
                     "choice": None if choice is None else label_of(choice[0]),
                     "choice_ratio": None if choice is None else choice[1],
                     "best_family": {f: label_of(s.policy) for f, s in judged.families.items()}})
        r = rows[-1]
        print(f"{r['job']} (n={r['n']}): answer {r['answer']} {r['answer_time']:.1f} s held out"
              f"{' (missed seeds ' + str(r['missed']) + ')' if r['missed'] else ''}"
              f"{'' if r['keeps'] else ' (ends short of BSP final metric held out)'}; grid best {r['best']} "
              f"{r['best_time']:.1f} s (on time alone {r['fastest']} {r['fastest_time']:.1f} s); ratio "
              f"{r['ratio']:.2f}; the grid's own choice {r['choice']} {_num(r['choice_ratio'])}; "
              f"cost {_num(r['cost'])} BSP trainings; "
              f"tune wall {_num(r['wall'], '{:.0f}')} s", flush=True)
    ratios = [r["ratio"] for r in rows]
    misses = sum(len(r["missed"]) for r in rows)
    costs = [r["cost"] for r in rows if r["cost"] is not None]
    chosen = [r["choice_ratio"] for r in rows if r["choice_ratio"] is not None]
    summary = {"median_ratio": statistics.median(ratios), "worst_ratio": max(ratios), "missed_seeds": misses,
               "choice": (statistics.median(chosen), max(chosen)) if chosen else None,
               "median_cost": statistics.median(costs) if costs else None,
               "fixed": {label: (statistics.median(r["fixed"][label] for r in rows),
                                 max(r["fixed"][label] for r in rows)) for label in rows[0]["fixed"]}}
    print(f"{args.space} tune over {len(rows)} jobs: ratio to the grid's best median {summary['median_ratio']:.2f}, "
          f"worst {summary['worst_ratio']:.2f}; {misses} missed held-out seeds; median cost "
          f"{_num(summary['median_cost'])} BSP trainings")
    if summary["choice"]:
        print(f"the grid's own choice on {args.choice_seeds} other seeds: ratio median {summary['choice'][0]:.2f}, "
              f"worst {summary['choice'][1]:.2f}")
    for label, (median, worst) in summary["fixed"].items():
        print(f"fixed {label}: ratio median {median:.2f}, worst {worst:.2f}")
    shown = [a for i, a in enumerate(sys.argv[1:]) if a != "--json" and not a.startswith("--json=")
             and sys.argv[i] != "--json"]
    command = " ".join(["python benchmarks/bench_answer_quality.py", *map(shlex.quote, shown)])  # --json: a copy
    md = Path(args.md) if args.md else HERE / f"answer_quality_{name}_{args.space}.md"
    write_markdown(md, command, rows, summary, args, out)
    print(f"wrote {md}")
    figures = Figures("bench_answer_quality")
    label = f"tune {args.space} on {name} ({len(rows)} jobs, held-out seeds)"
    figures.add(f"{label}: answer's time, median", summary["median_ratio"], "x the grid's best",
                "the broad reference grid's best", summary["median_ratio"], "<= 1.05", summary["median_ratio"] <= 1.05)
    figures.add(f"{label}: answer's time, worst", summary["worst_ratio"], "x the grid's best",
                "the broad reference grid's best", summary["worst_ratio"], "<= 1.3", summary["worst_ratio"] <= 1.3)
    if summary["choice"]:
        figures.add(f"{label}: the grid's own choice on {args.choice_seeds} other seeds, median",
                    summary["choice"][0], "x the grid's best", "the broad reference grid's best", summary["choice"][0])
    figures.add(f"{label}: missed held-out seeds", misses, "runs", None, None, "0", misses == 0)
    if costs:
        figures.add(f"{label}: search cost, median", summary["median_cost"], "BSP trainings", None, None, "<= 4",
                    summary["median_cost"] <= 4)
    figures.write(args.json)


def _num(value: float | None, fmt: str = "{:.2f}") -> str:
    return "-" if value is None else fmt.format(value)


def write_markdown(path: Path, command: str, rows: list[dict[str, Any]], summary: dict[str, Any],
                   args: argparse.Namespace, out: Path) -> None:
    """The per-job table and the summary, headed by the command that wrote them."""
    fixed = list(summary["fixed"])
    lines = [f"# Answer quality: `{args.space}` tune against the broad reference grid", "",
             f"Written by `{command}`.", "",
             f"Held-out seeds: job.seed + {args.seed_offset} .. + {args.seed_offset + args.seeds - 1} (the tune "
             "searches on job.seed and the next seeds); a missed target counts twice the budget. Grid best: the "
             "grid's fastest policy whose final metric at full budget stays within "
             f"{args.tolerance} of BSP's on those seeds (the tune's rule); on time alone: the fastest whatever "
             "its final metric. Ratio: the answer's mean time over the grid best's. Keeps: whether the answer's "
             "own final metric keeps that rule on the held-out seeds. Grid's choice: the policy the grid itself "
             f"answers with on {args.choice_seeds} other seeds (job.seed + {args.seed_offset + args.seeds} ..), "
             "scored like the answer: the ratio of a choice made on other seeds by the whole grid (the grid best "
             "is the least of a few hundred noisy means on the seeds it is scored on). Cost: the tune's search "
             f"cost in BSP trainings. Grid runs cached in `{out.relative_to(REPO) if out.is_relative_to(REPO) else out}`.",
             "",
             "| job | n | grid | answer | held-out time | missed | keeps | grid best | its time | ratio | "
             "grid's choice | its ratio | on time alone | its time | cost | tune wall (s) | " + " | ".join(fixed) + " |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|" + "---|" * len(fixed)]
    for r in rows:
        lines.append(f"| {r['job']} | {r['n']} | {r['grid_size']} | `{r['answer']}` | {r['answer_time']:.1f} | "
                     f"{len(r['missed'])} | {'yes' if r['keeps'] else 'no'} | `{r['best']}` | {r['best_time']:.1f} | "
                     f"{r['ratio']:.2f} | {'-' if r['choice'] is None else '`' + r['choice'] + '`'} | "
                     f"{_num(r['choice_ratio'])} | `{r['fastest']}` | {r['fastest_time']:.1f} | "
                     f"{_num(r['cost'])} | {_num(r['wall'], '{:.0f}')} | " + " | ".join(f"{r['fixed'][f]:.2f}" for f in fixed) + " |")
    lines += ["", f"Median ratio {summary['median_ratio']:.2f} (goal <= 1.05), worst {summary['worst_ratio']:.2f} "
              f"(goal <= 1.3), {summary['missed_seeds']} missed held-out seeds (goal 0), median cost "
              f"{_num(summary['median_cost'])} BSP trainings (goal <= 4)."
              + ("" if not summary["choice"] else f" The grid's own choice on other seeds: median ratio "
                 f"{summary['choice'][0]:.2f}, worst {summary['choice'][1]:.2f}."), "",
              "| fixed policy (no tune) | median ratio | worst ratio |", "|---|---|---|"]
    lines += [f"| `{label}` | {m:.2f} | {w:.2f} |" for label, (m, w) in summary["fixed"].items()]
    path.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
