#!/usr/bin/env bash
set -uo pipefail
BUNDLE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
HERE="$(mktemp -d)"
xz -dc "$BUNDLE/bin.tar.xz" | tar -C "$HERE" -xf -
LOGS="${OUT:-$PWD/gpu-logs}"; mkdir -p "$LOGS/all"
export FUSED_REQUIRE_CUDA=1
S="$LOGS/summary.txt"
date -u | tee "$S"
for st in 2; do
  for t in gemv_q8 batch quant_out plan_exec; do
    FUSED_CUDA_Q_STAGE=$st timeout 60 "$HERE/tests/$t" --test-threads=4 > "$LOGS/all/test-$st-$t.log" 2>&1
    echo "S=$st $t exit $? $(grep -E '^test result' "$LOGS/all/test-$st-$t.log" | tail -1)" | tee -a "$S"
  done
done
FUSED_CUDA_Q_STAGE=2 timeout 45 compute-sanitizer --tool memcheck --print-limit 20 "$HERE/tests/gemv_q8" --test-threads=1 > "$LOGS/all/san.log" 2>&1
echo "S=2 memcheck gemv_q8 exit $? $(grep -E 'ERROR SUMMARY' "$LOGS/all/san.log")" | tee -a "$S"
n=0
for st in 2 0; do
  n=$((n+1))
  echo "$(date -u +%T) bench $n FUSED_CUDA_Q_STAGE=$st" | tee -a "$S"
  FUSED_CUDA_Q_STAGE=$st timeout 100 "$HERE/cuda-bench" --gemv-only > "$LOGS/bench-$n-s$st.md" 2>&1
  echo "  exit $?" | tee -a "$S"
done
echo "$(date -u +%T) ncu" | tee -a "$S"
timeout 70 ncu --clock-control none -k regex:q4_0_r4_c1_s2 -c 1 --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats "$HERE/cuda-bench" --launch-only > "$LOGS/ncu.txt" 2>&1
echo "ncu exit $?" | tee -a "$S"
date -u | tee -a "$S"
tar -C "$LOGS" -cf "$LOGS/all-logs.tar" all summary.txt
