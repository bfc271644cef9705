#!/usr/bin/env bash
# A short first look at the whole decode token on the GPU machine, for
# when long calls are taken back: the Llama-3-8B-shaped stack (Q4_0, or
# FORMAT=q4_k) at context 512 (or CTX, with a prompt of PROMPT_CHARS) on
# the backends named as arguments (default:
# cuda), each as the whole token, the token planned unfused and (unless
# SKIP_LAYERED=1) the layered path (PATHS="whole" picks), with
# the device copy measured before and after every run (--floor), the
# whole token run 21 more times on the device timer (--token-timing), and
# timed launch by launch (--launch-profile). One call,
# carrying .h200/llama; logs in $OUT.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/prelude.sh"
backends=("$@")
[ "${#backends[@]}" -gt 0 ] || backends=(cuda)
{
    date -u
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv 2>&1
} >"$S"
fmt="${FORMAT:-q4_0}"
f="/tmp/synth-$fmt.gguf"
timeout 60 "$H/fused-llama-synth" --format "$fmt" --ctx "${CTX:-512}" "$f" >"$OUTDIR/synth.log" 2>&1
echo "synth: exit $?, $(stat -c %s "$f" 2>/dev/null) bytes" >>"$S"
p="$(head -c "${PROMPT_CHARS:-64}" /dev/zero | tr '\0' 'a')"
for be in "${backends[@]}"; do
    read -r -a paths <<<"${PATHS:-whole unfused}"
    [ -n "${SKIP_LAYERED:-}" ] || [ -n "${PATHS:-}" ] || paths+=(layered)
    for path in "${paths[@]}"; do
        # The whole token is also timed 21 more times on the device
        # timer: what a token costs the device against the caller.
        flag=(--token-timing 21)
        [ "$path" = whole ] || flag=(--"$path")
        log="$OUTDIR/$be-$path.log"
        # Loading the 5 GB stack took 52-58 s there.
        timeout 150 "$H/fused-llama" --model "$f" --backend "$be" --ctx "${CTX:-512}" -n 64 --ignore-eos \
            --prompt "$p" --json --floor -v "${flag[@]}" >"$log" 2>&1
        echo "$be $path: exit $? $(grep -o '"decode_tok_s":[0-9.]*' "$log") \
$(grep -o '"launches_per_token":[0-9]*' "$log") $(grep '^floor:' "$log") $(grep '^token timing:' "$log")" >>"$S"
    done
done
# Which kernels each GPU token's time is made of (launch by launch: an
# event, or a barrier and a timestamp, between every two): the kernels
# with the most time into the summary.
for be in "${backends[@]}"; do
    log="$OUTDIR/$be-launch-profile.log"
    timeout 150 "$H/fused-llama" --model "$f" --backend "$be" --ctx "${CTX:-512}" -n 8 --ignore-eos \
        --prompt "$p" --launch-profile >"$log" 2>&1
    echo "$be launch profile: exit $?" >>"$S"
    grep -A16 '^launch profile:' "$log" >>"$S"
done
date -u >>"$S"
cat "$S"
