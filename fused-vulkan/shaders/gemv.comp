#version 450
// y[col * M + row] = chain(W[row] . x[col]) for NC columns (1..8), or with
// GLU defined: chain(act(Wg[row] . x[col]) * (Wu[row] . x[col])).
// One workgroup of 64 threads per output row; weights are dequantized to f32
// in the shader and multiplied by f32 activations (the core's ActQuant::F32),
// then a shared-memory tree reduction. DTYPE: 0 F32, 1 F16, 2 Q8_0, 3 Q4_0, 4 Q4_K.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

#define WG 64u
layout(local_size_x = 64) in;
layout(constant_id = 0) const uint NC = 1;

layout(std430, binding = 0) readonly buffer W { uint w[]; };
layout(std430, binding = 1) readonly buffer X { float x[]; };
layout(std430, binding = 2) writeonly buffer Y { float y[]; };
layout(std430, binding = 3) readonly buffer OPS { float ops[]; };
#ifdef GLU
layout(std430, binding = 4) readonly buffer WU { uint wu[]; };
#define NMAT 2u
#else
#define NMAT 1u
#endif

layout(push_constant) uniform PC {
    uint M;
    uint K;
    uint n_stages;
    uint glu_act;
    uvec4 stage[2];  // kind | act << 8; kinds: 0 act, 1 add, 2 mul, 3 row bias
    uvec4 off[2];    // element offset of each stage's operand in `ops`
} pc;

shared float red[NMAT * 8u * WG];

uint byte_at(uint m, uint off) {
#ifdef GLU
    uint word = m == 0u ? w[off >> 2u] : wu[off >> 2u];
#else
    uint word = w[off >> 2u];
#endif
    return (word >> ((off & 3u) * 8u)) & 0xffu;
}

float half_at(uint m, uint off) {
    return unpackHalf2x16(byte_at(m, off) | (byte_at(m, off + 1u) << 8u)).x;
}

#if DTYPE == 0
#define ROW_BYTES(K) ((K) * 4u)
#define CHUNK 1u
#elif DTYPE == 1
#define ROW_BYTES(K) ((K) * 2u)
#define CHUNK 1u
#elif DTYPE == 2
#define ROW_BYTES(K) ((K) / 32u * 34u)
#define CHUNK 32u
#elif DTYPE == 3
#define ROW_BYTES(K) ((K) / 32u * 18u)
#define CHUNK 32u
#else
#define ROW_BYTES(K) ((K) / 256u * 144u)
#define CHUNK 256u
#endif

// Value j of chunk c (CHUNK values) of the row starting at byte `base`.
float weight(uint m, uint base, uint c, uint j) {
#if DTYPE == 0
    uint off = base + c * 4u;
#ifdef GLU
    return uintBitsToFloat(m == 0u ? w[off >> 2u] : wu[off >> 2u]);
#else
    return uintBitsToFloat(w[off >> 2u]);
#endif
#elif DTYPE == 1
    return half_at(m, base + c * 2u);
#elif DTYPE == 2
    uint b = base + c * 34u;
    int q = int(byte_at(m, b + 2u + j) << 24u) >> 24;
    return float(q) * half_at(m, b);
#elif DTYPE == 3
    uint b = base + c * 18u;
    uint packed = byte_at(m, b + 2u + (j & 15u));
    int q = int(j < 16u ? (packed & 15u) : (packed >> 4u)) - 8;
    return float(q) * half_at(m, b);
#else
    // Q4_K: d (f16), dmin (f16), 12 bytes of 6-bit sub-block scales and
    // mins, then 128 bytes of codes; 64-element chunk cc holds element
    // 64cc + l in the low nibble of byte 32cc + l, 64cc + 32 + l in the high.
    uint b = base + c * 144u;
    uint sub = j / 32u;
    uint l = j % 32u;
    uint packed = byte_at(m, b + 16u + 32u * (j / 64u) + l);
    uint q = (sub & 1u) == 0u ? (packed & 15u) : (packed >> 4u);
    uint sc;
    uint mn;
    if (sub < 4u) {
        sc = byte_at(m, b + 4u + sub) & 63u;
        mn = byte_at(m, b + 8u + sub) & 63u;
    } else {
        uint hi_sc = byte_at(m, b + 4u + sub - 4u);
        uint hi_mn = byte_at(m, b + 4u + sub);
        uint lo = byte_at(m, b + 8u + sub);
        sc = (lo & 15u) | ((hi_sc >> 6u) << 4u);
        mn = (lo >> 4u) | ((hi_mn >> 6u) << 4u);
    }
    precise float d1 = half_at(m, b) * float(sc);
    precise float m1 = half_at(m, b + 2u) * float(mn);
    precise float v = d1 * float(q) - m1;
    return v;
#endif
}

float apply_chain(float v, uint row, uint col) {
    precise float r = v;
    for (uint s = 0u; s < pc.n_stages; ++s) {
        uint code = pc.stage[s >> 2u][s & 3u];
        uint off = pc.off[s >> 2u][s & 3u];
        uint kind = code & 0xffu;
        if (kind == 0u) {
            r = act_apply(code >> 8u, r);
        } else if (kind == 1u) {
            r = ep_add(r, ops[off + col * pc.M + row]);
        } else if (kind == 2u) {
            r = ep_mul(r, ops[off + col * pc.M + row]);
        } else {
            r = ep_add(r, ops[off + row]);
        }
    }
    return r;
}

void main() {
    uint row = flat_group();
    if (row >= pc.M) {
        return;
    }
    uint tid = gl_LocalInvocationIndex;
    uint base = row * ROW_BYTES(pc.K);
    uint n_chunks = pc.K / CHUNK;
    // precise: no multiply-add contraction, so the plain and the gated
    // pipelines accumulate the same bits (fused == unfused).
    precise float acc[NMAT * NC];
    for (uint i = 0u; i < NMAT * NC; ++i) {
        acc[i] = 0.0;
    }
    for (uint c = tid; c < n_chunks; c += WG) {
        for (uint j = 0u; j < CHUNK; ++j) {
            uint k = c * CHUNK + j;
            for (uint m = 0u; m < NMAT; ++m) {
                float wv = weight(m, base, c, j);
                for (uint col = 0u; col < NC; ++col) {
                    acc[m * NC + col] += wv * x[col * pc.K + k];
                }
            }
        }
    }
    for (uint i = 0u; i < NMAT * NC; ++i) {
        red[i * WG + tid] = acc[i];
    }
    barrier();
    for (uint s = WG / 2u; s > 0u; s >>= 1u) {
        if (tid < s) {
            for (uint i = 0u; i < NMAT * NC; ++i) {
                red[i * WG + tid] += red[i * WG + tid + s];
            }
        }
        barrier();
    }
    if (tid < NC) {
        uint col = tid;
#ifdef GLU
        float v = glu_apply(pc.glu_act, red[col * WG], red[(NC + col) * WG]);
#else
        float v = red[col * WG];
#endif
        y[col * pc.M + row] = apply_chain(v, row, col);
    }
}
