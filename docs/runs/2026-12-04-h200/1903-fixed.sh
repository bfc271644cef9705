#!/usr/bin/env bash
# Epilogue chains fixed at compile time: the tests that run them, then
# cuda-bench --epilogue-only twice (fixed and generic chains taking turns
# in each), then the device plans with and without the fixed chains.
set -uo pipefail
BUNDLE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"; B="$(mktemp -d)"; xz -dc "$BUNDLE/bin.tar.xz" | tar -C "$B" -xf -
LOGS="${OUT:-$PWD/gpu-logs}"; mkdir -p "$LOGS"
date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
export FUSED_REQUIRE_CUDA=1
for t in fused_unfused gemv_q8 gemv batch plan_exec; do
  echo "=== test $t"; timeout 200 "$B/tests/$t" > "$LOGS/test-$t.log" 2>&1; echo "rc $?"; grep -E "^test result" "$LOGS/test-$t.log"
done
for i in 1 2; do
  echo "=== epilogue $i"; timeout 260 "$B/cuda-bench" --epilogue-only > "$LOGS/epilogue-$i.md" 2>&1; echo "rc $?"; grep -E "^Epi|^With|^GEMV alone|^Batched|ceiling used" "$LOGS/epilogue-$i.md" | cut -c1-600
done
for v in 1 0; do
  echo "=== plans, FUSED_CUDA_FIXED_EPILOGUES=$v"; FUSED_CUDA_FIXED_EPILOGUES=$v timeout 100 "$B/cuda-bench" --plans-only > "$LOGS/plans-fixed$v.md" 2>&1; echo "rc $?"; grep -E "^\| |ceiling used" "$LOGS/plans-fixed$v.md" | head -30 | cut -c1-300
done
nvidia-smi --query-gpu=clocks.sm,clocks_event_reasons.active --format=csv
date -u
