#!/usr/bin/env bash
# Old (main's kernels) against new (the norm quantizer's block-wide scale,
# attention's key/value rows asked of L2 before the wait), 8B-shaped stacks
# at context 512, rounds interleaved; leave-out profiles of the new token;
# then the CUDA tests of the changed kernels.
set -uo pipefail
D="$(dirname "${BASH_SOURCE[0]}")"
source "$D/prelude.sh"
date -u
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
xz -dc "$D/old-llama.tar.xz" | tar -C "$H" -xf -
synth q4_0
for round in 1 2; do
    decode_timed fused-llama-old cuda q4_0 "q4_0-old-r$round"
    decode_timed fused-llama cuda q4_0 "q4_0-new-r$round"
done
decode_timed fused-llama cuda q4_0 q4_0-new-leave-out --leave-out-profile 11
sed -n '/^leave-out profile/,$p' "$OUTDIR/q4_0-new-leave-out.log" | grep -v '^{' | head -12
synth q4_k
for round in 1; do
    decode_timed fused-llama-old cuda q4_k "q4_k-old-r$round"
    decode_timed fused-llama cuda q4_k "q4_k-new-r$round"
done
decode_timed fused-llama cuda q4_k q4_k-new-leave-out --leave-out-profile 11
sed -n '/^leave-out profile/,$p' "$OUTDIR/q4_k-new-leave-out.log" | grep -v '^{' | head -12
rm -f /tmp/synth-*.gguf
(cd "$OUTDIR" && tar czf llama-logs.tgz ./*.log && rm -f ./*.log)
mkdir -p "$OUTDIR/cuda"
OUT="$OUTDIR/cuda" TESTS="norm decode kv_tail plan_exec argmax_tail contract" SKIP_VERIFY=1 SKIP_BENCH=1 \
    SKIP_TORCH=1 SKIP_SANITIZER=1 TEST_TIMEOUT=100 bash "$D/../cuda/run.sh" 2>&1 |
    grep -E "^=== |test result|panicked|FAILED|failed" | head -40
# compute-sanitizer on the changed kernels' tests.
mkdir -p "$OUTDIR/san"
OUT="$OUTDIR/san" TESTS=none SKIP_VERIFY=1 SKIP_BENCH=1 SKIP_TORCH=1 SANITIZER_TIMEOUT=45 \
    SANITIZER_JOBS="memcheck:norm racecheck:norm synccheck:norm racecheck:decode" \
    bash "$D/../cuda/run.sh" 2>&1 | grep -E "SUMMARY|=== compute|=== exit|test result" | head -40
date -u
