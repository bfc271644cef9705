#!/usr/bin/env bash
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/prelude.sh"
timeout 60 "$H/fused-llama-synth" --format q4_k_m --ctx 512 /tmp/synth-q4_k_m.gguf >/dev/null 2>&1
p="$(head -c 64 /dev/zero | tr '\0' 'a')"
for be in cuda vulkan; do
  timeout 200 "$H/fused-llama" --model /tmp/synth-q4_k_m.gguf --backend $be --ctx 512 -n 16 --ignore-eos --prompt "$p" --leave-out-profile 11 -v >"$OUTDIR/q4km-$be-leave-out.log" 2>&1
  echo "$be exit $?"; tail -45 "$OUTDIR/q4km-$be-leave-out.log"
done
