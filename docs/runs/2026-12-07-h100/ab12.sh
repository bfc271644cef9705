#!/usr/bin/env bash
# The final build (4af0869), short: the CUDA tests of this session's
# kernels, the 8B-shaped stacks at context 512 (two rounds each) and the
# decode layer of cuda-bench.
set -uo pipefail
D="$(dirname "${BASH_SOURCE[0]}")"
TESTS="gemv_q8 fused_unfused kv_tail decode plan_exec" SKIP_VERIFY=1 SKIP_BENCH=1 SKIP_TORCH=1 \
    SKIP_SANITIZER=1 bash .h200/cuda/run.sh 2>&1 | grep -aE '^(FAIL|===)|test result|panicked|FAILED' | head -30
source "$D/prelude.sh"
date -u
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
xz -dc "$D/final-llama.tar.xz" | tar -C "$H" -xf -
synth q4_0
decode_timed fused-llama-final cuda q4_0 q4_0-final-r1
decode_timed fused-llama-final cuda q4_0 q4_0-final-r2
rm -f /tmp/synth-q4_0.gguf
synth q4_k
decode_timed fused-llama-final cuda q4_k q4_k-final-r1
decode_timed fused-llama-final cuda q4_k q4_k-final-r2
rm -f /tmp/synth-*.gguf
source .h200/cuda/prelude.sh
timeout 90 "$HERE/cuda-bench" --layers-only >"$LOGS/layers.md" 2>&1
echo "cuda-bench --layers-only: exit $?"; grep -a -A5 "^## Decode layer through the device plan (q4_0, Q8_0" "$LOGS/layers.md" | tail -3
(cd "$OUTDIR" && tar czf llama-logs.tgz ./*.log && rm -f ./*.log)
date -u
