#!/usr/bin/env bash
# Compiles the GLSL compute shaders of fused-vulkan to the committed SPIR-V in
# fused-vulkan/spirv/ with glslc (Debian 12: shaderc 2023.2).
#   build-spirv.sh           rewrite fused-vulkan/spirv/*.spv
#   build-spirv.sh --check   compile into a temporary folder and fail if any
#                            committed .spv differs from its sources
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
OUT="$HERE/../spirv"
CHECK=0
[ "${1:-}" = "--check" ] && CHECK=1
DEST="$OUT"
if [ "$CHECK" = 1 ]; then
    DEST="$(mktemp -d)"
    trap 'rm -rf "$DEST"' EXIT
fi
mkdir -p "$DEST"
# glslc runs on one thread: as many compilations run at once as there are
# CPUs. A failed one stops the script (set -e on `wait -n`) after glslc
# has printed why.
JOBS="$(nproc 2>/dev/null || echo 1)"
RUNNING=0
compile() { # name source defines...
    local name="$1" src="$2"
    shift 2
    glslc --target-env=vulkan1.1 -O -fshader-stage=compute -I "$HERE" "$@" \
        -o "$DEST/$name.spv" "$HERE/$src" &
    RUNNING=$((RUNNING + 1))
    if [ "$RUNNING" -ge "$JOBS" ]; then
        wait -n
        RUNNING=$((RUNNING - 1))
    fi
}
compile copy copy.comp
compile eltwise eltwise.comp
compile fwht_shared fwht.comp
compile fwht_shuffle fwht.comp -DSHUFFLE
compile rms_norm rms_norm.comp
# The decode ops: RoPE, the row write, the fused key/value append, attention
# (a split pass, with eight lanes a row sharing subgroup shuffles or one
# invocation a row, either also doing the key/value append, and the pass
# joining the splits, also writing its output as Q8_0 or Q8_1 activations)
# and argmax.
compile rope rope.comp
compile set_row set_row.comp
compile kv_append kv_append.comp
compile attention attention.comp
compile attention_shuffle attention.comp -DSHUFFLE
compile attention_append attention.comp -DAPPEND
compile attention_shuffle_append attention.comp -DSHUFFLE -DAPPEND
compile attention_combine attention.comp -DCOMBINE
compile attention_combine_q8_0 attention.comp -DCOMBINE -DQUANT
compile attention_combine_q8_1 attention.comp -DCOMBINE -DQUANT -DQ8_1
compile argmax argmax.comp
# The L2 look-ahead: the next GEMV's first weights read beside a small
# kernel.
compile l2_touch l2_touch.comp
# gemv{,_glu}{,_sg}_TYPE: F32, F16 and BF16 from gemv.comp, the quantized formats
# from gemv_quant.comp; Q8_0 and Q4_0 also with 16-bit loads (_s16).
gemv_variants() { # name-suffix source defines...
    local suffix="$1" src="$2"
    shift 2
    compile "gemv_${suffix}" "$src" "$@"
    compile "gemv_glu_${suffix}" "$src" "$@" -DGLU
    compile "gemv_sg_${suffix}" "$src" "$@" -DSUBGROUP
    compile "gemv_sg_glu_${suffix}" "$src" "$@" -DGLU -DSUBGROUP
}
for d in f32:0 f16:1 bf16:5; do
    gemv_variants "${d%%:*}" gemv.comp -DDTYPE="${d##*:}"
done
for d in q8_0:2 q4_0:3 q4_k:4; do
    gemv_variants "${d%%:*}" gemv_quant.comp -DDTYPE="${d##*:}"
done
# The other GGML formats (f32 activations only) from gemv_blocks.comp.
for d in q4_1:6 q5_0:7 q5_1:8 iq4_nl:9 q5_k:10 q6_k:11 tq2_0:12; do
    gemv_variants "${d%%:*}" gemv_blocks.comp -DDTYPE="${d##*:}"
done
for d in q8_0:2 q4_0:3; do
    gemv_variants "${d%%:*}_s16" gemv_quant.comp -DDTYPE="${d##*:}" -DSTORAGE16
done
# Q8-mode (quantized activations): the activation quantizers and
# gemv_q8{,_glu}{,_sg}{,_dot}_TYPE, Q8_0 and Q4_0 also with 16-bit loads.
compile quantize_q8_0 quantize.comp -DDTYPE=2
compile quantize_q8_1 quantize.comp -DDTYPE=2 -DQ8_1
compile quantize_q8_k quantize.comp -DDTYPE=4
# With the RMS-norm prologue of a GEMV step (norm.glsl).
compile quantize_norm_q8_0 quantize.comp -DDTYPE=2 -DNORM
compile quantize_norm_q8_1 quantize.comp -DDTYPE=2 -DQ8_1 -DNORM
compile quantize_norm_q8_k quantize.comp -DDTYPE=4 -DNORM
q8_variants() { # name-suffix source defines...
    local suffix="$1" src="$2"
    shift 2
    for glu in "" _glu; do
        for sg in "" _sg; do
            for dot in "" _dot; do
                local defs=()
                [ -n "$glu" ] && defs+=(-DGLU)
                [ -n "$sg" ] && defs+=(-DSUBGROUP)
                [ -n "$dot" ] && defs+=(-DDOT)
                compile "gemv_q8${glu}${sg}${dot}_${suffix}" "$src" "$@" "${defs[@]}"
            done
        done
    done
}
for d in q8_0:2 q4_0:3 q4_k:4; do
    q8_variants "${d%%:*}" gemv_q8.comp -DDTYPE="${d##*:}"
done
for d in q8_0:2 q4_0:3; do
    q8_variants "${d%%:*}_s16" gemv_q8.comp -DDTYPE="${d##*:}" -DSTORAGE16
done
# Q4_1 and Q5_1 against Q8_1 activations, Q5_0 and IQ4_NL against Q8_0,
# Q5_K, Q6_K and TQ2_0 against Q8_K, from gemv_blocks.comp.
for d in q4_1:6 q5_1:8 q5_0:7 iq4_nl:9 q5_k:10 q6_k:11 tq2_0:12; do
    q8_variants "${d%%:*}" gemv_blocks.comp -DDTYPE="${d##*:}" -DQ8
done
while [ "$RUNNING" -gt 0 ]; do
    wait -n
    RUNNING=$((RUNNING - 1))
done
if [ "$CHECK" = 1 ]; then
    status=0
    for f in "$DEST"/*.spv; do
        if ! cmp -s "$f" "$OUT/$(basename "$f")"; then
            echo "SPIR-V out of date: fused-vulkan/spirv/$(basename "$f") (run fused-vulkan/shaders/build-spirv.sh)" >&2
            status=1
        fi
    done
    n_committed=$(find "$OUT" -name '*.spv' | wc -l)
    n_built=$(find "$DEST" -name '*.spv' | wc -l)
    if [ "$n_committed" != "$n_built" ]; then
        echo "fused-vulkan/spirv holds $n_committed .spv files, the sources give $n_built" >&2
        status=1
    fi
    [ "$status" = 0 ] && echo "SPIR-V: all $n_built files match their sources"
    exit "$status"
fi
echo "SPIR-V: wrote $(find "$OUT" -name '*.spv' | wc -l) files to $OUT"
