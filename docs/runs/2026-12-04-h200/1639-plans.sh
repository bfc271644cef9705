#!/usr/bin/env bash
# Device plans with LaunchOptions::l2_ahead (default 4 MiB) and without:
# plan_exec tests, fused-verify --backend cuda, cuda-bench --plans-only,
# then cuda-bench --ahead-only (sizes 2-6 MiB at the start, 3-4 at the end).
set -uo pipefail
BUNDLE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"; B="$(mktemp -d)"; xz -dc "$BUNDLE/bin.tar.xz" | tar -C "$B" -xf -
LOGS="${OUT:-$PWD/gpu-logs}"; mkdir -p "$LOGS"
export FUSED_REQUIRE_CUDA=1
date -u | tee "$LOGS/tests.log"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv 2>&1 | tee -a "$LOGS/tests.log"
for t in plan_exec batch; do
  echo "=== $t" | tee -a "$LOGS/tests.log"
  timeout 120 "$B/tests/$t" --test-threads=4 2>&1 | tail -n 3 | tee -a "$LOGS/tests.log"
  echo "=== FUSED_CUDA_L2_AHEAD=0 $t" | tee -a "$LOGS/tests.log"
  FUSED_CUDA_L2_AHEAD=0 timeout 120 "$B/tests/$t" --test-threads=4 2>&1 | tail -n 3 | tee -a "$LOGS/tests.log"
done
echo "=== fused-verify --backend cuda" | tee -a "$LOGS/tests.log"
timeout 120 "$B/fused-verify" --backend cuda > "$LOGS/verify-cuda.log" 2>&1; echo "exit $?" | tee -a "$LOGS/tests.log"
grep -E "^FAIL |passed, " "$LOGS/verify-cuda.log" | tail -n 5 | tee -a "$LOGS/tests.log"
echo "=== plans"; timeout 200 "$B/cuda-bench" --plans-only > "$LOGS/plans.md" 2>&1; grep -E "^\| |^\(|^## Dec|ceiling used" "$LOGS/plans.md" | cut -c1-240
echo "=== ahead"; timeout 200 "$B/cuda-bench" --ahead-only > "$LOGS/ahead.md" 2>&1; grep -E "^\| |ceiling used" "$LOGS/ahead.md" | cut -c1-260
nvidia-smi --query-gpu=clocks.sm,clocks_event_reasons.active --format=csv
date -u
