#!/usr/bin/env bash
# Vulkan attention's split count: the 8B-shaped Q4_0 stack on NVIDIA's
# Vulkan driver at context 4096 (64 tokens after a 4024-token prompt) and
# 512 (after a 64-token prompt), the splits aiming at 128 to 2048
# workgroups at 4096 and at 512 or 64 at 512 (--attention-workgroups; 512
# is the default; at context 512 only aims under 128 change the splits),
# two interleaved rounds; then CUDA at both contexts for reference, and
# the Vulkan leave-out profile at context 4096. Carrying .h200/llama (scripts/gpu-model-bundle);
# logs in $OUT.
set -uo pipefail
D="$(dirname "${BASH_SOURCE[0]}")"
source "$D/prelude.sh"
date -u
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
# run BACKEND CTX TAG [ARGS...]: prelude.sh's decode_timed of the Q4_0 stack.
run() {
    local be="$1" ctx="$2" tag="$3"
    shift 3
    CTX="$ctx" decode_timed fused-llama "$be" q4_0 "$tag" "$@"
}
timeout 120 "$H/fused-llama-synth" --format q4_0 --ctx 4096 /tmp/synth-q4_0.gguf \
    >"$OUTDIR/synth-q4_0.log" 2>&1
echo "synth q4_0: exit $?"
for r in 1 2; do
    for w in 512 128 256 1024 2048; do
        run vulkan 4096 "vk-4096-w$w-r$r" --attention-workgroups "$w"
    done
    for w in 512 64; do
        run vulkan 512 "vk-512-w$w-r$r" --attention-workgroups "$w"
    done
done
run cuda 4096 cuda-4096
run cuda 512 cuda-512
run vulkan 4096 vk-4096-leave-out --leave-out-profile 7
grep -a -A60 "leave-out" "$OUTDIR/vk-4096-leave-out.log" | head -70
(cd "$OUTDIR" && tar czf llama-logs.tgz ./*.log && rm -f ./*.log)
date -u
