#!/usr/bin/env bash
# The Q4_0 kernel of 3 teams a block (LaunchOptions::teams, on by default):
# every test binary (tests/teams prints the team kernels' occupancy),
# fused-verify --backend cuda with teams on and off, compute-sanitizer
# memcheck / racecheck / synccheck of tests/teams, then cuda-bench
# --epilogue-only and --ahead-only with FUSED_CUDA_TEAMS=1 / 0 taking turns.
set -uo pipefail
source "$(dirname "$0")/prelude.sh"
gpu_header
for t in "$HERE"/tests/*; do
  timeout 120 "$t" --test-threads=4 --nocapture > "$LOGS/test-$(basename "$t").log" 2>&1; echo "$(basename "$t") rc $?"
done
grep -h "test result" "$LOGS"/test-*.log | sort | uniq -c
grep -h "blocks of 3 teams" "$LOGS/test-teams.log"
for v in 1 0; do
  FUSED_CUDA_TEAMS=$v timeout 120 "$HERE/fused-verify" --backend cuda > "$LOGS/verify-cuda-teams$v.log" 2>&1; echo "verify teams $v rc $?"; tail -1 "$LOGS/verify-cuda-teams$v.log"
done
for tool in memcheck racecheck synccheck; do
  timeout 120 compute-sanitizer --tool $tool --print-limit 20 "$HERE/tests/teams" --test-threads=1 > "$LOGS/san-$tool.log" 2>&1; echo "$tool rc $?"; tail -n 2 "$LOGS/san-$tool.log"
done
for i in 1 2; do
  for v in 1 0; do
    FUSED_CUDA_TEAMS=$v timeout 100 "$HERE/cuda-bench" --epilogue-only > "$LOGS/epilogue-teams$v-$i.md" 2>&1; echo "epilogue teams $v run $i rc $?"
  done
done
for v in 1 0; do
  FUSED_CUDA_TEAMS=$v timeout 100 "$HERE/cuda-bench" --ahead-only > "$LOGS/ahead-teams$v.md" 2>&1; echo "ahead teams $v rc $?"
done
nvidia-smi --query-gpu=clocks.sm,clocks_event_reasons.active --format=csv
date -u
