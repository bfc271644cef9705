#!/usr/bin/env bash
# A/B: the one-column Q4_0 integer kernel (r4, u1) capped at 9 blocks an
# SM (54 registers; old: 59, 8 blocks) and the F16 / Q4_K fixed-chain
# copies without a register cap (new) against the 19:12 build (old):
# tests of the new build, then cuda-bench --epilogue-only and --plans-only
# taking turns.
set -uo pipefail
BUNDLE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
N="$(mktemp -d)"; xz -dc "$BUNDLE/bin.tar.xz" | tar -C "$N" -xf -
O="$(mktemp -d)"; xz -dc "$BUNDLE/old/bin.tar.xz" | tar -C "$O" -xf -
LOGS="${OUT:-$PWD/gpu-logs}"; mkdir -p "$LOGS"
date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
export FUSED_REQUIRE_CUDA=1
for t in fused_unfused gemv_q8 batch plan_exec; do
  echo "=== test $t"; timeout 200 "$N/tests/$t" > "$LOGS/test-$t.log" 2>&1; echo "rc $?"; grep -E "^test result" "$LOGS/test-$t.log"
done
for i in 1 2; do
  for v in new old; do
    B=$N; [ $v = old ] && B=$O
    echo "=== epilogue $v $i"; timeout 150 "$B/cuda-bench" --epilogue-only > "$LOGS/epilogue-$v-$i.md" 2>&1; echo "rc $?"; grep -E "^Epi|^With|^GEMV alone|ceiling used" "$LOGS/epilogue-$v-$i.md" | cut -c1-420
  done
done
for v in new old; do
  B=$N; [ $v = old ] && B=$O
  echo "=== plans $v"; timeout 100 "$B/cuda-bench" --plans-only > "$LOGS/plans-$v.md" 2>&1; echo "rc $?"; grep -E "^\| fused \||^\| unfused \||ceiling used" "$LOGS/plans-$v.md" | cut -c1-200
done
nvidia-smi --query-gpu=clocks.sm,clocks_event_reasons.active --format=csv
date -u
