#!/usr/bin/env bash
# The real model on the GPU machine: fused-verify's model mode on every
# backend there (CPU, Vulkan on NVIDIA's driver, CUDA) and fused-llama's
# decode speed on each (scripts/gpu-model-bundle packs them). The model
# arrives in three parts: .h200/model-a and -b, copied to /tmp by earlier
# calls, and .h200/model-c. Logs in $OUT.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/prelude.sh"
cat /tmp/part-a /tmp/part-b "$B/../model-c/part-c" >"$M"
{
    date -u
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv 2>&1
    echo "model sha256 $(sha256sum "$M" | cut -c1-64), expected $(cat "$B/model.sha256")"
    nproc
} >"$S"
timeout 300 "$H/fused-verify" model "$M" --json "$L/model.json" >"$L/model.log" 2>&1
echo "fused-verify model: exit $? $(tail -1 "$L/model.log")" >>"$S"
grep -E "FAIL|fail|skip" "$L/model.log" | head -20 >>"$S"
timeout 60 "$H/fused-llama" --model "$M" --backend cuda -n 8 -v >"$L/llama-cuda-verbose.log" 2>&1
timeout 60 "$H/fused-llama" --model "$M" --backend vulkan -n 8 -v >"$L/llama-vulkan-verbose.log" 2>&1
# The whole token (the default), the layered path and the unfused token,
# side by side, three rounds; --floor measures the copy before and after.
for r in 1 2 3; do
    for be in cuda vulkan cpu; do
        for path in whole layered unfused; do
            flag=()
            [ "$path" = whole ] || flag=(--"$path")
            log="$L/llama-$be-$path-$r.log"
            timeout 60 "$H/fused-llama" --model "$M" --backend "$be" -n 128 --ignore-eos \
                --json --floor "${flag[@]}" >"$log" 2>&1
            echo "fused-llama $be $path run $r: exit $? $(grep -o '"decode_tok_s":[0-9.]*' "$log") $(grep -o '"launches_per_token":[0-9]*' "$log") $(grep '^floor:' "$log")" >>"$S"
        done
    done
done
date -u >>"$S"
tar -C "$L" -cf - . | xz >"$OUTDIR/logs.tar.xz"
cat "$S"
