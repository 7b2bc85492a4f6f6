"""The `--n-jobs` helper processes (`autosync.search.study.helper_processes`): spawned with the command's
Optuna log level, warning filters and shared kept runs, none below one, and a study in memory refused in one line."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import optuna
import pytest

from autosync.core.errors import UserError
from autosync.engine.forks import FORKS, sharing
from autosync.search.study import interrupts
from autosync.search.study.helper_processes import _run_then_end, follow_parent, start_helpers


def report(path: str, index: int, parent) -> None:
    """A helper's target: writes the log level, the first warning filter and the shared fork directory it
    runs with."""
    follow_parent(parent)
    shared = FORKS.shared.directory if FORKS.shared is not None else None
    Path(path).write_text(json.dumps([index, optuna.logging.get_verbosity(), warnings.filters[0][0], shared]))


@pytest.mark.processes
def test_a_helper_runs_its_target_with_the_command_s_log_level_warning_filters_and_kept_runs(tmp_path):
    before = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    try:
        with warnings.catch_warnings(), sharing(True) as directory:
            warnings.simplefilter("ignore")
            procs = start_helpers(f"sqlite:///{tmp_path}/s.db", 1, report, lambda i: (str(tmp_path / f"{i}.json"), i))
            for p in procs:
                p.join(60)
    finally:
        optuna.logging.set_verbosity(before)
    assert [p.exitcode for p in procs] == [0] and all(p.daemon for p in procs)
    assert json.loads((tmp_path / "0.json").read_text()) == [0, optuna.logging.ERROR, "ignore", directory]
    assert directory is not None and FORKS.shared is None  # the command's directory, gone with it


def test_no_helper_below_one_and_a_study_in_memory_is_refused_in_one_line():
    assert start_helpers("sqlite://", 0, report, lambda i: ()) == []
    for url in ("sqlite://", "sqlite:///:memory:"):
        with pytest.raises(UserError, match="needs a storage file or server that processes share"):
            start_helpers(url, 1, report, lambda i: ())


def test_a_helper_ends_quietly_on_ctrl_c_also_where_optuna_passed_it_on_as_another_exception(monkeypatch):
    """Optuna's trial bookkeeping can turn the KeyboardInterrupt raised after a storage call into another
    exception (an unbound local in `_run_trial`): a helper reads it as the interruption it is (exit status
    130, no traceback), and any other exception as itself."""
    def optuna_passing_it_on(ctrl_c: bool) -> None:
        if ctrl_c:
            interrupts._state["raised"] = True  # as the guard's handler records the Ctrl-C it raises
        raise UnboundLocalError("cannot access local variable 'updated_state'")

    monkeypatch.setitem(interrupts._state, "raised", False)
    with pytest.raises(SystemExit) as ended:
        _run_then_end(optuna_passing_it_on, True)
    assert ended.value.code == 130
    monkeypatch.setitem(interrupts._state, "raised", False)
    with pytest.raises(UnboundLocalError):
        _run_then_end(optuna_passing_it_on, False)
