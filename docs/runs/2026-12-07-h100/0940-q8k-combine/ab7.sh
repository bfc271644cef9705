#!/usr/bin/env bash
# q8k2: the Q8_K combine with the combine's shared memory back at 2 KiB
# (its output staged in the weights' array), so that it starts beside the
# split under programmatic dependent launch as before. Tests (kv_tail's
# Q8_K cases over 4 splits) and compute-sanitizer, then base (769bdd6)
# against q8k2, interleaved, two rounds on each stack, and the lab's
# Q4_K switches on q8k2.
set -uo pipefail
D="$(dirname "${BASH_SOURCE[0]}")"
TESTS="kv_tail decode" SKIP_VERIFY=1 SKIP_BENCH=1 \
    SKIP_TORCH=1 SANITIZER_JOBS="memcheck:kv_tail racecheck:kv_tail synccheck:kv_tail" \
    bash .h200/cuda/run.sh 2>&1 | grep -aE '^(ok|FAIL|===|---)|test |test result|ERROR SUMMARY|RACECHECK SUMMARY|errors|hazard|panicked' | head -40
source "$D/prelude.sh"
date -u
for t in base q8k2; do xz -dc "$D/$t-llama.tar.xz" | tar -C "$H" -xf -; done
mv "$H/fused-llama-final" "$H/fused-llama-base"
synth q4_0
for round in 1 2; do
    decode_timed fused-llama-base cuda q4_0 "q4_0-base-r$round"
    decode_timed fused-llama-q8k2 cuda q4_0 "q4_0-q8k2-r$round"
done
rm -f /tmp/synth-q4_0.gguf
synth q4_k
for round in 1 2; do
    decode_timed fused-llama-base cuda q4_k "q4_k-base-r$round"
    decode_timed fused-llama-q8k2 cuda q4_k "q4_k-q8k2-r$round"
done
decode_timed fused-llama-q8k2 cuda q4_k q4_k-q8k2-fold --fold-quantizers on
decode_timed fused-llama-q8k2 cuda q4_k q4_k-q8k2-ahead0 --l2-ahead 0
decode_timed fused-llama-q8k2 cuda q4_k q4_k-q8k2-ahead2m --l2-ahead 2097152
decode_timed fused-llama-q8k2 cuda q4_k q4_k-q8k2-ahead8m --l2-ahead 8388608
decode_timed fused-llama-q8k2 cuda q4_k q4_k-q8k2-r3 
decode_timed fused-llama-q8k2 cuda q4_k q4_k-q8k2-fold2 --fold-quantizers on
rm -f /tmp/synth-*.gguf
(cd "$OUTDIR" && tar czf llama-logs.tgz ./*.log && rm -f ./*.log)
date -u
