#!/usr/bin/env bash
# One-off A/B of the look-ahead's reach (fused_core::look_ahead): once the
# next GEMV's weights are all asked for, the kernels before it go on into
# the GEMV after it (--l2-reach 2) or ask nothing (1, main's behaviour).
# The 8B-shaped stacks at context 512, one binary, rounds interleaved:
# CUDA Q4_0 (reach 1, 2; every kernel's shared memory carveout at 100 %),
# CUDA Q4_K (reach 1, 2, one round), Vulkan Q4_0 (reach 1, 2). Then
# branch vk-fold (its fused-llama at the batched tail, on 6ba5ecb): the
# folded output quantizer's tail loading its norm and words in batches,
# fold off / on, Vulkan Q4_0, and last the branch's Vulkan tests
# (output_quantizer and plan_exec at its tip) on NVIDIA with validation.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/prelude.sh"
date -u
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
xz -dc "$(dirname "${BASH_SOURCE[0]}")/fold-bin.tar.xz" | tar -C "$H" -xf -
BIN="$H/fused-llama"
run() { # be fmt tag extra...
    local be="$1" fmt="$2" tag="$3"; shift 3
    local p; p="$(head -c 64 /dev/zero | tr '\0' 'a')"
    local log="$OUTDIR/$tag.log"
    timeout 60 "$BIN" --model "/tmp/synth-$fmt.gguf" --backend "$be" --ctx 512 -n 64 --ignore-eos \
        --prompt "$p" --json --floor -v --token-timing 21 "$@" >"$log" 2>&1
    echo "$(date -u +%T) $tag: exit $? $(grep -ao '"decode_tok_s":[0-9.]*' "$log") $(grep -ao '"launches_per_token":[0-9]*' "$log") $(grep -a '^floor:' "$log" | grep -ao '[0-9.]* tok/s; decode at [0-9.]* %') $(grep -a '^token timing:' "$log" | grep -ao 'device median [0-9.]* us, host median [0-9.]* us') ids $(grep -ao '"ids":\[[0-9,]*' "$log" | md5sum | cut -c1-8)"
}
synth() { # fmt
    timeout 90 "$H/fused-llama-synth" --format "$1" --ctx 512 "/tmp/synth-$1.gguf" >"$OUTDIR/synth-$1.log" 2>&1
    echo "synth $1: exit $?"
}
synth q4_0
for round in 1 2; do
    run cuda q4_0 "cuda-q4_0-reach1-r$round" --l2-reach 1
    run cuda q4_0 "cuda-q4_0-reach2-r$round" --l2-reach 2
    run cuda q4_0 "cuda-q4_0-carve100-r$round" --carveout 100
done
for round in 1 2; do
    BIN="$H/fused-llama-fold"
    run vulkan q4_0 "fold-off-r$round" --fold-quantizers off
    run vulkan q4_0 "fold-on-r$round" --fold-quantizers on
    BIN="$H/fused-llama"
done
for round in 1 2; do
    run vulkan q4_0 "vk-q4_0-reach1-r$round" --l2-reach 1
    run vulkan q4_0 "vk-q4_0-reach2-r$round" --l2-reach 2
done
synth q4_k
for round in 1; do
    run cuda q4_k "cuda-q4_k-reach1-r$round" --l2-reach 1
    run cuda q4_k "cuda-q4_k-reach2-r$round" --l2-reach 2
done
# The branch's Vulkan tests on NVIDIA with validation.
VT="$(mktemp -d)"
xz -dc "$(dirname "${BASH_SOURCE[0]}")/vk-tests.tar.xz" | tar -C "$VT" -xf -
for n in output_quantizer plan_exec; do
    log="$OUTDIR/vk-test-$n.log"
    FUSED_REQUIRE_VULKAN=1 timeout 100 "$VT/vk-tests/$n" --test-threads=1 >"$log" 2>&1
    echo "vk-fold test $n: exit $? $(grep -E '^test result' "$log" | tail -1)"
done
grep -h -A3 "panicked" "$OUTDIR"/vk-test-*.log | head -20
date -u
rm -f /tmp/synth-*.gguf
cd "$OUTDIR" && tar czf logs.tgz ./*.log && rm -f ./*.log
