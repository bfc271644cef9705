#version 450
// GEMV over the GGML formats that have no shader tuned for them, with f32
// activations (the core's ActQuant::F32): DTYPE 6 Q4_1, 7 Q5_0, 8 Q5_1,
// 9 IQ4_NL, 10 Q5_K, 11 Q6_K, 12 TQ2_0. See gemv_common.glsl for the
// output, the launch shape and the reduction.
//
// A row is cut into units of 32 values: one block of the 32-value formats,
// an eighth of a 256-value block (its values 32s .. 32s + 31) of Q5_K,
// Q6_K and TQ2_0. Thread t takes units t, t + WG, ...; for each it
// dequantizes the unit's 32 values as the core does (fused_core::quant,
// the same products and sums in the same order), then dots them with each
// column's 32 x values. Blocks are only 2-byte aligned (Q5_0: 22 bytes,
// IQ4_NL 18, Q6_K 210, TQ2_0 66), so bytes are cut out of 32-bit words.
//
// With Q8 defined the activations are GGML's, already quantized by
// quantize.comp (its layout): Q8_1 for Q4_1 and Q5_1, Q8_0 for Q5_0 and
// IQ4_NL, Q8_K for Q5_K, Q6_K and TQ2_0. A thread takes units of 32
// values, as with f32 activations: a whole block of the 32-value formats,
// one sub-block of the K-quants (a thread with whole 256-value blocks left
// most of a workgroup idle at K = 14336 and ran at 11 % of the copy
// bandwidth on the H200, 2026-12-02). Their
// integer weight codes (Q4_1: 0 .. 15, Q5_1: 0 .. 31, Q5_0: code - 16,
// IQ4_NL: the table value, Q5_K: 0 .. 31, Q6_K: -32 .. 31, TQ2_0: -1 .. 1) are packed as int8s and dotted with the activation
// codes in integers (int_dot.glsl), scaled in integers, and the core's
// formula (fused_core::quant::vec_dot) adds the unit:
//   Q4_1, Q5_1: acc += (d_w d_x) * float(isum) + m_w s_x
//   Q5_0, IQ4_NL: acc += (d_w d_x) * float(isum)
//   Q5_K: acc += (d d_x) * float(A) - (dmin d_x) * float(MI), A the
//         sub-block's scale * (sum of code * q), MI its min * (sum of its
//         32 activation codes)
//   Q6_K: acc += (d d_x) * float(A), A the sum of scale * code * q
//   TQ2_0: acc += float(isum) * (d_x d)
// Only the order in which the terms are added differs from the core (and
// the K-quants round a float term per sub-block, where the core rounds
// one per block from its eight lane sums).
//
// Every accumulation is `precise` (products through explicit fma()), so the
// plain and the gated pipelines compute the same bits (fused == unfused).
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#ifdef Q8
#include "int_dot.glsl"
#endif
#include "gemv_common.glsl"

#ifdef Q8
layout(constant_id = 5) const uint L = 1; // lanes per block: always 1 here
layout(std430, binding = 1) readonly buffer XQ { uint xq[]; };
#endif

#if DTYPE == 6
#define BLOCK_BYTES 20u
#define UNITS_PER_BLOCK 1u
#elif DTYPE == 7
#define BLOCK_BYTES 22u
#define UNITS_PER_BLOCK 1u
#elif DTYPE == 8
#define BLOCK_BYTES 24u
#define UNITS_PER_BLOCK 1u
#elif DTYPE == 9
#define BLOCK_BYTES 18u
#define UNITS_PER_BLOCK 1u
#elif DTYPE == 10
#define BLOCK_BYTES 176u
#define UNITS_PER_BLOCK 8u
#elif DTYPE == 11
#define BLOCK_BYTES 210u
#define UNITS_PER_BLOCK 8u
#else
#define BLOCK_BYTES 66u
#define UNITS_PER_BLOCK 8u
#endif
#define BLOCK_VALUES (32u * UNITS_PER_BLOCK)

uint base[R]; // byte offset of each row of the workgroup

// The 4 bytes of matrix m from byte `off` on (any alignment), the first in
// the low byte. Reads only the words that hold them.
uint bytes4(uint m, uint off) {
    uint w0 = word_at(m, off >> 2u);
    uint sh = (off & 3u) * 8u;
    if (sh == 0u) {
        return w0;
    }
    return (w0 >> sh) | (word_at(m, (off >> 2u) + 1u) << (32u - sh));
}

// The f16 at (2-aligned) byte `off` of matrix m, as f32.
float half_at_byte(uint m, uint off) {
    uint w = word_at(m, off >> 2u);
    return unpackHalf2x16((off & 2u) == 0u ? w : w >> 16u).x;
}

// Byte i (0..3) of w.
uint byte_of(uint w, uint i) {
    return (w >> (8u * i)) & 0xffu;
}

// The 32 bytes of matrix m from byte `off` on, 4 to a word.
void bytes32(uint m, uint off, out uint b[8]) {
    [[unroll]] for (uint i = 0u; i < 8u; ++i) {
        b[i] = bytes4(m, off + 4u * i);
    }
}

// Byte l (0..31) of 32 bytes read by bytes32.
uint byte32(uint b[8], uint l) {
    return byte_of(b[l >> 2u], l & 3u);
}

#if DTYPE == 9
const int KVALUES_IQ4NL[16] = int[16](-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53,
                                      69, 89, 113);
// The table where a thread indexes it: NVIDIA's compiler keeps a constant
// array indexed at run time in local memory, and the GEMV ran at 4 % of
// the copy bandwidth on the H200 so (2026-12-02); main() copies it here.
shared int kvalues_iq4nl[16];
#endif

#if DTYPE <= 9
// The integer codes of the 32-value block at byte b of matrix m, value j
// at q[j]: Q4_1 the nibble (0 .. 15), Q5_1 the nibble with its fifth bit
// (0 .. 31), Q5_0 that minus 16, IQ4_NL the table value of the nibble.
// The 16 code bytes hold values j (low nibble) and j + 16 (high); Q5_0 and
// Q5_1 keep value j's fifth bit in bit j of the word qh.
void block32_codes(uint m, uint b, out int q[32]) {
#if DTYPE == 6
    uint qs = b + 4u;
#elif DTYPE == 7
    uint qh = bytes4(m, b + 2u);
    uint qs = b + 6u;
#elif DTYPE == 8
    uint qh = bytes4(m, b + 4u);
    uint qs = b + 8u;
#else
    uint qs = b + 2u;
#endif
    [[unroll]] for (uint i = 0u; i < 4u; ++i) {
        uint w = bytes4(m, qs + 4u * i);
        [[unroll]] for (uint k = 0u; k < 4u; ++k) {
            uint j = 4u * i + k;
            uint lo = byte_of(w, k) & 15u;
            uint hi = byte_of(w, k) >> 4u;
#if DTYPE == 7 || DTYPE == 8
            lo |= ((qh >> j) & 1u) << 4u;
            hi |= ((qh >> (j + 16u)) & 1u) << 4u;
#endif
#if DTYPE == 9
            q[j] = kvalues_iq4nl[lo];
            q[j + 16u] = kvalues_iq4nl[hi];
#elif DTYPE == 7
            q[j] = int(lo) - 16;
            q[j + 16u] = int(hi) - 16;
#else
            q[j] = int(lo);
            q[j + 16u] = int(hi);
#endif
        }
    }
}
#endif

#ifdef Q8
// 32 codes (each in -128 .. 127) packed 4 int8s a word: value j in byte
// j mod 4 of word j / 4, the order of the activation codes.
void pack_int8(int q[32], out uint c[8]) {
    [[unroll]] for (uint i = 0u; i < 8u; ++i) {
        c[i] = (uint(q[4u * i]) & 0xffu) | ((uint(q[4u * i + 1u]) & 0xffu) << 8u)
            | ((uint(q[4u * i + 2u]) & 0xffu) << 16u) | (uint(q[4u * i + 3u]) << 24u);
    }
}
#endif

#if DTYPE >= 10
// The integer codes of values 32s .. 32s + 31 of the 256-value block at
// byte b of matrix m:
// - Q5_K (d, dmin, 12 scale bytes, qh[32], qs[128]): the low (s even) or
//   high nibbles of qs[32 (s / 2) ..] with fifth bit s of qh, 0 .. 31;
// - Q6_K (ql[128], qh[64], 16 int8 scales, d): value 128h + 32g + l (s =
//   4h + g) the low (g < 2) or high nibble of ql[64h + 32 (g mod 2) + l]
//   with bits 2g, 2g + 1 of qh[32h + l], minus 32;
// - TQ2_0 (qs[64], d): value 128 (s / 4) + 32 l' + i is bits 2l', 2l' + 1
//   of qs[32 (s / 4) + i] (l' = s mod 4), minus 1.
void sub_codes(uint m, uint b, uint s, out int q[32]) {
    uint qs[8];
#if DTYPE == 10
    uint qh[8];
    bytes32(m, b + 16u, qh);
    bytes32(m, b + 48u + 32u * (s >> 1u), qs);
    uint shift = 4u * (s & 1u);
    [[unroll]] for (uint l = 0u; l < 32u; ++l) {
        q[l] = int(((byte32(qs, l) >> shift) & 15u) | (((byte32(qh, l) >> s) & 1u) << 4u));
    }
#elif DTYPE == 11
    uint h = s >> 2u;
    uint g = s & 3u;
    uint qh[8];
    bytes32(m, b + 128u + 32u * h, qh);
    bytes32(m, b + 64u * h + 32u * (g & 1u), qs);
    uint shift = 4u * (g >> 1u);
    [[unroll]] for (uint l = 0u; l < 32u; ++l) {
        uint c = ((byte32(qs, l) >> shift) & 15u) | (((byte32(qh, l) >> (2u * g)) & 3u) << 4u);
        q[l] = int(c) - 32;
    }
#else
    bytes32(m, b + 32u * (s >> 2u), qs);
    uint shift = 2u * (s & 3u);
    [[unroll]] for (uint l = 0u; l < 32u; ++l) {
        q[l] = int((byte32(qs, l) >> shift) & 3u) - 1;
    }
#endif
}
#endif

#if DTYPE == 10
// The 6-bit scale and min of sub-block s of the Q5_K block at byte b (the
// core's scale_min).
void q5k_scale_min(uint m, uint b, uint s, out uint sc, out uint mn) {
    uint sw[3] = uint[3](bytes4(m, b + 4u), bytes4(m, b + 8u), bytes4(m, b + 12u));
    if (s < 4u) {
        sc = byte_of(sw[0], s) & 63u;
        mn = byte_of(sw[1], s) & 63u;
    } else {
        uint e = byte_of(sw[2], s - 4u);
        sc = (e & 15u) | ((byte_of(sw[0], s - 4u) >> 6u) << 4u);
        mn = (e >> 4u) | ((byte_of(sw[1], s - 4u) >> 6u) << 4u);
    }
}
#endif

#if DTYPE == 11
// The int8 scales of values 32s .. 32s + 15 and 32s + 16 .. 32s + 31 of the
// Q6_K block at byte b (its scales 2s and 2s + 1).
void q6k_scales(uint m, uint b, uint s, out int sc[2]) {
    uint sw = bytes4(m, b + 192u + 2u * s);
    sc[0] = int(sw << 24u) >> 24;
    sc[1] = int(sw << 16u) >> 24;
}
#endif

// The 32 values of unit u of the row at byte rb of matrix m.
void unit_values(uint m, uint rb, uint u, out float v[32]) {
#if DTYPE <= 9
    uint b = rb + u * BLOCK_BYTES;
    int q[32];
    block32_codes(m, b, q);
    float d = half_at_byte(m, b);
#if DTYPE == 6 || DTYPE == 8
    float mn = half_at_byte(m, b + 2u);
#endif
    [[unroll]] for (uint j = 0u; j < 32u; ++j) {
#if DTYPE == 6 || DTYPE == 8
        precise float a = float(q[j]) * d + mn;
#elif DTYPE == 7
        precise float a = float(q[j]) * d;
#else
        precise float a = d * float(q[j]);
#endif
        v[j] = a;
    }
#else
    uint b = rb + (u / UNITS_PER_BLOCK) * BLOCK_BYTES;
    uint s = u % UNITS_PER_BLOCK;
    int q[32];
    sub_codes(m, b, s, q);
#if DTYPE == 10
    uint sc;
    uint mn;
    q5k_scale_min(m, b, s, sc, mn);
    precise float d1 = half_at_byte(m, b) * float(sc);
    precise float m1 = half_at_byte(m, b + 2u) * float(mn);
    [[unroll]] for (uint l = 0u; l < 32u; ++l) {
        precise float a = d1 * float(q[l]) - m1;
        v[l] = a;
    }
#elif DTYPE == 11
    float d = half_at_byte(m, b + 208u);
    int sc[2];
    q6k_scales(m, b, s, sc);
    [[unroll]] for (uint l = 0u; l < 32u; ++l) {
        precise float a = d * float(sc[l >> 4u]) * float(q[l]);
        v[l] = a;
    }
#else
    float d = half_at_byte(m, b + 64u);
    [[unroll]] for (uint l = 0u; l < 32u; ++l) {
        precise float a = float(q[l]) * d;
        v[l] = a;
    }
#endif
#endif
}

#if defined(Q8) && DTYPE >= 10
// acc[(m * R + r) * NC + col] += sub-block s of block u . xq[col] for every
// matrix, row and column (quantize.comp's Q8_K layout: codes column after
// column, one f32 scale per block, then the sum of every 32 codes): the
// sub-block's integer sums, scaled in integers, then one float term with
// the block's d (and dmin).
void accumulate_sub(uint u, uint s) {
    uint n_blocks = pc.K / BLOCK_VALUES;
    uint soff = NC * (pc.K / 4u);
    uint moff = soff + NC * n_blocks;
    [[unroll]] for (uint m = 0u; m < NMAT; ++m) {
        [[unroll]] for (uint r = 0u; r < R; ++r) {
            uint b = base[r] + u * BLOCK_BYTES;
#if DTYPE == 10
            float dw = half_at_byte(m, b);
            float dmin = half_at_byte(m, b + 2u);
#elif DTYPE == 11
            float dw = half_at_byte(m, b + 208u);
#else
            float dw = half_at_byte(m, b + 64u);
#endif
            int sum_a[NC]; // per column: the sum of scale * code * q
#if DTYPE == 10
            int sum_m[NC]; // min * (sum of the 32 activation codes)
#endif
            int q[32];
            sub_codes(m, b, s, q);
            uint c[8];
            pack_int8(q, c);
#if DTYPE == 10
            uint sc;
            uint mn;
            q5k_scale_min(m, b, s, sc, mn);
#elif DTYPE == 11
            int sc2[2];
            q6k_scales(m, b, s, sc2);
#endif
            [[unroll]] for (uint col = 0u; col < NC; ++col) {
                uint xw = col * (pc.K / 4u) + u * 64u + 8u * s;
                int lo = 0;
                int hi = 0;
                [[unroll]] for (uint i = 0u; i < 4u; ++i) {
                    lo += dot4x8(c[i], xq[xw + i]);
                    hi += dot4x8(c[4u + i], xq[xw + 4u + i]);
                }
#if DTYPE == 10
                sum_a[col] = int(sc) * (lo + hi);
                sum_m[col] = int(mn) * int(xq[moff + col * (pc.K / 32u) + u * 8u + s]);
#elif DTYPE == 11
                sum_a[col] = sc2[0] * lo + sc2[1] * hi;
#else
                sum_a[col] = lo + hi;
#endif
            }
            [[unroll]] for (uint col = 0u; col < NC; ++col) {
                float dy = uintBitsToFloat(xq[soff + col * n_blocks + u]);
                uint a = (m * R + r) * NC + col;
#if DTYPE == 10
                precise float t = (dw * dy) * float(sum_a[col]) - (dmin * dy) * float(sum_m[col]);
#elif DTYPE == 11
                precise float t = (dw * dy) * float(sum_a[col]);
#else
                precise float t = float(sum_a[col]) * (dy * dw);
#endif
                precise float sum = acc[a] + t;
                acc[a] = sum;
            }
        }
    }
}
#elif defined(Q8)
// acc[(m * R + r) * NC + col] += block u . xq[col] for every matrix, row
// and column (quantize.comp's layout: codes column after column, then one
// f16 scale per block, Q8_1's with the f16 s in its high half).
void accumulate(uint u) {
    uint n_blocks = pc.K / BLOCK_VALUES;
    uint soff = NC * (pc.K / 4u);
    [[unroll]] for (uint m = 0u; m < NMAT; ++m) {
        [[unroll]] for (uint r = 0u; r < R; ++r) {
            uint b = base[r] + u * BLOCK_BYTES;
            int q[32];
            block32_codes(m, b, q);
            uint c[8];
            pack_int8(q, c);
            float dw = half_at_byte(m, b);
#if DTYPE == 6 || DTYPE == 8
            float mw = half_at_byte(m, b + 2u);
#endif
            [[unroll]] for (uint col = 0u; col < NC; ++col) {
                uint xw = col * (pc.K / 4u) + u * 8u;
                float dy = unpackHalf2x16(xq[soff + col * n_blocks + u]).x;
                int isum = 0;
                [[unroll]] for (uint i = 0u; i < 8u; ++i) {
                    isum += dot4x8(c[i], xq[xw + i]);
                }
                uint a = (m * R + r) * NC + col;
#if DTYPE == 6 || DTYPE == 8
                float sy = unpackHalf2x16(xq[soff + col * n_blocks + u]).y;
                precise float t = (dw * dy) * float(isum) + mw * sy;
#else
                precise float t = (dw * dy) * float(isum);
#endif
                precise float s = acc[a] + t;
                acc[a] = s;
            }
        }
    }
}
#else
// acc[(m * R + r) * NC + col] += unit u . x[col] for every matrix, row and
// column.
void accumulate(uint u) {
    [[unroll]] for (uint m = 0u; m < NMAT; ++m) {
        [[unroll]] for (uint r = 0u; r < R; ++r) {
            float v[32];
            unit_values(m, base[r], u, v);
            [[unroll]] for (uint col = 0u; col < NC; ++col) {
                uint xb = ((col * pc.K) >> 2u) + 8u * u;
                precise float s = 0.0;
                [[unroll]] for (uint i = 0u; i < 8u; ++i) {
                    vec4 wv = vec4(v[4u * i], v[4u * i + 1u], v[4u * i + 2u], v[4u * i + 3u]);
                    s = dot4(wv, x4[xb + i], s);
                }
                uint a = (m * R + r) * NC + col;
                precise float t = acc[a] + s;
                acc[a] = t;
            }
        }
    }
}
#endif

void main() {
    uint row0 = flat_group() * R;
    if (row0 >= pc.M) {
        return;
    }
    uint tid = gl_LocalInvocationIndex;
    uint n_blocks = pc.K / BLOCK_VALUES;
    uint row_bytes = n_blocks * BLOCK_BYTES;
    [[unroll]] for (uint r = 0u; r < R; ++r) {
        // Rows past M repeat the last row; their sums are not written.
        base[r] = min(row0 + r, pc.M - 1u) * row_bytes;
    }
    [[unroll]] for (uint i = 0u; i < NV; ++i) {
        acc[i] = 0.0;
    }
#if DTYPE == 9
    if (tid < 16u) {
        kvalues_iq4nl[tid] = KVALUES_IQ4NL[tid];
    }
    barrier();
#endif
    uint n_units = n_blocks * UNITS_PER_BLOCK;
    [[dont_unroll]] for (uint u = tid; u < n_units; u += WG) {
#if defined(Q8) && DTYPE >= 10
        accumulate_sub(u / UNITS_PER_BLOCK, u % UNITS_PER_BLOCK);
#else
        accumulate(u);
#endif
    }
    reduce_and_store(row0, tid);
}
