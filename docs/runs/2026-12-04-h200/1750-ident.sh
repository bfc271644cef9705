#!/usr/bin/env bash
# The epilogue's stages one at a time, now with an identity activation
# stage (the chain's control flow, no arithmetic): cuda-bench
# --epilogue-only twice.
set -uo pipefail
BUNDLE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"; B="$(mktemp -d)"; xz -dc "$BUNDLE/bin.tar.xz" | tar -C "$B" -xf -
LOGS="${OUT:-$PWD/gpu-logs}"; mkdir -p "$LOGS"
date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
for i in 1 2; do
  echo "=== epilogue $i"; timeout 200 "$B/cuda-bench" --epilogue-only > "$LOGS/epilogue-$i.md" 2>&1; grep -E "^Epilogue stages|ceiling used" "$LOGS/epilogue-$i.md" | cut -c1-400
done
nvidia-smi --query-gpu=clocks.sm,clocks_event_reasons.active --format=csv
date -u
