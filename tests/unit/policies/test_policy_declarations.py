"""Policies describe themselves (`Policy.presets`, `search_baselines`, `sized_defaults`): the composed
policy's slots and parameter owners, `as_seed`, `composition_of` and the search's first trials are derived
from those declarations, the shipped search spaces agree with them, and no module outside policies/
compares policy names as strings."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import autosync
from autosync.catalog import POLICIES, make_policy
from autosync.catalog import parse_policy_spec
from autosync.policies import SEED_POLICIES, Composed, composition_of
from autosync.policies._composed import PARAMETER_OWNERS, PLAIN, SLOTS, owner
from autosync.search.space import load_space, resolve_space_path
from autosync.search.tune import baseline_policies
from tests.conftest import small_job

PACKAGE = Path(autosync.__file__).parent


def _policy_name_comparisons(path: Path, root: Path = PACKAGE.parent) -> list[str]:
    """Each comparison in `path` with a policy name as a string constant on either side."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Compare):
            continue
        for operand in (node.left, *node.comparators):
            for sub in ast.walk(operand):
                if isinstance(sub, ast.Constant) and isinstance(sub.value, str) and sub.value in POLICIES:
                    found.append(f"{path.relative_to(root)}:{node.lineno} compares {sub.value!r}")
    return found


def test_no_module_outside_policies_compares_policy_names_as_strings():
    outside = [p for p in PACKAGE.rglob("*.py") if "policies" not in p.relative_to(PACKAGE).parts]
    assert outside, PACKAGE
    assert [hit for path in outside for hit in _policy_name_comparisons(path)] == []


def test_the_check_finds_a_comparison_it_is_meant_to_refuse(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text('def f(policy):\n    return policy["policy"] in ("backup", "x")\n')
    assert _policy_name_comparisons(sample, tmp_path) == ["sample.py:2 compares 'backup'"]


def test_each_slot_choice_belongs_to_the_policy_that_declares_it():
    assert SLOTS["barrier"][0] == "bsp" and set(SLOTS["barrier"]) == {"bsp", "asp", "ssp", "backup", "dbw", "bdbw"}
    assert SLOTS["batch"] == ("equal", "lbbsp")
    assert SLOTS["schedule"] == ("none", "sync_switch", "greedy", "elastic")
    assert owner("update", "dana_slim")[0].name == "dana_slim"
    assert owner("schedule", "greedy")[1].fixed == {"stragglers": "greedy"}
    assert PARAMETER_OWNERS["lr_rule"] == {"barrier": ("backup", "dbw", "bdbw")}
    assert PARAMETER_OWNERS["dc_lambda"] == {"update": ("dc_asgd", "dana_dc")}
    assert PARAMETER_OWNERS["asp_lr_rule"] == {"barrier": ("asp",), "schedule": ("sync_switch", "greedy", "elastic")}
    for slot, choices in SLOTS.items():  # every choice but the plain one is some policy's strategy
        assert [c for c in choices if c != PLAIN[slot]] == [c for c in choices[1:]]
        assert all(owner(slot, c)[1].slots()[slot] == c for c in choices[1:])


@pytest.mark.parametrize("cls", [c for c in SEED_POLICIES if c.presets], ids=lambda c: c.name)
def test_a_seed_policy_and_its_composition_name_each_other(cls):
    seed = cls()
    slots = composition_of(seed)
    assert slots is not None
    assert Composed(**slots).as_seed() == seed


def test_a_new_combination_is_no_seed_and_a_changed_free_parameter_no_composition():
    assert Composed(barrier="ssp", update="dana_slim").as_seed() is None
    assert composition_of(make_policy("bdbw", {"solve_every": 5})) is None
    assert composition_of(make_policy("sync_switch", {"stragglers": "elastic", "switch_at": 0.5})) == {
        "schedule": "elastic", "switch_at": 0.5, "config": "sync_switch", "bsp_lr_rule": None, "asp_lr_rule": "fixed"}


def test_a_parameter_the_matching_preset_does_not_carry_makes_a_new_combination():
    """The asynchronous rule is ASP's own (named lr_rule there) and the ASP phase's, but no DANA preset's:
    DANA-Slim under another rule is a new combination, not DANA-Slim (whose slots it shares)."""
    assert Composed(barrier="asp", asp_lr_rule="staleness").as_seed() == make_policy("asp", {"lr_rule": "staleness"})
    assert composition_of(make_policy("asp", {"lr_rule": "sqrt_staleness"})) == {
        "barrier": "asp", "asp_lr_rule": "sqrt_staleness"}
    assert Composed(barrier="asp", update="dana_slim").as_seed() == make_policy("dana_slim", {})
    assert Composed(barrier="asp", update="dana_slim", asp_lr_rule="staleness").as_seed() is None


def test_the_shipped_spaces_search_only_the_parameters_the_policies_declare():
    for name in ("policy", "static_k", "switch_point"):
        space = load_space(resolve_space_path(name, name), 4)
        for family, dims in space.dimensions.items():
            declared = {preset.own_name(p) for preset in POLICIES[family].presets for p in preset.params}
            assert set(dims) <= declared | set(POLICIES[family].standalone_params), (name, family)
    composed = load_space(resolve_space_path("composed", "composed"), 4).dimensions["compose"]
    for param, dim in composed.items():
        if param in SLOTS:
            assert set(dim.choices) <= set(SLOTS[param]), param
            continue
        owners = PARAMETER_OWNERS[param]
        for clause in dim.when or []:
            assert all(set(clause[slot]) <= set(owners.get(slot, ())) for slot in clause), (param, clause)


def test_the_search_queues_bsp_and_asp_first_then_each_policy_s_own_baselines():
    job = small_job()
    n = job.cluster.n_workers
    queued = baseline_policies(job)
    assert queued[:2] == [{"policy": "bsp", "params": {}}, {"policy": "asp", "params": {}}]
    assert {"policy": "backup", "params": {"k": n, "lr_rule": "fixed"}} in queued
    assert {"policy": "split", "params": {"fractions": [1.0 / n] * n}} in queued
    assert {"policy": "sync_switch", "params": {"switch_at": 1.0, "config": "sync_switch"}} in queued  # n eta
    assert queued[-2:] == [{"policy": "compose", "params": {"barrier": "bsp"}},
                           {"policy": "compose", "params": {"barrier": "asp"}}]


def test_a_bare_policy_takes_its_size_dependent_defaults():
    assert parse_policy_spec("backup", 8)["params"]["k"] == 6
    assert parse_policy_spec("backup:k=2", 8)["params"]["k"] == 2
    assert parse_policy_spec("dbw", 8) == make_policy("dbw").to_dict()


@pytest.mark.parametrize("name, key, value", [
    ("sync_switch", "switch_seconds", float("nan")), ("sync_switch", "switch_seconds", float("inf")),
    ("dbw", "beta", float("nan")), ("dc_asgd", "dc_lambda", float("inf")), ("lwp", "horizon", float("inf")),
])
def test_a_parameter_that_is_not_a_finite_number_is_refused_by_every_policy(name, key, value):
    """nan passes every range check (each comparison with it is False) and inf most: both are refused where a
    policy is made, for every policy alike, before a run starts (sync_switch's nan ended a run in a traceback)."""
    from autosync.catalog import make_policy
    from autosync.core.errors import UserError

    with pytest.raises(UserError, match=f"policy {name} parameter {key} must be a finite number, but got {value}"):
        make_policy(name, {key: value})


def test_a_composition_reads_a_parameter_only_where_a_slot_owning_it_is_taken():
    from autosync.policies import reads_parameter

    assert reads_parameter(POLICIES["backup"](k=3), "k")
    assert reads_parameter(Composed(barrier="backup", k=3), "k")
    assert not reads_parameter(Composed(barrier="asp"), "k")  # carried at its default, unused
    assert reads_parameter(Composed(barrier="asp"), "barrier") and not reads_parameter(POLICIES["bsp"](), "k")
    assert not reads_parameter(Composed(update="easgd"), "period") and reads_parameter(Composed(local="period"), "period")
