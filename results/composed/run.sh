#!/usr/bin/env bash
# Composed against single seed policies: for each job, a tune over the `policy` space and one over the
# `composed` space with the same trial budget and sampler seed, in one study storage; then the table.
#   bash results/composed/run.sh [TRIALS] [JOB.yaml ...]      (default: 12 trials, every baselines/ job)
# Run from the repository root. Resumable: a finished study answers from the cache.
set -euo pipefail
trials=${1:-12}
shift || true
jobs=("$@")
if [ ${#jobs[@]} -eq 0 ]; then
  jobs=($(ls baselines/*.yaml | grep -v family_))
fi
out=results/composed
storage="sqlite:///$out/studies.db"
for job in "${jobs[@]}"; do
  for space in policy composed; do
    autosync tune "$job" --space "$space" --n-trials "$trials" --seed 0 --storage "$storage" \
      --out "$out/plots/$(basename "$job" .yaml)-$space" > /dev/null
  done
done
python "$out/make_table.py" --storage "$storage" --trials "$trials" "${jobs[@]}" > "$out/README.md"
