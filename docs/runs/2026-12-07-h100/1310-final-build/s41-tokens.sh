#!/usr/bin/env bash
# The build of cf01895 on the GPU machine: the 8B-shaped stacks (Q4_0 and
# Q4_K) at context 512 on CUDA (two rounds) and Vulkan (one), at context
# 4096 after a 4024-token prompt on CUDA, then cuda-bench's decode layers.
# Carrying .h200/llama and .h200/cuda; logs in $OUT.
set -uo pipefail
D="$(dirname "${BASH_SOURCE[0]}")"
source "$D/prelude.sh"
date -u
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
ctx4096() { # FMT: CUDA at context 4096, 64 tokens after a 4024-token prompt
    local log="$OUTDIR/$1-ctx4096.log" p
    p="$(head -c 4024 /dev/zero | tr '\0' 'a')"
    timeout 150 "$H/fused-llama" --model "/tmp/synth-$1.gguf" --backend cuda --ctx 4096 -n 64 \
        --ignore-eos --prompt "$p" --json --floor -v --token-timing 21 >"$log" 2>&1
    echo "$(date -u +%T) $1-ctx4096: exit $? $(grep -ao '"decode_tok_s":[0-9.]*' "$log")" \
        "$(grep -ao '"launches_per_token":[0-9]*' "$log")" \
        "$(grep -a '^floor:' "$log" | grep -ao '[0-9.]* tok/s; decode at [0-9.]* %')" \
        "$(grep -a '^token timing:' "$log" | grep -ao 'device median [0-9.]* us')"
}
for fmt in q4_0 q4_k; do
    timeout 120 "$H/fused-llama-synth" --format "$fmt" --ctx 4096 "/tmp/synth-$fmt.gguf" \
        >"$OUTDIR/synth-$fmt.log" 2>&1
    echo "synth $fmt: exit $?"
    decode_timed fused-llama cuda "$fmt" "$fmt-r1"
    [ "$fmt" = q4_0 ] && decode_timed fused-llama vulkan "$fmt" "vk-$fmt"
    decode_timed fused-llama cuda "$fmt" "$fmt-r2"
    ctx4096 "$fmt"
    rm -f "/tmp/synth-$fmt.gguf"
done
source .h200/cuda/prelude.sh
timeout 90 "$HERE/cuda-bench" --layers-only >"$LOGS/layers.md" 2>&1
echo "cuda-bench --layers-only: exit $?"
grep -a -A5 "^## Decode layer" "$LOGS/layers.md" | grep -a "^| fused\b\|^| fused |\|^| unfused |" | head -6
(cd "$OUTDIR" && tar czf llama-logs.tgz ./*.log && rm -f ./*.log)
date -u
