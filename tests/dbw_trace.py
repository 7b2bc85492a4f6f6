"""A seeded DBW / B-DBW run of bench_scale's job, recorded as its decisions k_t (tests/unit/policies/dbw/test_dbw_scale.py).

    python tests/dbw_trace.py [--workers 1024] [--updates 60] [--write]

Writes tests/data/dbw_trace_n<n>.json with --write (the golden trace: recorded before issue #52's changes).
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path

from autosync.catalog import make_policy
from autosync.core.job import job_from_dict
from autosync.engine import Simulator
from autosync.policies.dbw._policy import DynamicK

DATA = Path(__file__).parent / "data"


def job(n: int, updates: int):
    """bench_scale's job (logistic regression, batch 8, shifted-exponential round trips), evaluations rare."""
    return job_from_dict({
        "name": f"scale_n{n}",
        "workload": {"dataset": {"name": "synthetic_classification", "n_samples": 4000, "n_features": 64,
                                 "n_classes": 4},
                     "model": {"name": "logreg"}, "batch_size": 8, "optimizer": {"lr": 0.05, "momentum": 0.9},
                     "evaluation": {"every_seconds": 1e6, "max_samples": 500}},
        "cluster": {"n_workers": n, "round_trip": {"kind": "shifted_exponential", "alpha": 0.7}},
        "target": {"metric": "test_accuracy", "threshold": 0.99},
        "budget": {"max_updates": updates},
    }, "dbw_trace")


def decisions(policy: str, n: int, updates: int) -> list[int]:
    """k_t after each update of one run of `policy` ("dbw" or "bdbw")."""
    ks: list[int] = []
    original = DynamicK.after_update

    def recording(self, server, stats):
        original(self, server, stats)
        ks.append(int(self._k))

    DynamicK.after_update = recording
    try:
        Simulator(job(n, updates), make_policy(policy, {})).run()
    finally:
        DynamicK.after_update = original
    return ks


def record(n: int, updates: int) -> dict:
    out = {"workers": n, "updates": updates}
    for policy in ("dbw", "bdbw"):
        ks = decisions(policy, n, updates)
        out[policy] = {"k": ks, "sha256": hashlib.sha256(json.dumps(ks).encode()).hexdigest()}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=1024)
    parser.add_argument("--updates", type=int, default=60)
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    out = record(args.workers, args.updates)
    print(json.dumps(out))
    if args.write:
        (DATA / f"dbw_trace_n{args.workers}.json").write_text(json.dumps(out) + "\n")


if __name__ == "__main__":
    main()
