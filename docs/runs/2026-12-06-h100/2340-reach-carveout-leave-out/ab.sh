#!/usr/bin/env bash
# The look-ahead's reach (--l2-reach 1 | 2), every kernel's shared-memory
# carveout at 100 %, and a leave-out profile of the replayed token
# (--leave-out-profile: the token as a CUDA graph without each kernel in
# turn), on the 8B-shaped stacks at context 512, rounds interleaved.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/prelude.sh"
date -u
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
BIN="$H/fused-llama"
run() { # be fmt tag extra...
    local be="$1" fmt="$2" tag="$3"; shift 3
    local p; p="$(head -c 64 /dev/zero | tr '\0' 'a')"
    local log="$OUTDIR/$tag.log"
    timeout 90 "$BIN" --model "/tmp/synth-$fmt.gguf" --backend "$be" --ctx 512 -n 64 --ignore-eos \
        --prompt "$p" --json --floor -v --token-timing 21 "$@" >"$log" 2>&1
    echo "$(date -u +%T) $tag: exit $? $(grep -ao '"decode_tok_s":[0-9.]*' "$log") $(grep -ao '"launches_per_token":[0-9]*' "$log") $(grep -a '^floor:' "$log" | grep -ao '[0-9.]* tok/s; decode at [0-9.]* %') $(grep -a '^token timing:' "$log" | grep -ao 'device median [0-9.]* us, host median [0-9.]* us') ids $(grep -ao '"ids":\[[0-9,]*' "$log" | md5sum | cut -c1-8)"
}
synth() { # fmt
    timeout 90 "$H/fused-llama-synth" --format "$1" --ctx 512 "/tmp/synth-$1.gguf" >"$OUTDIR/synth-$1.log" 2>&1
    echo "synth $1: exit $?"
}
synth q4_0
run cuda q4_0 cuda-q4_0-leave-out --leave-out-profile 11
sed -n '/^leave-out profile/,$p' "$OUTDIR/cuda-q4_0-leave-out.log" | grep -v '^{' | head -20
for round in 1 2; do
    run cuda q4_0 "cuda-q4_0-reach1-r$round" --l2-reach 1
    run cuda q4_0 "cuda-q4_0-reach2-r$round" --l2-reach 2
    run cuda q4_0 "cuda-q4_0-carve100-r$round" --carveout 100
    run cuda q4_0 "cuda-q4_0-reach2-carve100-r$round" --l2-reach 2 --carveout 100
done
synth q4_k
run cuda q4_k cuda-q4_k-leave-out --leave-out-profile 11
sed -n '/^leave-out profile/,$p' "$OUTDIR/cuda-q4_k-leave-out.log" | grep -v '^{' | head -20
run cuda q4_k "cuda-q4_k-reach1" --l2-reach 1
run cuda q4_k "cuda-q4_k-reach2" --l2-reach 2
for round in 1 2; do
    run vulkan q4_0 "vk-q4_0-reach1-r$round" --l2-reach 1
    run vulkan q4_0 "vk-q4_0-reach2-r$round" --l2-reach 2
done
date -u
rm -f /tmp/synth-*.gguf
cd "$OUTDIR" && tar czf logs.tgz ./*.log && rm -f ./*.log
