#!/usr/bin/env bash
# Vulkan attention's split count: the 8B-shaped Q4_0 stack on NVIDIA's
# Vulkan driver at context 4096 (64 tokens after a 4024-token prompt) and
# 512 (after a 64-token prompt), the splits aiming at each of AIMS
# workgroups at 4096 (default: 256, the tuning's default since 8f90637,
# then 192, 320, 384, 128 and 512) and of AIMS_512 at 512 (default: 256
# and 64; there only aims under 128 change the splits)
# (--attention-workgroups), two interleaved rounds; then CUDA at both
# contexts for reference, and the Vulkan leave-out profile at context
# 4096. About 7 minutes with the default aims. Carrying .h200/llama
# (scripts/gpu-model-bundle); logs in $OUT.
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
    for w in ${AIMS:-256 192 320 384 128 512}; do
        run vulkan 4096 "vk-4096-w$w-r$r" --attention-workgroups "$w"
    done
    for w in ${AIMS_512:-256 64}; do
        run vulkan 512 "vk-512-w$w-r$r" --attention-workgroups "$w"
    done
done
run cuda 4096 cuda-4096
run cuda 512 cuda-512
run vulkan 4096 vk-4096-leave-out --leave-out-profile 7
grep -a -A60 "leave-out" "$OUTDIR/vk-4096-leave-out.log" | head -70
(cd "$OUTDIR" && tar czf llama-logs.tgz ./*.log && rm -f ./*.log)
date -u
