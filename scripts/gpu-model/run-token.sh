#!/usr/bin/env bash
# The whole decode token on the GPU machine, with the Llama-3-8B-shaped
# stack (d 4096, ff 14336, 32 layers, 32/8 heads, vocab 128256) that
# fused-llama-synth writes here in Q4_0 and Q4_K: fused-llama decodes it on
# CUDA and NVIDIA's Vulkan at context 512 and 4096 (a prompt filling most
# of the context, so attention reads what a long conversation reads), each
# run with the device copy measured before and after it (--floor); at
# context 512 also the whole token planned unfused (--unfused) and the
# layered path (--layered), on the same machine in the same call. One call,
# carrying .h200/llama (scripts/gpu-model-bundle); logs in $OUT. Arguments
# name the formats to run (default: q4_0 q4_k), so that a call with a short
# time limit can take one format at a time.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/prelude.sh"
{
    date -u
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv 2>&1
    nproc
} >"$S"
# `a b c ...` of n bytes: one token a byte in the synthetic vocabulary.
prompt() { head -c "$1" /dev/zero | tr '\0' 'a'; }
run() { # name timeout args...
    local name="$1" t="$2"
    shift 2
    timeout "$t" "$H/fused-llama" "$@" --json --floor -v >"$L/$name.log" 2>&1
    local rc=$?
    echo "$name: exit $rc $(grep -o '"decode_tok_s":[0-9.]*' "$L/$name.log") \
$(grep -o '"launches_per_token":[0-9]*' "$L/$name.log") $(grep '^floor:' "$L/$name.log")" >>"$S"
}
formats=("$@")
[ "${#formats[@]}" -gt 0 ] || formats=(q4_0 q4_k)
for fmt in "${formats[@]}"; do
    f=/tmp/synth-$fmt.gguf
    t0=$(date +%s)
    timeout 120 "$H/fused-llama-synth" --format "$fmt" --ctx 4096 "$f" >"$L/synth-$fmt.log" 2>&1
    echo "synth $fmt: exit $? in $(($(date +%s) - t0)) s, $(stat -c %s "$f" 2>/dev/null) bytes" >>"$S"
    for be in cuda vulkan; do
        for ctx in 512 4096; do
            p="$(prompt $((ctx - 72)))"
            run "$fmt-$be-ctx$ctx" 150 --model "$f" --backend "$be" --ctx "$ctx" -n 64 \
                --ignore-eos --prompt "$p"
        done
        if [ "$fmt" = q4_0 ]; then
            p="$(prompt 64)"
            run "$fmt-$be-ctx512-unfused" 120 --model "$f" --backend "$be" --ctx 512 -n 64 \
                --ignore-eos --prompt "$p" --unfused
            run "$fmt-$be-ctx512-whole-short" 120 --model "$f" --backend "$be" --ctx 512 -n 64 \
                --ignore-eos --prompt "$p"
            run "$fmt-$be-ctx512-layered" 120 --model "$f" --backend "$be" --ctx 512 -n 64 \
                --ignore-eos --prompt "$p" --layered
        fi
    done
    rm -f "$f"
done
date -u >>"$S"
tar -C "$L" -cf - . | xz >"$OUTDIR/logs.tar.xz"
cat "$S"
