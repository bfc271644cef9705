#!/usr/bin/env bash
# The epilogue's cost (cuda-bench --epilogue-only) twice, two processes:
# bare against fused silu·mul + residual, also with the L2 look-ahead.
set -uo pipefail
BUNDLE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"; B="$(mktemp -d)"; xz -dc "$BUNDLE/bin.tar.xz" | tar -C "$B" -xf -
LOGS="${OUT:-$PWD/gpu-logs}"; mkdir -p "$LOGS"
date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
for i in 1 2; do
  echo "=== epilogue $i"; timeout 250 "$B/cuda-bench" --epilogue-only > "$LOGS/epilogue-$i.md" 2>&1; grep -E "^Epi|^With|^GEMV alone|^Batched|ceiling used" "$LOGS/epilogue-$i.md" | cut -c1-400
done
nvidia-smi --query-gpu=clocks.sm,clocks_event_reasons.active --format=csv
date -u
