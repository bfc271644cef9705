#!/usr/bin/env bash
# slots: the row groups over rows of up to 224 units (the down projection,
# K 14336) with each thread's sums kept per plain lane it stands for (the
# plain kernel's bits), against s2q (e6d2d41, row groups up to 64 units)
# and s2all (s2q's kernel over 224 units, other sums). Tests first
# (gemv_q8's grouped-against-plain bits at K up to 14336, the fixed-chain
# copies), compute-sanitizer, then the 8B-shaped Q4_K stack interleaved,
# two rounds, and Q4_0 once (unchanged kernels).
set -uo pipefail
D="$(dirname "${BASH_SOURCE[0]}")"
TESTS="gemv_q8 fused_unfused batch quant_out kv_tail decode plan_exec contract argmax_tail" SKIP_VERIFY=1 SKIP_BENCH=1 \
    SKIP_TORCH=1 SANITIZER_JOBS="memcheck:gemv_q8 racecheck:fused_unfused synccheck:fused_unfused memcheck:fused_unfused" \
    bash .h200/cuda/run.sh 2>&1 | grep -aE '^(FAIL|===|---)|test result|ERROR SUMMARY|RACECHECK SUMMARY|errors|hazard|panicked|FAILED|failed' | head -60
source "$D/prelude.sh"
date -u
for t in s2q slots; do xz -dc "$D/$t-llama.tar.xz" | tar -C "$H" -xf -; done
synth q4_k
for round in 1 2; do
    decode_timed fused-llama-s2q cuda q4_k "q4_k-s2q-r$round"
    decode_timed fused-llama-s2all cuda q4_k "q4_k-s2all-r$round"
    decode_timed fused-llama-slots cuda q4_k "q4_k-slots-r$round"
done
decode_timed fused-llama-slots cuda q4_k q4_k-slots-leave --leave-out-profile 11
grep -a -A12 "leave-out profile" "$OUTDIR/q4_k-slots-leave.log" | head -14
rm -f /tmp/synth-q4_k.gguf
synth q4_0
decode_timed fused-llama-s2q cuda q4_0 q4_0-s2q-r1
decode_timed fused-llama-slots cuda q4_0 q4_0-slots-r1
rm -f /tmp/synth-*.gguf
(cd "$OUTDIR" && tar czf llama-logs.tgz ./*.log && rm -f ./*.log)
date -u
