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

uint word_at(uint m, uint word) {
#ifdef GLU
    return m == 0u ? w[word] : wu[word];
#else
    return w[word];
#endif
}

uint byte_at(uint m, uint off) {
    return (word_at(m, off >> 2u) >> ((off & 3u) * 8u)) & 0xffu;
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

// The scales of a chunk: (d, dmin) of its block (dmin: Q4_K only).
vec2 chunk_scales(uint m, uint base, uint c) {
#if DTYPE == 2
    return vec2(half_at(m, base + c * 34u), 0.0);
#elif DTYPE == 3
    return vec2(half_at(m, base + c * 18u), 0.0);
#elif DTYPE == 4
    uint b = base + c * 144u;
    return vec2(half_at(m, b), half_at(m, b + 2u));
#else
    return vec2(1.0, 0.0);
#endif
}

#if DTYPE == 4
// Q4_K sub-block `sub` of the block at byte `b`: (d * scale, dmin * min).
vec2 q4k_sub_scales(uint m, uint b, uint sub, vec2 dd) {
    uint sc;
    uint mn;
    if (sub < 4u) {
        sc = byte_at(m, b + 4u + sub) & 63u;
        mn = byte_at(m, b + 8u + sub) & 63u;
    } else {
        uint lo = byte_at(m, b + 8u + sub);
        sc = (lo & 15u) | ((byte_at(m, b + sub) >> 6u) << 4u);
        mn = (lo >> 4u) | ((byte_at(m, b + 4u + sub) >> 6u) << 4u);
    }
    precise vec2 r = dd * vec2(float(sc), float(mn));
    return r;
}
#endif

// The `nbytes` (<= 32) code bytes at byte `qoff` (even) as aligned words:
// byte i is byte i & 3 of codes[i >> 2]. Reads only words inside the range.
void load_codes(uint m, uint qoff, uint nbytes, out uint codes[8]) {
    uint first = qoff >> 2u;
    uint last = (qoff + nbytes - 1u) >> 2u;
    uint sh = (qoff & 3u) * 8u;
    uint cur = word_at(m, first);
    for (uint i = 0u; i < 8u; ++i) {
        codes[i] = 0u;
        if (i * 4u < nbytes) {
            uint next = first + i + 1u <= last ? word_at(m, first + i + 1u) : 0u;
            codes[i] = sh == 0u ? cur : (cur >> sh) | (next << (32u - sh));
            cur = next;
        }
    }
}

uint code_byte(uint codes[8], uint i) {
    return (codes[i >> 2u] >> ((i & 3u) * 8u)) & 0xffu;
}

// Value j of chunk c (CHUNK values) of the row starting at byte `base`;
// `s` holds the chunk's scales (for Q4_K: of the current sub-block), `codes`
// the chunk's code bytes (Q8_0, Q4_0).
float weight(uint m, uint base, uint c, uint j, vec2 s, uint codes[8]) {
#if DTYPE == 0
    return uintBitsToFloat(word_at(m, (base >> 2u) + c));
#elif DTYPE == 1
    uint off = base + c * 2u;
    vec2 h = unpackHalf2x16(word_at(m, off >> 2u));
    return (off & 2u) == 0u ? h.x : h.y;
#elif DTYPE == 2
    int q = int(code_byte(codes, j) << 24u) >> 24;
    return float(q) * s.x;
#elif DTYPE == 3
    uint packed = code_byte(codes, j & 15u);
    int q = int(j < 16u ? (packed & 15u) : (packed >> 4u)) - 8;
    return float(q) * s.x;
#else
    // Q4_K: d (f16), dmin (f16), 12 bytes of 6-bit sub-block scales and
    // mins, then 128 bytes of codes; 64-element chunk cc holds element
    // 64cc + l in the low nibble of byte 32cc + l, 64cc + 32 + l in the high.
    uint packed = byte_at(m, base + c * 144u + 16u + 32u * (j / 64u) + j % 32u);
    uint q = ((j / 32u) & 1u) == 0u ? (packed & 15u) : (packed >> 4u);
    precise float v = s.x * float(q) - s.y;
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
        for (uint m = 0u; m < NMAT; ++m) {
            vec2 s = chunk_scales(m, base, c);
            uint codes[8];
#if DTYPE == 2
            load_codes(m, base + c * 34u + 2u, 32u, codes);
#elif DTYPE == 3
            load_codes(m, base + c * 18u + 2u, 16u, codes);
#else
            for (uint i = 0u; i < 8u; ++i) {
                codes[i] = 0u;
            }
#endif
#if DTYPE == 4
            vec2 dd = s;
#endif
            for (uint j = 0u; j < CHUNK; ++j) {
#if DTYPE == 4
                if ((j & 31u) == 0u) {
                    s = q4k_sub_scales(m, base + c * 144u, j / 32u, dd);
                }
#endif
                float wv = weight(m, base, c, j, s, codes);
                uint k = c * CHUNK + j;
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
