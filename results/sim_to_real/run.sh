#!/usr/bin/env bash
# The whole loop on this machine (about 2 minutes on 2 cores; real-clock times vary from run to run):
# profile the default job's real workers, tune the profiled job in simulation with the static_k and the
# policy spaces, verify the 3 best candidates and BSP on worker processes with the real clock, and train
# the cached (real) winner on the real clock. Run from the repository root.
set -euo pipefail
OUT=${OUT:-results/sim_to_real}
mkdir -p "$OUT"
autosync profile --rounds 5 --out "$OUT/profile"
for SPACE in static_k policy; do
    mkdir -p "$OUT/$SPACE"
    autosync tune "$OUT/profile/profiled_job.yaml" --space $SPACE --n-trials 12 --storage "sqlite:///$OUT/studies.db" \
        --backend processes --clock real --verify-top 3 --out "$OUT/$SPACE"
done
autosync run "$OUT/profile/profiled_job.yaml" --policy tuned --storage "sqlite:///$OUT/studies.db" \
    --backend processes --clock real --out "$OUT/run_tuned"
