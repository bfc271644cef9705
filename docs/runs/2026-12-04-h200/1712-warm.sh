#!/usr/bin/env bash
# A/B: the epilogue chain run once on a dummy value right after the
# dependency wait (its code then in the instruction cache at the block's
# end; "new", .gpu-bundle) against main ("old", .gpu-bundle/old): the new
# build's tests, then cuda-bench --epilogue-only taking turns, then
# --columns-only each (bare kernels).
set -uo pipefail
BUNDLE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
N="$(mktemp -d)"; xz -dc "$BUNDLE/bin.tar.xz" | tar -C "$N" -xf -
O="$(mktemp -d)"; xz -dc "$BUNDLE/old/bin.tar.xz" | tar -C "$O" -xf -
LOGS="${OUT:-$PWD/gpu-logs}"; mkdir -p "$LOGS"
export FUSED_REQUIRE_CUDA=1
date -u > "$LOGS/tests.txt"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv >> "$LOGS/tests.txt" 2>&1
for t in fused_unfused gemv_q8 gemv batch; do
  echo "=== new $t" >> "$LOGS/tests.txt"
  timeout 120 "$N/tests/$t" --test-threads=4 2>&1 | tail -n 3 >> "$LOGS/tests.txt"
done
grep -E "===|test result" "$LOGS/tests.txt"
for i in 1 2; do
  for v in new old; do
    B="$N"; [ $v = old ] && B="$O"
    echo "=== epilogue $v $i"; timeout 200 "$B/cuda-bench" --epilogue-only > "$LOGS/epilogue-$v-$i.md" 2>&1
    grep -E "^Epilogue silu|^With|^GEMV alone|^Epilogue stages.*GEMV alone|ceiling used" "$LOGS/epilogue-$v-$i.md" | sed -E 's/operands loaded after the sums [0-9.]+ µs \([^)]*\), //; s/unfused \(GEMV.*//' | cut -c1-300
  done
done
for v in new old; do
  B="$N"; [ $v = old ] && B="$O"
  echo "=== columns $v"; timeout 200 "$B/cuda-bench" --columns-only > "$LOGS/columns-$v.md" 2>&1; grep -E "^\| 4096" "$LOGS/columns-$v.md" | cut -c1-100 | tr '\n' ' '; echo
done
nvidia-smi --query-gpu=clocks.sm,clocks_event_reasons.active --format=csv
date -u
