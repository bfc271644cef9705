#!/usr/bin/env bash
# The CUDA norm test and compute-sanitizer on it, from the .h200 bundle.
set -uo pipefail
B="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
H="$(mktemp -d)"
xz -dc "$B/cuda/bin.tar.xz" | tar -C "$H" -xf - ./tests/norm ./tests/contract
export FUSED_REQUIRE_CUDA=1
date -u
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for t in norm contract; do
    timeout 60 "$H/tests/$t" --test-threads=4 2>&1 | grep -E "^test |test result|panicked|left|right"
done
for tool in memcheck racecheck synccheck; do
    timeout 60 compute-sanitizer --tool "$tool" "$H/tests/norm" --test-threads=1 2>&1 \
        | grep -E "SUMMARY|test result" | sed "s/^/$tool: /"
done
date -u
