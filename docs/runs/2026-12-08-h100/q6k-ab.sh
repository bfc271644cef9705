#!/usr/bin/env bash
# Vulkan K-quant GEMV codes a word at a time (new, this bundle) against a
# byte at a time (old, .h200/ab/old.tar.xz): the 8B-shaped Q4_K_M token on
# NVIDIA's Vulkan at context 512, builds interleaved (old new, new old),
# then the new build's leave-out profile.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/prelude.sh"
mkdir -p "$H/old"
xz -dc "$B/../ab/old.tar.xz" | tar -C "$H/old" -xf -
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 60 "$H/fused-llama-synth" --format q4_k_m --ctx 512 /tmp/synth-q4_k_m.gguf >/dev/null 2>&1
echo "synth: $?"
for r in 1 2; do
    order="old new"
    [ "$r" = 2 ] && order="new old"
    for b in $order; do
        bin=fused-llama
        [ "$b" = old ] && bin=old/fused-llama
        decode_timed "$bin" vulkan q4_k_m "vk-$b-$r"
    done
done
p="$(head -c 64 /dev/zero | tr '\0' 'a')"
timeout 120 "$H/fused-llama" --model /tmp/synth-q4_k_m.gguf --backend vulkan --ctx 512 -n 16 \
    --ignore-eos --prompt "$p" --leave-out-profile 11 >"$OUTDIR/vk-new-leave-out.log" 2>&1
echo "leave-out new: exit $?"
grep -A12 "^leave-out profile" "$OUTDIR/vk-new-leave-out.log"
