#!/usr/bin/env bash
# Every CUDA test binary, fused-verify --backend cuda, and cuda-bench's
# handoff table twice.
set -uo pipefail
BUNDLE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"; B="$(mktemp -d)"; xz -dc "$BUNDLE/bin.tar.xz" | tar -C "$B" -xf -
LOGS="${OUT:-$PWD/gpu-logs}"; mkdir -p "$LOGS"
export FUSED_REQUIRE_CUDA=1
date -u | tee "$LOGS/tests.log"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv 2>&1 | tee -a "$LOGS/tests.log"
status=0
for t in "$B"/tests/*; do
  echo "=== $(basename "$t")" | tee -a "$LOGS/tests.log"
  timeout 120 "$t" --test-threads=4 2>&1 | grep -E "^test result|FAILED|panicked|skipped" | tee -a "$LOGS/tests.log"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
done
echo "=== tests: $([ $status = 0 ] && echo all passed || echo FAILURES)" | tee -a "$LOGS/tests.log"
echo "=== fused-verify --backend cuda" | tee -a "$LOGS/tests.log"
timeout 150 "$B/fused-verify" --backend cuda --json "$LOGS/verify-cuda.json" >"$LOGS/verify-cuda.log" 2>&1 || status=1
grep -E "^FAIL |passed, " "$LOGS/verify-cuda.log" | tail -n 20 | tee -a "$LOGS/tests.log"
for i in 1 2; do
  timeout 100 "$B/cuda-bench" --handoff-only > "$LOGS/handoff-$i.md" 2>&1; grep -E "^\| |ceiling used" "$LOGS/handoff-$i.md"
done
nvidia-smi --query-gpu=clocks.sm,clocks_event_reasons.active --format=csv
date -u
exit $status
