#!/usr/bin/env bash
# Run 33's two halves apart on CUDA (norm =
# the norm quantizer's block-wide scale only, new = that and attention's
# L2 prefetch and combine preload; kvtile = new with each attention tile's
# key and value rows loaded at once), and on Vulkan the segmented norm
# scale (vknew; also with 256-invocation quantizers) against the one-group
# chain (vkold); 8B-shaped stacks at
# context 512, rounds interleaved; leave-out profiles.
set -uo pipefail
D="$(dirname "${BASH_SOURCE[0]}")"
source "$D/prelude.sh"
date -u
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for t in norm vkold vknew kvtile; do xz -dc "$D/$t-llama.tar.xz" | tar -C "$H" -xf -; done
lo() { # TAG: the leave-out table of TAG's log
    sed -n '/^leave-out profile/,$p' "$OUTDIR/$1.log" | grep -v '^{' | head -"${2:-14}"
}
synth q4_0
for round in 1 2; do
    decode_timed fused-llama-norm cuda q4_0 "q4_0-norm-r$round"
    decode_timed fused-llama-vknew cuda q4_0 "q4_0-new-r$round"
    decode_timed fused-llama-kvtile cuda q4_0 "q4_0-kvtile-r$round"
    decode_timed fused-llama-vkold vulkan q4_0 "vk-q4_0-old-r$round"
    decode_timed fused-llama-vknew vulkan q4_0 "vk-q4_0-new-r$round"
    decode_timed fused-llama-vknew vulkan q4_0 "vk-q4_0-new-wg256-r$round" --quantize-workgroup 256
done
decode_timed fused-llama-vknew vulkan q4_0 vk-q4_0-new-leave-out --leave-out-profile 11
lo vk-q4_0-new-leave-out 24
decode_timed fused-llama-kvtile cuda q4_0 q4_0-kvtile-leave-out --leave-out-profile 11
lo q4_0-kvtile-leave-out
synth q4_k
for round in 1 2; do
    decode_timed fused-llama-norm cuda q4_k "q4_k-norm-r$round"
    decode_timed fused-llama-vknew cuda q4_k "q4_k-new-r$round"
    decode_timed fused-llama-kvtile cuda q4_k "q4_k-kvtile-r$round"
done
decode_timed fused-llama-norm cuda q4_0 q4_0-norm-leave-out --leave-out-profile 11
lo q4_0-norm-leave-out
decode_timed fused-llama-vkold vulkan q4_0 vk-q4_0-old-leave-out --leave-out-profile 11
lo vk-q4_0-old-leave-out 24
rm -f /tmp/synth-*.gguf
(cd "$OUTDIR" && tar czf llama-logs.tgz ./*.log && rm -f ./*.log)
date -u
