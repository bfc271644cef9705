#!/usr/bin/env bash
# 5-7 column integer GEMVs of 2 or 4 rows a block (FUSED_CUDA_Q_ROWS_MC57):
# the GEMV tests at each row count, then cuda-bench's several-column table
# with the variable unset, 2, 4, unset, 2, 4 (one process each).
set -uo pipefail
BUNDLE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
HERE="$(mktemp -d)"
xz -dc "$BUNDLE/bin.tar.xz" | tar -C "$HERE" -xf -
LOGS="${OUT:-$PWD/gpu-logs}"; mkdir -p "$LOGS"
export FUSED_REQUIRE_CUDA=1
date -u | tee "$LOGS/tests.log"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv 2>&1 | tee -a "$LOGS/tests.log"
for r in 2 4; do
  for t in gemv_q8 fused_unfused batch; do
    echo "=== FUSED_CUDA_Q_ROWS_MC57=$r $t" | tee -a "$LOGS/tests.log"
    FUSED_CUDA_Q_ROWS_MC57=$r timeout 120 "$HERE/tests/$t" --test-threads=4 2>&1 | tail -n 4 | tee -a "$LOGS/tests.log"
  done
done
export FUSED_BENCH_COLS=4,5,6,7,8
for i in 1 2; do
  for r in unset 2 4; do
    echo "=== bench MC57=$r run $i"
    if [ $r = unset ]; then timeout 120 "$HERE/cuda-bench" --columns-only > "$LOGS/cols-mc57-$r-$i.md" 2>&1
    else FUSED_CUDA_Q_ROWS_MC57=$r timeout 120 "$HERE/cuda-bench" --columns-only > "$LOGS/cols-mc57-$r-$i.md" 2>&1; fi
    grep -E "^\| (4096|32768)|ceiling" "$LOGS/cols-mc57-$r-$i.md"
  done
done
nvidia-smi --query-gpu=clocks.sm,clocks_event_reasons.active --format=csv
date -u
