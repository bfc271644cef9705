// The RMS-norm scale of one column in fused_core::norm's order, shared by
// the unfused norm (rms_norm.comp) and the norm prologue of the activation
// quantizer (quantize.comp with NORM), so that both compute the same bits.
// The includer defines NORM_X(i), the f32 input element at index i.
//
//   1. partial j (j < 32) sums x[i]^2 for i = j, j + 32, ... in increasing
//      i, from +0.0, a product then a sum (`precise`: no FMA contraction,
//      no reordering). The column is cut into segments of NORM_SEG values
//      and the workgroup's invocations into groups of 32 (one group when
//      it has fewer than 32: each invocation then takes the partials
//      j = t, t + n, ...). In a round each group loads one segment, group
//      after group in column order, every load of the round in flight at
//      once; then the groups add their squares to the partials in segment
//      order, each after the one before it (a barrier apart), so each
//      partial still takes its elements one by one in increasing i;
//   2. the tree p[j] = p[j] + p[j + w] for j < w, w = 16, 8, 4, 2, 1 (one
//      invocation: the same operations as a shuffle-down reduction);
//   3. mean = sum / K, s = 1 / sqrt(mean + eps) (the shader's division and
//      square root: within a few ulps, not correctly rounded; an infinite
//      root gives 0, a zero one infinity, as IEEE division would).

// Loads in flight per invocation in a round of step 1.
#define NORM_LOADS 16u
// Values of a segment: NORM_LOADS for each of the 32 partials.
#define NORM_SEG (32u * NORM_LOADS)

shared float norm_part[32];
shared float norm_s;

// The scale of the column of K values at `base`. Every invocation of the
// workgroup calls it, in uniform control flow (it holds barriers).
float norm_scale(uint base, uint K, float eps, uint tid, uint n) {
    uint groups = max(n / 32u, 1u);
    uint group = tid / 32u;
    uint stride = min(n, 32u);
    uint slots = (32u + stride - 1u) / stride; // partials an invocation takes
    for (uint r = 0u; r * groups * NORM_SEG < K; ++r) {
        for (uint m = 0u; m < slots; ++m) {
            uint j = tid % 32u + m * stride;
            bool has_part = group < groups && j < 32u;
            uint first = (r * groups + group) * NORM_SEG + j;
            // Past K a square is +0, which leaves a partial (never below
            // +0) as it is.
            float sq[NORM_LOADS];
            [[unroll]] for (uint u = 0u; u < NORM_LOADS; ++u) {
                uint i = first + 32u * u;
                float v = has_part && i < K ? NORM_X(base + i) : 0.0;
                precise float s2 = v * v;
                sq[u] = s2;
            }
            for (uint w = 0u; w < groups; ++w) {
                if (has_part && group == w) {
                    precise float p = r == 0u && w == 0u ? 0.0 : norm_part[j];
                    [[unroll]] for (uint u = 0u; u < NORM_LOADS; ++u) {
                        p = p + sq[u];
                    }
                    norm_part[j] = p;
                }
                barrier();
            }
        }
    }
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
    // The next call writes norm_part only after the barrier above (which
    // follows invocation 0's reads of it), and norm_s only after its own
    // first barrier (K > 0), which every invocation reaches after this
    // read.
    return norm_s;
}
