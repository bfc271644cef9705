#!/usr/bin/env bash
# The attention combine writing Q8_K (Q4_K's o-projection input) itself:
# the CUDA tests (kv_tail's new Q8_K cases) and compute-sanitizer on them,
# the decode layer of cuda-bench, then base (769bdd6) against q8k on the
# 8B-shaped stacks at context 512, interleaved, two rounds, and q8k's
# leave-out profile on Q4_K.
set -uo pipefail
D="$(dirname "${BASH_SOURCE[0]}")"
TESTS="kv_tail decode plan_exec contract" SKIP_VERIFY=1 SKIP_BENCH=1 \
    SKIP_TORCH=1 SANITIZER_JOBS="memcheck:kv_tail racecheck:kv_tail synccheck:kv_tail" \
    bash .h200/cuda/run.sh 2>&1 | grep -aE '^(ok|FAIL|===|---)|test |test result|ERROR SUMMARY|RACECHECK SUMMARY|errors|hazard|panicked' | head -80
source "$D/prelude.sh"
date -u
for t in base q8k; do xz -dc "$D/$t-llama.tar.xz" | tar -C "$H" -xf -; done
mv "$H/fused-llama-final" "$H/fused-llama-base"
synth q4_k
for round in 1 2; do
    decode_timed fused-llama-base cuda q4_k "q4_k-base-r$round"
    decode_timed fused-llama-q8k cuda q4_k "q4_k-q8k-r$round"
done
decode_timed fused-llama-q8k cuda q4_k q4_k-q8k-leave --leave-out-profile 11
grep -a -A14 -i "leave" "$OUTDIR/q4_k-q8k-leave.log" | head -30
synth q4_0
for round in 1 2; do
    decode_timed fused-llama-base cuda q4_0 "q4_0-base-r$round"
    decode_timed fused-llama-q8k cuda q4_0 "q4_0-q8k-r$round"
done
rm -f /tmp/synth-*.gguf
date -u
source .h200/cuda/prelude.sh
timeout 120 "$HERE/cuda-bench" --layers-only >"$LOGS/layers.md" 2>&1
echo "cuda-bench --layers-only: exit $?"; grep -a -i "decode layer\|copy" "$LOGS/layers.md" | head -20
(cd "$OUTDIR" && tar czf llama-logs.tgz ./*.log && rm -f ./*.log)
date -u
