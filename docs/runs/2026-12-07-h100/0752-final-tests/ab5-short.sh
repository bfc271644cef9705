#!/usr/bin/env bash
# The final kernels of run 34's choices (final = the norm quantizer's
# block-wide scale, attention tiles of keys and values loaded together, no
# attention L2 prefetch or combine preload; Vulkan: segmented norm scale,
# 256-invocation Q8_0 quantizers): the CUDA tests and compute-sanitizer on
# them first, then final against norm (run 33's norm half alone) and
# kvtile (run 34's, with the attention loads), 8B-shaped stacks at context
# 512 (one round: the device time left was short).
set -uo pipefail
D="$(dirname "${BASH_SOURCE[0]}")"
TESTS="decode contract plan_exec kv_tail argmax_tail norm" SKIP_VERIFY=1 SKIP_BENCH=1 \
    SKIP_TORCH=1 SANITIZER_JOBS="memcheck:decode racecheck:decode synccheck:decode" \
    bash .h200/cuda/run.sh 2>&1 | grep -aE '^(ok|FAIL|===|---)|test result|ERROR SUMMARY|RACECHECK SUMMARY|errors|hazard' | head -60
source "$D/prelude.sh"
date -u
for t in norm kvtile final; do xz -dc "$D/$t-llama.tar.xz" | tar -C "$H" -xf -; done
synth q4_0
for round in 1; do
    decode_timed fused-llama-norm cuda q4_0 "q4_0-norm-r$round"
    decode_timed fused-llama-kvtile cuda q4_0 "q4_0-kvtile-r$round"
    decode_timed fused-llama-final cuda q4_0 "q4_0-final-r$round"
done
decode_timed fused-llama-final vulkan q4_0 vk-q4_0-final-r1
synth q4_k
decode_timed fused-llama-final cuda q4_k q4_k-final-r1
rm -f /tmp/synth-*.gguf
(cd "$OUTDIR" && tar czf llama-logs.tgz ./*.log && rm -f ./*.log)
date -u
