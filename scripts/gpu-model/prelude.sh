# Sourced by run-model.sh and run-debug.sh: unpacks the binaries into $H,
# installs the Vulkan loader .debs, points the loader at NVIDIA's driver
# and the validation layer, and sets $OUTDIR, $L (logs), $M (the model) and
# $S (the summary).
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
