#!/usr/bin/env bash
# s2q: s2 (Q4_K rows of at most 64 units on 4 rows in 2 row groups) with
# the Q8_K quantizers' first-largest search by one ballot instead of three
# shuffles a round; s2all: s2q with the row groups also for rows of up to
# 224 units (the down projection, K 14336). Tests (the quantizers against
# the core bit for bit, the fixed-chain copies), compute-sanitizer, then
# q8k2 (df5e4fb) against both on the 8B-shaped Q4_K stack, interleaved,
# two rounds; Q4_0 once.
set -uo pipefail
D="$(dirname "${BASH_SOURCE[0]}")"
TESTS="gemv_q8 fused_unfused quant_out norm kv_tail decode" SKIP_VERIFY=1 SKIP_BENCH=1 \
    SKIP_TORCH=1 SANITIZER_JOBS="memcheck:quant_out racecheck:norm synccheck:norm memcheck:norm" \
    bash .h200/cuda/run.sh 2>&1 | grep -aE '^(FAIL|===|---)|test result|ERROR SUMMARY|RACECHECK SUMMARY|errors|hazard|panicked|FAILED|failed' | head -60
source "$D/prelude.sh"
date -u
for t in q8k2 s2q; do xz -dc "$D/$t-llama.tar.xz" | tar -C "$H" -xf -; done
synth q4_k
for round in 1 2; do
    decode_timed fused-llama-q8k2 cuda q4_k "q4_k-q8k2-r$round"
    decode_timed fused-llama-s2q cuda q4_k "q4_k-s2q-r$round"
    decode_timed fused-llama-s2all cuda q4_k "q4_k-s2all-r$round"
done
decode_timed fused-llama-s2q cuda q4_k q4_k-s2q-leave --leave-out-profile 11
grep -a -A12 "leave-out profile" "$OUTDIR/q4_k-s2q-leave.log" | head -14
rm -f /tmp/synth-q4_k.gguf
synth q4_0
decode_timed fused-llama-q8k2 cuda q4_0 q4_0-q8k2-r1
decode_timed fused-llama-s2q cuda q4_0 q4_0-s2q-r1
rm -f /tmp/synth-*.gguf
(cd "$OUTDIR" && tar czf llama-logs.tgz ./*.log && rm -f ./*.log)
date -u
