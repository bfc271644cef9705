#!/usr/bin/env bash
# Why the real model fails on NVIDIA's Vulkan driver: the plans' kind
# (device or step by step), validation messages, the norm prologue off,
# each matrix's GEMV alone (fused-verify gguf), the layers without
# attention (fused-verify decode). The model's parts as for run-model.sh.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/prelude.sh"
[ -f "$M" ] || cat /tmp/part-a /tmp/part-b "$B/../model-c/part-c" >"$M"
{ date -u; sha256sum "$M" | cut -c1-64; cat "$B/model.sha256"; } >"$S"
run() {
    local name="$1"; shift
    timeout 120 "$@" >"$L/$name.log" 2>&1
    echo "== $name: exit $?" >>"$S"
    grep -E "plan |step by step|refused|prompt:|passed|FAIL|rror|VUID|tok/s" "$L/$name.log" | head -30 >>"$S"
}
run vk-verbose "$H/fused-llama" --model "$M" --backend vulkan -n 4 -v
VK_INSTANCE_LAYERS=VK_LAYER_KHRONOS_validation run vk-validation "$H/fused-llama" --model "$M" --backend vulkan -n 1 -v
run vk-host-norm "$H/fused-llama" --model "$M" --backend vulkan --host-norm -n 8 -v
run vk-gguf "$H/fused-verify" gguf "$M" --backend vulkan --rows 256
run vk-decode "$H/fused-verify" decode "$M" --backend vulkan --layers 2 --reps 3
run vk-decode-all "$H/fused-verify" decode --backend vulkan --reps 3
date -u >>"$S"
tar -C "$L" -cf - . | xz >"$OUTDIR/logs.tar.xz"
cat "$S"
