#!/usr/bin/env bash
# A/B: the epilogue chain's kinds and activation codes read from one head
# word ("new", .gpu-bundle) against indexed parameter loads ("old",
# .gpu-bundle/old, 8ffd18f): the new build's tests and fused-verify, then
# cuda-bench --epilogue-only, --launch-only and --columns-only taking turns.
set -uo pipefail
BUNDLE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
N="$(mktemp -d)"; xz -dc "$BUNDLE/bin.tar.xz" | tar -C "$N" -xf -
O="$(mktemp -d)"; xz -dc "$BUNDLE/old/bin.tar.xz" | tar -C "$O" -xf -
LOGS="${OUT:-$PWD/gpu-logs}"; mkdir -p "$LOGS"
export FUSED_REQUIRE_CUDA=1
date -u | tee "$LOGS/tests.log"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv 2>&1 | tee -a "$LOGS/tests.log"
for t in fused_unfused gemv_q8 gemv batch plan_exec quant_out; do
  echo "=== new $t" | tee -a "$LOGS/tests.log"
  timeout 120 "$N/tests/$t" --test-threads=4 2>&1 | tail -n 3 | tee -a "$LOGS/tests.log"
done
echo "=== new fused-verify --backend cuda" | tee -a "$LOGS/tests.log"
timeout 120 "$N/fused-verify" --backend cuda > "$LOGS/verify-cuda.log" 2>&1; echo "exit $?" | tee -a "$LOGS/tests.log"
grep -E "^FAIL |passed, " "$LOGS/verify-cuda.log" | tail -n 8 | tee -a "$LOGS/tests.log"
for i in 1 2; do
  for v in new old; do
    B="$N"; [ $v = old ] && B="$O"
    echo "=== epilogue $v $i"; timeout 200 "$B/cuda-bench" --epilogue-only > "$LOGS/epilogue-$v-$i.md" 2>&1
    grep -E "^Epilogue silu|^With|^GEMV alone|ceiling used" "$LOGS/epilogue-$v-$i.md" | sed -E 's/operands loaded after the sums [0-9.]+ µs \([^)]*\), //' | cut -c1-330
  done
done
for v in new old; do
  B="$N"; [ $v = old ] && B="$O"
  echo "=== launch $v"; timeout 200 "$B/cuda-bench" --launch-only > "$LOGS/launch-$v.md" 2>&1; grep -E "^\| (4096|32768)|ceiling used" "$LOGS/launch-$v.md" | cut -c1-140
  echo "=== columns $v"; timeout 200 "$B/cuda-bench" --columns-only > "$LOGS/columns-$v.md" 2>&1; grep -E "^\| |ceiling used" "$LOGS/columns-$v.md" | cut -c1-200
done
nvidia-smi --query-gpu=clocks.sm,clocks_event_reasons.active --format=csv
date -u
