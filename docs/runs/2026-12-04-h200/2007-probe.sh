#!/usr/bin/env bash
# The fixed-chain copies' occupancy probe: every test binary (the new
# fixed_chain_copies_run_only_at_their_kernels_occupancy prints the table),
# fused-verify --backend cuda, then cuda-bench --epilogue-only once.
set -uo pipefail
BUNDLE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"; B="$(mktemp -d)"; xz -dc "$BUNDLE/bin.tar.xz" | tar -C "$B" -xf -
LOGS="${OUT:-$PWD/gpu-logs}"; mkdir -p "$LOGS"
date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
export FUSED_REQUIRE_CUDA=1
for t in "$B"/tests/*; do
  echo "=== $(basename "$t")" >> "$LOGS/tests.log"
  timeout 120 "$t" --test-threads=4 --nocapture >> "$LOGS/tests.log" 2>&1; echo "$(basename "$t") rc $?"
done
grep -E "blocks an SM|test result" "$LOGS/tests.log" | head -40
timeout 120 "$B/fused-verify" --backend cuda > "$LOGS/verify-cuda.log" 2>&1; echo "verify rc $?"; tail -1 "$LOGS/verify-cuda.log"
timeout 150 "$B/cuda-bench" --epilogue-only > "$LOGS/epilogue.md" 2>&1; echo "bench rc $?"; grep -E "^Epilogue silu|^GEMV alone|ceiling used" "$LOGS/epilogue.md" | cut -c1-300
date -u
