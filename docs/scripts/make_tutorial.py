"""Run every command of the tutorial and write what it printed into the pages' output files, so that the
tutorial shows real output and cannot go stale.

Each part of the tutorial (docs/tutorial/*.md) includes its steps' output from docs/tutorial/output/<part>/
<step>.txt: the command as typed, then what it printed on the terminal (stdout and stderr together, 100
columns wide). The commands run in a fresh folder holding a copy of examples/, as a user runs them from the
root of a fresh clone, with the study storage's default place (results/autosync-studies.db in that folder).
The figures the pages show are copied out of what the commands wrote (docs/tutorial/img/).

    python docs/scripts/make_tutorial.py                  # run every step, rewrite the output files and figures
    python docs/scripts/make_tutorial.py --out DIR        # write the output files under DIR instead (no figures)
    python docs/scripts/make_tutorial.py --part first-tune

tests/e2e/test_docs.py runs it into a temporary folder and compares what the simulator steps print with the
committed files, digits masked (times and trial numbers vary with the machine); the real-clock steps of the
third part are compared by their commands and exit codes only, since what they measure varies run to run.
A step may be expected to fail (`expect`: a refusal the page shows), and a step may run in the background
while the next runs (`background`: the second machine of a torchrun launch on several machines).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
OUTPUT = REPO / "docs" / "tutorial" / "output"
IMAGES = REPO / "docs" / "tutorial" / "img"
WIDTH = "100"


@dataclass(frozen=True)
class Step:
    name: str
    command: str  # as the reader types it, from the root of a clone; `export X=Y` sets X for the later steps
    real_clock: bool = False  # measures this machine: its numbers and verdicts vary from run to run
    expect: int = 0  # its exit code (2: the step shows a refusal)
    # started, and left running, before the next step (another machine of a torchrun launch, which waits
    # for the next step's ranks); its output is collected once that step is done
    background: bool = False


# A launch on several machines: torchrun's static rendezvous on the first machine (node 0; 127.0.0.1 here,
# where both "machines" are this one), one rank a machine: rank 0 serves, rank 1 computes
NODES = ("torchrun --nnodes 2 --nproc-per-node 1 --node-rank {rank} --master-addr 127.0.0.1 --master-port {port} "
         "-m autosync.cli {command}")
CLUSTER_JOB = "results/profiles/majority_lstm-cluster/profiled_job.yaml"
PROFILE_CLUSTER = ("profile examples/sequences/job.yaml --backend distributed --rounds 2 "
                   "--out results/profiles/majority_lstm-cluster")
RUN_ON_CLUSTER = f"run {CLUSTER_JOB} --policy tuned --backend distributed --clock real"


PARTS: dict[str, list[Step]] = {
    "first-tune": [
        Step("tune", "autosync tune"),
        Step("tune-again", "autosync tune"),
        Step("cache-list", "autosync cache list"),
        Step("run-tuned", "autosync run --policy tuned --plot"),
    ],
    "own-model": [
        Step("validate", "autosync validate examples/sequences/job.yaml"),
        Step("tune", "autosync tune examples/sequences/job.yaml --space static_k --n-trials 4"),
        Step("run-tuned", "autosync run examples/sequences/job.yaml --policy tuned"),
    ],
    "own-cluster": [
        Step("path", "export PYTHONPATH=$PWD/examples/sequences"),
        Step("check-described", "autosync calibrate examples/sequences/job.yaml --no-fit --updates 20",
             real_clock=True),
        Step("profile", "autosync profile examples/sequences/job.yaml --rounds 2 --check --check-updates 10",
             real_clock=True),
        Step("check-model", "autosync calibrate examples/sequences/job.yaml --no-fit --updates 20 "
                            "--stragglers model --time-scale 0.05", real_clock=True),
        Step("tune", "autosync tune results/profiles/majority_lstm/profiled_job.yaml --space static_k "
                     "--n-trials 4 --backend processes --clock real --verify-top 2", real_clock=True),
        Step("run-tuned", "autosync run results/profiles/majority_lstm/profiled_job.yaml --policy tuned "
                          "--backend processes --clock real", real_clock=True),
        Step("answer-json", "python -c \"import json, autosync.api as a; job = a.load_job('results/profiles/"
                            "majority_lstm/profiled_job.yaml'); print(json.dumps(a.tuned_policy(job).to_dict()))\"",
             real_clock=True),
        Step("profile-second-machine", NODES.format(rank=1, port=29531, command=PROFILE_CLUSTER), real_clock=True,
             background=True),
        Step("profile-first-machine", NODES.format(rank=0, port=29531, command=PROFILE_CLUSTER), real_clock=True),
        Step("tune-cluster", f"autosync tune {CLUSTER_JOB} --space static_k --n-trials 4 "
                             "--out results/tune/majority_lstm-cluster", real_clock=True),
        Step("second-machine", NODES.format(rank=1, port=29532, command=RUN_ON_CLUSTER), real_clock=True,
             background=True),
        Step("first-machine", NODES.format(rank=0, port=29532, command=RUN_ON_CLUSTER), real_clock=True),
        Step("check-refused", "autosync profile examples/sequences/job.yaml --backend distributed --check",
             expect=2),
    ],
}

# Figures the pages show: (part, file the commands wrote, relative to the work folder; a glob where the name
# depends on the answer) -> docs/tutorial/img/NAME
FIGURES = {
    "first-tune-race.png": ("first-tune", "results/tune/digits_default-policy/race.png"),
    "first-tune-run.png": ("first-tune", "results/runs/digits_default/*-seed0/plot.png"),
    "own-cluster-sim-vs-real.png": ("own-cluster", "results/tune/majority_lstm-profiled-static_k/sim_vs_real.png"),
}


def run_part(part: str, work: Path, out: Path) -> dict[str, int]:
    """Run a part's steps in `work`; write each step's transcript to out/<part>/<step>.txt; exit codes."""
    env = {**os.environ, "COLUMNS": WIDTH, "TERM": "dumb", "NO_COLOR": "1", "PYTHONUNBUFFERED": "1"}
    # the `autosync` the pages run is the one installed beside this interpreter, activated or not (a venv's
    # python run by its path leaves its bin/ off PATH, and every step would exit 127)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    (out / part).mkdir(parents=True, exist_ok=True)
    codes: dict[str, int] = {}
    running: list[tuple[Step, subprocess.Popen, float]] = []  # background steps, waiting for the next one

    def done(step: Step, text: str, code: int, started: float) -> None:
        print(f"[{part}/{step.name}] exit {code} in {time.monotonic() - started:.0f} s", file=sys.stderr)
        if code != step.expect:
            print(text, file=sys.stderr)
        codes[step.name] = code
        body = "\n".join(line.rstrip() for line in text.replace(str(work) + "/", "").splitlines())
        (out / part / f"{step.name}.txt").write_text(f"$ {step.command}\n{body}\n".rstrip() + "\n")

    for step in PARTS[part]:
        started = time.monotonic()
        if step.command.startswith("export "):
            key, value = step.command.removeprefix("export ").split("=", 1)
            env[key] = value.replace("$PWD", str(work)) + (os.pathsep + env[key] if env.get(key) else "")
            done(step, "", 0, started)
        elif step.background:
            running.append((step, subprocess.Popen(["bash", "-c", step.command], cwd=work, env=env,
                                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True),
                            started))
        else:
            proc = subprocess.run(["bash", "-c", step.command], cwd=work, env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, timeout=900)
            done(step, proc.stdout, proc.returncode, started)
            for waiting, background, since in running:
                try:
                    text, _ = background.communicate(timeout=120)
                except subprocess.TimeoutExpired:
                    background.kill()
                    text, _ = background.communicate()
                done(waiting, text, background.returncode, since)
            running.clear()
    return codes


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help="output folder (default: docs/tutorial/output)")
    parser.add_argument("--part", action="append", choices=list(PARTS), help="only these parts (repeatable)")
    args = parser.parse_args(argv)
    out = args.out or OUTPUT
    failed = []
    with tempfile.TemporaryDirectory(prefix="autosync-tutorial-") as tmp:
        work = Path(tmp)
        shutil.copytree(REPO / "examples", work / "examples", ignore=shutil.ignore_patterns("__pycache__"))
        for part in args.part or list(PARTS):
            codes = run_part(part, work, out)
            expected = {step.name: step.expect for step in PARTS[part]}
            failed += [f"{part}/{name}" for name, code in codes.items() if code != expected[name]]
            if args.out is None:
                for name, (figure_part, source) in FIGURES.items():
                    found = sorted(work.glob(source)) if figure_part == part else []
                    if found:
                        IMAGES.mkdir(parents=True, exist_ok=True)
                        shutil.copyfile(found[0], IMAGES / name)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
