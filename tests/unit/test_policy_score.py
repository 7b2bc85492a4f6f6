"""A policy's score over seeds and the final-metric constraint (`autosync.policy_score`), which the search and
the experiments both score with: the keys it returns are the names a trial stores them under, a policy that
cannot run fails in one line, and the constraint faces the way the target metric improves."""

from __future__ import annotations

import pytest

from autosync.engine.forks import FORKS
from autosync.policy_score import STOPPED_EARLY, RunFailed, constraint, evaluate
from autosync.search.study import records
from tests.conftest import small_job


@pytest.fixture(autouse=True)
def no_kept_forks():
    """Each test's runs start from nothing kept by another test's, and leave nothing kept."""
    FORKS.clear()
    yield
    FORKS.clear()


def test_a_score_carries_the_keys_a_trial_stores_it_under():
    """The objective stores a score's items as the trial's attributes, whose names `records` owns: this module
    sits below the search and spells them, so they are held equal here."""
    job = small_job()
    full = evaluate(job, {"policy": "bsp", "params": {}}, [job.seed, job.seed + 1])
    assert set(full) == {records.TIME_TO_TARGET, records.FINAL_METRIC, records.REACHED, records.RUNS,
                         records.VIRTUAL_SECONDS}
    assert full[records.RUNS] == 2 and full[records.VIRTUAL_SECONDS] > 0
    to_target = evaluate(job, {"policy": "bsp", "params": {}}, [job.seed], stop_at_target=True)
    assert set(to_target) - set(full) == {STOPPED_EARLY}
    assert to_target[STOPPED_EARLY] == to_target[records.REACHED] == 1  # the target was met before the budget
    forked = evaluate(job, {"policy": "bsp", "params": {}}, [job.seed])  # continues the run stopped at the target
    assert forked[records.FORKED] > 0 and set(forked) - set(full) == {records.FORKED}
    assert forked[records.FINAL_METRIC] == full_first_seed(job)


def full_first_seed(job) -> float:
    """The final metric of BSP's full run on the job's seed, trained from the start (no fork kept)."""
    FORKS.clear()
    return evaluate(job, {"policy": "bsp", "params": {}}, [job.seed])[records.FINAL_METRIC]


def test_a_policy_that_cannot_run_on_the_job_fails_in_one_line():
    job = small_job()
    with pytest.raises(RunFailed, match=r"invalid policy .*backup.*k") as info:
        evaluate(job, {"policy": "backup", "params": {"k": job.cluster.n_workers + 1}}, [job.seed])
    assert "\n" not in str(info.value)
    assert not info.value.diverged and info.value.spent == 0.0  # nothing ran: no final metric is implied


@pytest.mark.parametrize("metric, final, feasible", [
    ("test_accuracy", 0.895, True),   # 0.005 under BSP's 0.90: inside the tolerance
    ("test_accuracy", 0.885, False),  # 0.015 under: outside
    ("test_loss", 0.505, True),       # 0.005 over BSP's 0.50: inside
    ("test_loss", 0.515, False),      # 0.015 over: outside
])
def test_the_constraint_faces_the_way_the_metric_improves(metric, final, feasible):
    reference = 0.90 if metric == "test_accuracy" else 0.50
    job = small_job(target={"metric": metric, "threshold": 0.8 if metric == "test_accuracy" else 0.3})
    assert (constraint(job, final, reference, tolerance=0.01) <= 0) == feasible
