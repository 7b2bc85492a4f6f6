"""`--mlflow URI` on tune, run and leaderboard: what each logs to a local tracking store (SQLite, since
MLflow's folder store is in maintenance mode), and the one-line refusals before any work starts."""

from __future__ import annotations

import importlib.util
import json
import sys

import pytest

from tests.conftest import autosync, no_traceback

needs_mlflow = pytest.mark.skipif(importlib.util.find_spec("mlflow") is None,
                                  reason="MLflow is not installed (pip install 'autosync[mlflow]')")


def _refused(proc, tmp_path, words: str) -> None:
    assert proc.returncode == 2, proc.stderr
    no_traceback(proc)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --mlflow ") and words in lines[0], lines
    assert not (tmp_path / "results").exists()  # refused before the study storage or any output was made


@pytest.mark.parametrize("command", ["tune", "run", "leaderboard"])
def test_without_mlflow_the_option_names_the_extra_to_install(tiny_job, tmp_path, monkeypatch, command):
    monkeypatch.setitem(sys.modules, "mlflow", None)  # `import mlflow` raises ImportError, as where it is missing
    proc = autosync(command, str(tiny_job), "--mlflow", f"sqlite:///{tmp_path}/mlflow.db", cwd=tmp_path)
    _refused(proc, tmp_path, 'pip install "autosync[mlflow]"')


@needs_mlflow
@pytest.mark.parametrize("uri, words", [("nosuch://x", "unsupported URI 'nosuch://x'"),
                                        ("http://127.0.0.1:9", "failed"),
                                        ("mlruns", "MLFLOW_ALLOW_FILE_STORE=true")])
def test_a_tracking_uri_that_cannot_be_used_is_refused_in_one_line(tiny_job, tmp_path, monkeypatch, uri, words):
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    _refused(autosync("tune", str(tiny_job), "--mlflow", uri, cwd=tmp_path), tmp_path, words)


@needs_mlflow
@pytest.mark.slow
def test_tune_run_and_leaderboard_are_logged_with_the_answer_tagged(tiny_job, tmp_path, monkeypatch):
    from mlflow import MlflowClient

    monkeypatch.delenv("MLFLOW_EXPERIMENT_NAME", raising=False)
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    tune = autosync("tune", str(tiny_job), "--space", "static_k", "--n-trials", "3", "--json", "--mlflow", uri,
                    cwd=tmp_path)
    assert tune.returncode == 0, tune.stderr
    assert f"logged to MLflow {uri}" in tune.stderr
    answer = json.loads(tune.stdout)["cache"]
    run = autosync("run", str(tiny_job), "--policy", "tuned", "--plot", "--mlflow", uri, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    board = autosync("leaderboard", str(tiny_job), "--policies", "bsp", "--policies", "asp", "--seeds", "2",
                     "--mlflow", uri, cwd=tmp_path)
    assert board.returncode == 0, board.stderr

    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("tiny").experiment_id], max_results=1000)
    by_command = {r.data.tags.get("autosync.command"): r for r in runs if "autosync.command" in r.data.tags}
    assert set(by_command) == {"tune", "run", "leaderboard"}
    children = {}
    for r in runs:
        children.setdefault(r.data.tags.get("mlflow.parentRunId"), []).append(r)

    def artifacts(r) -> set[str]:
        return {a.path for a in client.list_artifacts(r.info.run_id)}

    # the tune: the answer tagged on the study's run and on its trial; every trial with policy, score and cost
    study = by_command["tune"]
    assert json.loads(study.data.tags["autosync.answer"]) == answer["best_policy"]
    assert study.data.metrics["time_to_target"] == pytest.approx(answer["best_value"])
    assert {"final_metric", "speedup_vs_bsp", "cost_bsp_trainings"} <= set(study.data.metrics)
    assert {"answer.json", "optimization_history.png"} <= artifacts(study)
    trials = children[study.info.run_id]
    assert len(trials) >= answer["trials"]
    assert [t.data.params["trial"] for t in trials if t.data.tags.get("autosync.answer") == "true"] == \
        [str(answer["best_trial"])]
    for t in trials:
        assert t.data.params["policy"] == "backup" and "policy.k" in t.data.params
        assert "cost_virtual_seconds" in t.data.metrics
        if t.data.tags["state"] == "complete":
            assert {"time_to_target", "final_metric"} <= set(t.data.metrics)

    # the run: the tuned policy with its time to target, final metric and cost, and its plot
    trained = by_command["run"]
    assert trained.data.params["policy"] == answer["best_policy"]["policy"]
    assert {"time_to_target", "final_metric", "cost_virtual_seconds"} <= set(trained.data.metrics)
    assert {"plot.png", "summary.json"} <= artifacts(trained)

    # the leaderboard: a run per policy, one per seed under each, the best row tagged, its plots logged
    rows = children[by_command["leaderboard"].info.run_id]
    assert sorted(r.data.params["policy"] for r in rows) == ["asp", "bsp"]
    assert sum(r.data.tags.get("autosync.answer") == "true" for r in rows) == 1
    for r in rows:
        assert {"time_to_target", "final_metric", "cost_virtual_seconds"} <= set(r.data.metrics)
        assert len(children[r.info.run_id]) == 2
    assert any(p.endswith(".png") for p in artifacts(by_command["leaderboard"]))


def test_a_store_that_fails_while_logging_ends_in_one_line_after_the_files_are_written():
    from autosync.core.errors import RuntimeFailure
    from autosync.reporting.tracking import Tracking, log_run

    class GoneServer:
        def get_experiment_by_name(self, name):
            raise ConnectionError("Max retries exceeded with url: /api/2.0/mlflow/experiments/get-by-name.\nmore")

    class Result:
        def summary(self):
            return {"job": "tiny", "policy": {"policy": "bsp", "params": {}}, "seed": 0}

    with pytest.raises(RuntimeFailure) as info:
        log_run(Tracking("http://user:secret@mlflow.example:5000", GoneServer()), Result(), [])
    message = str(info.value)
    assert "\n" not in message and "secret" not in message
    assert message.startswith("--mlflow http://") and "logging the run failed (its files are written)" in message
