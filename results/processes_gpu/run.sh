#!/usr/bin/env bash
# The processes backend on one CUDA GPU (several worker processes share it through CUDA IPC slots), run
# from the repository root on a machine with a GPU (about 8 minutes on one H100/H200):
# 1. the GPU benchmark (worker processes against one process computing the same gradients in a loop);
# 2. the sim-to-real loop of results/sim_to_real/ on the GPU, injected stragglers: the default job's
#    workers on 4 processes sharing the GPU, model stragglers as real delays (time scale 0.02), calibrated
#    (`autosync calibrate`: two short real runs fit the server's costs), a static_k search in simulation,
#    the 8 best candidates and BSP re-run on the real clock (`injected/verify.md`);
# 3. the same loop on the GPU's own timings: `autosync profile --device cuda --check` fits the cluster
#    model from the real round trips of the 16 workers on 4 processes and calibrates it, then the profiled
#    job is tuned and verified (`profiled/verify.md`).
set -euo pipefail
OUT=${OUT:-results/processes_gpu}
UPDATES=${UPDATES:-200}
mkdir -p "$OUT"
python benchmarks/bench_gpu.py --updates "$UPDATES" --out "$OUT/bench_gpu.json" | tee "$OUT/bench_gpu.txt"
GPU="--device cuda --workers-per-device 4"
TUNE="--space static_k --n-trials 12 --storage sqlite:///$OUT/studies.db --backend processes --clock real --verify-top 8"
autosync calibrate $GPU --stragglers model --time-scale 0.02 --out "$OUT/injected/calibrated_job.yaml"
autosync tune "$OUT/injected/calibrated_job.yaml" $TUNE $GPU --stragglers model --time-scale 0.02 --out "$OUT/injected"
autosync profile $GPU --rounds 5 --check --out "$OUT/profile"
autosync tune "$OUT/profile/profiled_job.yaml" $TUNE $GPU --out "$OUT/profiled"
python results/sim_to_real/summarize.py "$OUT" injected profiled | tee "$OUT/summary.md"
