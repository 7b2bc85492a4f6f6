"""Issue #52: DBW's decisions are unchanged by the work on its per-update cost at scale.

tests/data/dbw_trace_n1024.json is the golden trace, recorded before those changes (`tests/dbw_trace.py
--workers 1024 --updates 60 --write`): k_t after each of 60 updates of bench_scale's job (seed 0) at
n = 1,024 for DBW and B-DBW. The run takes about half a minute on two loaded cores.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import dbw_trace  # noqa: E402

GOLDEN = Path(__file__).parent / "data" / "dbw_trace_n1024.json"


def test_dbw_and_bdbw_decisions_at_1024_workers_match_the_recorded_trace():
    golden = json.loads(GOLDEN.read_text())
    assert golden["workers"] == 1024
    for policy in ("dbw", "bdbw"):
        assert dbw_trace.decisions(policy, golden["workers"], golden["updates"]) == golden[policy]["k"], policy
