"""The lattice: every policy a search or the reference grid can answer on a job of n workers, each point
once, and the labels that name a point the same way on jobs of any size.

The lattice (`lattice_points`) holds, for a job of n workers:

- static k: backup k = 1..n-1 under the four learning-rate rules, k = n under sqrt and linear, and BSP
  (`autosync.policy_grid.static_k_policies`);
- ASP under each asynchronous rule (fixed, sqrt_staleness, staleness); SSP with staleness 0..8;
- the DANA family: DANA-Zero, DANA-Slim, DANA-DC (dc_lambda 0.2, 1, 2) and the DANA paper's appendix
  baselines NAG-ASGD, Multi-ASGD, DC-ASGD and LWP, each with its defaults;
- DBW over windows 2, 5, 10, 20 and B-DBW, each under the four rules;
- LB-BSP over its modes (auto, gpu, cpu) and rules (fixed, sqrt, linear);
- Sync-Switch at the switch points 1/16, 1/8, 1/4, 1/2, each with six (configuration, BSP-phase rule,
  ASP-phase rule) settings;
- local updates: local SGD with periods 2, 4, 8, 16, AdaComm from 8, DiLoCo with periods 8 and 16,
  asynchronous local SGD and EASGD with period 8, each with its paper's outer step;
- compositions: strong single settings of each family with the strategy of another paper that the
  `composed` space adds to them (`autosync.policies.cross_paper_variants`: LB-BSP's batches, DANA-Slim's
  look-ahead), and Sync-Switch's elastic straggler schedule.

Continuous dimensions are thinned (switch points, windows, lambdas); static k is exhaustive. Points that
run alike on n workers (the same canonical form) are kept once.

A label (`labelled_points`) names a point so that a portfolio fitted on some jobs means the same on
another: static k as a share of the workers (`SHARES`, k = round(share * n) within 1..n-1) under each rule,
BSP, every other point as its policy and parameters (a composition's k, three quarters of n, belongs to its
base and is left out of its label), and every static k of the job's own size by its k (the race's local
step moves on those: `autosync.race.neighbours`).

Below both the search and the experiments (tests/unit/test_layers.py): the search races on these points
and labels, the experiments score the search against the same points.
"""

from __future__ import annotations

import functools
import math
import re
from typing import Any

from autosync.catalog import make_policy, policy_from_dict
from autosync.policies import (BSP, DANADC, DCASGD, EASGD, LWP, NAGASGD, AdaComm, AsyncLocalSGD, BackupWorkers,
                               Composed, DANASlim, DANAZero, DiLoCo, LocalSGD, MultiASGD, cross_paper_variants)
from autosync.policy_grid import static_k_policies

__all__ = ["ALL_LR_RULES", "ASYNC_RULES", "BSP_LABEL", "BSP_POLICY", "FAMILIES", "SHARES", "composition_bases",
           "compositions", "family_of", "is_label", "labelled_points", "lattice_points"]

ALL_LR_RULES = ("fixed", "proportional", "sqrt", "linear")  # backup's, DBW's and B-DBW's rules
ASYNC_RULES = ("fixed", "sqrt_staleness", "staleness")  # ASP's and Sync-Switch's ASP phase's rules
SSP_STALENESS = tuple(range(0, 9))
DBW_WINDOWS = (2, 5, 10, 20)  # 20: DBW's default
DC_LAMBDAS = (0.2, 1.0, 2.0)  # 2: DANA-DC's default
LBBSP_MODES = ("auto", "gpu", "cpu")
LBBSP_RULES = ("fixed", "sqrt", "linear")  # proportional is fixed under LB-BSP: all n are aggregated
SWITCH_POINTS = (1 / 16, 1 / 8, 1 / 4, 1 / 2)
# (config, BSP-phase lr_rule, ASP-phase rule): the paper's, its ASP phase's rules, and the pairs that move alike
SYNC_SWITCH_SETTINGS = (("sync_switch", None, "fixed"), ("sync_switch", None, "sqrt_staleness"),
                        ("sync_switch", "sqrt", "sqrt_staleness"), ("sync_switch", "sqrt", "staleness"),
                        ("none", None, "fixed"), ("none", None, "sqrt_staleness"))
DANA_VARIANTS = ("dana_zero", "dana_slim")  # plus dana_dc over DC_LAMBDAS
DANA_APPENDIX = ("nag_asgd", "multi_asgd", "dc_asgd", "lwp")  # the DANA paper's baselines (app. A)
LOCAL_PERIODS = (2, 4, 8, 16)  # local SGD's H
FAMILIES = ("static k", "asp", "ssp", "dana", "dana appendix", "dbw", "bdbw", "lbbsp", "sync_switch", "local update",
            "composed")


def composition_bases(n_workers: int) -> list[dict[str, Any]]:
    """A strong setting of each family, as the composed space's slots, that another paper's strategy is added to."""
    return [
        {"barrier": "asp", "asp_lr_rule": "sqrt_staleness"},
        {"barrier": "ssp", "staleness": 2},
        {"barrier": "bsp", "schedule": "sync_switch", "switch_at": 0.25, "bsp_lr_rule": "sqrt",
         "asp_lr_rule": "sqrt_staleness"},
        {"barrier": "bsp", "schedule": "elastic", "switch_at": 0.25},
        {"barrier": "backup", "k": max(1, math.ceil(3 * n_workers / 4)), "lr_rule": "sqrt"},
        {"barrier": "dbw", "lr_rule": "linear"},
        {"barrier": "bdbw", "lr_rule": "linear"},
    ]


def compositions(n_workers: int) -> list[dict[str, Any]]:
    """Each base (`composition_bases`) with the strategies the composed space adds from another paper
    (`cross_paper_variants`), and the elastic schedule on its own (a composition no named policy runs)."""
    bases = composition_bases(n_workers)
    slots = [bases[3]] + [c for base in bases for c in cross_paper_variants(base)]
    return [make_policy("compose", s).to_dict() for s in slots]


def lattice_points(n_workers: int) -> list[dict[str, Any]]:
    """Every point of the lattice for a job of `n_workers` workers (see the module's
    docstring), each once by its canonical form on `n_workers`, in family order."""
    def p(name: str, **params: Any) -> dict[str, Any]:
        return make_policy(name, params).to_dict()

    grid = static_k_policies(n_workers, ALL_LR_RULES)
    grid += [p("asp", lr_rule=r) for r in ASYNC_RULES]
    grid += [p("ssp", staleness=s) for s in SSP_STALENESS]
    grid += [p(name) for name in DANA_VARIANTS] + [p("dana_dc", dc_lambda=lam) for lam in DC_LAMBDAS]
    grid += [p(name) for name in DANA_APPENDIX]
    grid += [p("dbw", window=w, lr_rule=r) for w in DBW_WINDOWS for r in ALL_LR_RULES]
    grid += [p("bdbw", lr_rule=r) for r in ALL_LR_RULES]
    grid += [p("lbbsp", mode=m, lr_rule=r) for m in LBBSP_MODES for r in LBBSP_RULES]
    grid += [p("sync_switch", switch_at=s, config=c, lr_rule=bsp, asp_lr_rule=asp)
             for s in SWITCH_POINTS for c, bsp, asp in SYNC_SWITCH_SETTINGS]
    grid += [p("local_sgd", period=h) for h in LOCAL_PERIODS] + [p("adacomm", period=8)]
    grid += [p("diloco", period=h) for h in (8, 16)] + [p("async_local_sgd", period=8), p("easgd", period=8)]
    grid += compositions(n_workers)
    first: dict[str, int] = {}  # canonical form -> its point's place in `out`
    out = []
    for policy in grid:
        canonical = _canonical(policy, n_workers)
        if canonical not in first:
            first[canonical] = len(out)
            out.append(policy)
        elif policy == BSP_POLICY:  # BSP stands for its class (on one worker, static k = 1 under any rule)
            out[first[canonical]] = policy
    return out


def _canonical(policy: dict[str, Any], n_workers: int) -> str:
    """The class of policies that run alike with `policy` on `n_workers` workers, as a key."""
    return policy_from_dict(policy).canonical(n_workers).to_json()


def family_of(policy: dict[str, Any]) -> str:
    """Which family of the grid (`FAMILIES`) a policy belongs to (by its class: a DANA-DC is a DC-ASGD too)."""
    instance = policy_from_dict(policy)
    for family, classes in (("static k", (BSP, BackupWorkers)), ("dana", (DANAZero, DANASlim, DANADC)),
                            ("dana appendix", (NAGASGD, MultiASGD, DCASGD, LWP)),
                            ("local update", (LocalSGD, AdaComm, DiLoCo, AsyncLocalSGD, EASGD)),
                            ("composed", (Composed,))):
        if isinstance(instance, classes):
            return family
    return instance.name



BSP_POLICY = {"policy": "bsp", "params": {}}
BSP_LABEL = "bsp"
# static k's shares of the workers: eighths, the finest that exists on the smallest jobs (n >= 3 resolves
# at least two of them apart)
SHARES = tuple(i / 8 for i in range(1, 8))


def labelled_points(n_workers: int) -> dict[str, dict[str, Any]]:
    """Every label and the lattice point it stands for on `n_workers` workers (see the module's docstring);
    two labels may stand for one point (a share and the k it resolves to). One worker has no static k but BSP:
    no share labels there."""
    out = {BSP_LABEL: BSP_POLICY}
    for share in SHARES if n_workers > 1 else ():  # one worker has no static k but BSP
        k = max(1, min(n_workers - 1, round(share * n_workers)))
        for rule in ALL_LR_RULES:
            out[f"backup:k={share:g}n,lr_rule={rule}"] = {"policy": "backup", "params": {"k": k, "lr_rule": rule}}
    for k in range(1, n_workers):  # every static k of this size too (a label of one size only)
        for rule in ALL_LR_RULES:
            out[f"backup:k={k},lr_rule={rule}"] = {"policy": "backup", "params": {"k": k, "lr_rule": rule}}
    for policy in lattice_points(n_workers):
        if family_of(policy) == "static k":
            continue
        composed = family_of(policy) == "composed"
        params = {k: v for k, v in policy["params"].items() if not (composed and k == "k")}
        label = policy["policy"] + "".join(f",{k}={v}" for k, v in sorted(params.items()))
        out.setdefault(label, policy)
    return out


_STATIC_K_LABEL = re.compile(r"backup:k=([1-9][0-9]*),lr_rule=(\w+)")  # a size's own static k (`labelled_points`)
LABEL_SIZE = 64  # jobs this large hold every label but the static k of larger sizes: none of the lattice's points
# collide there (`lattice_points` keeps one point of those that run alike, and small jobs merge some)


def is_label(label: str) -> bool:
    """Whether `label` names a lattice point on jobs of some size (`labelled_points`): a static k by its k names
    one on every job of more workers; every other label on jobs of `LABEL_SIZE` workers."""
    static = _STATIC_K_LABEL.fullmatch(label)
    if static is not None:
        return static.group(2) in ALL_LR_RULES
    return label in _labels_of_every_size()


@functools.lru_cache(maxsize=1)
def _labels_of_every_size() -> frozenset[str]:
    return frozenset(labelled_points(LABEL_SIZE))

