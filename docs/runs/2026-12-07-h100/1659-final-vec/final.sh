#!/usr/bin/env bash
# c9a52b3 on the GPU machine: the CUDA tests of the decode ops and plans,
# fused-verify on CUDA,
# compute-sanitizer on decode and plan_exec, then ab5.sh (head = c9a52b3 against vec).
# Carrying .h200/cuda, .h200/llama and .h200/exp2; logs in $OUT.
TESTS="decode kv_tail plan_exec argmax_tail contract norm" SKIP_BENCH=1 SKIP_TORCH=1 \
    SANITIZER_JOBS="memcheck:decode racecheck:decode synccheck:decode memcheck:plan_exec" \
    bash .h200/cuda/run.sh >"${OUT:-.}/suite-stdout.txt" 2>&1
echo "suite: exit $?"
grep -aE "^=== |test result|SUMMARY|passed, " "${OUT:-.}/suite-stdout.txt" | grep -v "^=== compute" | tail -60
bash "$(dirname "${BASH_SOURCE[0]}")/ab5.sh"
