#!/usr/bin/env bash
set -uo pipefail
BUNDLE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
HERE="$(mktemp -d)"
xz -dc "$BUNDLE/bin.tar.xz" | tar -C "$HERE" -xf -
LOGS="${OUT:-$PWD/gpu-logs}"; mkdir -p "$LOGS"
export FUSED_REQUIRE_CUDA=1
date -u | tee "$LOGS/tests.log"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv 2>&1 | tee -a "$LOGS/tests.log"
for t in gemv_q8 fused_unfused batch; do
  echo "=== $t" | tee -a "$LOGS/tests.log"
  timeout 120 "$HERE/tests/$t" --test-threads=4 2>&1 | tail -n 40 | tee -a "$LOGS/tests.log"
done
for i in 1 2; do
  echo "=== bench mma $i"; timeout 120 "$HERE/cuda-bench" --columns-only > "$LOGS/cols-mma-$i.md" 2>&1; tail -n 50 "$LOGS/cols-mma-$i.md"
  echo "=== bench dp4a $i"; FUSED_CUDA_Q_MMA=0 timeout 120 "$HERE/cuda-bench" --columns-only > "$LOGS/cols-dp4a-$i.md" 2>&1; tail -n 50 "$LOGS/cols-dp4a-$i.md"
done
date -u
