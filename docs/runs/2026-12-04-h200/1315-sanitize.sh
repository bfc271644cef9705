#!/usr/bin/env bash
# compute-sanitizer memcheck on the kernel tests, racecheck on FWHT and GEMV.
set -uo pipefail
BUNDLE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
HERE="$(mktemp -d)"
xz -dc "$BUNDLE/bin.tar.xz" | tar -C "$HERE" -xf -
LOGS="${OUT:-$PWD/gpu-logs}"; mkdir -p "$LOGS"
export FUSED_REQUIRE_CUDA=1
date -u
for job in memcheck:gemv_q8 memcheck:fused_unfused memcheck:fwht memcheck:errors memcheck:batch memcheck:quant_out racecheck:fwht racecheck:fused_unfused racecheck:gemv_q8; do
  tool="${job%%:*}" bin="$HERE/tests/${job#*:}"
  echo "=== compute-sanitizer --tool $tool ${job#*:}"
  timeout 100 compute-sanitizer --tool "$tool" --print-limit 20 "$bin" --test-threads=1 2>&1 | tail -n 40
  echo "=== exit ${PIPESTATUS[0]}"
done > "$LOGS/sanitizer.log" 2>&1
grep -E "ERROR SUMMARY|RACECHECK SUMMARY|=== |test result" "$LOGS/sanitizer.log"
date -u
