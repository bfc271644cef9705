#!/usr/bin/env bash
# After moving the kernel lookup into CudaDevice::kernel: every test binary
# and fused-verify --backend cuda, through the bundle's prelude.
set -uo pipefail
source "$(dirname "$0")/prelude.sh"
gpu_header
for t in "$HERE"/tests/*; do
  timeout 120 "$t" --test-threads=4 > "$LOGS/$(basename "$t").log" 2>&1; echo "$(basename "$t") rc $?"
done
grep -h "test result" "$LOGS"/*.log
timeout 120 "$HERE/fused-verify" --backend cuda > "$LOGS/verify-cuda.log" 2>&1; echo "verify rc $?"; tail -1 "$LOGS/verify-cuda.log"
date -u
