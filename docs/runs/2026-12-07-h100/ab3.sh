#!/usr/bin/env bash
# Which half of the 0010 patch wins: old (main's kernels), norm (the norm
# quantizer's block-wide scale only), new (that and attention's L2 prefetch
# and combine preload); 8B-shaped stacks at context 512, rounds interleaved;
# leave-out profile of the norm-only token.
set -uo pipefail
D="$(dirname "${BASH_SOURCE[0]}")"
source "$D/prelude.sh"
date -u
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
xz -dc "$D/old-llama.tar.xz" | tar -C "$H" -xf -
xz -dc "$D/norm-llama.tar.xz" | tar -C "$H" -xf -
for fmt in q4_0 q4_k; do
    synth $fmt
    for round in 1 2; do
        decode_timed fused-llama-old cuda $fmt "$fmt-old-r$round"
        decode_timed fused-llama-norm cuda $fmt "$fmt-norm-r$round"
        decode_timed fused-llama cuda $fmt "$fmt-new-r$round"
    done
done
decode_timed fused-llama-norm cuda q4_0 q4_0-norm-leave-out --leave-out-profile 11
sed -n '/^leave-out profile/,$p' "$OUTDIR/q4_0-norm-leave-out.log" | grep -v '^{' | head -12
rm -f /tmp/synth-*.gguf
(cd "$OUTDIR" && tar czf llama-logs.tgz ./*.log && rm -f ./*.log)
date -u
