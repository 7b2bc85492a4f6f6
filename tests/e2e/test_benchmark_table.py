"""The benchmarks' figures and the one table make_table.py writes from them."""

from __future__ import annotations

import json
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import make_table  # noqa: E402
from _report import Figures  # noqa: E402


def test_figures_round_trip_into_the_table_with_goals_and_their_outcome(tmp_path):
    figures = Figures("bench_transport")
    figures.add("digits bsp: overhead", 3.1, "ms", "latency floor (1.365 ms)", 2.27, "<= 3x", True)
    figures.add("resnet18 asp: overhead", 9.0, "ms", "the larger floor", 2.4, "<= 2x", False)
    figures.add("peak memory", 700, "MiB")
    path = tmp_path / "f.json"
    figures.write(str(path))
    record = json.loads(path.read_text())
    record.update(date="2026-11-25", machine="2 CPU cores")
    text = make_table.table({"bench_transport": record})
    rows = [line for line in text.splitlines() if line.startswith("| ") and "figure" not in line]
    assert rows == ["| digits bsp: overhead | 3.1 ms | latency floor (1.365 ms) | 2.27x | <= 3x | yes |",
                    "| resnet18 asp: overhead | 9 ms | the larger floor | 2.4x | <= 2x | **no** |",
                    "| peak memory | 700 MiB |  |  |  |  |"]
    assert "measured 2026-11-25 on 2 CPU cores" in text
    assert "## bench_gpu\n\nNot measured yet." in text  # every benchmark has its section


def test_figures_write_nothing_without_a_path(tmp_path):
    Figures("bench_x").write(None)
    assert list(tmp_path.iterdir()) == []


def test_every_benchmark_in_the_directory_is_in_the_table_and_takes_json():
    scripts = sorted(p.stem for p in BENCHMARKS.glob("bench_*.py"))
    assert scripts == sorted(name for name in make_table.BENCHMARKS if name not in make_table.VARIANTS)
    assert all(script in scripts for script, _ in make_table.VARIANTS.values())  # a variant runs a script there
    for name in scripts:
        assert '"--json"' in (BENCHMARKS / f"{name}.py").read_text(), name
