#!/usr/bin/env bash
# Attention: head (c9a52b3) against vec (head + a lane's E head values
# contiguous, one vector load a row, and a tile's weights read back from
# shared memory instead of shuffled); vec's tests decode, kv_tail and
# plan_exec first, with memcheck and racecheck on decode.
set -uo pipefail
D="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$D/prelude.sh"
xz -dc .h200/exp2/v.tar.xz | tar -C "$H" -xf -
date -u
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for t in decode kv_tail plan_exec; do
    FUSED_REQUIRE_CUDA=1 timeout 120 "$H/tests/$t" --test-threads=1 >"$OUTDIR/test-$t.txt" 2>&1
    echo "=== vec $t: exit $? $(grep -a 'test result' "$OUTDIR/test-$t.txt")"
done
for tool in memcheck racecheck; do
    FUSED_REQUIRE_CUDA=1 timeout 120 compute-sanitizer --tool $tool "$H/tests/decode" \
        --test-threads=1 2>&1 | grep -aE 'SUMMARY|test result' | sed "s/^/$tool: /"
done
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
V="${VARIANTS:-head vec}"
for fmt in ${FORMATS:-q4_0 q4_k}; do
    timeout 120 "$H/fused-llama-synth" --format "$fmt" --ctx 4096 "/tmp/synth-$fmt.gguf" \
        >"$OUTDIR/synth-$fmt.log" 2>&1
    echo "synth $fmt: exit $?"
    rounds="1 2"; [ "$fmt" = q4_k ] && rounds=1
    for r in $rounds; do
        for b in $V; do
            bin=fused-llama; [ $b = head ] || bin=fused-llama-$b
            ctx4096 "$bin" "$fmt" "$fmt-$b-4096-$r"
        done
    done
    for b in $V; do
        bin=fused-llama; [ $b = head ] || bin=fused-llama-$b
        decode_timed "$bin" cuda "$fmt" "$fmt-$b-512"
    done
    rm -f "/tmp/synth-$fmt.gguf"
done
(cd "$OUTDIR" && tar czf llama-logs.tgz ./*.log && rm -f ./*.log)
date -u
