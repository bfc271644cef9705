#!/usr/bin/env bash
# 2026-12-03 late session: the integer GEMVs' _pipe form (FUSED_CUDA_Q_PIPE).
set -uo pipefail
BUNDLE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
HERE="$(mktemp -d)"
xz -dc "$BUNDLE/bin.tar.xz" | tar -C "$HERE" -xf -
LOGS="${OUT:-$PWD/gpu-logs}"; mkdir -p "$LOGS/all"
export FUSED_REQUIRE_CUDA=1
S="$LOGS/summary.txt"
date -u | tee "$S"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv 2>&1 | tee -a "$S"
# Every test with the _pipe kernels on a grid of 3 blocks (each block walks
# many row groups); batch compares them with the group kernels bit for bit.
for t in gemv_q8 batch fused_unfused plan_exec quant_out; do
  FUSED_CUDA_Q_PIPE=blocks:3 timeout 80 "$HERE/tests/$t" --test-threads=4 > "$LOGS/all/test-pipe-$t.log" 2>&1
  echo "pipe blocks:3 $t exit $? $(grep -E '^test result' "$LOGS/all/test-pipe-$t.log" | tail -1)" | tee -a "$S"
done
for job in memcheck:gemv_q8 memcheck:batch racecheck:gemv_q8; do
  tool="${job%%:*}" t="${job#*:}"
  FUSED_CUDA_Q_PIPE=blocks:3 timeout 50 compute-sanitizer --tool "$tool" --print-limit 20 "$HERE/tests/$t" --test-threads=1 > "$LOGS/all/$tool-$t.log" 2>&1
  echo "$tool (pipe blocks:3) $t exit $? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$LOGS/all/$tool-$t.log" | tail -1)" | tee -a "$S"
done
FUSED_CUDA_Q_PIPE=1 timeout 100 "$HERE/fused-verify" --backend cuda > "$LOGS/all/verify-pipe1.log" 2>&1
echo "fused-verify --backend cuda, FUSED_CUDA_Q_PIPE=1: exit $? $(grep -E 'passed, ' "$LOGS/all/verify-pipe1.log" | tail -1)" | tee -a "$S"
n=0
for pipe in 0 1; do
  n=$((n+1))
  echo "$(date -u +%T) bench $n FUSED_CUDA_Q_PIPE=$pipe" | tee -a "$S"
  FUSED_CUDA_Q_PIPE=$pipe timeout 150 "$HERE/cuda-bench" --gemv-only > "$LOGS/bench-$n-pipe$pipe.md" 2>&1
  echo "  exit $?" | tee -a "$S"
done
date -u | tee -a "$S"
tar -C "$LOGS" -cf "$LOGS/all-logs.tar" all summary.txt
