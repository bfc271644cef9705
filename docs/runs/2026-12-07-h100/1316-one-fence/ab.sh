#!/usr/bin/env bash
# One fence a block in the output quantizer (exp) against cf01895 (base):
# quant_out, teams, gemv_q8, fused_unfused tests of exp and compute-sanitizer
# on quant_out; cuda-bench --layers-only base/exp/base/exp; the 8B-shaped
# Q4_0 / Q4_K tokens with --fold-quantizers on, exp against base.
set -uo pipefail
E="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source .h200/llama/prelude.sh
X="$(mktemp -d)"
xz -dc "$E/bin.tar.xz" | tar -C "$X" -xf -
cp "$X/fused-llama-exp" "$H/"
source .h200/cuda/prelude.sh
export FUSED_REQUIRE_CUDA=1
for t in quant_out teams gemv_q8 fused_unfused; do
    echo "=== exp $t: $(timeout 120 "$X/tests/$t" --test-threads=4 2>&1 | grep -a 'test result')"
done
for tool in memcheck racecheck synccheck; do
    echo "=== $tool quant_out: $(timeout 90 compute-sanitizer --tool $tool "$X/tests/quant_out" --test-threads=1 2>&1 | grep -aE 'SUMMARY|test result' | tr '\n' ' ')"
done
for r in 1 2; do
    for b in base exp; do
        bin="$HERE/cuda-bench"; [ $b = exp ] && bin="$X/cuda-bench"
        timeout 90 "$bin" --layers-only >"$LOGS/layers-$b-$r.md" 2>&1
        echo "layers $b $r: exit $?"
        grep -a "^| fused\|^| unfused |" "$LOGS/layers-$b-$r.md" | head -5
    done
done
for fmt in q4_0 q4_k; do
    synth "$fmt"
    for r in 1 2; do
        decode_timed fused-llama cuda "$fmt" "$fmt-base-fold-$r" --fold-quantizers on
        decode_timed fused-llama-exp cuda "$fmt" "$fmt-exp-fold-$r" --fold-quantizers on
        decode_timed fused-llama-exp cuda "$fmt" "$fmt-exp-$r"
    done
    rm -f "/tmp/synth-$fmt.gguf"
done
(cd "$OUTDIR" && tar czf llama-logs.tgz ./*.log && rm -f ./*.log)
date -u
