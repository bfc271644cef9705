#!/usr/bin/env bash
# The L2 look-ahead (GemvJob::with_l2_ahead): the tests that use it, then
# cuda-bench --ahead-only twice (two processes).
set -uo pipefail
BUNDLE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"; B="$(mktemp -d)"; xz -dc "$BUNDLE/bin.tar.xz" | tar -C "$B" -xf -
LOGS="${OUT:-$PWD/gpu-logs}"; mkdir -p "$LOGS"
export FUSED_REQUIRE_CUDA=1
date -u | tee "$LOGS/tests.log"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv 2>&1 | tee -a "$LOGS/tests.log"
for t in batch errors gemv_q8 fused_unfused; do
  echo "=== $t" | tee -a "$LOGS/tests.log"
  timeout 120 "$B/tests/$t" --test-threads=4 2>&1 | tail -n 4 | tee -a "$LOGS/tests.log"
done
for i in 1 2; do
  echo "=== bench $i"; timeout 200 "$B/cuda-bench" --ahead-only > "$LOGS/ahead-$i.md" 2>&1; grep -E "^\| |ceiling used" "$LOGS/ahead-$i.md" | cut -c1-260
done
echo "=== memcheck batch"
timeout 90 compute-sanitizer --tool memcheck --print-limit 20 "$B/tests/batch" --test-threads=1 2>&1 | tail -n 5
nvidia-smi --query-gpu=clocks.sm,clocks_event_reasons.active --format=csv
date -u
