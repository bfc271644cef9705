#!/usr/bin/env bash
# The attention's splits merged by the split kernel's last blocks (on, the
# new default) against the combine launch (off), one fused-llama build,
# --merge-attention-splits on|off interleaved: the CUDA tests of the
# decode ops and plans first (kv_tail's two new cases among them) with
# compute-sanitizer on kv_tail, then the 8B-shaped stack, Q4_0 at context
# 4096 and 512 (two rounds), Q4_K at both (one), and the leave-out profile
# of Q4_0 at 512 both ways. Carrying .h200/cuda and .h200/llama; logs in $OUT.
set -uo pipefail
D="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$D/prelude.sh"
date -u
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
T="$(mktemp -d)"
xz -dc .h200/cuda/bin.tar.xz | tar -C "$T" -xf -
for t in kv_tail decode plan_exec argmax_tail contract norm fused_unfused; do
    FUSED_REQUIRE_CUDA=1 timeout 120 "$T/tests/$t" --test-threads=1 >"$OUTDIR/test-$t.txt" 2>&1
    echo "=== $t: exit $? $(grep -a 'test result' "$OUTDIR/test-$t.txt")"
done
# memcheck on all of kv_tail; racecheck and synccheck on the merge's test.
for tool in memcheck racecheck synccheck; do
    filter=the_split_blocks_merge; [ $tool = memcheck ] && filter=
    FUSED_REQUIRE_CUDA=1 timeout 120 compute-sanitizer --tool $tool "$T/tests/kv_tail" $filter \
        --test-threads=1 >"$OUTDIR/sanitizer-$tool-kv_tail.txt" 2>&1
    echo "$tool kv_tail: exit $? $(grep -aE 'SUMMARY|test result' "$OUTDIR/sanitizer-$tool-kv_tail.txt" | tr '\n' ' ')"
done
date -u
for fmt in ${FORMATS:-q4_0 q4_k}; do
    timeout 120 "$H/fused-llama-synth" --format "$fmt" --ctx 4096 "/tmp/synth-$fmt.gguf" \
        >"$OUTDIR/synth-$fmt.log" 2>&1
    echo "synth $fmt: exit $?"
    rounds="1 2"; [ "$fmt" = q4_k ] && rounds=1
    for r in $rounds; do
        for m in on off; do
            CTX=4096 decode_timed fused-llama cuda "$fmt" "$fmt-$m-4096-$r" --merge-attention-splits $m
            decode_timed fused-llama cuda "$fmt" "$fmt-$m-512-$r" --merge-attention-splits $m
        done
    done
    if [ "$fmt" = q4_0 ]; then
        for m in on off; do
            timeout 150 "$H/fused-llama" --model /tmp/synth-q4_0.gguf --backend cuda --ctx 512 -n 16 \
                --ignore-eos --prompt "$(head -c 64 /dev/zero | tr '\0' 'a')" --leave-out-profile 11 \
                --merge-attention-splits $m >"$OUTDIR/profile-$m.log" 2>&1
            echo "profile $m: exit $?"
            grep -aiE "attention|nothing left|without weights" "$OUTDIR/profile-$m.log" | head -8
        done
    fi
    rm -f "/tmp/synth-$fmt.gguf"
done
(cd "$OUTDIR" && tar czf llama-logs.tgz ./*.log && rm -f ./*.log)
date -u
