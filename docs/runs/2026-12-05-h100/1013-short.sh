#!/usr/bin/env bash
# One-off, short: the CUDA tests after the test fixes, then cuda-bench's
# launch-options table, new (working tree) and old (3512f03), once each.
set -uo pipefail
B="$(cd "$(dirname "$0")" && pwd)"
L="$OUT"; mkdir -p "$L/r"
source "$B/cuda/prelude.sh"
pack() { tar -C "$L" -cf "$L/recheck.tar" r; }
gpu_header > "$L/r/tests.log"
for t in "$HERE"/tests/*; do
  echo "=== $(basename "$t")" >> "$L/r/tests.log"
  timeout 30 "$t" --test-threads=8 >> "$L/r/tests.log" 2>&1; echo "exit $?" >> "$L/r/tests.log"
done
grep -E "^=== |^exit|test result|panicked" "$L/r/tests.log"; pack
OUT="$L/r/launch" BENCH_ARGS=--launch-only ORDER="new old" BENCH_TIMEOUT=40 bash "$B/../.gpu-ab/run.sh" > /dev/null 2>&1; cat "$L/r/launch/summary.txt"; pack
