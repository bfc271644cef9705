// The RMS-norm scale of one column in fused_core::norm's order, shared by
// the unfused norm (rms_norm.comp) and the norm prologue of the activation
// quantizer (quantize.comp with NORM), so that both compute the same bits.
// The includer defines NORM_X(i), the f32 input element at index i.
//
//   1. partial j (j < 32) sums x[i]^2 for i = j, j + 32, ... in increasing
//      i, from +0.0, a product then a sum (`precise`: no FMA contraction,
//      no reordering); invocation t of the workgroup computes the partials
//      j = t, t + n, ... (n invocations);
//   2. the tree p[j] = p[j] + p[j + w] for j < w, w = 16, 8, 4, 2, 1 (one
//      invocation: the same operations as a shuffle-down reduction);
//   3. mean = sum / K, s = 1 / sqrt(mean + eps) (the shader's division and
//      square root: within a few ulps, not correctly rounded; an infinite
//      root gives 0, a zero one infinity, as IEEE division would).

// Loads in flight per invocation in step 1.
#define NORM_LOADS 16u

shared float norm_part[32];
shared float norm_s;

// The scale of the column of K values at `base`. Every invocation of the
// workgroup calls it, in uniform control flow (it holds barriers).
float norm_scale(uint base, uint K, float eps, uint tid, uint n) {
    for (uint j = tid; j < 32u; j += n) {
        precise float p = 0.0;
        uint i = j;
        // NORM_LOADS values loaded before any is added, so that their loads
        // are in flight together rather than one latency each; the sum
        // still takes them one by one in increasing i.
        for (; i + 32u * (NORM_LOADS - 1u) < K; i += 32u * NORM_LOADS) {
            float v[NORM_LOADS];
            [[unroll]] for (uint u = 0u; u < NORM_LOADS; ++u) {
                v[u] = NORM_X(base + i + 32u * u);
            }
            [[unroll]] for (uint u = 0u; u < NORM_LOADS; ++u) {
                precise float sq = v[u] * v[u];
                p = p + sq;
            }
        }
        for (; i < K; i += 32u) {
            float v = NORM_X(base + i);
            precise float sq = v * v;
            p = p + sq;
        }
        norm_part[j] = p;
    }
    barrier();
    if (tid == 0u) {
        float q[32];
        for (uint j = 0u; j < 32u; ++j) {
            q[j] = norm_part[j];
        }
        for (uint w = 16u; w > 0u; w >>= 1) {
            for (uint j = 0u; j < w; ++j) {
                precise float t = q[j] + q[j + w];
                q[j] = t;
            }
        }
        precise float mean = q[0] / float(K);
        precise float r = sqrt(mean + eps);
        precise float s = 1.0 / r;
        if (isinf(r)) {
            s = 0.0;
        } else if (r == 0.0) {
            s = uintBitsToFloat(0x7f800000u);
        }
        norm_s = s;
    }
    barrier();
    // The next call writes norm_part and norm_s only after its first
    // barrier, which every invocation reaches after this read.
    return norm_s;
}
