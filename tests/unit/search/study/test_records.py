"""The records of a trial, a study and the cache answer (`autosync.search.study.records`).

A round trip through Optuna's attributes, a damaged record refused in one line, and a check on the source
that no other module spells an attribute key of a trial or a study: the records module owns them all.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from autosync.core.errors import UserError
from autosync.search.study import records

PACKAGE = Path(__file__).resolve().parents[4] / "autosync"
RECORDS = PACKAGE / "search" / "study" / "records.py"

#: Every key the records module declares (the trial's and study's attributes, a reference's fields).
KEYS = {value for name, value in vars(records).items() if name.isupper() and isinstance(value, str)}

#: Constants elsewhere whose value happens to equal a key and that name something else: the Optuna
#: parameter of the policy choice, and the name of the default search space.
OTHER_MEANINGS = {("autosync/search/space.py", "POLICY_PARAM"),
                  ("autosync/search/tune_options.py", "DEFAULT_TUNE_SPACE")}


def _is_attrs(node: ast.AST) -> bool:
    """`x.user_attrs`, or a local named `attrs` (what a study's or trial's attributes are read into)."""
    return (isinstance(node, ast.Attribute) and node.attr == "user_attrs") or (
        isinstance(node, ast.Name) and node.id == "attrs")


def _literal(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _key_literals(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, key) of each string literal used as an attribute key of a trial or a study."""
    found = []
    for node in ast.walk(tree):
        key = None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            name, args = node.func.attr, node.args
            if name == "set_user_attr" and args:
                key = _literal(args[0])
            elif name == "set_trial_user_attr" and len(args) > 1:
                key = _literal(args[1])
            elif name in ("get", "pop", "setdefault") and _is_attrs(node.func.value) and args:
                key = _literal(args[0])
            for kw in node.keywords:  # enqueue_trial(..., user_attrs={...}), create_trial(user_attrs=...)
                if kw.arg == "user_attrs" and isinstance(kw.value, ast.Dict):
                    found += [(node.lineno, k) for k in map(_literal, kw.value.keys) if k is not None]
        elif isinstance(node, ast.Subscript) and _is_attrs(node.value):
            key = _literal(node.slice)
        elif isinstance(node, ast.Compare) and any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops) \
                and any(_is_attrs(c) for c in node.comparators):
            key = _literal(node.left)
        if key is not None:
            found.append((node.lineno, key))
    return found


def test_no_module_but_records_spells_an_attribute_key():
    bad = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == RECORDS:
            continue
        rel = path.relative_to(PACKAGE.parent).as_posix()
        tree = ast.parse(path.read_text())
        bad += [f"{rel}:{line}: {key!r}" for line, key in _key_literals(tree)]
        for node in tree.body:  # a second declaration of a key, under another name
            if isinstance(node, ast.Assign) and _literal(node.value) in KEYS:
                names = [t.id for t in node.targets if isinstance(t, ast.Name)]
                bad += [f"{rel}:{node.lineno}: {n} = {node.value.value!r}" for n in names
                        if (rel, n) not in OTHER_MEANINGS]
    assert not bad, "attribute keys belong to autosync.search.study.records:\n" + "\n".join(bad)


def test_the_check_sees_a_spelled_key():
    """The AST test above would catch each way a key is spelled (so its passing means something)."""
    source = """
trial.set_user_attr("policy", p)
storage.set_trial_user_attr(tid, "fail_reason", why)
t.user_attrs["same_as_trial"]
t.user_attrs.get("virtual_seconds", 0.0)
"bsp_reference" in study.user_attrs
study.enqueue_trial(params, user_attrs={"full_budget_check_of": 3})
attrs.get("cache")
"""
    keys = sorted(key for _, key in _key_literals(ast.parse(source)))
    assert keys == sorted(["policy", "fail_reason", "same_as_trial", "virtual_seconds", "bsp_reference",
                           "full_budget_check_of", "cache"])


def _record() -> records.CacheRecord:
    return {"best_policy": {"policy": "backup", "params": {"k": 3}}, "best_value": 12.5, "trials": 4,
            "best_final_metric": 0.9, "finished_at": "2026-01-01T00:00:00+00:00"}


def test_a_trial_and_a_cache_record_round_trip_through_optuna():
    import optuna

    from autosync.search.study.cache import read_cache

    study = optuna.create_study(storage=optuna.storages.InMemoryStorage())
    policy = {"policy": "backup", "params": {"k": 3}}
    study.add_trial(optuna.trial.create_trial(value=12.5, user_attrs={
        records.POLICY: policy, records.VIRTUAL_SECONDS: 40.0, records.FINAL_METRIC: 0.9, records.REACHED: 1,
        records.RUNS: 1, records.SAME_AS: records.BSP_REFERENCE}))
    trial = records.TrialRecord(study.get_trials()[0])
    assert (trial.policy, trial.virtual_seconds, trial.final_metric, trial.same_as) == (
        policy, 40.0, 0.9, records.BSP_REFERENCE)
    assert trial.summary() == {"trial": 0, "policy": policy, "time_to_target": 12.5, "final_metric": 0.9,
                               "reached": 1, "runs": 1}

    records.describe_study(study, "job", "abc123", "policy", "test_accuracy 0.9", 4, "simulator")
    record = _record()
    records.write_cache_record(study, record)
    about = records.StudyRecord(study.user_attrs)
    assert (about.fingerprint, about.space, about.execution, about.job_name, about.n_workers) == (
        "abc123", "policy", "simulator", "job", 4)
    assert read_cache(study) == record


def test_a_cache_record_of_an_older_autosync_with_a_confirmation_still_answers():
    """Records that a tune with a confirmation step wrote (its table, the search's own best beside the answer)
    load as they are, and answer with their best policy."""
    import optuna

    from autosync.search.study.cache import read_cache

    study = optuna.create_study(storage=optuna.storages.InMemoryStorage())
    old = {**_record(), "search_best_policy": {"policy": "bsp", "params": {}}, "search_best_value": 11.0,
           "confirmed": {"top": 2, "seeds": [0, 1], "rows": [], "winner": _record()["best_policy"],
                         "winner_time": 12.5, "fell_back_to_bsp": False}}
    records.write_cache_record(study, old)
    assert read_cache(study) == old and read_cache(study)["best_policy"] == {"policy": "backup", "params": {"k": 3}}


def test_a_study_of_an_older_autosync_that_judged_checks_on_a_second_seed_loads_and_counts_their_runs():
    """A study whose tune judged checks near the rule's edge on a second seed: its record (the breakdown's
    `second_seed_checks`) loads as it is, and the full runs it stored beside its trials stay in its cost."""
    import optuna

    from autosync.search.study.cache import read_cache, search_cost

    study = optuna.create_study(storage=optuna.storages.InMemoryStorage())
    study.add_trial(optuna.trial.create_trial(value=12.5, user_attrs={records.VIRTUAL_SECONDS: 40.0}))
    study.set_user_attr(records.STORED_RUNS, {"a|full budget": {"final_metric": 0.9, records.VIRTUAL_SECONDS: 30.0},
                                              "b|full budget": {"reason": "diverged", records.VIRTUAL_SECONDS: 0.0}})
    old = {**_record(), "search_breakdown": {"full_budget_checks": 2, "second_seed_checks": 1}}
    records.write_cache_record(study, old)
    assert read_cache(study) == old
    assert search_cost(study) == pytest.approx(70.0)


@pytest.mark.parametrize("damage, field", [
    (lambda r: r.pop("best_value"), "field best_value is missing"),
    (lambda r: r.update(trials="many"), "trials:"),
    (lambda r: r.update(best_policy={"policy": "no-such-policy"}), "best_policy:"),
])
def test_a_damaged_cache_record_is_refused_in_one_line(damage, field):
    record = _record()
    damage(record)
    with pytest.raises(UserError) as caught:
        records.validated("abc123-policy", record)
    message = str(caught.value)
    assert "\n" not in message and message.startswith("study abc123-policy: corrupt cache entry (") \
        and field in message and "autosync cache clear" in message


def test_the_study_package_imports_nothing_of_the_search_above_it():
    """With the records' keys in `records`, `search.study` no longer reads the objective's or the strategies'
    constants: it imports only itself and `search.cost` (a leaf: the unit of search cost), type hints aside."""
    above = []

    def visit(node: ast.AST, where: str) -> None:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            return
        names = [node.module] if isinstance(node, ast.ImportFrom) and node.module else \
            [a.name for a in node.names] if isinstance(node, ast.Import) else []
        above.extend(f"{where}: {name}" for name in names if name.startswith("autosync.search.")
                     and not name.startswith("autosync.search.study") and name != "autosync.search.cost")
        for child in ast.iter_child_nodes(node):
            visit(child, where)

    for path in sorted((PACKAGE / "search" / "study").glob("*.py")):
        visit(ast.parse(path.read_text()), path.name)
    assert not above, above


@pytest.mark.parametrize("attrs, state, role", [
    ({}, "COMPLETE", "budget"),
    ({}, "PRUNED", "budget"),
    ({records.FAIL_REASON: "diverged"}, "FAIL", "budget"),  # a failure of its own uses its place
    ({}, "FAIL", "interrupted"),
    ({records.ANSWERED: True}, "COMPLETE", "answered"),
    ({records.FULL_BUDGET_OF: 3, records.ANSWERED: True}, "COMPLETE", "check"),
    ({records.REPAIR_OF: 3}, "PRUNED", "repair"),
    ({records.RESAMPLED: 2, records.FAIL_REASON: "not a failure"}, "FAIL", "resampled"),
    ({records.KILLED: True, records.FAIL_REASON: "its process is gone", records.FULL_BUDGET_OF: 1}, "FAIL", "killed"),
    ({records.TIMED_OUT: True, records.FAIL_REASON: "stopped"}, "FAIL", "timed_out"),
    ({records.GIVEN_UP: 5, records.FAIL_REASON: "gave up"}, "FAIL", "given_up"),
])
def test_a_trials_role_says_whether_the_budget_counts_it(attrs, state, role):
    """"budget" exactly where the budget's count (`budget_used`) counts a trial that ran; every other role is
    one of `ROLES`."""
    import optuna

    from autosync.search.study.records import has_run, outside_budget

    made = optuna.trial.create_trial(state=getattr(optuna.trial.TrialState, state), user_attrs=attrs,
                                     **({"value": 1.0} if state == "COMPLETE" else {}))
    assert records.role_of(made) == role and role in records.ROLES
    counted = has_run(made) and not outside_budget(made) and not attrs.get(records.ANSWERED)
    assert counted == (role in ("budget", "given_up"))
