"""optuna-dashboard (the `dashboard` extra) reads a tuned storage: named metrics, and what each study is about."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from autosync.search.space import SPACE_DIR, load_space
from autosync.search.tune import tune
from tests.conftest import small_job, tune_request, wait_for


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str) -> object:
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.loads(response.read())


@pytest.mark.slow
def test_optuna_dashboard_shows_the_tuned_study_with_its_metric_and_job(tmp_path):
    pytest.importorskip("optuna_dashboard", reason="optuna-dashboard is not installed (pip install 'autosync[dashboard]')")
    command = shutil.which("optuna-dashboard", path=str(Path(sys.executable).parent)) or shutil.which("optuna-dashboard")
    if command is None:
        pytest.skip("the optuna-dashboard command is not on the PATH")
    url = f"sqlite:///{tmp_path / 'studies.db'}"
    job = small_job()
    outcome = tune(tune_request(job, load_space(SPACE_DIR / "static_k.yaml", 4), n_trials=2, storage=url,
                                tolerance=0.05))
    port = _free_port()
    server = subprocess.Popen([command, url, "--host", "127.0.0.1", "--port", str(port), "--quiet"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        def summaries() -> list | None:
            try:
                return [_get(f"http://127.0.0.1:{port}/api/studies")["study_summaries"]]
            except OSError:
                return None

        (studies,) = wait_for(summaries, 60, "optuna-dashboard to answer", every=0.3)
        (summary,) = [s for s in studies if s["study_name"] == outcome.study_name]
        attrs = {a["key"]: a["value"] for a in summary["user_attrs"]}
        assert attrs["job_name"] == "small" and attrs["fingerprint"] == job.fingerprint() and attrs["space"] == "static_k"
        detail = _get(f"http://127.0.0.1:{port}/api/studies/{summary['study_id']}")
        assert detail["objective_names"] == ["time to target (virtual s)"]
        checks = [t for t in detail["trials"] if any(a["key"] == "full_budget_check_of" for a in t["user_attrs"])]
        answered = [t for t in detail["trials"] if any(a["key"] == "answered_untrained" for a in t["user_attrs"])]
        # the budget; beside it the winner's full-budget check and the points answered untrained (BSP's)
        assert len(detail["trials"]) - len(checks) - len(answered) == 2
        # each trial's role, which the dashboard shows and filters on, tells the budget's apart
        roles = [{a["key"]: a["value"] for a in t["user_attrs"]}.get("role") for t in detail["trials"]]
        assert roles.count("budget") == 2 and roles.count("check") == len(checks) and None not in roles, roles
    finally:
        server.terminate()
        server.wait(timeout=30)
