#!/usr/bin/env bash
# One device call: the Vulkan A/B (.vk-ab), then the contract suites on
# CUDA and on NVIDIA's Vulkan from the .h200 bundle (the K = 0 check).
set -uo pipefail
LOGS="${OUT:-$PWD/next-logs}"; mkdir -p "$LOGS"
H="$(mktemp -d)"
xz -dc .h200/cuda/bin.tar.xz | tar -C "$H" -xf - ./tests/contract ./tests/errors ./tests/plan_exec ./fused-verify
xz -dc .h200/bin.tar.xz | tar -C "$H" -xf - ./vk-tests/contract ./vk-tests/plan_exec
for t in contract; do
  FUSED_REQUIRE_CUDA=1 timeout 60 "$H/tests/$t" --test-threads=1 --nocapture >"$LOGS/cuda-$t.log" 2>&1
  echo "cuda $t: exit $? $(grep -E '^test result' "$LOGS/cuda-$t.log")" | tee -a "$LOGS/next.log"
done
OUT="$LOGS/ab" BENCH_ARGS="9 64" BENCH_TIMEOUT=60 bash .vk-ab/run.sh; echo "vk-ab exit $?" | tee -a "$LOGS/next.log"
export VK_LAYER_PATH=/usr/share/vulkan/explicit_layer.d
export VK_DRIVER_FILES="${VK_DRIVER_FILES:-/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json}"
[ -f "$VK_DRIVER_FILES" ] || unset VK_DRIVER_FILES
for t in contract; do
  FUSED_REQUIRE_VULKAN=1 timeout 60 "$H/vk-tests/$t" --test-threads=1 --nocapture >"$LOGS/vk-$t.log" 2>&1
  echo "vulkan $t: exit $? $(grep -E '^test result' "$LOGS/vk-$t.log")" | tee -a "$LOGS/next.log"
done
grep -h "skipped" "$LOGS"/cuda-contract.log "$LOGS"/vk-contract.log | head -20 | tee -a "$LOGS/next.log"
