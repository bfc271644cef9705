#!/usr/bin/env bash
# compute-sanitizer memcheck, racecheck and synccheck of tests/handoff.
set -uo pipefail
BUNDLE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"; B="$(mktemp -d)"; xz -dc "$BUNDLE/bin.tar.xz" | tar -C "$B" -xf -
LOGS="${OUT:-$PWD/gpu-logs}"; mkdir -p "$LOGS"
export FUSED_REQUIRE_CUDA=1
date -u | tee "$LOGS/sanitizer.log"
for tool in memcheck racecheck synccheck; do
  echo "=== $tool handoff" | tee -a "$LOGS/sanitizer.log"
  timeout 150 compute-sanitizer --tool $tool "$B/tests/handoff" --test-threads=1 2>&1 | tail -n 4 | tee -a "$LOGS/sanitizer.log"
done
date -u | tee -a "$LOGS/sanitizer.log"
