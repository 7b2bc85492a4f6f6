"""Ctrl-C at random moments of a command that runs several processes: does every run end in one line?

    python benchmarks/bench_ctrl_c_storm.py [--commands tune leaderboard table run calibrate] [--runs 40] [--earliest 0.1]
                                            [--latest 4.0] [--seed 0] [--json FILE]

Each run starts one command on a fresh folder, in a session of its own, and sends SIGINT to its process group
(as a terminal's Ctrl-C reaches the command and every process it started) after a delay drawn uniformly from
[--earliest, --latest] seconds. The commands: `tune` of the tests' tiny job (its budget 60 virtual seconds and
a target it never meets, so the race is still running) with `--n-jobs 2` (its helper spawned, importing
torch, BSP's reference, both processes racing); `leaderboard` of that job (3 policies x 2 seeds on joblib's
2 worker processes); `table` of the first quarry job (its cells on joblib's 2 worker processes); `run` of the
tiny job on the processes backend (its 2 worker processes forked; it ends about 2.5 s after the start, so the
later Ctrl-Cs find it finished); `calibrate` of that job (its two real runs on 2 worker processes each, the
simulations and the fit: about 5 s). The Ctrl-C lands while the command's modules load, as its workers start,
while they train. A run ends well when the command exits with status 130, prints exactly one
`error: interrupted` line and no traceback, or had finished before the Ctrl-C came (status 0, no traceback).
Printed: each run that did not, with its delay, exit status and the last lines of its error output, and the
count per command (goal 0). Below --earliest the Ctrl-C can land before Python runs any of autosync (its
interpreter's own start), where nothing can catch it. tests/e2e/test_interruptions.py checks two of these moments of `tune`.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # tests.conftest: the tests' tiny job

from autosync.data import BASELINE_DIR  # noqa: E402
from tests.conftest import TINY_JOB  # noqa: E402

from _report import Figures  # noqa: E402

COMMANDS = ("tune", "leaderboard", "table", "run", "calibrate")  # each with 2 processes or more (`command_line`)


def never_met_job(path: Path) -> Path:
    """The tiny job with a 60 s budget and a target it never meets (as the interruption tests' `_long`)."""
    text = re.sub(r"max_virtual_seconds: \d+", "max_virtual_seconds: 60", TINY_JOB)
    path.write_text(text.replace("threshold: 0.8", "threshold: 0.99"))
    return path


def command_line(command: str, job: Path, folder: Path) -> list[str]:
    """The arguments of `command` (see the module's docstring), writing into `folder`."""
    storage = f"sqlite:///{folder / 's.db'}"
    if command == "tune":
        return ["tune", str(job), "--n-jobs", "2", "--storage", storage]
    if command == "leaderboard":
        return ["leaderboard", str(job), "--policies", "bsp", "--policies", "asp", "--policies", "ssp", "--seeds",
                "2", "--n-jobs", "2", "--out", str(folder / "leaderboard"), "--storage", storage]
    if command == "table":
        return ["table", str(BASELINE_DIR / "family_quarry.yaml"), "--jobs", "1", "--n-jobs", "2", "--out",
                str(folder / "table")]
    if command == "calibrate":
        return ["calibrate", str(job), "--out", str(folder / "calibrated.yaml")]
    return ["run", str(job), "--backend", "processes", "--out", str(folder / "run")]


def interrupted_run(argv: list[str], folder: Path, delay: float) -> tuple[int, str]:
    """`autosync ARGV`, Ctrl-C to its process group after `delay` seconds: its exit status and stderr."""
    command = subprocess.Popen([sys.executable, "-m", "autosync.cli", *argv], cwd=folder,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    time.sleep(delay)
    os.killpg(command.pid, signal.SIGINT)
    stderr = command.communicate(timeout=120)[1]
    return command.returncode, stderr


def ended_well(status: int, stderr: str) -> bool:
    """Exit status 130 and one `error: interrupted` line, or 0 (finished first); no traceback either way."""
    lines = [x for x in stderr.splitlines() if x.startswith("error: interrupted")]
    quiet = "Traceback" not in stderr and "Exception ignored" not in stderr
    return quiet and ((status == 130 and len(lines) == 1) or (status == 0 and not lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commands", nargs="+", default=list(COMMANDS), choices=list(COMMANDS))
    parser.add_argument("--runs", type=int, default=40, help="per command")
    parser.add_argument("--earliest", type=float, default=0.1, help="seconds after the start")
    parser.add_argument("--latest", type=float, default=4.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None, help="also write the figures here (benchmarks/make_table.py)")
    args = parser.parse_args()
    figures = Figures("bench_ctrl_c_storm")
    with tempfile.TemporaryDirectory(prefix="ctrl-c-storm-") as tmp:
        job = never_met_job(Path(tmp) / "long.yaml")
        for command in args.commands:
            draw = random.Random(args.seed)
            bad, finished = [], 0
            began = time.monotonic()
            for i in range(args.runs):
                delay = draw.uniform(args.earliest, args.latest)
                folder = Path(tmp) / f"{command}{i}"
                folder.mkdir()
                status, stderr = interrupted_run(command_line(command, job, folder), folder, delay)
                finished += status == 0
                if not ended_well(status, stderr):
                    bad.append(delay)
                    tail = " | ".join(stderr.strip().splitlines()[-3:])
                    print(f"{command} run {i}: Ctrl-C after {delay:.2f} s: exit {status}: {tail}", flush=True)
            wall = time.monotonic() - began
            print(f"{command}: {len(bad)} of {args.runs} runs did not end well (Ctrl-C {args.earliest:g}-"
                  f"{args.latest:g} s after the start; {finished} had finished first), {wall:.0f} s", flush=True)
            figures.add(f"{command}: runs interrupted at random ({args.earliest:g}-{args.latest:g} s after the "
                        f"start; {finished} finished first)", args.runs, "runs")
            figures.add(f"{command}: runs not ending in one line with exit status 130 (or finished, quiet)",
                        len(bad), "runs", goal="0", met=not bad)
            figures.add(f"{command}: wall time", wall, "s")
    figures.write(args.json)


if __name__ == "__main__":
    main()
