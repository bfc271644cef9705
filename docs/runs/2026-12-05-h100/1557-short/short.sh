#!/usr/bin/env bash
# A short GPU run from the .h200 bundle: the CUDA tests, fused-verify on
# CUDA, compute-sanitizer on the norm kernels, and the Vulkan norm,
# contract and plan tests on NVIDIA's driver with validation. Logs in $OUT.
set -uo pipefail
B="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
OUTDIR="${OUT:-$PWD/short-logs}"
LOGS="$(mktemp -d)"
mkdir -p "$OUTDIR"
H="$(mktemp -d)"
xz -dc "$B/cuda/bin.tar.xz" | tar -C "$H" -xf -
mkdir -p "$H/vk"
xz -dc "$B/bin.tar.xz" | tar -C "$H/vk" -xf - ./vk-tests/rms_norm ./vk-tests/contract ./vk-tests/plan_exec
for f in "$B"/debs/*.deb; do dpkg -x "$f" /; done
ldconfig
export VK_DRIVER_FILES="${VK_DRIVER_FILES:-/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json}"
[ -f "$VK_DRIVER_FILES" ] || unset VK_DRIVER_FILES
export VK_LAYER_PATH=/usr/share/vulkan/explicit_layer.d
export FUSED_REQUIRE_CUDA=1
S="$OUTDIR/summary.log"
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv 2>&1; } >"$S"
for t in norm contract plan_exec errors fused_unfused gemv_q8 quant_out batch fwht gemv; do
    timeout 80 "$H/tests/$t" --test-threads=4 --nocapture >"$LOGS/cuda-$t.log" 2>&1
    echo "cuda $t: exit $? $(grep -E '^test result' "$LOGS/cuda-$t.log" | tail -1)" >>"$S"
done
timeout 150 "$H/fused-verify" --backend cuda --json "$LOGS/verify-cuda.json" >"$LOGS/verify-cuda.log" 2>&1
echo "fused-verify cuda: exit $? $(tail -1 "$LOGS/verify-cuda.log")" >>"$S"
grep -E "FAIL|fail" "$LOGS/verify-cuda.log" | head -20 >>"$S"
grep -B2 -A8 -E "^FAIL" "$LOGS/verify-cuda.log" | head -60 >>"$S"
for tool in memcheck racecheck synccheck; do
    timeout 60 compute-sanitizer --tool "$tool" --print-limit 20 "$H/tests/norm" --test-threads=1 \
        >"$LOGS/sanitizer-$tool-norm.log" 2>&1
    echo "sanitizer $tool norm: exit $? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$LOGS/sanitizer-$tool-norm.log" | tail -1)" >>"$S"
done
for t in rms_norm contract plan_exec; do
    FUSED_REQUIRE_VULKAN=1 timeout 90 "$H/vk/vk-tests/$t" --test-threads=1 >"$LOGS/vk-$t.log" 2>&1
    echo "vulkan $t: exit $? $(grep -E '^test result' "$LOGS/vk-$t.log" | tail -1)" >>"$S"
done
date -u >>"$S"
grep -E "panicked|assertion|left|right" "$LOGS"/cuda-*.log | head -20 >>"$S"
tar -C "$LOGS" -cf - . | xz -T4 >"$OUTDIR/logs.tar.xz"
cat "$S"
