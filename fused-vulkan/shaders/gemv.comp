#version 450
// GEMV over F32, F16 or BF16 weights (DTYPE 0 F32, 1 F16, 5 BF16); see
// gemv_common.glsl for the output, the launch shape and the reduction.
//
// A row is cut into units of one uvec4 (F32: 4 values, F16 and BF16: 8);
// thread t
// takes units t, t + WG, t + 2 WG, ... (U of them per loop trip, their loads
// issued together), so that consecutive threads read consecutive weight
// quads and x vec4s. For every unit each thread loads the x values once per
// column and uses them for all R rows. Rows whose K is not a multiple of the
// unit take a scalar path. Weights are converted to f32 and multiplied by
// f32 activations (the core's ActQuant::F32).
//
// Every accumulation is `precise` (products through explicit fma()), so the
// plain and the gated pipelines compute the same bits (fused == unfused).
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#include "gemv_common.glsl"

#if DTYPE == 0
#define ROW_BYTES(K) ((K) * 4u)
#define UV 4u
#else
#define ROW_BYTES(K) ((K) * 2u)
#define UV 8u
#endif
#define UX (UV / 4u)

// The loaded quads of one loop trip: un[j * NMAT * R + m * R + r] is unit j
// of matrix m, row r. Loading does no arithmetic and takes no branch, so
// that every load of a trip is in flight at once.
uvec4 un[U * NMAT * R];
uint base[R]; // byte offset of each row of the workgroup

// The two bf16 values of a 32-bit word (the low half first) as f32: a
// bf16 is the high half of the f32 with the same bits (exact).
vec2 unpack_bf16x2(uint w) {
    return uintBitsToFloat(uvec2(w << 16u, w & 0xffff0000u));
}

// Values 4i..4i+3 of a loaded unit.
vec4 values4(uvec4 q, uint i) {
#if DTYPE == 0
    return uintBitsToFloat(q);
#elif DTYPE == 5
    return vec4(unpack_bf16x2(q[2u * i]), unpack_bf16x2(q[2u * i + 1u]));
#else
    return vec4(unpackHalf2x16(q[2u * i]), unpackHalf2x16(q[2u * i + 1u]));
#endif
}

// acc[(m * R + r) * NC + col] += unit . x[col] for the loaded units
// un[j * NMAT * R + m * R + r] (unit index u) and every column.
void accumulate(uint u, uint j) {
    uint first = j * NMAT * R;
    [[unroll]] for (uint col = 0u; col < NC; ++col) {
        uint xb = (col * pc.K) >> 2u;
        precise float s[NMAT * R];
        [[unroll]] for (uint i = 0u; i < NMAT * R; ++i) {
            s[i] = 0.0;
        }
        [[unroll]] for (uint i = 0u; i < UX; ++i) {
            vec4 xv = x4[xb + u * UX + i];
            [[unroll]] for (uint v = 0u; v < NMAT * R; ++v) {
                s[v] = dot4(values4(un[first + v], i), xv, s[v]);
            }
        }
        [[unroll]] for (uint v = 0u; v < NMAT * R; ++v) {
            precise float t = acc[v * NC + col] + s[v];
            acc[v * NC + col] = t;
        }
    }
}

// One weight of the scalar path.
float scalar_weight(uint m, uint base, uint k) {
#if DTYPE == 0
    return uintBitsToFloat(word_at(m, (base >> 2u) + k));
#else
    uint off = base + 2u * k;
    uint word = word_at(m, off >> 2u);
#if DTYPE == 5
    return unpack_bf16x2((off & 2u) == 0u ? word : word >> 16u).x;
#else
    return unpackHalf2x16((off & 2u) == 0u ? word : word >> 16u).x;
#endif
#endif
}

void main() {
    uint row0 = flat_group() * R;
    if (row0 >= pc.M) {
        return;
    }
    uint tid = gl_LocalInvocationIndex;
    uint rb = ROW_BYTES(pc.K);
    [[unroll]] for (uint r = 0u; r < R; ++r) {
        // Rows past M repeat the last row; their sums are not written.
        base[r] = min(row0 + r, pc.M - 1u) * rb;
    }
    [[unroll]] for (uint i = 0u; i < NV; ++i) {
        acc[i] = 0.0;
    }
    if ((pc.K & (UV - 1u)) == 0u) {
        uint n_units = pc.K / UV;
        uint u = tid;
        [[dont_unroll]] for (; u + (U - 1u) * WG < n_units; u += U * WG) {
            [[unroll]] for (uint j = 0u; j < U; ++j) {
                [[unroll]] for (uint m = 0u; m < NMAT; ++m) {
                    [[unroll]] for (uint r = 0u; r < R; ++r) {
                        un[(j * NMAT + m) * R + r] = quad_at(m, (base[r] >> 4u) + u + j * WG);
                    }
                }
            }
            [[unroll]] for (uint j = 0u; j < U; ++j) {
                accumulate(u + j * WG, j);
            }
        }
        [[dont_unroll]] for (; u < n_units; u += WG) {
            [[unroll]] for (uint m = 0u; m < NMAT; ++m) {
                [[unroll]] for (uint r = 0u; r < R; ++r) {
                    un[m * R + r] = quad_at(m, (base[r] >> 4u) + u);
                }
            }
            accumulate(u, 0u);
        }
    } else {
        for (uint k = tid; k < pc.K; k += WG) {
            [[unroll]] for (uint col = 0u; col < NC; ++col) {
                float xv = x[col * pc.K + k];
                [[unroll]] for (uint m = 0u; m < NMAT; ++m) {
                    [[unroll]] for (uint r = 0u; r < R; ++r) {
                        uint v = (m * R + r) * NC + col;
                        precise float a = fma(scalar_weight(m, base[r], k), xv, acc[v]);
                        acc[v] = a;
                    }
                }
            }
        }
    }
    reduce_and_store(row0, tid);
}
