"""What the command line prints, as rich renderables: each report is a list of `Line`s that `autosync.cli`
prints in order on stdout, so the command line holds no rendering of its own and a report can be tested
without running a command.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autosync.core import strict_json
from autosync.reporting.leaderboard_files import leaderboard_columns, printed_columns
from autosync.reporting.output import format_cell, times_faster
from autosync.reporting.robustness_files import SUMMARY_COLUMNS, SUMMARY_WIDE, comparison_cells, comparison_header
from autosync.reporting.tables import Column, fitted
from autosync.search.cost import COST_UNIT
from autosync.search.study.storage import DEFAULT_STORAGE, redact_url
from autosync.workloads.user_code import imported_from


@dataclass(frozen=True)
class Line:
    """One thing to print: a string (rich markup) or a table, with a rich style."""

    what: Any
    style: str | None = None


Printed = Line

# Every verdict the command line prints, as the words it prints, and the module whose text prints them:
# docs/troubleshooting.md explains each, with its cause and its fix (tests/e2e/test_docs.py holds both).
VERDICTS = {
    "cache hit": __name__,
    "no cached policy for job": "autosync.search.study.cache",
    "not sure": __name__,
    "it does not beat BSP, so it never pays off": __name__,
    "missed the target on": __name__,
    "not the simulated winner": __name__,
    "no candidate kept the final-metric constraint for real": __name__,
    "does not fit": __name__,
    "no prediction of its time": __name__,
    "the simulation does not fit the real runs": "autosync.measure.calibration",
    "final parameters differ from the logged run": __name__,
    "corrupt cache entry": __name__,
    "no cached study": __name__,
    "no trial met the target within tolerance": "autosync.search.study.cache",
    "BSP itself fails on this job": "autosync.search.tune",
}


def count(n: int, noun: str) -> str:
    """"3 trials", "1 trial"."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def fmt(x: Any, digits: int = 4) -> str:
    """A number with `digits` decimals, "-" for none."""
    return "-" if x is None else f"{x:.{digits}f}"


def policy_label(policy: dict[str, Any]) -> str:
    """backup(k=3): a policy as the tables name it."""
    from autosync.catalog import label_of  # not at the top: numpy, which --help does not load

    return label_of(policy)


def run_summary(result: Any) -> list[Printed]:
    """One run's metrics table (`autosync run`)."""
    out: list[Printed] = []
    m = result.metrics
    ttt = m["time_to_target"]
    rows = [
        (f"time to {m['target_metric']} {'<=' if m['target_metric'] != 'test_accuracy' else '>='} "
         f"{m['target_threshold']}", f"{ttt:.2f} s" if ttt is not None else "not reached"),
        ("updates to target", str(m["updates_to_target"]) if m["updates_to_target"] is not None else "-"),
        ("final training loss", fmt(m["final_train_loss"])),
        ("final test loss", fmt(m["final_test_loss"])),
        ("final test accuracy", fmt(m["final_test_accuracy"])),
        ("updates", str(m["updates"])),
        ("virtual time", f"{m['virtual_time']:.2f} s"),
        ("updates per virtual second", f"{m['updates_per_virtual_second']:.3f}"),
        ("gradients discarded", f"{m['gradients_discarded']} of {m['gradients_arrived']}"),
        ("wall time", f"{result.wall_seconds:.2f} s"),
    ]
    out.append(Line(fitted(f"{result.job_name} - {result.policy['policy']} {result.policy['params'] or ''} "
                           f"seed {result.seed} ({result.status})", (Column("metric", text=True), Column("value")),
                           rows)))
    return out


def fitted_compute(cluster: dict) -> str:
    """The fitted compute of a profile, in one phrase: per worker, or per compute unit that workers share."""
    units = cluster.get("compute_units")
    if units is not None:
        speeds = units["speed_factors"]
        return (f"{units['count']} compute units shared by the workers (worker w on unit w % {units['count']}), "
                f"each {units['compute']}, speed factors {min(speeds):.3f}..{max(speeds):.3f}")
    speeds = cluster["speed_factors"]
    return (f"compute {cluster['compute']}, communication {1e3 * cluster['communication_seconds']:.2f} ms, "
            f"speed factors {min(speeds):.3f}..{max(speeds):.3f}")


def calibration_report(calibration: Any) -> list[Printed]:
    """Each real run beside its simulation, before and (with a fit) after, the fitted costs and the verdict."""
    out: list[Printed] = []
    columns = [Column(h, text=h == "run") for h in ("run", "real s", "simulated s", "real / sim",
                                                     *(("fitted sim s", "real / fitted") if calibration.after else ()))]
    rows = []
    for i, run in enumerate(calibration.before):
        after = calibration.after[i] if calibration.after else None
        rows.append((run.name, f"{run.real_seconds:.3f}", f"{run.simulated_seconds:.3f}", run.ratio_text,
                     *((f"{after.simulated_seconds:.3f}", after.ratio_text) if after else ())))
    out.append(Line(fitted(f"simulation against real runs of {calibration.updates} updates", columns, rows)))
    if calibration.server is not None:
        out.append(Line(f"server costs fitted from the two runs (the profile alone cannot separate them): "
                        f"{1e3 * calibration.server['apply_seconds']:.3f} ms per update, "
                        f"{1e3 * calibration.server['gradient_seconds']:.3f} ms per gradient (job seconds)"
                        + (f"; the compute units' times x {calibration.server['units_factor']:.3g}"
                           if "units_factor" in calibration.server else "")))
    if calibration.units is not None:
        units = calibration.units
        out.append(Line(f"the workers share {units['count']} compute units (the worker processes), timed at "
                        f"{units['compute']} job seconds per task, speed factors {units['speed_factors']}"))
    out.append(Line(calibration.verdict()))
    return out


def jobs_table(title: str, facts: list[dict[str, Any]]) -> list[Printed]:
    """A family's drawn jobs, one row each (`autosync family`)."""
    columns = (Column("job", text=True), Column("n"), Column("round trips", text=True), Column("slow workers"),
               Column("slowdowns"), Column("workload", text=True), Column("momentum"), Column("fingerprint", wide=True))
    rows = [(f["job"], f["n_workers"], f["round_trip"], f"{f['slow_workers']} (up to {f['speed_spread']:.1f}x slower)",
             f["slowdowns"], f["workload"], f"{f['momentum']:g}", f["fingerprint"]) for f in facts]
    return [Line(fitted(title, columns, rows))]


def reuse_line(reused: int, total: int, cells: Any) -> str:
    """`autosync robustness` or `autosync leaderboard` resuming: how many of its runs it reads back, and from
    where."""
    return f"reusing {reused} of {total} finished runs from {cells}"


def resume_line(found: int, requeued: list[int]) -> str:
    """What a tune found of an earlier, interrupted search of the same study."""
    dead = (f"; {count(len(requeued), 'trial')} whose process died "
            f"({', '.join(f'#{n}' for n in requeued)}) re-queued") if requeued else ""
    waiting = "".join(f"; waiting {line}"
                      for line in getattr(requeued, "waiting", []))
    reference = " and BSP's reference runs" if getattr(requeued, "reference", False) else ""
    return f"resuming the study: {count(found, 'finished trial')} of the budget{reference} found{dead}{waiting}"


def breakdown_line(b: dict[str, int]) -> str:
    """Where a search's cost went: the record's `search_breakdown` in words."""
    answered = b["answered_by_equivalent"]
    return (f"Of its trials, {b['stopped_at_target']} stopped at the target, {answered} "
            f"{'was' if answered == 1 else 'were'} answered by an equivalent policy's result without training"
            + f", {b['pruned']} {'was' if b['pruned'] == 1 else 'were'} pruned"
            + pruned_how(b)
            + (f", {b['forked_trials']} continued from another switch point's run (its prefix, forked)"
               if b.get("forked_trials") else "") + "; "
            + (f"{count(b['full_budget_checks'], 'check')} to BSP's time to target ({b['checked_at']:.1f} virtual s, "
               "--constraint-at bsp-target)" if b.get("checked_at") is not None
               else count(b['full_budget_checks'], 'full-budget check')) + " of the candidates that could win"
            + (f", {b['forked_checks']} of them continued from the run stopped at the target (forked)"
               if b.get("forked_checks") else "")
            + (f", {count(len(b['unchecked']), 'faster candidate')} left unchecked" if b.get("unchecked") else "")
            + "."
            + (f" A candidate that failed its check was moved towards BSP: {_repairs(b['repairs'])} ran as "
               "candidates (repairs)." if b.get("repairs") else "")
            + (f" The search stopped improving ({count(b['patience'] or 0, 'trial')} in a row found nothing "
               f"faster), so {count(b['given_up'], 'queued trial')} of the budget "
               f"{'was' if b['given_up'] == 1 else 'were'} not run (--patience {b['patience']}; --patience 0 "
               "runs the whole budget)." if b.get("given_up") else ""))


def _repairs(repairs: list[dict[str, Any]]) -> str:
    """The repairs' policies with every parameter (a repair may change only the learning-rate rule, which a
    label leaves out at its default), joined."""
    from autosync.catalog import label_of  # not at the top: numpy, which --help does not load

    return " and ".join(label_of(r["policy"], every=True) if isinstance(r.get("policy"), dict) else "?"
                        for r in repairs)


def unchecked_line(unchecked: list[dict[str, Any]], checks: int, metric: str) -> str:
    """The candidates faster than the answer that the bounded full-budget checks did not reach
    (`autosync.search.strategies.full_budget.MAX_CHECKS`): the answer is not sure to be the fastest that keeps
    BSP's final metric."""
    return (f"not sure: the full-budget checks stop after {checks}; {count(len(unchecked), 'faster candidate')}, "
            f"fastest {_fastest(unchecked)}, {'was' if len(unchecked) == 1 else 'were'} not checked, so the answer "
            f"is the fastest known to keep BSP's final {metric}.")


def _fastest(rows: list[dict[str, Any]]) -> str:
    """The first of recorded candidate rows, named, with its time to target where known."""
    first = rows[0]
    policy = policy_label(first["policy"]) if isinstance(first.get("policy"), dict) else f"trial {first['trial']}"
    return policy + (f" ({first['time_to_target']:.2f} s)" if isinstance(first.get("time_to_target"), (int, float))
                     else "")


def pruned_how(b: dict[str, int]) -> str:
    """' (P on their pace)': how many of the pruned trials were pruned on their pace."""
    return f" ({b['pruned_on_pace']} on their pace)" if b.get("pruned_on_pace") else ""


def neighbours_line(near: list[dict[str, Any]], cost_to_answer: float | None) -> str:
    """The tuned jobs a search started from (a transfer) and what finding the answer cost."""
    jobs = "; ".join(f"{nb['job']} (distance {nb['distance']:.2f}): {policy_label(nb['policy'])}" for nb in near)
    cost = f"; the answer was found after {cost_to_answer:.2f} BSP trainings" if cost_to_answer is not None else ""
    return f"Started from the winners of {count(len(near), 'tuned neighbour job')}: {jobs}{cost}."


def _others_line(roles: dict[str, int]) -> str:
    """The study's trials that are not of the budget, by their role (the user attribute `role` the
    dashboard shows), or nothing where it holds none."""
    others = {role: n for role, n in roles.items() if role != "budget"}
    if not others:
        return ""
    listed = ", ".join(count(n, role) if role in ("check", "repair") else f"{n} {role.replace('_', ' ')}"
                       for role, n in others.items())
    return (f"; the study's other {count(sum(others.values()), 'trial')} ({listed}) are the search's own, "
            "marked by their user attribute role")


def tune_report(outcome: Any, spec: Any) -> list[Printed]:
    """What `autosync tune` found or re-used: the study, the best policies, the answer against BSP with its
    cost, where the cost went, the neighbours it started from, faster spaces."""
    out: list[Printed] = []
    c = outcome.cache
    label = policy_label(c["best_policy"])
    if outcome.cached:
        out.append(Line(f"[bold]cache hit[/bold]: study {outcome.study_name} finished {c['finished_at']} after "
                        f"{c['trials']} trials (autosync {c['autosync_version']}, sampler {c['sampler']}); "
                        "no new trial. " + ("`autosync cache clear` the job to race again (the race runs the same "
                                            "runs on the same seeds)." if isinstance(c.get("race"), dict)
                                            else "Use --refresh to search again.")))
    else:
        out.append(Line(f"study {outcome.study_name}: {count(outcome.new_trials, 'trial')} run by this command, "
                        f"{c['trials']} in all" + _others_line(getattr(outcome, "roles", {}))))
    if isinstance(c.get("race"), dict):
        out += race_report(c["race"], spec)
    else:
        columns = (Column("trial"), Column("policy", text=True), Column("time (s)"), Column("final"),
                   Column("reached"))
        out.append(Line(fitted(f"{spec.name}: best policies (time to {spec.target.metric} {spec.target.threshold})",
                               columns, ((row["trial"], policy_label(row["policy"]), f"{row['time_to_target']:.2f}",
                                          fmt(row["final_metric"]), f"{row['reached']}/{row['runs']}")
                                         for row in outcome.top))))
    amortize, speedup = c["recurrences_to_amortize"], c.get("speedup_vs_bsp")
    cost = c.get("search_cost_bsp_trainings")
    out.append(Line(
        f"best: [bold]{label}[/bold], {_timed(c['best_value'], c.get('best_reached'), c.get('best_runs'), ' to target')}"
        f" vs BSP {_timed(c['bsp_time_to_target'], c.get('bsp_reached'), c.get('bsp_runs'))}"
        + (f" ({times_faster(speedup, 'BSP')})" if speedup is not None else "")
        + f". Search cost: {fmt(cost, 2)} {c.get('search_cost_unit', 'BSP trainings')}; "
        + (f"pays for itself after {amortize} recurrences." if amortize
           else "it does not beat BSP, so it never pays off." if speedup is not None
           else "with a miss there is no saving over BSP to repay it.")))
    if isinstance(b := c.get("search_breakdown"), dict) and "race" not in c:
        out.append(Line(breakdown_line(b), style="dim"))
        if b.get("unchecked"):
            out.append(Line(unchecked_line(b["unchecked"], b["full_budget_checks"], spec.target.metric)))
    if c.get("neighbour_jobs"):
        out.append(Line(neighbours_line(c["neighbour_jobs"], c.get("cost_to_answer_bsp_trainings")), style="dim"))
    for other in outcome.faster_elsewhere:
        out.append(Line(f"on this job the {other['space']} space answered {policy_label(other['policy'])} at "
                        f"{other['time']:.2f} s, {other['times_faster']:.2f}x faster than this space's answer: "
                        f"autosync tune {_job_argument(spec)}--space {shlex.quote(str(other['space']))}"))
    return out


def _timed(seconds: float, reached: int | None, runs: int | None, what: str = "") -> str:
    """A time to the target ('12.30 s' and `what`), or, where a run missed it on some seed, on how many, with
    the score that ranked it (a miss counts `policy_score.MISS_PENALTY` times the seconds it ran)."""
    if reached is None or reached == runs:
        return f"{seconds:.2f} s{what}"
    return f"missed the target on {runs - reached} of {count(runs, 'seed')} (scored {seconds:.2f} s: a miss counts " \
           "twice the seconds it ran)"


def _race_verdict(answer: str, checked: list[str], tried: list[str]) -> str:
    """Why the race answers `answer`: a finalist kept BSP's final metric (`checked`, in order), or none did
    and its round towards BSP (`tried`: the static k bisected, in order; empty: it did not run) decided."""
    if not checked and not tried:
        return "the fastest candidate is BSP: nothing to check"
    if answer in checked:
        faster = checked.index(answer)
        return ("the fastest finalist kept it" if not faster
                else f"the {count(faster, 'faster finalist')} broke it, the next kept it")
    if not tried:
        return "none kept it, so the answer is BSP"
    why = ("the fewest workers that kept it are the answer" if answer in tried
           else "none that kept it was faster than BSP, so the answer is BSP")
    # no finalist at all: every candidate was stopped on a seed, or --budget skipped the rounds that race them
    lead = "none kept it" if checked else "no candidate was left to check (each stopped on a seed, or the " \
                                          "budget skipped the rounds that race them)"
    return f"{lead}; static k at BSP's learning rate, bisected towards BSP ({len(tried)} tried): {why}"


def race_report(race: dict[str, Any], spec: Any) -> list[Printed]:
    """The race's runs (`autosync.search.race_trials.rounds`): by round, the seed each ran on and whether that
    seed was new to the candidate, its time to the target or where it was stopped, and the finalists' final
    metrics; whether its --budget cut it short; then the answer and why."""
    columns = (Column("round", text=True), Column("seed", text=True), Column("policy", text=True),
               Column("time (s)"), Column(f"final {spec.target.metric}"))
    rows = [(r["round"], f"{r['seed']}" + (" (new)" if x["new_seed"] else " (again)" if x.get("again") else ""),
             policy_label(x["policy"]) if "policy" in x else x["label"],
             "stopped" if x["time"] is None else "missed" if x.get("missed") else f"{x['time']:.2f}",
             fmt(x["final"], 4) if "final" in x else "") for r in race["rounds"] for x in r["runs"]]
    out: list[Printed] = [Line(fitted("the race: each candidate compared with the others on the seeds they all ran "
                                      "(a seed is new to a candidate the first time it runs there; stopped: past "
                                      "the round's margin of its fastest; missed: ran to its end short of the target, "
                                      "scored at twice that)", columns, rows))]
    checked = race.get("checked") or []
    verdict = _race_verdict(race["answer"], checked, race.get("towards_bsp") or [])
    if cut := race.get("cut_short"):
        out.append(Line(f"the budget of {race['budget']:g} BSP trainings was spent before the race's "
                        f"{' and '.join(cut)}: it skipped {'them' if len(cut) > 1 else 'it'} and went to the "
                        "final-metric check, its candidates ranked on the seeds they all ran."))
    out.append(Line(f"final metric checked for {count(len(checked), 'finalist')} on both seeds against BSP's "
                    f"(a paired test: the mean difference within the tolerance, or within BSP's own spread between "
                    f"the seeds where that is wider): {verdict}.", style="dim"))
    return out


def verification_report(v: Any) -> list[Printed]:
    """The candidates re-run on a real backend beside their simulation, and what the cache answers with."""
    out: list[Printed] = []
    columns = [Column(h, text=h == "policy")
               for h in ("policy", "simulated s", "real s", "real / sim", "real final", "feasible")]
    rows = [(policy_label(r["policy"]), fmt(r["simulated_time"], 1), fmt(r["real_time"], 1),
             fmt(r["real_over_simulated"], 2), fmt(r["real_final_metric"], 3), "yes" if r["real_feasible"] else "no")
            for r in v.rows]
    out.append(Line(fitted(f"simulation verified on {v.execution['backend']} ({v.execution.get('clock', 'virtual')} "
                           f"clock), seeds {v.seeds}", columns, rows)))
    tau = "-" if v.kendall_tau is None else f"{v.kendall_tau:.2f}"
    winner = policy_label(v.real_winner) if v.real_winner else "none feasible"
    out.append(Line(f"Kendall's tau {tau}; real winner {winner} "
                    f"({'the simulated winner too' if v.same_winner else 'not the simulated winner'})"))
    answer = v.answer()
    if answer is None:
        out.append(Line("no candidate kept the final-metric constraint for real: the cache keeps the search's best"))
        return out
    speedup = lambda x: "-" if x is None else times_faster(x, "BSP")  # noqa: E731
    out.append(Line(f"the cache answers with [bold]{policy_label(answer['policy'])}[/bold]: real "
                    f"{fmt(answer['real_time'], 2)} s vs BSP {fmt(answer['bsp_real_time'], 2)} s "
                    f"({speedup(answer['real_speedup'])} on the real clock); simulated "
                    f"{fmt(answer['simulated_time'], 2)} s vs BSP {fmt(answer['bsp_simulated_time'], 2)} s "
                    f"({speedup(answer['simulated_speedup'])})"))
    return out


def profile_report(found: Any, job_name: str, device: str) -> list[Printed]:
    """The timed rounds per batch size and the fitted cluster model (`autosync profile`)."""
    cluster, server = found.cluster, found.server
    columns = [Column(h) for h in ("batch size", "compute (mean)", "round trip (mean)", "round trip (p90)")]
    rows = [(b, *(f"{1e3 * seconds:.2f} ms" for seconds in (compute, trip, trip_p90)))
            for b, compute, trip, trip_p90 in found.rows()]
    return [Line(fitted(f"{job_name}: measured on {device} with {found.workers}", columns, rows)),
            Line(f"fitted: {fitted_compute(cluster)}; server: update {1e3 * server.apply_seconds:.3f} ms, "
                 f"parameters moved at {server.bandwidth / 1e6:.1f} MB/s")]


def leaderboard_report(spec: Any, seeds: int, rows: list[dict[str, Any]]) -> list[Printed]:
    """The scored leaderboard as one table (`autosync leaderboard`)."""
    keys = leaderboard_columns()  # score() compares with BSP
    printed = printed_columns(spec.target.metric)
    columns = [Column(header, text=key == "policy", wide=key not in printed) for key, header, _ in keys]
    return [Line(fitted(f"{spec.name}: {seeds} seeds, target {spec.target.metric} {spec.target.threshold}", columns,
                        ([format_cell(r.get(k), f) for k, _, f in keys] for r in rows)))]


def scaling_report(result: Any, metric: str) -> list[Printed]:
    """A metric per policy against the number of workers (`autosync scaling`)."""
    columns = [Column("policy", text=True), *(Column(f"n = {n}") for n in result.worker_counts)]
    return [Line(fitted(f"{metric}: mean ± std over seeds", columns,
                        ((policy, *cells) for policy, cells in result.rows())))]


def robustness_report(found: Any, jobs: int, seeds: int) -> list[Printed]:
    """A family's regret summary against the best static k (`autosync robustness`)."""
    columns = [Column(header, text=key == "policy", wide=key in SUMMARY_WIDE) for key, header, _ in SUMMARY_COLUMNS]
    rows = ([format_cell(row.get(k), f) for k, _, f in SUMMARY_COLUMNS] for row in found.result["summary"])
    return [Line(fitted(f"family {found.family}: {jobs} jobs x {seeds} seeds, regret (time as a multiple of the "
                        "best static k's)", columns, rows))]


def replay_report(found: Any, logs: Any, simulations: int) -> list[Printed]:
    """Each switch-point search strategy's cost and success on recorded runs (`autosync replay`)."""
    columns = (Column("strategy", text=True), Column("setting", text=True), Column(f"cost ({COST_UNIT})"),
               Column("success"), Column("same as full info"), Column("valid"))
    return [Line(fitted(f"switch-point search on {logs} ({simulations} simulated searches each)", columns,
                        ((r.strategy, r.setting, f"{r.mean_cost:.2f}", f"{r.success:.1%}",
                          f"{r.same_as_full_information:.1%}", f"{r.valid:.1%}") for r in found.rows)))]


def recommendation_report(answer: Any, spec: Any) -> list[Printed]:
    """The nearest tuned jobs, their votes, and the policy recommended without training (`autosync recommend`)."""
    columns = (Column("job", text=True), Column("distance"), Column("same workload"),
               Column("its winner here", text=True), Column("weight"))
    table = fitted(f"{spec.name}: the nearest tuned jobs", columns,
                   ((nb["job"], f"{nb['distance']:.2f}", "yes" if nb["same_workload"] else "no",
                     policy_label(nb["policy"]) if nb["policy"] else "does not fit", f"{nb['weight']:.2f}")
                    for nb in answer.neighbours))
    target = f"{spec.target.metric} {spec.target.threshold}"
    if answer.predicted_time is not None:
        prediction = (f"predicted {answer.predicted_time:.1f} s to {target} vs BSP {answer.predicted_bsp_time:.1f} s "
                      f"({times_faster(answer.predicted_speedup, 'BSP')})")
    elif answer.predicted_speedup is not None:  # a speedup: BSP's time over the policy's, not a share of BSP's time
        prediction = f"predicted {times_faster(answer.predicted_speedup, 'BSP')} to target (from another workload)"
    else:
        prediction = ("no prediction of its time (no neighbour that voted for it has a speedup over BSP: BSP missed "
                      "the target there)")
    return [Line(table), Line(f"recommended: [bold]{policy_label(answer.policy)}[/bold], {prediction}. Nothing was "
                              "trained: `autosync tune` checks it (and starts from these jobs' winners).")]


def cache_report(studies: list[dict[str, Any]], where: str) -> list[Printed]:
    """Every cached study: job, trials, best policy and score (`autosync cache list`); a line saying there is
    none in an empty storage."""
    if not studies:
        return [Line(f"no cached study in {where}")]
    rows = []
    for s in studies:
        c = s["cache"] if isinstance(s["cache"], dict) else {}
        best = policy_label(c["best_policy"]) if isinstance(c.get("best_policy"), dict) else "(unfinished)"
        value = f"{c['best_value']:.2f}" if isinstance(c.get("best_value"), (int, float)) else "-"
        rows.append((s["study"], c.get("job_name", "-"), s["trials"], best, value, c.get("finished_at", "-")))
    columns = (Column("study", text=True), Column("job", text=True), Column("trials"),
               Column("best policy", text=True), Column("time to\ntarget (s)"), Column("finished", wide=True))
    return [Line(fitted(f"cache: {where}", columns, rows))]


def cache_show_report(studies: list[dict[str, Any]], spec: Any, where: str) -> list[Printed]:
    """The cached studies of one job, each with its cache record as JSON (`autosync cache show`)."""
    if not studies:
        return [Line(f"no cached study for job {spec.name} (fingerprint {spec.fingerprint()}) in {where}")]
    out: list[Printed] = []
    for s in studies:
        out.append(Line(f"[bold]{s['study']}[/bold] ({s['trials']} trials)"))
        out.append(Line(strict_json.dumps(s["cache"], indent=2) if s["cache"] is not None else "  not finished yet"))
    return out


def rerun_report(outcome: Any) -> list[Printed]:
    """A replayed run against the logged one (`autosync rerun`): every decision matched, and whether the
    final parameters did (with a GPU on either side some CUDA kernels sum in a run-dependent order)."""
    trace = outcome.result.trace
    out = [Line(f"replayed {len(trace.arrivals)} arrivals and {len(trace.updates)} updates: every dispatch and "
                "decision as logged")]
    if outcome.identical:
        return [*out, Line("final parameters: bit-identical to the logged run")]
    out.append(Line(f"final parameters differ from the logged run: max |difference| "
                    f"{outcome.max_abs_difference:.3g}", style="yellow"))
    if not outcome.bit_reproducible:
        out.append(Line("(expected with a GPU on either side: some CUDA kernels sum in a run-dependent order; every "
                        "decision matched)"))
    return out


def policies_report() -> list[Printed]:
    """Every policy with its paper's name, parameters and defaults (`autosync policies`)."""
    import inspect

    from autosync.catalog import POLICIES, policy_parameters  # not at the top: numpy, which --help does not load

    columns = (Column("name", text=True), Column("papers' name", text=True), Column("parameters (default)", text=True),
               Column("what it does", text=True))
    rows = [(name, cls.paper_name,
             ", ".join(f"{k}={'(required)' if v is inspect.Parameter.empty else v!r}"
                       for k, v in policy_parameters(cls).items()) or "-",
             _first_sentence(cls.__doc__ or "")) for name, cls in POLICIES.items()]
    return [Line(fitted("policies (either name is accepted, in any case, with hyphens or underscores)", columns, rows))]


_ABBREVIATIONS = ("et al", "e.g", "i.e", "cf", "vs", "eq", "eqs", "sec", "fig")  # a period that ends no sentence


def _first_sentence(doc: str) -> str:
    """A docstring's first sentence, over as many lines as it takes (its first line alone stopped mid-sentence)."""
    paragraph = " ".join(doc.strip().split("\n\n")[0].split())
    for end in (m.start() for m in re.finditer(r"\.\s", paragraph)):
        if not paragraph[:end].lower().endswith(_ABBREVIATIONS):
            return paragraph[:end + 1]
    return paragraph


def comparison_report(comparison: Any) -> list[Printed]:
    """Online policies' regret on several job families side by side (`autosync robustness-compare`)."""
    held_out = [r.family for r in comparison.reports if r.family != comparison.developed_on]
    title = "regret (time as a multiple of the best static k's), per family" + (
        f" (developed on {comparison.developed_on}; held out: {', '.join(held_out)})"
        if comparison.developed_on else "")
    columns = [Column(h, text=h == "policy") for h in comparison_header(comparison, roles=False, between="\n")]
    return [Line(fitted(title, columns, ((label, *comparison_cells(values)) for label, values in comparison.rows())))]


def comparison_notes(comparison: Any) -> list[Printed]:
    """The notes under `autosync robustness-compare`'s table (on stderr): the families' static-k grids that
    differ, and the policies run on some families only."""
    notes = [comparison.grids_differ()] if comparison.grids_differ() else []
    if comparison.partial:
        notes.append(f"not compared (run on some families only): {', '.join(comparison.partial)}")
    return [Line(note, "dim") for note in notes]


def tune_files_report(files: Any) -> list[Printed]:
    """What `autosync tune` wrote (`reporting.tune_files.TuneFiles`, on stderr): the verification's files, the
    study's plots, and each plot skipped with why."""
    out = [Line(f"wrote {', '.join(str(p) for p in files.verification)}")] if files.verification is not None else []
    if files.plots:
        out.append(Line(f"wrote {', '.join(str(p) for p in files.plots)}"))
    return out + [Line(f"skipped {line}", "dim") for line in files.skipped]


def fault_warnings(result: Any) -> list[Printed]:
    """A warning for each fault a run survived (`autosync run`, on stderr: a worker process lost and replaced)."""
    return [Line(f"warning: {line}", "yellow") for line in result.faults]


def written_job(spec: Any, written: "str | os.PathLike[str]") -> str:
    """A job file autosync wrote from `spec` (a profiled or calibrated job), as a command names it: where
    `spec` names the user's code and `written` is not beside it, prefixed with the PYTHONPATH that imports it
    (a job file's folder is where its code is imported from: the printed `autosync tune` said "No module")."""
    source, path = Path(spec.source), Path(written)
    if spec.uses_user_code and source.is_file() and source.resolve().parent != path.resolve().parent:
        return f"{_pythonpath(source.resolve().parent)}autosync tune {shlex.quote(str(path))}"
    return f"autosync tune {shlex.quote(str(path))}"


def _job_argument(spec: Any) -> str:
    """The job file a printed command names (it printed 'JOB.yaml'): the file `spec` was loaded from, none for
    the embedded default job."""
    if spec.name == "digits_default":
        return ""
    return f"{shlex.quote(spec.source)} " if Path(spec.source).is_file() else "JOB.yaml "


def _pythonpath(folder: Path) -> str:
    """The prefix of a printed command that imports the user's code from `folder`, keeping this process's
    other PYTHONPATH entries after it (what the user's code may import besides)."""
    others = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
              if p and Path(p).resolve() != folder.resolve()]
    return f"PYTHONPATH={shlex.quote(os.pathsep.join([str(folder), *others]))} "


def tune_hint(job_file: "str | os.PathLike[str] | None", storage: str | None = None,
              spec: Any = None) -> list[Printed]:
    """How to train with the tuned policy (`autosync tune`, on stderr): the job file the tune was given (none
    for the embedded default job), the PYTHONPATH the tune imported the job's own code from where it is not the
    job file's folder (`PYTHONPATH=... autosync tune results/profiles/.../profiled_job.yaml`: the hint without
    it said "No module named ..."), and the `storage` where it is not the default one (its password masked)."""
    imports = ""
    if job_file is not None and spec is not None and spec.uses_user_code:
        folder = imported_from(spec)
        on_path = {str(Path(p).resolve()) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p}
        if folder is not None and folder != Path(job_file).resolve().parent and str(folder) in on_path:
            imports = _pythonpath(folder)
    job_file = f"{shlex.quote(str(job_file))} " if job_file is not None else ""
    where = f" --storage {shlex.quote(redact_url(storage))}" if storage and storage != DEFAULT_STORAGE else ""
    return [Line(f"train with it: {imports}autosync run {job_file}--policy tuned{where}", "dim")]

