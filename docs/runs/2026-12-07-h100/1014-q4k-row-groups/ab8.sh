#!/usr/bin/env bash
# s2: one-column Q4_K rows of at most 64 units on 4 rows a block in 2 row
# groups (every thread loading), against q8k2 (df5e4fb) and against s2's
# own plain 2-row kernel (--int-rows 2). Tests first (gemv_q8's bit-for-bit
# check of the grouped kernels against the plain ones, the group kernels
# in batch), compute-sanitizer, then the 8B-shaped Q4_K stack, interleaved,
# two rounds, s2's leave-out profile, and Q4_0 once each (unchanged
# kernels).
set -uo pipefail
D="$(dirname "${BASH_SOURCE[0]}")"
TESTS="gemv_q8 batch fused_unfused quant_out kv_tail decode plan_exec contract" SKIP_VERIFY=1 SKIP_BENCH=1 \
    SKIP_TORCH=1 SANITIZER_JOBS="memcheck:gemv_q8 memcheck:fused_unfused racecheck:fused_unfused synccheck:fused_unfused" \
    bash .h200/cuda/run.sh 2>&1 | grep -aE '^(FAIL|===|---)|test result|ERROR SUMMARY|RACECHECK SUMMARY|errors|hazard|panicked|FAILED|failed' | head -60
source "$D/prelude.sh"
date -u
for t in q8k2 s2; do xz -dc "$D/$t-llama.tar.xz" | tar -C "$H" -xf -; done
synth q4_k
for round in 1 2; do
    decode_timed fused-llama-q8k2 cuda q4_k "q4_k-q8k2-r$round"
    decode_timed fused-llama-s2 cuda q4_k "q4_k-s2-r$round"
    decode_timed fused-llama-s2 cuda q4_k "q4_k-s2-rows2-r$round" --int-rows 2
done
decode_timed fused-llama-s2 cuda q4_k q4_k-s2-leave --leave-out-profile 11
grep -a -A12 "leave-out profile" "$OUTDIR/q4_k-s2-leave.log" | head -14
rm -f /tmp/synth-q4_k.gguf
synth q4_0
decode_timed fused-llama-q8k2 cuda q4_0 q4_0-q8k2-r1
decode_timed fused-llama-s2 cuda q4_0 q4_0-s2-r1
rm -f /tmp/synth-*.gguf
(cd "$OUTDIR" && tar czf llama-logs.tgz ./*.log && rm -f ./*.log)
date -u
