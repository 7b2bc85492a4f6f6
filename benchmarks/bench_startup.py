"""Start-up: what `autosync --help`, `autosync validate`, a cache hit of `autosync tune` and a default
`autosync run` cost outside training.

    python benchmarks/bench_startup.py [--repeats 5]

Runs each command as a user would (a new process, from a temporary directory; medians of --repeats)
beside two floors measured in the same run: the bare interpreter and `import torch`, which every
training command pays. The commands run as on a user's machine, which writes Python's bytecode once and
reads it after: without PYTHONDONTWRITEBYTECODE (a test or CI setting that makes every start compile
autosync from source, about 0.3 s), each command run once unmeasured first to write it. For `autosync run`
(the embedded default job, BSP) it reads the run's own training wall time from its --json output and
prints the share of the wall time spent outside training. A tune of the default job (one trial) is run
once, then timed as the recurring job it answers from the cache (read from the SQLite file without Optuna:
`autosync.search.cache_file`), against `import torch`, which a cache hit does not need.
Goals (issue 64): --help under 0.5 s, validate under 1 s, a cache hit at most 1 s, on 2 idle cores; a
default run at most 25% outside training.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from _report import Figures  # noqa: E402


# the commands' environment: bytecode written and read as on a user's machine (the module doc)
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def _wall(args: list[str], cwd: Path) -> tuple[float, str]:
    start = time.perf_counter()
    proc = subprocess.run(args, cwd=cwd, capture_output=True, text=True, check=True, env=ENV)
    return time.perf_counter() - start, proc.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", default=None, help="also write the figures here (benchmarks/make_table.py)")
    args = parser.parse_args()
    python, cli = sys.executable, [sys.executable, "-m", "autosync.cli"]
    job = str(ROOT / "baselines" / "digits_default.yaml")
    with tempfile.TemporaryDirectory() as tmp:
        cwd = Path(tmp)

        def median(command: list[str]) -> float:
            _wall(command, cwd)  # unmeasured: writes the bytecode a user's later starts read
            return statistics.median(_wall(command, cwd)[0] for _ in range(args.repeats))

        interpreter = median([python, "-c", "pass"])
        torch_import = median([python, "-c", "import torch"])
        help_wall = median([*cli, "--help"])
        validate_wall = median([*cli, "validate", job])
        runs = [_wall([*cli, "run", "--json", "--out", str(cwd / f"run{i}")], cwd) for i in range(args.repeats)]
        tune = [*cli, "tune", "--storage", f"sqlite:///{cwd / 'studies.db'}",  # the race: it takes no --n-trials
                "--out", str(cwd / "tune")]
        _wall(tune, cwd)  # the search, once: what follows is the recurring job's answer from the cache
        cache_hit = median(tune)
        run_wall = statistics.median(w for w, _ in runs)
        training = statistics.median(json.loads(out)["wall_seconds"] for _, out in runs)
    outside = (run_wall - training) / run_wall
    print(f"floors: interpreter {interpreter:.2f} s, import torch {torch_import:.2f} s")
    print(f"autosync --help      {help_wall:.2f} s  ({help_wall / interpreter:.1f}x the interpreter; goal < 0.5 s)")
    print(f"autosync validate    {validate_wall:.2f} s  ({validate_wall / interpreter:.1f}x the interpreter; goal < 1 s)")
    print(f"autosync run         {run_wall:.2f} s wall, {training:.2f} s training: {outside:.0%} outside training "
          f"(goal <= 25%); import torch alone is {torch_import / run_wall:.0%} of the wall time")

    print(f"autosync tune (cache hit) {cache_hit:.2f} s  ({cache_hit / interpreter:.1f}x the interpreter, "
          f"{cache_hit / torch_import:.2f}x import torch: a recurring job's policy without loading torch; "
          "goal <= 1 s)")
    figures = Figures("bench_startup")
    figures.add("autosync --help", help_wall, "s", "the bare interpreter", help_wall / interpreter, "< 0.5 s",
                help_wall < 0.5)
    figures.add("autosync validate (default job)", validate_wall, "s", "the bare interpreter",
                validate_wall / interpreter, "< 1 s", validate_wall < 1.0)
    figures.add("autosync tune (default job), answered from the cache", cache_hit, "s", "import torch",
                cache_hit / torch_import, "<= 1 s", cache_hit <= 1.0)
    figures.add("autosync run (default job): wall time outside training", run_wall - training, "s",
                "the run's wall time", outside, "<= 0.25x", outside <= 0.25)
    figures.add("autosync run (default job): import torch alone", torch_import, "s", "the run's wall time",
                torch_import / run_wall)
    figures.write(args.json)


if __name__ == "__main__":
    main()
