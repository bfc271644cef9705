#!/usr/bin/env bash
# A/B: one-column integer GEMVs with G teams of 4 warps a block
# (FUSED_CUDA_Q_TEAM=G: Q4_0 r4 G 3, Q8_0 r2 G 2 / 5, Q4_K r2 G 2 / 4)
# against the plain kernels (G 1): tests with each G, then
# cuda-bench --ahead-only taking turns G 1, 3, 2, 4, twice.
set -uo pipefail
source "$(dirname "$0")/prelude.sh"
gpu_header | tee "$LOGS/tests.log"
for g in 3 2 4 5; do
  for t in gemv_q8 fused_unfused batch; do
    echo "=== G $g test $t" | tee -a "$LOGS/tests.log"
    FUSED_CUDA_Q_TEAM=$g timeout 100 "$HERE/tests/$t" --test-threads=4 2>&1 | tail -n 3 | tee -a "$LOGS/tests.log"
  done
done
for i in 1 2; do
  for g in 1 3 2 4; do
    echo "=== bench G $g run $i"
    FUSED_CUDA_Q_TEAM=$g timeout 120 "$HERE/cuda-bench" --ahead-only > "$LOGS/ahead-g$g-$i.md" 2>&1; echo "rc $?"
    grep -E "blocks an SM|^\| 4096|^\| 32768|ceiling used" "$LOGS/ahead-g$g-$i.md" | cut -c1-200
  done
done
nvidia-smi --query-gpu=clocks.sm,clocks_event_reasons.active --format=csv
date -u
