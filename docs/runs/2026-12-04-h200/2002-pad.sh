#!/usr/bin/env bash
# Experiment: the one-column Q4_0 integer kernel (9 blocks an SM by its
# registers) held to 8 blocks by 24 KiB of dynamic shared memory
# (FUSED_CUDA_Q_PAD=24576) against none: cuda-bench --epilogue-only,
# taking turns, twice each; batch test with the pad.
set -uo pipefail
BUNDLE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"; B="$(mktemp -d)"; xz -dc "$BUNDLE/bin.tar.xz" | tar -C "$B" -xf -
LOGS="${OUT:-$PWD/gpu-logs}"; mkdir -p "$LOGS"
date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
export FUSED_REQUIRE_CUDA=1
FUSED_CUDA_Q_PAD=24576 timeout 100 "$B/tests/batch" > "$LOGS/test-batch-pad.log" 2>&1; echo "batch pad rc $?"
for i in 1 2; do
  for pad in 24576 0; do
    echo "=== epilogue pad $pad $i"; FUSED_CUDA_Q_PAD=$pad timeout 150 "$B/cuda-bench" --epilogue-only > "$LOGS/epilogue-pad$pad-$i.md" 2>&1; echo "rc $?"; grep -E "^Epilogue silu|^With|^GEMV alone|ceiling used" "$LOGS/epilogue-pad$pad-$i.md" | grep -v "q4_K" | cut -c1-330 | head -9
  done
done
nvidia-smi --query-gpu=clocks.sm,clocks_event_reasons.active --format=csv
date -u
