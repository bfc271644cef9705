#!/usr/bin/env bash
# The final build: compute-sanitizer on the kernel tests (the fixed-chain
# kernels included), then cuda-bench --epilogue-only twice (Q4_0 at both
# shapes, Q4_K at 4096 x 14336; fixed and generic chains taking turns).
set -uo pipefail
BUNDLE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"; B="$(mktemp -d)"; xz -dc "$BUNDLE/bin.tar.xz" | tar -C "$B" -xf -
LOGS="${OUT:-$PWD/gpu-logs}"; mkdir -p "$LOGS"
date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
export FUSED_REQUIRE_CUDA=1
for job in memcheck:fused_unfused memcheck:gemv_q8 memcheck:batch memcheck:plan_exec racecheck:fused_unfused; do
  tool="${job%%:*}" t="${job#*:}"
  echo "=== compute-sanitizer --tool $tool $t"
  timeout 150 compute-sanitizer --tool "$tool" --print-limit 20 "$B/tests/$t" --test-threads=1 > "$LOGS/san-$tool-$t.log" 2>&1; echo "exit $?"
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|test result" "$LOGS/san-$tool-$t.log"
done
for i in 1 2; do
  echo "=== epilogue $i"; timeout 150 "$B/cuda-bench" --epilogue-only > "$LOGS/epilogue-$i.md" 2>&1; echo "rc $?"; grep -E "^Epi|^With|^GEMV alone|ceiling used" "$LOGS/epilogue-$i.md" | cut -c1-420
done
nvidia-smi --query-gpu=clocks.sm,clocks_event_reasons.active --format=csv
date -u
