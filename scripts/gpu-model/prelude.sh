# Sourced by run-model.sh and run-debug.sh: unpacks the binaries into $H,
# installs the Vulkan loader .debs, points the loader at NVIDIA's driver
# and the validation layer, and sets $OUTDIR, $L (logs), $M (the model) and
# $S (the summary); defines synth and decode_timed for A/B scripts.
B="$(cd "$(dirname "${BASH_SOURCE[1]}")" && pwd)"
OUTDIR="${OUT:-$PWD/model-logs}"
mkdir -p "$OUTDIR"
L="$(mktemp -d)"
H="$(mktemp -d)"
xz -dc "$B/bin.tar.xz" | tar -C "$H" -xf -
for f in "$B"/debs/*.deb; do dpkg -x "$f" /; done
ldconfig
export VK_DRIVER_FILES="${VK_DRIVER_FILES:-/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json}"
[ -f "$VK_DRIVER_FILES" ] || unset VK_DRIVER_FILES
export VK_LAYER_PATH=/usr/share/vulkan/explicit_layer.d
M=/tmp/smollm2.gguf
S="$OUTDIR/summary.log"

# synth FMT: the 8B-shaped stack of format FMT at /tmp/synth-FMT.gguf.
synth() {
    timeout 90 "$H/fused-llama-synth" --format "$1" --ctx 512 "/tmp/synth-$1.gguf" \
        >"$OUTDIR/synth-$1.log" 2>&1
    echo "synth $1: exit $?"
}

# decode_timed BIN BACKEND FMT TAG [ARGS...]: the binary $H/BIN decodes 64
# tokens of the synth stack at context $CTX (default 512; after a 64-token
# prompt there, a CTX − 72-token one at a longer context) with the floor
# and 21 timed replays (the lab's --token-timing); the log goes to
# $OUTDIR/TAG.log, one line of tok/s, launches, floor, device and host
# medians and a hash of the ids to stdout.
decode_timed() {
    local bin="$1" be="$2" fmt="$3" tag="$4" ctx="${CTX:-512}" n=64
    shift 4
    local p log
    [ "$ctx" -gt 512 ] && n=$((ctx - 72))
    p="$(head -c "$n" /dev/zero | tr '\0' 'a')"
    log="$OUTDIR/$tag.log"
    timeout 150 "$H/$bin" --model "/tmp/synth-$fmt.gguf" --backend "$be" --ctx "$ctx" -n 64 \
        --ignore-eos --prompt "$p" --json --floor -v --token-timing 21 "$@" >"$log" 2>&1
    echo "$(date -u +%T) $tag: exit $? $(grep -ao '"decode_tok_s":[0-9.]*' "$log")" \
        "$(grep -ao '"launches_per_token":[0-9]*' "$log")" \
        "$(grep -a '^floor:' "$log" | grep -ao '[0-9.]* tok/s; decode at [0-9.]* %')" \
        "$(grep -a '^token timing:' "$log" | grep -ao 'device median [0-9.]* us, host median [0-9.]* us')" \
        "ids $(grep -ao '"ids":\[[0-9,]*' "$log" | md5sum | cut -c1-8)"
}
