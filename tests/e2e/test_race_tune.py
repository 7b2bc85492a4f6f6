"""`autosync tune --sampler race`: the race on common seeds as a tune, replayed on the table alike, the same
answer and cost whatever --n-jobs, resumed from its trials, its bad options refused in one line; `autosync fit --check`
pins the shipped settings to what the fit gives on the committed table."""

from __future__ import annotations

import io
import json
import re
import shutil
from pathlib import Path

import optuna
import pytest
from rich.console import Console

from autosync import cli
from autosync.api import tune
from autosync.core.family import load_family, write_jobs
from autosync.data import BASELINE_DIR, RACE_SETTINGS
from autosync.engine.forks import FORKS
from autosync.experiments import race_fit
from autosync.experiments.race_fit import MARGINS
from autosync.reporting.console import race_report
from autosync.race import race_settings
from autosync.table import KEPT, Table
from tests.conftest import COMMITTED_FAMILIES, TABLE_JOBS, TINY_JOB, autosync, no_traceback

REPO = Path(__file__).resolve().parents[2]


def _trials(storage: str) -> list[tuple]:
    (summary,) = optuna.get_all_study_summaries(storage)
    study = optuna.load_study(study_name=summary.study_name, storage=storage)
    return [(t.number, t.state.name, t.values, {k: v for k, v in t.user_attrs.items() if k != "process"})
            for t in study.get_trials()]


def _tune(tmp_path: Path, job: Path, name: str, *extra: str) -> dict:
    FORKS.clear()  # each tune as in a process of its own
    KEPT.clear()
    url = f"sqlite:///{tmp_path / name}.db"
    proc = autosync("tune", str(job), "--sampler", "race", "--storage", url, "--json", *extra, cwd=tmp_path)
    no_traceback(proc)
    assert proc.returncode == 0, proc.stderr
    return {"url": url, "out": json.loads(proc.stdout), "stderr": proc.stderr}


@pytest.fixture(scope="module")
def live_race(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The tiny job's race trained live in one process, for the tests that compare another tune with it."""
    folder = tmp_path_factory.mktemp("live-race")
    (folder / "tiny.yaml").write_text(TINY_JOB)
    return _tune(folder, folder / "tiny.yaml", "live", "--n-jobs", "1")


@pytest.mark.slow
def test_the_race_replayed_on_the_table_runs_the_live_race_s_trials_and_answers_alike(live_race, tiny_job, tmp_path):
    table = tmp_path / "table"
    live = live_race
    replayed = [_tune(tmp_path, tiny_job, name, "--table", str(table)) for name in ("filling", "replayed")]
    trials = _trials(live["url"])
    rounds = [r["round"] for r in live["out"]["cache"]["race"]["rounds"]]
    assert rounds[0] == "portfolio" and "final metric" in rounds  # a race to the answer's check
    for other in replayed:
        assert _trials(other["url"]) == trials
        for key in ("best_policy", "best_value", "search_cost_bsp_trainings", "race"):
            assert other["out"]["cache"][key] == live["out"]["cache"][key], key
    two = _tune(tmp_path, tiny_job, "two", "--table", str(table), "--n-jobs", "2")
    for key in ("best_policy", "best_value", "race"):
        assert two["out"]["cache"][key] == live["out"]["cache"][key], key


@pytest.mark.slow  # a live race in two processes: about 17 s on 2 cores
def test_a_live_race_in_two_processes_gives_the_answer_and_cost_of_one(live_race, tiny_job, tmp_path):
    two = _tune(tmp_path, tiny_job, "two", "--n-jobs", "2")
    for key in ("best_policy", "best_value", "best_final_metric", "search_cost_bsp_trainings", "race"):
        assert two["out"]["cache"][key] == live_race["out"]["cache"][key], key
    assert two["out"]["new_trials"] == len(_trials(two["url"])) == live_race["out"]["new_trials"]  # its helper's too
    # run for run the same: a run started beside the rivals it races learnt its horizon as it trained
    # (`autosync.search.race_horizon`) and stopped where one process would have stopped it
    assert _trials(two["url"]) == _trials(live_race["url"])
    forked = [live_race["out"]["cache"]["search_breakdown"]["forked_trials"],
              two["out"]["cache"]["search_breakdown"]["forked_trials"]]
    assert forked[0] > 0 and forked[1] == forked[0]  # the finalists' full runs continued, whoever ran them first


@pytest.mark.slow  # two races, the first training the table's runs: about 6 s on 2 cores
def test_a_race_resumes_from_its_trials_and_runs_none_twice(tiny_job, tmp_path):
    first = _tune(tmp_path, tiny_job, "study", "--table", str(tmp_path / "table"))
    (summary,) = optuna.get_all_study_summaries(first["url"])
    study = optuna.load_study(study_name=summary.study_name, storage=first["url"])
    study.set_user_attr("cache", None)  # as if the process died after its last run, before its answer
    trials = _trials(first["url"])
    again = _tune(tmp_path, tiny_job, "study", "--table", str(tmp_path / "table"))
    assert not again["out"]["cached"] and _trials(first["url"]) == trials  # no run trained again
    # a table folder not there yet is said to be started (a misspelt path trained everything without a word)
    new_table = (f"table {tmp_path / 'table'}: no such folder, so the runs this command trains are kept there as a "
                 "new table")
    assert new_table in first["stderr"] and new_table not in again["stderr"]
    for key in ("best_policy", "best_value", "race", "search_cost_bsp_trainings"):
        assert again["out"]["cache"][key] == first["out"]["cache"][key], key
    seeds = {r["seed"] for r in first["out"]["cache"]["race"]["rounds"]}
    assert seeds == {0, 1}  # the job's seed and the next: every comparison on seeds both candidates ran


@pytest.mark.slow  # a race on a fresh table and its plots: 2-6 s on 2 cores
def test_a_budget_cuts_the_race_short_and_its_output_says_so(tiny_job, tmp_path):
    capped = _tune(tmp_path, tiny_job, "capped", "--table", str(tmp_path / "table"), "--budget", "2.5")
    cache = capped["out"]["cache"]
    race = cache["race"]
    assert race["rounds"][0]["round"] == "reference"  # BSP's two full runs: the budget's unit, 2 of its 2.5
    assert race["budget"] == 2.5 and race["cut_short"] and cache["search_cost_bsp_trainings"] >= 2.5
    assert not {r["round"] for r in race["rounds"]} & set(race["cut_short"])
    proc = autosync("tune", str(tiny_job), "--sampler", "race", "--storage", capped["url"], "--budget", "2.5",
                    cwd=tmp_path)  # the cached answer, printed
    assert proc.returncode == 0, proc.stderr
    assert "the budget of 2.5 BSP trainings was spent before the race's" in " ".join(proc.stdout.split())
    # without the budget, or with other settings, the answer cut short was returned as this command's: refused
    settings = tmp_path / "race.yaml"
    settings.write_text("portfolio: [bsp, 'asp,lr_rule=staleness']\nmargin: 2.0\n")
    for extra, says in (((), "--budget 2.5 (this command: none)"),
                        (("--budget", "2.5", "--race-settings", str(settings)), f"other settings than {settings}")):
        proc = autosync("tune", str(tiny_job), "--sampler", "race", "--storage", capped["url"], *extra, cwd=tmp_path)
        no_traceback(proc)
        assert proc.returncode == 2 and f"holds the race's answer made with {says}: name another --study" \
            in " ".join(proc.stderr.split()), proc.stderr


@pytest.mark.parametrize("args, says", [
    (("--space", "static_k", "--race-settings", "x.yaml"), "--race-settings is read by the race only"),
    (("--sampler", "race", "--space", "static_k"), "needs --space policy"),
    (("--sampler", "race", "--verify-top", "2", "--backend", "processes"), "no --verify-top"),
    (("--sampler", "race", "--timeout", "60"), "takes no --timeout (--sampler tpe takes one), but got --timeout 60"),
    (("--objective", "time,metric"), "the race (--sampler race, the default on --space policy) compares"),
    (("--sampler", "race", "--race-settings", "bad.yaml"), "bad.yaml: margin must be a number >= 1"),
    (("--sampler", "tpe", "--budget", "3"), "--budget is read by --sampler race only, but got --sampler tpe"),
    (("--sampler", "race", "--budget", "1"), "--budget must be >= 2 BSP trainings (BSP's two full runs"),
    (("--repeats", "2"), "does not read --repeats 2: it runs each candidate on two seeds (--sampler tpe reads it)"),
    (("--constraint-at", "bsp-target"), "does not read --constraint-at bsp-target: it holds the final metric"),
    (("--patience", "3"), "does not read --patience 3: it runs to its answer"),
    (("--n-trials", "5"), "runs to its answer: it takes no --n-trials (--budget caps its cost in BSP trainings"),
    (("--no-transfer",), "does not read --no-transfer: it starts from its fitted portfolio"),
])
def test_a_bad_race_option_is_one_line_and_exit_2(tiny_job, tmp_path, args, says):
    (tmp_path / "bad.yaml").write_text("portfolio: [bsp]\nmargin: 0\n")
    proc = autosync("tune", str(tiny_job), "--storage", f"sqlite:///{tmp_path}/s.db", *args, cwd=tmp_path)
    no_traceback(proc)
    assert proc.returncode == 2 and says in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.slow  # the fit on the 64 committed family jobs: about 50 s on 2 cores
def test_the_shipped_race_settings_are_what_the_fit_gives_on_the_committed_table(tmp_path):
    families = [str(BASELINE_DIR / f"family_{name}.yaml") for name in COMMITTED_FAMILIES]
    proc = autosync("fit", *families, "--table", str(REPO / "results" / "table"), "--jobs", str(TABLE_JOBS), "--check",
                    "--json", cwd=tmp_path)
    no_traceback(proc)
    assert proc.returncode == 0, proc.stderr
    fitted = json.loads(proc.stdout)
    jobs = len(COMMITTED_FAMILIES) * TABLE_JOBS
    assert fitted["unchanged"] and fitted["file"] == str(RACE_SETTINGS) and fitted["jobs"] == jobs


def test_fit_check_exits_1_where_the_file_holds_other_settings(tmp_path):
    """A margin of 9 is none the fit tries (`race_fit.MARGINS`): no fit holds it, so one family's first job
    (a fit of about 1 s) is enough to see --check refuse the file."""
    assert 9 not in MARGINS
    stale = tmp_path / "stale.yaml"
    stale.write_text(RACE_SETTINGS.read_text().replace("margin:", "margin: 9 #"))
    proc = autosync("fit", str(BASELINE_DIR / "family_fresh.yaml"), "--jobs", "1", "--table",
                    str(REPO / "results" / "table"), "--check", "--out", str(stale), cwd=tmp_path)
    no_traceback(proc)
    assert proc.returncode == 1 and "does not hold what" in proc.stderr


def test_fit_check_writes_nothing_to_a_table_that_lacks_a_run(tmp_path):
    """--check writes nothing: a run the table lacks is refused in one line (it was trained into the table)."""
    table = tmp_path / "table"
    table.mkdir()
    proc = autosync("fit", str(BASELINE_DIR / "family_fresh.yaml"), "--jobs", "1", "--table", str(table), "--check",
                    cwd=tmp_path)
    no_traceback(proc)
    assert proc.returncode == 2 and re.search(rf"^error: --table {table} lacks the run of \S+ on job fresh-000 \(seed "
                                              r"\d+\), and is only read here: compute it first", proc.stderr), proc.stderr
    assert list(table.iterdir()) == []


def test_where_every_candidate_breaks_the_rule_the_replayed_race_bisects_static_k_towards_bsp_and_says_so(tmp_path):
    """Fleet's first job on the committed table: the 6 candidates the race checked break the final-metric rule, and the
    round towards BSP (static k at BSP's learning rate, bisected: 4 keeps it, 2 and 3 do not) answers 4 of the 9
    workers; every run is read from the table (a copy: nothing is trained into it)."""
    table = tmp_path / "table"
    shutil.copytree(REPO / "results" / "table", table)
    job = load_family(BASELINE_DIR / "family_fleet.yaml").jobs(1)[0]
    FORKS.clear()
    KEPT.clear()
    race = tune(job, table=str(table), storage=f"sqlite:///{tmp_path}/s.db").cache["race"]
    assert race["answer"] == "backup:k=0.5n,lr_rule=fixed" and len(race["checked"]) == 6
    assert race["towards_bsp"] == ["backup:k=0.5n,lr_rule=fixed", "backup:k=0.25n,lr_rule=fixed",
                              "backup:k=0.375n,lr_rule=fixed"]  # k = 4 keeps it, then 2 and 3 do not
    tried = [run for r in race["rounds"] if r["round"] == "towards BSP" for run in r["runs"]]
    assert len(tried) == 6 and all("final" in run for run in tried)  # each k on both seeds, to the end
    assert not list(table.glob("*.jsonl"))  # nothing trained: every run was in the table
    verdict = race_report(race, job)[-1].what
    assert "bisected towards BSP (3 tried)" in verdict and "the fewest workers that kept it are the answer" in verdict


def test_a_portfolio_of_bsp_alone_answers_bsp_with_its_runs_to_the_budget_as_the_reference(tmp_path):
    """BSP leading answered without its runs to the end of the budget, which a portfolio holding BSP does not
    queue early: the tune failed with "BSP itself fails on this job" (exit 1), its storage left behind."""
    table = tmp_path / "table"
    shutil.copytree(REPO / "results" / "table", table)
    (tmp_path / "bsp.yaml").write_text("portfolio: [bsp]\nmargin: 4.0\n")
    job = load_family(BASELINE_DIR / "family_fleet.yaml").jobs(1)[0]
    FORKS.clear()
    KEPT.clear()
    cache = tune(job, table=str(table), storage=f"sqlite:///{tmp_path}/s.db", race_settings=str(tmp_path / "bsp.yaml")
                 ).cache
    assert cache["best_policy"] == {"policy": "bsp", "params": {}} and cache["bsp_final_metric"] is not None
    assert [r["round"] for r in cache["race"]["rounds"]].count("reference") == 2  # BSP's two runs to the end


def test_where_bsp_missed_the_target_on_a_seed_the_tune_claims_no_speedup_and_says_why(tmp_path):
    """Fleet's fourth job on the committed table: BSP misses the target on its second search seed, where its time
    is a miss's score (twice the seconds it ran), not a time: the record counts the seed and claims no speedup
    or payback, and the answer's line says so."""
    from autosync.reporting.console import tune_report

    table = tmp_path / "table"
    shutil.copytree(REPO / "results" / "table", table)
    job = load_family(BASELINE_DIR / "family_fleet.yaml").jobs(4)[3]
    FORKS.clear()
    KEPT.clear()
    outcome = tune(job, table=str(table), storage=f"sqlite:///{tmp_path}/s.db")
    cache = outcome.cache
    assert (cache["bsp_reached"], cache["bsp_runs"], cache["best_reached"], cache["best_runs"]) == (1, 2, 2, 2)
    assert cache["speedup_vs_bsp"] is None and cache["recurrences_to_amortize"] is None
    best = next(line.what for line in tune_report(outcome, job) if str(line.what).startswith("best:"))
    assert "vs BSP missed the target on 1 of 2 seeds" in best and "faster than BSP" not in best, best
    assert best.endswith("with a miss there is no saving over BSP to repay it."), best
    assert not list(table.glob("*.jsonl"))


@pytest.mark.slow  # about 8 s: every run trains the whole budget
def test_where_no_candidate_reaches_the_target_the_answer_says_it_missed_on_every_seed(tmp_path):
    """A target no run reaches within the budget: every time is a miss's score, so the answer's line counts
    the misses and claims no speedup, and the record says so (best_reached 0)."""
    job = tmp_path / "never.yaml"
    job.write_text(TINY_JOB.replace("threshold: 0.8", "threshold: 0.999"))
    url = f"sqlite:///{tmp_path}/s.db"
    proc = autosync("tune", str(job), "--storage", url, cwd=tmp_path)
    no_traceback(proc)
    assert proc.returncode == 0, proc.stderr
    said = " ".join(proc.stdout.split())
    assert "missed the target on 2 of 2 seeds" in said and "faster than BSP" not in said, said
    record = json.loads(autosync("tune", str(job), "--storage", url, "--json", cwd=tmp_path).stdout)["cache"]
    assert (record["best_reached"], record["bsp_reached"], record["speedup_vs_bsp"]) == (0, 0, None)


def _replayed_and_counted(tmp_path, family: str, index: int):
    """A family job replayed through the tune on a copy of the committed table (nothing trained into it) and the
    race counted on the table (`race_fit.race`) with the shipped settings: the job, the tune's cache record and
    the count."""
    table = tmp_path / "table"
    shutil.copytree(REPO / "results" / "table", table)
    path = BASELINE_DIR / f"family_{family}.yaml"
    job = load_family(path).jobs(index + 1)[index]
    FORKS.clear()
    KEPT.clear()
    cache = tune(job, table=str(table), storage=f"sqlite:///{tmp_path}/s.db").cache
    counted = race_fit.race(Table(table), race_fit.family_jobs(Table(table), [path], index + 1)[index], race_settings())
    assert not list(table.glob("*.jsonl"))
    return job, cache, counted


def test_a_finalist_whose_run_to_the_target_ran_the_whole_budget_is_not_trained_again_for_its_final_metric(tmp_path):
    """Steady's sixth job: a finalist's second-seed run raced no one, missed the target and so trained to the end
    of the budget; the final-metric round reads its final metric from that run instead of training it again."""
    job, cache, counted = _replayed_and_counted(tmp_path, "steady", 5)
    race = cache["race"]
    (second,) = [r for r in race["rounds"] if r["round"] == "second seed"]
    (whole,) = [run for run in second["runs"] if "final" in run]  # missed the target: twice the budget
    assert whole["time"] == 2 * job.budget.max_virtual_seconds and whole["label"] in race["checked"]
    finals = [run for r in race["rounds"] if r["round"] == "final metric" and r["seed"] == second["seed"]
              for run in r["runs"]]
    assert whole["label"] not in [run["label"] for run in finals]  # not run again on that seed


@pytest.mark.parametrize("family, index", [
    ("steady", 5),  # a finalist's whole-budget run to the target read, not trained again (above)
    ("quarry", 1),  # round 5's static k continues from another label's run of the same point, kept at its target
])
def test_the_race_counted_on_the_table_gives_the_replayed_tune_s_answer_and_cost(tmp_path, family, index):
    _, cache, counted = _replayed_and_counted(tmp_path, family, index)
    assert counted["answer"] == cache["race"]["answer"]
    assert abs(counted["cost"] - cache["search_cost_bsp_trainings"]) < 1e-9


def test_runs_stopped_by_a_portfolio_member_out_on_the_second_seed_run_again_in_the_replayed_tune(tmp_path):
    """Tiers' third job: the portfolio's fastest run on the first seed (NAG-ASGD) diverges on the second, so the runs
    it stopped on the first seed are queued again, against the members still racing, and run to their new horizon
    (`race.plan`). The tune answers as the race counted on the table does; it pays less, by what a Sync-Switch run
    asked again continues from the prefix its first run kept (the count trains it again: `race_fit`'s docstring)."""
    job, cache, counted = _replayed_and_counted(tmp_path, "tiers", 2)
    race = cache["race"]
    first = [run["label"] for r in race["rounds"] if r["round"] == "portfolio" for run in r["runs"]]
    again = sorted({label for label in first if first.count(label) > 1})
    assert again == ["backup:k=0.25n,lr_rule=fixed", "backup:k=0.625n,lr_rule=sqrt", "backup:k=2,lr_rule=linear",
                     "sync_switch,asp_lr_rule=staleness,asp_momentum=same,config=sync_switch,consecutive=2,"
                     "lr_rule=sqrt,order=bsp_asp,stragglers=agnostic,switch_at=0.0625,switch_seconds=0.0,"
                     "window_seconds=5.0"]
    assert sorted(run["label"] for r in race["rounds"] for run in r["runs"] if run.get("again")) == again
    assert counted["answer"] == race["answer"] != "nag_asgd"
    assert 0 < counted["cost"] - cache["search_cost_bsp_trainings"] < 0.05
    console = Console(file=io.StringIO(), width=200)
    cli._show(race_report(race, job), console, wide=True)
    assert console.file.getvalue().count("(again)") == len(again)  # each run asked again, said so


@pytest.mark.slow  # two replayed races, one in two processes: about 15 s on 2 cores
def test_runs_asked_again_are_the_same_in_two_processes(tmp_path):
    """Tiers' third job replayed on a copy of the table by `autosync tune` in one process and in two: the runs asked
    again are queued and run alike, so the trials, the answer and the cost are one process's."""
    shutil.copytree(REPO / "results" / "table", tmp_path / "table")
    family = load_family(BASELINE_DIR / "family_tiers.yaml")
    ((path, _),) = write_jobs(family, family.jobs(3)[2:], tmp_path / "jobs", "test", "test")
    one, two = (_tune(tmp_path, path, name, "--table", str(tmp_path / "table"), "--n-jobs", n)
                for name, n in (("one", "1"), ("two", "2")))
    assert any(run.get("again") for r in one["out"]["cache"]["race"]["rounds"] for run in r["runs"])
    for key in ("best_policy", "best_value", "search_cost_bsp_trainings", "race"):
        assert two["out"]["cache"][key] == one["out"]["cache"][key], key
    assert _trials(two["url"]) == _trials(one["url"])
    assert not list((tmp_path / "table").glob("*.jsonl"))
