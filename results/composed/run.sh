#!/usr/bin/env bash
# Composed against single seed policies: for each job, a tune over the `policy` space and one over the
# `composed` space with the same trial budget and sampler seed, in one study storage; then, per job where
# the composition is at least 1.1x faster, a leaderboard of BSP and both (3 seeds) to show why it wins; then the table.
#   bash results/composed/run.sh [TRIALS] [JOB.yaml ...]
# Default: 12 trials; every baselines/ job, then the 24 jobs of baselines/family_stragglers.yaml (written
# to results/composed/family_jobs/). Run from the repository root. Resumable: a finished tune answers
# from the cache, and the composed tune reuses what the policy tune trained (sibling studies).
# AUTOSYNC_COMPOSED_STORAGE overrides the study storage (default: results/composed/studies.db).
set -euo pipefail
trials=${1:-12}
shift || true
jobs=("$@")
out=results/composed
if [ ${#jobs[@]} -eq 0 ]; then
  autosync family baselines/family_stragglers.yaml --jobs 24 --out "$out/family_jobs" > /dev/null
  jobs=($(ls baselines/*.yaml | grep -v family_) $(ls "$out"/family_jobs/*.yaml))
fi
storage=${AUTOSYNC_COMPOSED_STORAGE:-"sqlite:///$out/studies.db"}
for job in "${jobs[@]}"; do
  name=$(basename "$job" .yaml)
  for space in policy composed; do
    autosync tune "$job" --space "$space" --n-trials "$trials" --seed 0 --storage "$storage" \
      --out "$out/plots/$name-$space" > /dev/null
  done
done
python "$out/make_table.py" --storage "$storage" --trials "$trials" --specs "${jobs[@]}" |
  while IFS=$'\t' read -r job name single composed ratio; do
    why="$out/why/$name"
    if ! awk -v r="$ratio" 'BEGIN { exit !(r >= 1.1) }'; then  # the composition does not win here
      rm -rf "$why"
      continue
    fi
    [ "$(cat "$why/specs" 2> /dev/null)" = "$single $composed" ] && continue  # made for these winners
    policies=(--policies bsp)
    [ "$single" != bsp ] && policies+=(--policies "$single")  # the policy tune answers with BSP (a fallback)
    policies+=(--policies "$composed")
    autosync leaderboard "$job" "${policies[@]}" --seeds 3 --out "$why" < /dev/null > /dev/null
    echo "$single $composed" > "$why/specs"
  done
python "$out/make_table.py" --storage "$storage" --trials "$trials" "${jobs[@]}" > "$out/README.md"
