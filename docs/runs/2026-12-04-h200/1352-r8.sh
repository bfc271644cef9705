#!/usr/bin/env bash
# One-column Q8_0 / Q4_0 GEMVs of 8 rows a block (FUSED_CUDA_Q_ROWS=8) and
# the handoff table at 1-8 blocks an SM: the tests with R 8, then
# cuda-bench --launch-only with R 8 and with the defaults, taking turns.
set -uo pipefail
BUNDLE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"; B="$(mktemp -d)"; xz -dc "$BUNDLE/bin.tar.xz" | tar -C "$B" -xf -
LOGS="${OUT:-$PWD/gpu-logs}"; mkdir -p "$LOGS"
export FUSED_REQUIRE_CUDA=1
date -u | tee "$LOGS/tests.log"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv 2>&1 | tee -a "$LOGS/tests.log"
timeout 60 "$B/handoff" --test-threads=1 2>&1 | tail -n 3 | tee -a "$LOGS/tests.log"
for t in gemv_q8 fused_unfused batch; do
  echo "=== FUSED_CUDA_Q_ROWS=8 $t" | tee -a "$LOGS/tests.log"
  FUSED_CUDA_Q_ROWS=8 timeout 120 "$B/$t" --test-threads=4 2>&1 | tail -n 3 | tee -a "$LOGS/tests.log"
done
for i in 1 2; do
  echo "=== bench R8 $i"; FUSED_CUDA_Q_ROWS=8 timeout 150 "$B/cuda-bench" --launch-only > "$LOGS/launch-r8-$i.md" 2>&1; grep -E "^\| (4096|32768|stream|PDL)|ceiling used" "$LOGS/launch-r8-$i.md" | cut -c1-200
  echo "=== bench default $i"; timeout 150 "$B/cuda-bench" --launch-only > "$LOGS/launch-def-$i.md" 2>&1; grep -E "^\| (4096|32768)|ceiling used" "$LOGS/launch-def-$i.md" | cut -c1-200
done
nvidia-smi --query-gpu=clocks.sm,clocks_event_reasons.active --format=csv
date -u
