#!/usr/bin/env bash
# 1) The traced copy of Q4_K's row-group kernel (.h200/exp/bin.tar.xz):
#    tests timeline, quant_out, teams; memcheck on timeline;
#    cuda-bench --timeline-only.
# 2) Attention at context 4096: the build of 48787bc (fused-llama) against
#    the same with the split kernel of 22c0668, before 51a0927's key/value
#    tiles (fused-llama-notile), Q4_0 and Q4_K, contexts 512 and 4096,
#    taking turns; and tpf: 48787bc with the split's L2 prefetch of its
#    key/value rows before the wait (22c0668's attn_l2_rows) restored.
# Builds (not run yet: the session's device time ran out): fused-llama-notile
# is `fused-llama --features cuda,vulkan,lab` built with notile.patch
# applied to 48787bc, fused-llama-tpf the same with l2-rows.patch; both
# stripped, packed with xz into .h200/exp/notile.tar.xz; .h200/exp/bin.tar.xz
# holds cuda-bench and tests/{timeline,quant_out,teams} of scripts/gpu-bundle;
# .h200/llama is scripts/gpu-model-bundle's. On the GPU machine, carrying
# .h200/llama and .h200/exp: `FORMATS=q4_0 bash .h200/llama/ab3.sh`.
set -uo pipefail
D="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$D/prelude.sh"
X="$(mktemp -d)"
xz -dc .h200/exp/bin.tar.xz | tar -C "$X" -xf -
xz -dc .h200/exp/notile.tar.xz | tar -C "$H" -xf -
date -u
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for t in timeline quant_out teams; do
    FUSED_REQUIRE_CUDA=1 timeout 120 "$X/tests/$t" --test-threads=1 --nocapture >"$OUTDIR/test-$t.txt" 2>&1
    echo "=== $t: exit $? $(grep -a 'test result' "$OUTDIR/test-$t.txt")"
done
[ -n "${MEMCHECK:-}" ] && FUSED_REQUIRE_CUDA=1 timeout 120 compute-sanitizer --tool memcheck "$X/tests/timeline" --test-threads=1 2>&1 | grep -aE 'SUMMARY|test result'
[ -n "${TIMELINE_BENCH:-}" ] && timeout 150 "$X/cuda-bench" --timeline-only >"$OUTDIR/timeline.md" 2>&1
echo "cuda-bench --timeline-only: exit $?"
ctx4096() { # BIN FMT TAG
    local log="$OUTDIR/$3.log" p
    p="$(head -c 4024 /dev/zero | tr '\0' 'a')"
    timeout 150 "$H/$1" --model "/tmp/synth-$2.gguf" --backend cuda --ctx 4096 -n 64 \
        --ignore-eos --prompt "$p" --json --floor -v --token-timing 21 >"$log" 2>&1
    echo "$(date -u +%T) $3: exit $? $(grep -ao '"decode_tok_s":[0-9.]*' "$log")" \
        "$(grep -a '^floor:' "$log" | grep -ao '[0-9.]* tok/s; decode at [0-9.]* %')" \
        "$(grep -a '^token timing:' "$log" | grep -ao 'device median [0-9.]* us')" \
        "ids $(grep -ao '"ids":\[[0-9,]*' "$log" | md5sum | cut -c1-8)"
}
for fmt in ${FORMATS:-q4_0 q4_k}; do
    timeout 120 "$H/fused-llama-synth" --format "$fmt" --ctx 4096 "/tmp/synth-$fmt.gguf" \
        >"$OUTDIR/synth-$fmt.log" 2>&1
    echo "synth $fmt: exit $?"
    rounds="1 2"; [ "$fmt" = q4_k ] && rounds=1
    for r in $rounds; do
        for b in head notile tpf; do
            bin=fused-llama; [ $b = head ] || bin=fused-llama-$b
            ctx4096 "$bin" "$fmt" "$fmt-$b-4096-$r"
        done
    done
    for b in head notile tpf; do
        bin=fused-llama; [ $b = head ] || bin=fused-llama-$b
        decode_timed "$bin" cuda "$fmt" "$fmt-$b-512"
    done
    rm -f "/tmp/synth-$fmt.gguf"
done
(cd "$OUTDIR" && tar czf llama-logs.tgz ./*.log && rm -f ./*.log)
date -u
