#!/usr/bin/env bash
# 2-4 column integer GEMVs of 2 or 4 rows a block with one unit in flight
# (FUSED_CUDA_Q_ROWS_MC24) against the default (2 rows, 2 units), and the
# new 5-8 column defaults: the GEMV tests at each setting, then cuda-bench's
# several-column table with MC24 unset, 2, 4, twice.
set -uo pipefail
BUNDLE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
HERE="$(mktemp -d)"
xz -dc "$BUNDLE/bin.tar.xz" | tar -C "$HERE" -xf -
LOGS="${OUT:-$PWD/gpu-logs}"; mkdir -p "$LOGS"
export FUSED_REQUIRE_CUDA=1
date -u | tee "$LOGS/tests.log"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv 2>&1 | tee -a "$LOGS/tests.log"
for v in default 2 4; do
  for t in gemv_q8 fused_unfused batch; do
    echo "=== FUSED_CUDA_Q_ROWS_MC24=$v $t" | tee -a "$LOGS/tests.log"
    FUSED_CUDA_Q_ROWS_MC24=$v timeout 120 "$HERE/tests/$t" --test-threads=4 2>&1 | tail -n 4 | tee -a "$LOGS/tests.log"
  done
done
export FUSED_BENCH_COLS=2,3,4,5,6,7,8
for i in 1 2; do
  for r in unset 2 4; do
    echo "=== bench MC24=$r run $i"
    if [ $r = unset ]; then timeout 120 "$HERE/cuda-bench" --columns-only > "$LOGS/cols-mc24-$r-$i.md" 2>&1
    else FUSED_CUDA_Q_ROWS_MC24=$r timeout 120 "$HERE/cuda-bench" --columns-only > "$LOGS/cols-mc24-$r-$i.md" 2>&1; fi
    grep -E "^\| (4096|32768) × [0-9]+ \| [a-zA-Z0-9_]+ \| [234] |ceiling used" "$LOGS/cols-mc24-$r-$i.md"
  done
done
nvidia-smi --query-gpu=clocks.sm,clocks_event_reasons.active --format=csv
date -u
