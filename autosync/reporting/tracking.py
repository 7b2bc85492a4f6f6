"""Tracking in MLflow (`--mlflow URI` on `autosync tune`, `run` and `leaderboard`): what a command found,
logged where a team already looks.

- `autosync tune`: one run for the study, with a nested run for each of its trials (policy, time to target,
  final metric, cost in virtual seconds and in BSP trainings, how the trial ended); the trial that answers
  is tagged `autosync.answer`, and the study's run carries the answer as tags, metrics and `answer.json`.
- `autosync run`: one run with its policy, seed, time to target, final metric and cost.
- `autosync leaderboard`: one run for the leaderboard, a nested run per policy (its scored row) and, under
  each, one per seed; the best row is tagged `autosync.answer`.
The plots and reports each command wrote are logged as artifacts. The experiment is the job's name, or
`MLFLOW_EXPERIMENT_NAME` where it is set.

Trials are logged from the study once the tune has finished rather than by an Optuna callback as they
finish: the study holds every trial, also those other processes ran (`--n-jobs`, a shared storage) and the
full-budget checks, each with the time to target, final metric and cost the search recorded.

MLflow is an optional dependency (`pip install "autosync[mlflow]"`): `Tracking.open` fails in one line, as a
`UserError`, where it is missing or the URI cannot be reached, before the command does any work.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Sequence

from autosync.core.errors import AutosyncError, RuntimeFailure, UserError
from autosync.search.study.records import TrialRecord
from autosync.search.study.storage import redact_url

if TYPE_CHECKING:
    from mlflow import MlflowClient

    from autosync.core.job import JobSpec

EXTRA = "mlflow"  # the optional dependency group in pyproject.toml
ANSWER_TAG = "autosync.answer"  # on the trial, policy row or study run that is the command's answer
COMMAND_TAG = "autosync.command"  # tune, run or leaderboard
PROBE_RETRIES, PROBE_TIMEOUT = "0", "10"  # a tracking server that does not answer fails the check at once
# artifacts worth a look in the tracking UI; a run's trace and parameters stay in its folder
ARTIFACT_SUFFIXES = (".png", ".md", ".json", ".csv")
SKIPPED_ARTIFACTS = ("trace.json", "arrivals.csv", "updates.csv")


class Tracking:
    """An MLflow tracking store, reached once (`open`), where a command logs what it found."""

    def __init__(self, uri: str, client: "MlflowClient"):
        self.uri = uri
        self.client = client
        self.logged: list[str] = []  # the id of each top-level run logged, in order

    @classmethod
    def of(cls, mlflow: "str | Tracking") -> "Tracking":
        """`mlflow` as a tracking store: a URI is reached (`open`), a `Tracking` taken as it is."""
        return mlflow if isinstance(mlflow, Tracking) else cls.open(mlflow)

    @classmethod
    def open(cls, uri: str) -> "Tracking":
        """Reach the tracking store at `uri` (any MLflow tracking URI: sqlite:///mlflow.db, http://host:5000,
        postgresql://..., a folder where MLFLOW_ALLOW_FILE_STORE=true), or fail in one line."""
        try:
            from mlflow import MlflowClient
        except ImportError:
            raise UserError(f"--mlflow needs MLflow, which is not installed: pip install \"autosync[{EXTRA}]\"") \
                from None
        for name in ("mlflow", "alembic"):  # their migrations' INFO lines would sit among the command's output
            logging.getLogger(name).setLevel(logging.WARNING)
        try:
            with _environment(MLFLOW_HTTP_REQUEST_MAX_RETRIES=PROBE_RETRIES, MLFLOW_HTTP_REQUEST_TIMEOUT=PROBE_TIMEOUT):
                client = MlflowClient(tracking_uri=uri)
                client.search_experiments(max_results=1)
        except Exception as exc:  # MlflowException, SQLAlchemy's, requests': each only a reason to print
            hint = (" (set MLFLOW_ALLOW_FILE_STORE=true to use a folder, or give sqlite:///mlflow.db)"
                    if "MLFLOW_ALLOW_FILE_STORE" in str(exc) else "")
            raise UserError(f"--mlflow {redact_url(uri)}: cannot use this tracking URI: {_first_sentence(exc)}{hint}") \
                from None
        return cls(uri, client)

    @contextlib.contextmanager
    def one_line_failures(self, what: str) -> Iterator[None]:
        """Log `what`; a store that fails meanwhile (a server gone, a disk full) ends in one line, exit 1,
        the command's own files being written already."""
        try:
            yield
        except AutosyncError:
            raise
        except Exception as exc:  # MlflowException, SQLAlchemy's, requests', OSError: each only a reason to print
            raise RuntimeFailure(f"--mlflow {redact_url(self.uri)}: logging the {what} failed (its files are "
                                 f"written): {_first_sentence(exc)}") from None

    def experiment(self, job_name: str) -> str:
        """The id of the experiment runs of `job_name` go to (created the first time)."""
        name = os.environ.get("MLFLOW_EXPERIMENT_NAME") or job_name
        found = self.client.get_experiment_by_name(name)
        return found.experiment_id if found is not None else self.client.create_experiment(name)

    @contextlib.contextmanager
    def run(self, experiment: str, name: str, parent: str | None = None,
            tags: dict[str, str] | None = None) -> Iterator[str]:
        """A run (nested under `parent`), ended FINISHED, or FAILED if logging it raised."""
        all_tags = {**(tags or {}), **({"mlflow.parentRunId": parent} if parent else {})}
        run_id = self.client.create_run(experiment, run_name=name, tags=all_tags).info.run_id
        if parent is None:
            self.logged.append(run_id)
        try:
            yield run_id
        except BaseException:
            self.client.set_terminated(run_id, "FAILED")
            raise
        self.client.set_terminated(run_id)

    def log(self, run_id: str, params: dict[str, Any] | None = None, metrics: dict[str, Any] | None = None,
            tags: dict[str, Any] | None = None) -> None:
        """Params, metrics (None, inf and nan left out) and tags in one request."""
        from mlflow.entities import Metric, Param, RunTag

        now = _now_ms()
        self.client.log_batch(
            run_id,
            metrics=[Metric(k, float(v), now, 0) for k, v in (metrics or {}).items()
                     if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)]
            + [Metric(k, float(v), now, 0) for k, v in (metrics or {}).items() if isinstance(v, bool)],
            params=[Param(k, _text(v)[:6000]) for k, v in (params or {}).items() if v is not None],
            tags=[RunTag(k, _text(v)[:8000]) for k, v in (tags or {}).items() if v is not None])

    def artifacts(self, run_id: str, paths: Sequence[Path]) -> None:
        """The plots and reports among `paths` (a run's trace and parameters left out)."""
        for path in paths:
            path = Path(path)
            if path.suffix in ARTIFACT_SUFFIXES and path.name not in SKIPPED_ARTIFACTS and path.is_file():
                self.client.log_artifact(run_id, str(path))


def log_run(tracking: Tracking, result: Any, files: Sequence[Path], backend: str = "simulator") -> str:
    """One training run (`autosync run`): its policy, seed, time to target, final metric and cost."""
    with tracking.one_line_failures("run"):
        summary = result.summary()
        name = f"run {_label(summary['policy'])} seed {summary['seed']}"
        with tracking.run(tracking.experiment(summary["job"]), name, tags={COMMAND_TAG: "run"}) as run_id:
            tracking.log(run_id, params={**_policy_params(summary["policy"]), "seed": summary["seed"],
                                         "backend": backend, "fingerprint": summary["fingerprint"]},
                         metrics=_run_metrics(summary), tags={"status": summary["status"]})
            tracking.artifacts(run_id, files)
    return run_id


def log_tune(tracking: Tracking, outcome: Any, job: "JobSpec", files: Sequence[Path]) -> str:
    """A tune (`autosync tune`): the study's run with the answer, each trial nested under it. A cache hit
    logs the study's run alone (its trials were logged by the tune that ran them)."""
    with tracking.one_line_failures("tune"):
        cache = outcome.cache or {}
        answer = cache.get("best_policy")
        per_bsp = _bsp_training_seconds(cache)
        with tracking.run(tracking.experiment(job.name), f"tune {outcome.study_name}",
                          tags={COMMAND_TAG: "tune", "autosync.cached": str(outcome.cached).lower()}) as parent:
            tracking.log(parent, params={"job": job.name, "fingerprint": job.fingerprint(), "space": cache.get("space"),
                                         "study": outcome.study_name, "storage": redact_url(outcome.storage),
                                         "target": f"{job.target.metric} {job.target.threshold}"},
                         metrics={"time_to_target": cache.get("best_value"),
                                  "final_metric": cache.get("best_final_metric"),
                                  "bsp_time_to_target": cache.get("bsp_time_to_target"),
                                  "speedup_vs_bsp": cache.get("speedup_vs_bsp"),
                                  "cost_bsp_trainings": cache.get("search_cost_bsp_trainings"),
                                  "cost_virtual_seconds": cache.get("search_cost_virtual_seconds"),
                                  "trials": cache.get("trials"), "new_trials": outcome.new_trials},
                         tags={ANSWER_TAG: json.dumps(answer, sort_keys=True) if answer else None,
                               f"{ANSWER_TAG}.policy": _label(answer) if answer else None,
                               f"{ANSWER_TAG}.trial": cache.get("best_trial")})
            if answer:
                tracking.client.log_dict(parent, {"best_policy": answer, **{k: cache.get(k) for k in (
                    "best_value", "best_final_metric", "speedup_vs_bsp", "job_name", "fingerprint", "space")}},
                    "answer.json")
            if not outcome.cached and outcome.study is not None:
                experiment = tracking.experiment(job.name)
                for trial in outcome.study.trials:
                    record = TrialRecord(trial)
                    if record.policy is None:  # never proposed a policy (failed before it started)
                        continue
                    is_answer = trial.number == cache.get("best_trial")
                    with tracking.run(experiment, f"trial {trial.number} {_label(record.policy)}", parent=parent,
                                      tags={ANSWER_TAG: "true"} if is_answer else None) as run_id:
                        done = trial.state.name == "COMPLETE"
                        tracking.log(run_id, params={**_policy_params(record.policy), "trial": trial.number},
                                     metrics={"time_to_target": trial.values[0] if done and trial.values else None,
                                              "final_metric": record.final_metric,
                                              "cost_virtual_seconds": record.virtual_seconds,
                                              "cost_bsp_trainings": (record.virtual_seconds / per_bsp
                                                                     if per_bsp else None)},
                                     tags={"state": trial.state.name.lower(), "same_as_trial": record.same_as})
            tracking.artifacts(parent, files)
    return parent


def log_leaderboard(tracking: Tracking, board: Any, files: Sequence[Path]) -> str:
    """A leaderboard (`autosync leaderboard`): its run, a nested run per scored row and one per seed under it;
    the best row tagged as the answer."""
    with tracking.one_line_failures("leaderboard"):
        job = board.job
        experiment = tracking.experiment(job.name)
        best = board.rows[0] if board.rows and math.isfinite(board.rows[0]["time_to_target"]) else None
        runs_of = {json.dumps(e.policy, sort_keys=True): e.runs for e in board.entries}
        with tracking.run(experiment, f"leaderboard {job.name}", tags={COMMAND_TAG: "leaderboard"}) as parent:
            tracking.log(parent, params={"job": job.name, "fingerprint": job.fingerprint(), "seeds": len(board.seeds),
                                         "policies": len(board.rows)},
                         tags={ANSWER_TAG: json.dumps(best["spec"], sort_keys=True) if best else None,
                               f"{ANSWER_TAG}.policy": best["policy"] if best else None})
            for row in board.rows:
                runs = runs_of.get(json.dumps(row["spec"], sort_keys=True), [])
                with tracking.run(experiment, row["policy"], parent=parent,
                                  tags={ANSWER_TAG: "true"} if row is best else None) as row_id:
                    tracking.log(row_id, params=_policy_params(row["spec"]), metrics={
                        **{k: v for k, v in row.items() if k not in ("policy", "spec")},
                        "final_metric": _final_metric(runs),
                        "cost_virtual_seconds": sum(r.get("virtual_time") or 0.0 for r in runs)})
                    for summary in runs:
                        name = f"{row['policy']} seed {summary['seed']}"
                        with tracking.run(experiment, name, parent=row_id) as run_id:
                            tracking.log(run_id, params={**_policy_params(summary["policy"]), "seed": summary["seed"]},
                                         metrics=_run_metrics(summary), tags={"status": summary.get("status")})
            tracking.artifacts(parent, files)
    return parent


def _run_metrics(summary: dict[str, Any]) -> dict[str, Any]:
    """A run's time to target, final metric and cost (virtual and wall seconds)."""
    final = summary.get(f"final_{summary.get('target_metric')}")
    return {"time_to_target": summary.get("time_to_target"), "final_metric": final,
            "reached_target": bool(summary.get("reached_target")),
            "cost_virtual_seconds": summary.get("virtual_time"), "wall_seconds": summary.get("wall_seconds"),
            "updates": summary.get("updates"), "final_test_accuracy": summary.get("final_test_accuracy"),
            "final_train_loss": summary.get("final_train_loss")}


def _final_metric(runs: list[dict[str, Any]]) -> float | None:
    finals = [r.get(f"final_{r.get('target_metric')}") for r in runs]
    finals = [f for f in finals if isinstance(f, (int, float)) and math.isfinite(f)]
    return sum(finals) / len(finals) if finals else None


def _policy_params(policy: dict[str, Any]) -> dict[str, Any]:
    """{"policy": name, "policy.k": 3, ...}: a policy as MLflow params (each searchable)."""
    return {"policy": policy["policy"], "policy.label": _label(policy),
            **{f"policy.{k}": v for k, v in sorted(policy.get("params", {}).items())}}


def _label(policy: dict[str, Any]) -> str:
    from autosync.catalog import label_of  # not at the top: numpy, which --help does not load

    return label_of(policy)


def _bsp_training_seconds(cache: dict[str, Any]) -> float | None:
    """Virtual seconds of one BSP training (the unit of search cost), from the cache record's two costs."""
    seconds, trainings = cache.get("search_cost_virtual_seconds"), cache.get("search_cost_bsp_trainings")
    return seconds / trainings if seconds and trainings else None


def _first_sentence(exc: Exception, most: int = 240) -> str:
    """The reason an error gives, on one line: its first sentence, cut at `most` characters."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    end = text.find(". ")
    text = text[:end + 1] if end > 0 else text
    return text if len(text) <= most else text[:most - 3] + "..."


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)


def _now_ms() -> int:
    import time

    return int(time.time() * 1000)


@contextlib.contextmanager
def _environment(**values: str) -> Iterator[None]:
    """Set environment variables for the block (those the user set win), then restore them."""
    saved = {k: os.environ.get(k) for k in values}
    for k, v in values.items():
        os.environ.setdefault(k, v)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
