#!/usr/bin/env bash
# Simulation against real worker processes, three ways (about 12 minutes on 2 cores; real-clock times vary
# from run to run and from machine to machine, so this is not in make_results.sh). Run from the repository
# root. Each case calibrates the job (two short real runs fit the server's costs per update and per
# gradient), searches the static_k space in simulation, and re-runs its 8 best candidates and BSP on the
# real clock (`--verify-top 8`); summarize.py then checks the goals on the three verify.json files.
#   injected/       the default job's straggler model played as real delays (time scale 0.02)
#   machine/        this machine's own workers, profiled (`autosync profile --check`)
#   heterogeneous/  worker process 1 pinned to core 1 beside a CPU-bound co-runner: its workers are real
#                   stragglers (about 2x slower), which the profile must find on its own
# CPUS (default 0,1) names the two cores of the heterogeneous case; its co-runner sits on the second.
set -euo pipefail
OUT=${OUT:-results/sim_to_real}
CPUS=${CPUS:-0,1}
rm -rf "$OUT/injected" "$OUT/machine" "$OUT/heterogeneous" "$OUT/studies.db" "$OUT/studies.db.lock"
mkdir -p "$OUT"
TUNE=(--space static_k --n-trials 12 --storage "sqlite:///$OUT/studies.db" --backend processes --clock real
      --verify-top 8)

autosync calibrate --stragglers model --time-scale 0.02 --out "$OUT/injected/calibrated_job.yaml"
autosync tune "$OUT/injected/calibrated_job.yaml" "${TUNE[@]}" --stragglers model --time-scale 0.02 \
    --out "$OUT/injected"

autosync profile --rounds 5 --check --out "$OUT/machine/profile"
autosync tune "$OUT/machine/profile/profiled_job.yaml" "${TUNE[@]}" --out "$OUT/machine"

taskset -c "${CPUS#*,}" python -c "while True: pass" &
CORUNNER=$!
trap 'kill $CORUNNER' EXIT
autosync profile --rounds 5 --check --worker-cpus "$CPUS" --out "$OUT/heterogeneous/profile"
autosync tune "$OUT/heterogeneous/profile/profiled_job.yaml" "${TUNE[@]}" --worker-cpus "$CPUS" --out "$OUT/heterogeneous"
kill $CORUNNER
trap - EXIT

python "$(dirname "$0")/summarize.py" "$OUT" | tee "$OUT/summary.md"
