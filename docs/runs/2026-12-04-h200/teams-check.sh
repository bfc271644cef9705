#!/usr/bin/env bash
# The Q4_0 kernel of 3 teams a block (LaunchOptions::teams, off by default;
# FUSED_CUDA_TEAMS=1 below turns it on) and the traced GEMV chains, in two
# runs on the GPU machine (each under 10 minutes):
#   bash .gpu-bundle/teams-check.sh tests   every test binary (tests/teams
#       prints the team kernels' occupancy, tests/timeline the timer step),
#       fused-verify --backend cuda with teams on and off, compute-sanitizer
#       memcheck / racecheck of tests/teams, memcheck of tests/timeline
#   bash .gpu-bundle/teams-check.sh bench   cuda-bench --epilogue-only and
#       --ahead-only with FUSED_CUDA_TEAMS=1 / 0 taking turns, and
#       --timeline-only (traced dependent chains) twice
# This script builds nothing; it runs the bundle's binaries. cuda-bench, the
# team kernels and the traced chains are lab code, so the bundle's binaries
# must come from builds with the lab feature:
#   cargo test  -p fused-cuda   --features cuda,lab --release --no-run
#   cargo build -p fused-cuda   --features cuda,lab --release --bin cuda-bench
#   cargo build -p fused-verify --features cuda --release --bin fused-verify
# Copy this file into .gpu-bundle/ after scripts/gpu-bundle.
# Since 2026-12-05 (issue 33) the library reads no environment: only
# cuda-bench turns FUSED_CUDA_TEAMS into its Tuning, so the fused-verify
# runs below with FUSED_CUDA_TEAMS=1 / 0 run the same (default) kernels;
# tests/teams compares teams on and off itself.
set -uo pipefail
source "$(dirname "$0")/prelude.sh"
gpu_header
if [ "${1:-tests}" = tests ]; then
for t in "$HERE"/tests/*; do
  timeout 120 "$t" --test-threads=4 --nocapture > "$LOGS/test-$(basename "$t").log" 2>&1; echo "$(basename "$t") rc $?"
done
grep -h "test result" "$LOGS"/test-*.log | sort | uniq -c
grep -h "blocks of 3 teams" "$LOGS/test-teams.log"
for v in 1 0; do
  FUSED_CUDA_TEAMS=$v timeout 120 "$HERE/fused-verify" --backend cuda > "$LOGS/verify-cuda-teams$v.log" 2>&1; echo "verify teams $v rc $?"; tail -1 "$LOGS/verify-cuda-teams$v.log"
done
for run in "memcheck teams" "racecheck teams" "memcheck timeline"; do
  set -- $run
  timeout 120 compute-sanitizer --tool $1 --print-limit 20 "$HERE/tests/$2" --test-threads=1 > "$LOGS/san-$1-$2.log" 2>&1; echo "$1 $2 rc $?"; tail -n 2 "$LOGS/san-$1-$2.log"
done
grep -h "timer step" "$LOGS/test-timeline.log" | head -4
else
for i in 1 2; do
  for v in 1 0; do
    FUSED_CUDA_TEAMS=$v timeout 100 "$HERE/cuda-bench" --epilogue-only > "$LOGS/epilogue-teams$v-$i.md" 2>&1; echo "epilogue teams $v run $i rc $?"
  done
done
for v in 1 0; do
  FUSED_CUDA_TEAMS=$v timeout 100 "$HERE/cuda-bench" --ahead-only > "$LOGS/ahead-teams$v.md" 2>&1; echo "ahead teams $v rc $?"
done
for i in 1 2; do
  timeout 100 "$HERE/cuda-bench" --timeline-only > "$LOGS/timeline-$i.md" 2>&1; echo "timeline run $i rc $?"; grep -E "^\| [0-9]" "$LOGS/timeline-$i.md"
done
fi
nvidia-smi --query-gpu=clocks.sm,clocks_event_reasons.active --format=csv
date -u
