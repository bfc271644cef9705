#!/usr/bin/env bash
# 2026-12-03 late session: the weight lookahead (LaunchOptions::lookahead).
set -uo pipefail
BUNDLE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
HERE="$(mktemp -d)"
xz -dc "$BUNDLE/bin.tar.xz" | tar -C "$HERE" -xf -
LOGS="${OUT:-$PWD/gpu-logs}"; mkdir -p "$LOGS/all"
export FUSED_REQUIRE_CUDA=1
S="$LOGS/summary.txt"
date -u | tee "$S"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv 2>&1 | tee -a "$S"
# Tests: those that set the lookahead themselves (batch, fused_unfused,
# plan_exec), and the GEMV tests with a lookahead of 3 blocks from the env.
for t in batch fused_unfused plan_exec; do
  timeout 80 "$HERE/tests/$t" --test-threads=4 > "$LOGS/all/test-$t.log" 2>&1
  echo "$t exit $? $(grep -E '^test result' "$LOGS/all/test-$t.log" | tail -1)" | tee -a "$S"
done
for t in gemv gemv_q8 quant_out; do
  FUSED_CUDA_LOOKAHEAD=blocks:3 timeout 80 "$HERE/tests/$t" --test-threads=4 > "$LOGS/all/test-la-$t.log" 2>&1
  echo "lookahead blocks:3 $t exit $? $(grep -E '^test result' "$LOGS/all/test-la-$t.log" | tail -1)" | tee -a "$S"
done
for t in gemv_q8 batch; do
  FUSED_CUDA_LOOKAHEAD=blocks:3 timeout 50 compute-sanitizer --tool memcheck --print-limit 20 "$HERE/tests/$t" --test-threads=1 > "$LOGS/all/memcheck-$t.log" 2>&1
  echo "memcheck (lookahead blocks:3) $t exit $? $(grep -E 'ERROR SUMMARY' "$LOGS/all/memcheck-$t.log" | tail -1)" | tee -a "$S"
done
FUSED_CUDA_LOOKAHEAD=1 timeout 100 "$HERE/fused-verify" --backend cuda > "$LOGS/all/verify-la1.log" 2>&1
echo "fused-verify --backend cuda, FUSED_CUDA_LOOKAHEAD=1: exit $? $(grep -E 'passed, ' "$LOGS/all/verify-la1.log" | tail -1)" | tee -a "$S"
n=0
for la in 0 1; do
  n=$((n+1))
  echo "$(date -u +%T) bench $n FUSED_CUDA_LOOKAHEAD=$la" | tee -a "$S"
  FUSED_CUDA_LOOKAHEAD=$la timeout 150 "$HERE/cuda-bench" --gemv-only > "$LOGS/bench-$n-la$la.md" 2>&1
  echo "  exit $?" | tee -a "$S"
done
date -u | tee -a "$S"
tar -C "$LOGS" -cf "$LOGS/all-logs.tar" all summary.txt
