#version 450
// GEMV over GGML-quantized weights in their block layout (DTYPE 2 Q8_0,
// 3 Q4_0, 4 Q4_K); see gemv_common.glsl for the output, the launch shape and
// the reduction.
//
// A row is cut into units: a quarter block of Q8_0 (8 codes), half a block
// of Q4_0 (8 code bytes: values 8h..8h+7 and 16+8h..16+8h+7), one 16-byte
// code quad of Q4_K (32 values of the 64-value chunk c: 16 in sub-block 2c,
// 16 in 2c + 1).
// Thread t takes units t, t + WG, ... (U per loop trip): consecutive threads
// read neighbouring bytes of the row. A loop trip first loads the weights of
// all its units (no arithmetic, no branch: every load in flight at once),
// then, per column, loads the unit's x values once as vec4s and uses them
// for all R rows.
//
// Q8_0 and Q4_0 blocks (34 and 18 bytes) are only 2-byte aligned: with
// STORAGE16 the shader reads them as 16-bit words (storageBuffer16BitAccess),
// otherwise it cuts 16-bit words out of 32-bit loads. Q4_K blocks (144 bytes)
// are read as 16-byte quads. Codes become floats without integer
// conversions (which issue at a quarter of the FMA rate): an int8 code c is
// the f32 with bits 0x4B000000 | (c + 128), minus 2^23 + 128 (exact); a
// nibble q (masked in place, 4 per word: 0x0F0F0F0F) is used as the f32
// with bits 0x3F000000 | q << 16, which is 0.5 + q / 256 exactly, with no
// subtraction per value: sum(q x) = 256 sum((0.5 + q/256) x) - 128 sum(x),
// whose cancellation costs about 2^-17 sum|x| per unit, far below the
// tolerance (and the rounding of long sums).
//
// Weights are dequantized to f32 and multiplied by f32 activations (the
// core's ActQuant::F32): per unit d * sum((q - 8) x) (Q4_0), d * sum(q x)
// (Q8_0), and per sub-block d*sc * sum(q x) - dmin*m * sum(x) (Q4_K). Every
// accumulation is `precise` (products through explicit fma()), so the plain
// and the gated pipelines compute the same bits (fused == unfused).
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#ifdef STORAGE16
#extension GL_EXT_shader_16bit_storage : require
#endif
#include "gemv_common.glsl"

#ifdef STORAGE16
layout(std430, binding = 0) readonly buffer W16 { uint16_t w16[]; };
#ifdef GLU
layout(std430, binding = 4) readonly buffer WU16 { uint16_t wu16[]; };
#endif
#endif

// The float of 2^23 + b for b < 2^23 has the bits MAGIC | b.
const uint MAGIC = 0x4B000000u;

#if DTYPE == 2
#define BLOCK_VALUES 32u
#define UNITS_PER_BLOCK 4u
#define BLOCK_HALVES 17u // 16-bit words per block
#elif DTYPE == 3
#define BLOCK_VALUES 32u
#define UNITS_PER_BLOCK 2u
#define BLOCK_HALVES 9u
#else
#define BLOCK_VALUES 256u
#define UNITS_PER_BLOCK 8u
#define BLOCK_QUADS 9u // 16-byte words per block
#endif

// The 16-bit word i of matrix m (0: W, 1: the up matrix).
uint half_at(uint m, uint i) {
#ifdef STORAGE16
#ifdef GLU
    return m == 0u ? uint(w16[i]) : uint(wu16[i]);
#else
    return uint(w16[i]);
#endif
#else
    return (word_at(m, i >> 1u) >> ((i & 1u) << 4u)) & 0xffffu;
#endif
}

// The loaded words of one loop trip; index s = (j * NMAT + m) * R + r for
// unit j of matrix m, row r. Q8_0 and Q4_0: q the 4 code halves, d the
// scale half; Q4_K: q the code quad, h the block's header quad.
uvec4 lq[U * NMAT * R];
#if DTYPE == 4
uvec4 lh[U * NMAT * R];
#else
uint ld[U * NMAT * R];
#endif
uint base[R]; // each row's first 16-bit word (Q8_0, Q4_0) or quad (Q4_K)

void load_unit(uint s, uint m, uint r, uint u) {
#if DTYPE == 2
    uint hb = base[r] + (u >> 2u) * BLOCK_HALVES;
    uint o = hb + 1u + (u & 3u) * 4u;
    ld[s] = half_at(m, hb);
    lq[s] = uvec4(half_at(m, o), half_at(m, o + 1u), half_at(m, o + 2u), half_at(m, o + 3u));
#elif DTYPE == 3
    uint hb = base[r] + (u >> 1u) * BLOCK_HALVES;
    uint o = hb + 1u + (u & 1u) * 4u;
    ld[s] = half_at(m, hb);
    lq[s] = uvec4(half_at(m, o), half_at(m, o + 1u), half_at(m, o + 2u), half_at(m, o + 3u));
#else
    uint qb = base[r] + (u >> 3u) * BLOCK_QUADS;
    lq[s] = quad_at(m, qb + 1u + (u & 7u));
    lh[s] = quad_at(m, qb);
#endif
}

#if DTYPE == 2
// The 4 bytes of v as floats minus `bias` (exact for small results).
vec4 bytes_minus(uint v, float bias) {
    return vec4(uintBitsToFloat(MAGIC | (v & 0xffu)), uintBitsToFloat(MAGIC | ((v >> 8u) & 0xffu)),
                uintBitsToFloat(MAGIC | ((v >> 16u) & 0xffu)), uintBitsToFloat(MAGIC | (v >> 24u)))
        - (8388608.0 + bias);
}
#else
// The 4 bytes q of v (each < 128) as 0.5 + q / 256: the f32 with bits
// 0x3F000000 | q << 16 (one byte move each).
vec4 half_plus(uint v) {
    const uint H = 0x3F000000u;
    return uintBitsToFloat(uvec4(((v << 16u) & 0x00ff0000u) | H, ((v << 8u) & 0x00ff0000u) | H,
                                 (v & 0x00ff0000u) | H, ((v >> 8u) & 0x00ff0000u) | H));
}
#endif

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

// acc[(m * R + r) * NC + col] += unit u . x[col] for the loaded unit j of
// every matrix and row, and every column.
void accumulate(uint u, uint j) {
    uint first = j * NMAT * R;
    [[unroll]] for (uint col = 0u; col < NC; ++col) {
        uint xb = (col * pc.K) >> 2u;
#if DTYPE == 2
        vec4 x0 = x4[xb + 2u * u];
        vec4 x1 = x4[xb + 2u * u + 1u];
        [[unroll]] for (uint v = 0u; v < NMAT * R; ++v) {
            uvec4 q = lq[first + v];
            // int8 codes + 128 in each byte.
            uint w0 = (q.x | (q.y << 16u)) ^ 0x80808080u;
            uint w1 = (q.z | (q.w << 16u)) ^ 0x80808080u;
            precise float s = dot4(bytes_minus(w0, 128.0), x0, 0.0);
            s = dot4(bytes_minus(w1, 128.0), x1, s);
            precise float a = fma(unpackHalf2x16(ld[first + v]).x, s, acc[v * NC + col]);
            acc[v * NC + col] = a;
        }
#elif DTYPE == 3
        // Code bytes 8h..8h+7: low nibbles values 8h.., high 16 + 8h..
        uint xq = xb + (u >> 1u) * 8u + (u & 1u) * 2u;
        vec4 xl0 = x4[xq];
        vec4 xl1 = x4[xq + 1u];
        vec4 xh0 = x4[xq + 4u];
        vec4 xh1 = x4[xq + 5u];
        precise float sx = sum4(xl0, 0.0);
        sx = sum4(xl1, sx);
        sx = sum4(xh0, sx);
        sx = sum4(xh1, sx);
        [[unroll]] for (uint v = 0u; v < NMAT * R; ++v) {
            uvec4 q = lq[first + v];
            uint w0 = q.x | (q.y << 16u);
            uint w1 = q.z | (q.w << 16u);
            // s = sum (0.5 + q/256) x; sum (q - 8) x = 256 s - 136 sum x.
            precise float s = dot4(half_plus(w0 & 0x0f0f0f0fu), xl0, 0.0);
            s = dot4(half_plus(w1 & 0x0f0f0f0fu), xl1, s);
            s = dot4(half_plus((w0 >> 4u) & 0x0f0f0f0fu), xh0, s);
            s = dot4(half_plus((w1 >> 4u) & 0x0f0f0f0fu), xh1, s);
            precise float t = fma(-136.0, sx, 256.0 * s);
            precise float a = fma(unpackHalf2x16(ld[first + v]).x, t, acc[v * NC + col]);
            acc[v * NC + col] = a;
        }
#else
        // Values 64c + 16hq + 0..15 (low nibbles) and 64c + 32 + 16hq + 0..15.
        uint qi = u & 7u;
        uint xq = xb + (u >> 3u) * 64u + (qi >> 1u) * 16u + (qi & 1u) * 4u;
        vec4 xl[4];
        vec4 xh[4];
        precise float sxl = 0.0;
        precise float sxh = 0.0;
        [[unroll]] for (uint k = 0u; k < 4u; ++k) {
            xl[k] = x4[xq + k];
            xh[k] = x4[xq + 8u + k];
            sxl = sum4(xl[k], sxl);
            sxh = sum4(xh[k], sxh);
        }
        [[unroll]] for (uint v = 0u; v < NMAT * R; ++v) {
            uvec4 q = lq[first + v];
            precise float sl = 0.0;
            precise float sh = 0.0;
            [[unroll]] for (uint k = 0u; k < 4u; ++k) {
                sl = dot4(half_plus(q[k] & 0x0f0f0f0fu), xl[k], sl);
                sh = dot4(half_plus((q[k] >> 4u) & 0x0f0f0f0fu), xh[k], sh);
            }
            // sum q x = 256 s - 128 sum x per half.
            sl = fma(-128.0, sxl, 256.0 * sl);
            sh = fma(-128.0, sxh, 256.0 * sh);
            vec4 sc = q4k_scales(lh[first + v], qi >> 1u);
            precise float t = fma(sc.x, sl, acc[v * NC + col]);
            t = fma(-sc.y, sxl, t);
            t = fma(sc.z, sh, t);
            t = fma(-sc.w, sxh, t);
            acc[v * NC + col] = t;
        }
#endif
    }
}

void main() {
    uint row0 = flat_group() * R;
    if (row0 >= pc.M) {
        return;
    }
    uint tid = gl_LocalInvocationIndex;
    uint n_blocks = pc.K / BLOCK_VALUES;
#if DTYPE == 4
    uint row_words = n_blocks * BLOCK_QUADS;
#else
    uint row_words = n_blocks * BLOCK_HALVES;
#endif
    [[unroll]] for (uint r = 0u; r < R; ++r) {
        // Rows past M repeat the last row; their sums are not written.
        base[r] = min(row0 + r, pc.M - 1u) * row_words;
    }
    [[unroll]] for (uint i = 0u; i < NV; ++i) {
        acc[i] = 0.0;
    }
    uint n_units = n_blocks * UNITS_PER_BLOCK;
    uint u = tid;
    [[dont_unroll]] for (; u + (U - 1u) * WG < n_units; u += U * WG) {
        [[unroll]] for (uint j = 0u; j < U; ++j) {
            [[unroll]] for (uint m = 0u; m < NMAT; ++m) {
                [[unroll]] for (uint r = 0u; r < R; ++r) {
                    load_unit((j * NMAT + m) * R + r, m, r, u + j * WG);
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
                load_unit(m * R + r, m, r, u);
            }
        }
        accumulate(u, 0u);
    }
    reduce_and_store(row0, tid);
}
