#version 450
// y[col * M + row] = chain(W[row] . x[col]) for NC columns (1..8), or with
// GLU defined: chain(act(Wg[row] . x[col]) * (Wu[row] . x[col])).
//
// One workgroup of WG threads computes R consecutive rows. A row is cut into
// units of UV values; thread t takes units t, t + WG, t + 2 WG, ... (U of
// them per loop trip, their loads issued together), so that consecutive
// threads read consecutive weight words and x vec4s. For every unit each
// thread loads the x values once per column and uses them for all R rows.
// Weights are dequantized to f32 and multiplied by f32 activations (the
// core's ActQuant::F32). Partial sums are reduced with subgroupAdd and shared
// memory (SUBGROUP defined) or with a shared-memory tree.
// DTYPE: 0 F32, 1 F16, 2 Q8_0, 3 Q4_0, 4 Q4_K.
//
// Every accumulation is `precise` (products through explicit fma()), so the
// plain and the gated pipelines compute the same bits (fused == unfused).
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#ifdef SUBGROUP
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#endif
#include "common.glsl"

layout(constant_id = 0) const uint NC = 1;     // columns
layout(constant_id = 1) const uint WG = 64;    // threads per workgroup
layout(constant_id = 2) const uint R = 1;      // rows per workgroup
layout(constant_id = 3) const uint U = 1;      // units per thread per loop trip
layout(constant_id = 4) const uint SLOTS = 64; // partial sums per value: subgroups, or WG
layout(local_size_x_id = 1) in;

layout(std430, binding = 0) readonly buffer W { uint w[]; };
layout(std430, binding = 0) readonly buffer W4 { uvec4 w4[]; };
layout(std430, binding = 1) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer X4 { vec4 x4[]; };
layout(std430, binding = 2) writeonly buffer Y { float y[]; };
layout(std430, binding = 3) readonly buffer OPS { float ops[]; };
#ifdef GLU
layout(std430, binding = 4) readonly buffer WU { uint wu[]; };
layout(std430, binding = 4) readonly buffer WU4 { uvec4 wu4[]; };
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

const uint NV = NMAT * R * NC; // partial sums per thread
shared float red[NV * SLOTS];

uint word_at(uint m, uint word) {
#ifdef GLU
    return m == 0u ? w[word] : wu[word];
#else
    return w[word];
#endif
}

uvec4 quad_at(uint m, uint quad) {
#ifdef GLU
    return m == 0u ? w4[quad] : wu4[quad];
#else
    return w4[quad];
#endif
}

// The f16 at byte `off` (even).
float half_at(uint m, uint off) {
    uint word = word_at(m, off >> 2u);
    return unpackHalf2x16((off & 2u) == 0u ? word : word >> 16u).x;
}

// Units: UV values; UX = UV / 4 vec4s of x per unit; VEC_OK(K): whether the
// unit path applies (otherwise, F32 and F16 only, one value at a time).
#if DTYPE == 0
// F32: 4 values, one uvec4.
#define ROW_BYTES(K) ((K) * 4u)
#define UV 4u
#define VEC_OK(K) (((K) & 3u) == 0u)
#elif DTYPE == 1
// F16: 8 values, one uvec4.
#define ROW_BYTES(K) ((K) * 2u)
#define UV 8u
#define VEC_OK(K) (((K) & 7u) == 0u)
#elif DTYPE == 2
// Q8_0 (34-byte blocks: f16 d, 32 int8): a quarter block, 8 codes.
#define ROW_BYTES(K) ((K) / 32u * 34u)
#define UV 8u
#define VEC_OK(K) true
#elif DTYPE == 3
// Q4_0 (18-byte blocks: f16 d, 16 bytes of nibbles; byte i holds value i
// low and i + 16 high): 4 code bytes, values 4p..4p+3 and 16+4p..16+4p+3.
#define ROW_BYTES(K) ((K) / 32u * 18u)
#define UV 8u
#define VEC_OK(K) true
#else
// Q4_K (144-byte blocks: f16 d, f16 dmin, 12 bytes of 6-bit sub-block
// scales and mins, 128 code bytes; 64-value chunk c holds value 64c + l in
// the low nibble of code byte 32c + l and 64c + 32 + l in the high one):
// 8 code bytes (one uvec2), values 64c + 8j + 0..7 and 64c + 32 + 8j + 0..7.
#define ROW_BYTES(K) ((K) / 256u * 144u)
#define UV 16u
#define VEC_OK(K) true
#endif
#define UX (UV / 4u)

// One unit of one row as loaded: raw code words (q) and raw scale words
// (h). Loading does no arithmetic on loaded data and takes no branch, so
// that every load of a loop trip is in flight at once; decoding happens in
// `accumulate`.
struct Unit {
    uvec4 q;
    uvec4 h;
};

// The 4 bytes at byte offset `sh / 8` (0 or 2) of the 8 bytes lo, hi.
uint funnel(uint lo, uint hi, uint sh) {
    // (hi << 1) << (31 - sh): hi << (32 - sh), and 0 for sh = 0.
    return (lo >> sh) | ((hi << 1u) << (31u - sh));
}

// Loads unit u of the row starting at byte `base`.
Unit load_unit(uint m, uint base, uint u) {
    Unit r;
    r.h = uvec4(0u);
#if DTYPE <= 1
    r.q = quad_at(m, (base >> 4u) + u);
#elif DTYPE == 2
    uint bo = base + (u >> 2u) * 34u;
    uint off = bo + 2u + (u & 3u) * 8u;
    // Words holding bytes off .. off + 7 (the last may repeat the second).
    r.q = uvec4(word_at(m, off >> 2u), word_at(m, (off >> 2u) + 1u),
                word_at(m, (off + 7u) >> 2u), 0u);
    r.h.x = word_at(m, bo >> 2u);
#elif DTYPE == 3
    uint bo = base + (u >> 2u) * 18u;
    uint off = bo + 2u + (u & 3u) * 4u;
    // Words holding bytes off .. off + 3 (the same word twice when aligned).
    r.q = uvec4(word_at(m, off >> 2u), word_at(m, (off + 3u) >> 2u), 0u, 0u);
    r.h.x = word_at(m, bo >> 2u);
#else
    uint bq = (base >> 4u) + (u >> 4u) * 9u; // the block's first quad
    uint c = (u >> 2u) & 3u;
    uint j = u & 3u;
    uvec4 codes = quad_at(m, bq + 1u + 2u * c + (j >> 1u));
    r.q = uvec4(codes.xy, codes.zw);
    r.h = quad_at(m, bq);
#endif
    return r;
}

// The code words of a loaded unit (Q8_0: two, Q4_0: one, Q4_K: the two of
// unit u) and its scales: (d, 0, 0, 0), for Q4_K (d * scale, dmin * min) of
// its low (xy) and high (zw) sub-block.
struct Decoded {
    uvec2 q;
    vec4 s;
};

#if DTYPE == 4
// (d * scale, dmin * min) of sub-blocks 2c (xy) and 2c + 1 (zw) of the block
// whose header words are h (d | dmin << 16, then the 12 scale bytes).
vec4 q4k_scales(uvec4 h, uint c) {
    vec2 dd = unpackHalf2x16(h.x);
    // Byte pairs (2c', 2c' + 1) of the three scale words, c' = c mod 2.
    uint sh = (c & 1u) * 16u;
    uint a = (h.y >> sh) & 0xffffu; // scales 0..3 (+ high bits of 4..7)
    uint b = (h.z >> sh) & 0xffffu; // mins 0..3 (+ high bits of 4..7)
    uint e = (h.w >> sh) & 0xffffu; // low bits of scales and mins 4..7
    bool upper = c >= 2u;
    uint sc = upper ? (e & 0x0f0fu) | ((a >> 2u) & 0x3030u) : a & 0x3f3fu;
    uint mn = upper ? ((e >> 4u) & 0x0f0fu) | ((b >> 2u) & 0x3030u) : b & 0x3f3fu;
    precise vec4 r = vec4(dd.x, dd.y, dd.x, dd.y)
        * vec4(float(sc & 0xffu), float(mn & 0xffu), float(sc >> 8u), float(mn >> 8u));
    return r;
}
#endif

// Decodes unit u of the row starting at byte `base` as loaded.
Decoded decode_unit(Unit un, uint u, uint base) {
    Decoded d;
    d.s = vec4(1.0, 0.0, 0.0, 0.0);
    d.q = un.q.xy;
#if DTYPE == 2
    // Blocks and their code bytes start at even offsets: shift by 0 or 16.
    uint bo = base + (u >> 2u) * 34u;
    uint sh = (bo & 2u) * 8u; // the codes at bo + 2 + 8p: the other half
    d.q = uvec2(funnel(un.q.x, un.q.y, 16u - sh), funnel(un.q.y, un.q.z, 16u - sh));
    d.s.x = unpackHalf2x16(un.h.x >> sh).x;
#elif DTYPE == 3
    uint bo = base + (u >> 2u) * 18u;
    uint sh = (bo & 2u) * 8u;
    d.q.x = funnel(un.q.x, un.q.y, 16u - sh);
    d.s.x = unpackHalf2x16(un.h.x >> sh).x;
#elif DTYPE == 4
    d.q = (u & 1u) == 0u ? un.q.xy : un.q.zw;
    d.s = q4k_scales(un.h, (u >> 2u) & 3u);
#endif
    return d;
}

// The index of vec4 i (< UX) of unit u's x values within a column.
uint x_quad(uint u, uint i) {
#if DTYPE <= 2
    return u * UX + i;
#elif DTYPE == 3
    return (u >> 2u) * 8u + (u & 3u) + 4u * i;
#else
    // Chunk (u >> 2) of 64 values; low values 8j.., high 32 + 8j..
    return (u >> 2u) * 16u + (u & 3u) * 2u + (i & 1u) + (i >> 1u) * 8u;
#endif
}

// Code values 4i..4i+3 of a unit (Q4_0 without the -8, Q4_K without scales);
// `q` holds the unit's raw words (F32, F16) or decoded code words.
vec4 codes4(uvec4 q, uint i) {
#if DTYPE == 0
    return uintBitsToFloat(q);
#elif DTYPE == 1
    return vec4(unpackHalf2x16(q[2u * i]), unpackHalf2x16(q[2u * i + 1u]));
#elif DTYPE == 2
    int v = int(q[i]);
    return vec4(bitfieldExtract(v, 0, 8), bitfieldExtract(v, 8, 8),
                bitfieldExtract(v, 16, 8), bitfieldExtract(v, 24, 8));
#elif DTYPE == 3
    uint v = (q.x >> (4u * i)) & 0x0f0f0f0fu;
    return vec4(v & 0xffu, (v >> 8u) & 0xffu, (v >> 16u) & 0xffu, v >> 24u);
#else
    // i: 0, 1 low nibbles of words 0, 1; 2, 3 high nibbles.
    uint v = (q[i & 1u] >> (4u * (i >> 1u))) & 0x0f0f0f0fu;
    return vec4(v & 0xffu, (v >> 8u) & 0xffu, (v >> 16u) & 0xffu, v >> 24u);
#endif
}

float dot4(vec4 a, vec4 b, float acc) {
    precise float r = fma(a.x, b.x, acc);
    r = fma(a.y, b.y, r);
    r = fma(a.z, b.z, r);
    r = fma(a.w, b.w, r);
    return r;
}

float sum4(vec4 a, float acc) {
    precise float r = acc + a.x;
    r = r + a.y;
    r = r + a.z;
    r = r + a.w;
    return r;
}

// Per-invocation state: the loaded units of one loop trip (un[j * NMAT * R
// + m * R + r]: unit j of matrix m, row r) and the partial sums
// (acc[(m * R + r) * NC + col]).
// Every value stored in acc is computed by a `precise` expression.
Unit un[U * NMAT * R];
float acc[NV];
uint base[R]; // byte offset of each row of the workgroup

// acc[(m * R + r) * NC + col] += unit . x[col] for the loaded units
// un[j * NMAT * R + m * R + r] (unit index u) and every column.
void accumulate(uint u, uint j) {
    uint first = j * NMAT * R;
#if DTYPE >= 2
    Decoded dec[NMAT * R];
    [[unroll]] for (uint v = 0u; v < NMAT * R; ++v) {
        dec[v] = decode_unit(un[first + v], u, base[v % R]);
    }
#endif
    [[unroll]] for (uint col = 0u; col < NC; ++col) {
        uint xb = (col * pc.K) >> 2u;
#if DTYPE <= 1
        precise float s[NMAT * R];
        [[unroll]] for (uint i = 0u; i < NMAT * R; ++i) {
            s[i] = 0.0;
        }
        [[unroll]] for (uint i = 0u; i < UX; ++i) {
            vec4 xv = x4[xb + x_quad(u, i)];
            [[unroll]] for (uint v = 0u; v < NMAT * R; ++v) {
                s[v] = dot4(codes4(un[first + v].q, i), xv, s[v]);
            }
        }
        [[unroll]] for (uint v = 0u; v < NMAT * R; ++v) {
            precise float t = acc[v * NC + col] + s[v];
            acc[v * NC + col] = t;
        }
#elif DTYPE <= 3
        precise float s[NMAT * R];
        precise float sx = 0.0;
        [[unroll]] for (uint i = 0u; i < NMAT * R; ++i) {
            s[i] = 0.0;
        }
        [[unroll]] for (uint i = 0u; i < UX; ++i) {
            vec4 xv = x4[xb + x_quad(u, i)];
#if DTYPE == 3
            sx = sum4(xv, sx);
#endif
            [[unroll]] for (uint v = 0u; v < NMAT * R; ++v) {
                s[v] = dot4(codes4(uvec4(dec[v].q, 0u, 0u), i), xv, s[v]);
            }
        }
        [[unroll]] for (uint v = 0u; v < NMAT * R; ++v) {
#if DTYPE == 3
            // d * (sum q x - 8 sum x): Q4_0 codes are q - 8.
            precise float t = fma(-8.0, sx, s[v]);
#else
            precise float t = s[v];
#endif
            precise float a = fma(dec[v].s.x, t, acc[v * NC + col]);
            acc[v * NC + col] = a;
        }
#else
        // Q4_K: per half h (low, high), d*sc * sum q x - dmin*mn * sum x.
        precise float s[NMAT * R * 2u];
        precise float sx[2];
        sx[0] = 0.0;
        sx[1] = 0.0;
        [[unroll]] for (uint i = 0u; i < NMAT * R * 2u; ++i) {
            s[i] = 0.0;
        }
        [[unroll]] for (uint i = 0u; i < UX; ++i) {
            vec4 xv = x4[xb + x_quad(u, i)];
            uint h = i >> 1u;
            sx[h] = sum4(xv, sx[h]);
            [[unroll]] for (uint v = 0u; v < NMAT * R; ++v) {
                s[2u * v + h] = dot4(codes4(uvec4(dec[v].q, 0u, 0u), i), xv, s[2u * v + h]);
            }
        }
        [[unroll]] for (uint v = 0u; v < NMAT * R; ++v) {
            vec4 sc = dec[v].s;
            precise float t = fma(sc.x, s[2u * v], acc[v * NC + col]);
            t = fma(-sc.y, sx[0], t);
            t = fma(sc.z, s[2u * v + 1u], t);
            t = fma(-sc.w, sx[1], t);
            acc[v * NC + col] = t;
        }
#endif
    }
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

// Scalar F32 / F16 path for K not a multiple of the unit.
float scalar_weight(uint m, uint base, uint k) {
#if DTYPE == 0
    return uintBitsToFloat(word_at(m, (base >> 2u) + k));
#else
    return half_at(m, base + 2u * k);
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
    if (VEC_OK(pc.K)) {
        uint n_units = pc.K / UV;
        uint u = tid;
        [[dont_unroll]] for (; u + (U - 1u) * WG < n_units; u += U * WG) {
            [[unroll]] for (uint j = 0u; j < U; ++j) {
                [[unroll]] for (uint m = 0u; m < NMAT; ++m) {
                    [[unroll]] for (uint r = 0u; r < R; ++r) {
                        un[(j * NMAT + m) * R + r] = load_unit(m, base[r], u + j * WG);
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
                    un[m * R + r] = load_unit(m, base[r], u);
                }
            }
            accumulate(u, 0u);
        }
    }
#if DTYPE <= 1
    else {
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
#endif

#ifdef SUBGROUP
    [[unroll]] for (uint v = 0u; v < NV; ++v) {
        float s = subgroupAdd(acc[v]);
        if (subgroupElect()) {
            red[v * SLOTS + gl_SubgroupID] = s;
        }
    }
    barrier();
    uint n_parts = gl_NumSubgroups;
#else
    [[unroll]] for (uint v = 0u; v < NV; ++v) {
        red[v * SLOTS + tid] = acc[v];
    }
    barrier();
    for (uint s = WG / 2u; s > 0u; s >>= 1u) {
        if (tid < s) {
            [[unroll]] for (uint v = 0u; v < NV; ++v) {
                red[v * SLOTS + tid] = red[v * SLOTS + tid] + red[v * SLOTS + tid + s];
            }
        }
        barrier();
    }
    uint n_parts = 1u;
#endif
    for (uint t = tid; t < R * NC; t += WG) {
        uint r = t / NC;
        uint col = t % NC;
        uint row = row0 + r;
        if (row < pc.M) {
            precise float sums[NMAT];
            [[unroll]] for (uint m = 0u; m < NMAT; ++m) {
                uint v = (m * R + r) * NC + col;
                sums[m] = red[v * SLOTS];
                for (uint g = 1u; g < n_parts; ++g) {
                    sums[m] = sums[m] + red[v * SLOTS + g];
                }
            }
#ifdef GLU
            float o = glu_apply(pc.glu_act, sums[0], sums[1]);
#else
            float o = sums[0];
#endif
            y[col * pc.M + row] = apply_chain(o, row, col);
        }
    }
}
