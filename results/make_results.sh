#!/usr/bin/env bash
# Re-create every committed leaderboard in results/ (run from the repository root; about 80 minutes on
# 2 cores). Each leaderboard.md also records the exact command that produced it.
set -euo pipefail
autosync leaderboard baselines/lbbsp_gpu.yaml --policies bsp --policies lbbsp --seeds 5 --n-jobs 2
autosync leaderboard baselines/lbbsp_cpu.yaml --policies bsp --policies lbbsp:mode=cpu,predictor=last \
    --policies lbbsp:mode=cpu,predictor=ema --policies lbbsp:mode=cpu,predictor=narx --seeds 3 --n-jobs 2
# Sync-Switch's BSP trains with n * eta (its configuration policy): sync_switch:switch_at=1.0 is that BSP.
autosync leaderboard baselines/sync_switch.yaml --policies bsp --policies asp --policies sync_switch:switch_at=1.0 \
    --policies sync_switch:switch_at=0.25 --policies sync_switch:switch_at=0.5 --policies sync_switch:switch_at=0.75 \
    --policies sync_switch:switch_at=0.5,order=asp_bsp --seeds 5 --n-jobs 2
autosync leaderboard baselines/sync_switch_stragglers.yaml --policies sync_switch:switch_at=1.0 \
    --policies sync_switch:switch_at=0.5 --policies sync_switch:switch_at=0.5,stragglers=greedy \
    --policies sync_switch:switch_at=0.5,stragglers=elastic --seeds 3 --n-jobs 2
# DBW Figs. 4 and 6: every static k under both lr rules (eta k/n and the fixed eta DBW uses) against DBW,
# the paper's DBW as printed (robust=false, window=5) and B-DBW at alpha = 0, 0.2, 1.
STATIC_K="--policies bsp"
for k in $(seq 1 15); do
    STATIC_K="$STATIC_K --policies backup:k=$k,lr_rule=proportional --policies backup:k=$k,lr_rule=fixed"
done
for alpha in 0 02 1; do
    autosync leaderboard baselines/dbw_alpha$alpha.yaml $STATIC_K --policies dbw --policies dbw:robust=false,window=5 \
        --policies bdbw --seeds 5 --n-jobs 2
done
# DBW Fig. 9: half of the workers slow down 5x at 50 s; where k_t settles is the leaderboard's "late k".
autosync leaderboard baselines/dbw_slowdown.yaml --policies backup:k=4,lr_rule=proportional \
    --policies backup:k=8,lr_rule=proportional --policies backup:k=12,lr_rule=proportional \
    --policies backup:k=16,lr_rule=proportional --policies dbw --policies dbw:robust=false,window=5 --policies bdbw \
    --seeds 5 --n-jobs 2
# DANA Fig. 4 / Table 2: every asynchronous algorithm at n = 1, 4, 8, 16, 32, then accuracy against n.
DANA="--policies nag_asgd --policies multi_asgd --policies lwp --policies dc_asgd --policies dana_zero"
DANA="$DANA --policies dana_slim --policies dana_dc"
for n in 1 4 8 16 32; do
    autosync leaderboard baselines/dana_n$n.yaml $DANA --seeds 5 --n-jobs 2
done
autosync scaling results/dana_n1 results/dana_n4 results/dana_n8 results/dana_n16 results/dana_n32 \
    --out results/dana_scaling
# Online policies on 24 jobs drawn from a family unlike the papers' own, each against its best static k.
# The paper's DBW as printed (robust=false, window=5) runs beside the default one.
autosync robustness baselines/family_stragglers.yaml --jobs 24 --seeds 2 --n-jobs 2 --policies dbw \
    --policies dbw:robust=false,window=5 --policies bdbw --policies lbbsp --policies ssp --policies sync_switch \
    --policies dana_slim
# ASP's throughput over BSP's against n and the server's link (about 2 minutes).
python results/server_throughput/make_table.py
# Sync-Switch with the server in the cluster model: leaderboards, throughput against n and the link, README (about 7-12 minutes).
bash results/sync_switch_server/run.sh
# Local SGD / DiLoCo, AdaComm, asynchronous local SGD: the papers' headline shapes (about 20-30 minutes).
python results/local_updates/reproduce.py communications adacomm stragglers
# Sync-Switch's Table II on its published logs (about 20 s): binary search, the ladder and TPE, 1000 searches each.
autosync replay autosync/data/sync_switch_logs/cifar10_res32 --simulations 1000 --seed 0
