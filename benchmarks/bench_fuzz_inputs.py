"""The input fuzzer's long run: generated job, family and search-space files through their loaders, counted.

    python benchmarks/bench_fuzz_inputs.py [--examples 10000] [--seed 0] [--show 3] [--json FILE]

`--examples` files of each kind (job, family, space; `tests/fuzzing.py` draws them: valid files with random
changes, written with YAML's oddities) are written and loaded (`tests.fuzzing.check`): each is loaded and
used, or refused in one line per problem naming the file; anything else (a traceback, a refusal that does
not name the file) is a defect. Printed: files, loaded, refused, defects and distinct defects (by the last
line of their traceback), the first `--show` of each with the file's text, and the wall time. Goal (issue
63): at least 10,000 files, 0 tracebacks. The test suite runs the same property on about a thousand
(tests/unit/core/test_fuzz_inputs.py).

Defects it found, each fixed with a regression test: a value its YAML tag cannot hold (`!!bool maybe`,
`!!timestamp nope`, `!!set [1]`: KeyError, AttributeError, TypeError inside the loader); a family range from
0.0 to -0.0 (numpy's ValueError when jobs are drawn); a family server's bandwidth that is not a number (a
ValueError when jobs are drawn; the first run of the default command found it, 1 in 10,200 files); a family
whose compute takes no time (every drawn job refused in a line naming the job, not the file: `--seed 7`, 2
in 10,200); a space's float step of 2.2e-311 (an OverflowError counting its grid: `--seed 8`), which led to
counting a space's size without listing its values (an int range of 10^12 never returned); a float
parameter given an integer past any float (10^400: an OverflowError in `make_policy`, which `autosync run
--param` met too: `--seed 10`).
"""

from __future__ import annotations

import argparse
import collections
import sys
import tempfile
import time
from pathlib import Path

from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # tests.fuzzing: the strategies the test suite runs

from tests.fuzzing import KINDS, check, files  # noqa: E402

from _report import Figures  # noqa: E402


def fuzz(kind: str, examples: int, at: int, folder: Path) -> tuple[collections.Counter, dict[str, list[str]]]:
    """`examples` files of `kind` through `check` (hypothesis seeded with `at`): the count of each outcome,
    and each distinct defect with the texts of the files that showed it."""
    counts: collections.Counter = collections.Counter()
    defects: dict[str, list[str]] = collections.defaultdict(list)
    path = folder / f"{kind}.yaml"

    @seed(at)
    @settings(max_examples=examples, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(data=files(kind), n_workers=st.sampled_from([1, 2, 4, 16]))
    def run(data: bytes, n_workers: int) -> None:
        path.write_bytes(data)
        outcome = check(kind, path, n_workers)
        counts[outcome.kind] += 1
        if outcome.defect is not None:  # told apart by the traceback's last line (the exception and message)
            key = outcome.defect.strip().splitlines()[-1][:200]
            defects[key].append(f"{outcome.defect}\n--- the file:\n{data.decode('utf-8', 'replace')[:2000]}")

    run()
    return counts, defects


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=3400, help="files of each kind")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS))
    parser.add_argument("--show", type=int, default=1, help="files shown per distinct defect")
    parser.add_argument("--json", default=None, help="also write the figures here (benchmarks/make_table.py)")
    args = parser.parse_args()
    figures = Figures("bench_fuzz_inputs")
    total: collections.Counter = collections.Counter()
    distinct = 0
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for kind in args.kinds:
            began = time.perf_counter()
            counts, defects = fuzz(kind, args.examples, args.seed, Path(tmp))
            total += counts
            distinct += len(defects)
            print(f"{kind}: {sum(counts.values())} files in {time.perf_counter() - began:.1f} s: "
                  f"{counts['loaded']} loaded, {counts['refused']} refused, {counts['defect']} defects "
                  f"({len(defects)} distinct)", flush=True)
            for key, shown in defects.items():
                print(f"  defect x{len(shown)}: {key}")
                for text in shown[:args.show]:
                    print("    " + text.replace("\n", "\n    "))
    wall = time.perf_counter() - start
    files_made = sum(total.values())
    print(f"all: {files_made} files, {total['defect']} defects ({distinct} distinct), {wall:.0f} s wall")
    figures.add("files generated and checked", files_made, "files", goal=">= 10000", met=files_made >= 10000)
    figures.add("defects (tracebacks or refusals not naming the file)", total["defect"], "files", goal="0",
                met=total["defect"] == 0)
    figures.add("files refused in one line per problem", total["refused"], "files")
    figures.add("files loaded and used", total["loaded"], "files")
    figures.add("wall time", wall, "s")
    figures.write(args.json)


if __name__ == "__main__":
    main()
