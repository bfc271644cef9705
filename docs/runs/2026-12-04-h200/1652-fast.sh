#!/usr/bin/env bash
# A/B: silu and sigmoid with __expf and __fdividef ("fast", .gpu-bundle/fast)
# against main's expf and IEEE division ("main", .gpu-bundle): the fast
# build's tests and fused-verify, then cuda-bench --epilogue-only taking turns.
set -uo pipefail
BUNDLE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
M="$(mktemp -d)"; xz -dc "$BUNDLE/bin.tar.xz" | tar -C "$M" -xf -
F="$(mktemp -d)"; xz -dc "$BUNDLE/fast/bin.tar.xz" | tar -C "$F" -xf -
LOGS="${OUT:-$PWD/gpu-logs}"; mkdir -p "$LOGS"
export FUSED_REQUIRE_CUDA=1
date -u | tee "$LOGS/tests.log"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv 2>&1 | tee -a "$LOGS/tests.log"
for t in fused_unfused gemv_q8 gemv batch plan_exec; do
  echo "=== fast $t" | tee -a "$LOGS/tests.log"
  timeout 120 "$F/tests/$t" --test-threads=4 2>&1 | tail -n 3 | tee -a "$LOGS/tests.log"
done
echo "=== fast fused-verify --backend cuda" | tee -a "$LOGS/tests.log"
timeout 120 "$F/fused-verify" --backend cuda > "$LOGS/verify-cuda-fast.log" 2>&1; echo "exit $?" | tee -a "$LOGS/tests.log"
grep -E "^FAIL |passed, " "$LOGS/verify-cuda-fast.log" | tail -n 8 | tee -a "$LOGS/tests.log"
for i in 1 2; do
  for v in fast main; do
    B="$M"; [ $v = fast ] && B="$F"
    echo "=== $v $i"; timeout 200 "$B/cuda-bench" --epilogue-only > "$LOGS/epilogue-$v-$i.md" 2>&1
    grep -E "^Epilogue silu|^With|^GEMV alone|ceiling used" "$LOGS/epilogue-$v-$i.md" | sed -E 's/operands loaded after the sums [0-9.]+ µs \([^)]*\), //' | cut -c1-330
  done
done
nvidia-smi --query-gpu=clocks.sm,clocks_event_reasons.active --format=csv
date -u
