#!/usr/bin/env bash
# The event model against a real concurrent run on 2 cores (the machine CI runs on): the default job's
# straggler model played as real delays at 0.1 real s per virtual s, so a worker's injected delay is at
# least 10x its task's compute, on ONE worker process (a larger time scale and fewer processes than run.sh,
# so the 2 cores are not the bottleneck). Calibrated, searched in simulation (static_k, 12 trials), its 6
# best candidates and BSP re-run on the real clock; then spread.py runs the simulated winner, the real
# winner and BSP on 3 seeds on both sides and twice more on one seed for real. Run from the repository root
# on an otherwise idle machine (about 12 minutes on 2 cores):
#     bash results/sim_to_real/two_cores.sh            # OUT=results/sim_to_real/two_cores_run1 by default
set -euo pipefail
OUT=${OUT:-results/sim_to_real/two_cores_run1}
REAL=(--stragglers model --time-scale 0.1 --workers-per-device 1)
rm -rf "$OUT"
mkdir -p "$OUT"
autosync calibrate "${REAL[@]}" --out "$OUT/calibrated_job.yaml"
autosync tune "$OUT/calibrated_job.yaml" --space static_k --n-trials 12 --storage "sqlite:///$OUT/studies.db" \
    --backend processes --clock real "${REAL[@]}" --verify-top 6 --out "$OUT"
python "$(dirname "$0")/spread.py" "$OUT" --seeds 3 --repeats 2 --candidates 3
python "$(dirname "$0")/summarize.py" "$(dirname "$OUT")" "$(basename "$OUT")"
