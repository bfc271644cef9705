#version 450
// GEMV over GGML-quantized weights (DTYPE 2 Q8_0, 3 Q4_0, 4 Q4_K) against
// activations already quantized by quantize.comp (the core's ActQuant::Q8_0
// for Q8_0 and Q4_0, ActQuant::Q8_K for Q4_K; layout in quantize.comp): int8
// codes dotted with integer dot products, exact integer block sums, then per
// block the core's f32 formula (fused_core::quant::vec_dot):
//   Q8_0: acc += float(isum) * (dx * dy)
//   Q4_0: acc += (float(isum) * dx) * dy,   isum = sum (nib - 8) q
//   Q4_K: acc += (dx dy) * float(A) - (dminx dy) * float(MI), A the block's
//         sum of scale * code * q, MI the sum of min * (sum of 32 codes).
// Only the order in which blocks are added differs from the core (the
// reduction in gemv_common.glsl; Q4_K also rounds A once instead of the
// core's eight lane sums).
//
// A block is cut into UPB sub-units (Q8_0: 8 values, Q4_0: 16, Q4_K: 32,
// the units of gemv_quant.comp) shared by L lanes (spec constant 5, a power
// of two up to UPB): lane p of a group of L consecutive threads takes S =
// UPB / L consecutive sub-units; the lanes' integer sums are added with
// subgroup shuffles (SUBGROUP; L = 1 without), and lane 0 adds the block.
// Groups take blocks g, g + WG / L, ... (U per loop trip, all loads first).
//
// DOT: integer dot products (OpSDot, int_dot.glsl); otherwise the same
// integer sums with bitfieldExtract and multiplies. Both give the same bits.
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#ifdef STORAGE16
#extension GL_EXT_shader_16bit_storage : require
#endif
#ifdef SUBGROUP
#extension GL_KHR_shader_subgroup_shuffle : require
#endif
#include "int_dot.glsl"
#include "gemv_common.glsl"

layout(constant_id = 5) const uint L = 1; // lanes per block

layout(std430, binding = 1) readonly buffer XQ { uint xq[]; };
layout(std430, binding = 1) readonly buffer XQ2 { uvec2 xq2[]; };
layout(std430, binding = 1) readonly buffer XQ4 { uvec4 xq4[]; };

#ifdef STORAGE16
layout(std430, binding = 0) readonly buffer W16 { uint16_t w16[]; };
#ifdef GLU
layout(std430, binding = 4) readonly buffer WU16 { uint16_t wu16[]; };
#endif
#endif

#if DTYPE == 2
#define BLOCK_VALUES 32u
#define UPB 4u
#define BLOCK_HALVES 17u
#elif DTYPE == 3
#define BLOCK_VALUES 32u
#define UPB 2u
#define BLOCK_HALVES 9u
#else
#define BLOCK_VALUES 256u
#define UPB 8u
#define BLOCK_QUADS 9u
#endif

const uint S = UPB / L; // sub-units per lane

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

// Loaded words of one loop trip: lq[(v * U + j) * S + s] sub-unit s of block
// j of matrix-row v = m * R + r (Q8_0, Q4_0: the 4 code halves; Q4_K: the
// code quad); lh[v * U + j] the scale half (Q8_0, Q4_0) or header quad.
uvec4 lq[NMAT * R * U * S];
#if DTYPE == 4
uvec4 lh[NMAT * R * U];
#else
uint lh[NMAT * R * U];
#endif
uint base[R];

void load_block(uint m, uint r, uint j, uint b, uint p) {
    uint v = m * R + r;
#if DTYPE == 4
    uint qb = base[r] + b * BLOCK_QUADS;
    lh[v * U + j] = quad_at(m, qb);
    [[unroll]] for (uint s = 0u; s < S; ++s) {
        lq[(v * U + j) * S + s] = quad_at(m, qb + 1u + p * S + s);
    }
#else
    uint hb = base[r] + b * BLOCK_HALVES;
    lh[v * U + j] = half_at(m, hb);
    [[unroll]] for (uint s = 0u; s < S; ++s) {
        uint o = hb + 1u + (p * S + s) * 4u; // 8 code bytes a sub-unit
        lq[(v * U + j) * S + s] = uvec4(half_at(m, o), half_at(m, o + 1u), half_at(m, o + 2u),
                                        half_at(m, o + 3u));
    }
#endif
}

#if DTYPE == 3
// Low (hi = false) or high nibbles of the 4 bytes of w minus 8, as int8s.
uint nib_minus8(uint w, bool hi) {
    uint n = (hi ? (w >> 4u) : w) & 0x0f0f0f0fu;
    return (n + 0x78787878u) ^ 0x80808080u;
}
#endif

// Adds the integer over the L lanes of a group (all active together).
int lanes_sum(int v) {
#ifdef SUBGROUP
    [[unroll]] for (uint o = 1u; o < L; o <<= 1u) {
        v += subgroupShuffleXor(v, o);
    }
#endif
    return v;
}

// Adds block b (loaded as block j of the trip) of every matrix and row, for
// every column, to acc; lane p of its group.
void accumulate(uint b, uint j, uint p) {
    uint n_blocks = pc.K / BLOCK_VALUES;
    uint soff = NC * (pc.K / 4u);
    [[unroll]] for (uint col = 0u; col < NC; ++col) {
        uint xw = col * (pc.K / 4u) + b * (BLOCK_VALUES / 4u); // first code word of the block
#if DTYPE == 4
        float dy = uintBitsToFloat(xq[soff + col * n_blocks + b]);
        uint moff = soff + NC * n_blocks + col * (pc.K / 32u) + b * 8u;
#else
        float dy = unpackHalf2x16(xq[soff + col * n_blocks + b]).x;
#endif
        [[unroll]] for (uint v = 0u; v < NMAT * R; ++v) {
            int isum = 0;
#if DTYPE == 4
            int mi = 0;
            uvec4 h = lh[v * U + j];
#endif
            [[unroll]] for (uint s = 0u; s < S; ++s) {
                uint su = p * S + s;
                uvec4 q = lq[(v * U + j) * S + s];
#if DTYPE == 2
                uvec2 x = xq2[(xw >> 1u) + su];
                isum += dot4x8(q.x | (q.y << 16u), x.x);
                isum += dot4x8(q.z | (q.w << 16u), x.y);
#elif DTYPE == 3
                // Code bytes 8su..8su+7: low nibbles values 8su.., high 16 + 8su..
                uvec2 xl = xq2[(xw >> 1u) + su];
                uvec2 xh = xq2[(xw >> 1u) + 2u + su];
                uint w0 = q.x | (q.y << 16u);
                uint w1 = q.z | (q.w << 16u);
                isum += dot4x8(nib_minus8(w0, false), xl.x);
                isum += dot4x8(nib_minus8(w1, false), xl.y);
                isum += dot4x8(nib_minus8(w0, true), xh.x);
                isum += dot4x8(nib_minus8(w1, true), xh.y);
#else
                // Quad su of the codes: values 64c + 16hq + 0..15 (low
                // nibbles, sub-block 2c) and 64c + 32 + 16hq + 0..15 (high,
                // sub-block 2c + 1).
                uint c = su >> 1u;
                uint hq = su & 1u;
                uvec4 xl = xq4[(xw >> 2u) + 4u * c + hq];
                uvec4 xh = xq4[(xw >> 2u) + 4u * c + 2u + hq];
                int il = 0;
                int ih = 0;
                [[unroll]] for (uint k = 0u; k < 4u; ++k) {
                    il += dot4x8(q[k] & 0x0f0f0f0fu, xl[k]);
                    ih += dot4x8((q[k] >> 4u) & 0x0f0f0f0fu, xh[k]);
                }
                // Scales and mins of sub-blocks 2c (low byte), 2c + 1 (high).
                uint sh = (c & 1u) * 16u;
                uint a = (h.y >> sh) & 0xffffu;
                uint bb = (h.z >> sh) & 0xffffu;
                uint e = (h.w >> sh) & 0xffffu;
                bool upper = c >= 2u;
                uint sc = upper ? (e & 0x0f0fu) | ((a >> 2u) & 0x3030u) : a & 0x3f3fu;
                isum += int(sc & 0xffu) * il + int(sc >> 8u) * ih;
                if (hq == 0u) {
                    uint mn = upper ? ((e >> 4u) & 0x0f0fu) | ((bb >> 2u) & 0x3030u) : bb & 0x3f3fu;
                    mi += int(mn & 0xffu) * int(xq[moff + 2u * c])
                        + int(mn >> 8u) * int(xq[moff + 2u * c + 1u]);
                }
#endif
            }
            isum = lanes_sum(isum);
#if DTYPE == 4
            mi = lanes_sum(mi);
#endif
            if (p == 0u) {
                uint ai = v * NC + col;
#if DTYPE == 2
                precise float t = float(isum) * (unpackHalf2x16(lh[v * U + j]).x * dy);
                precise float r = acc[ai] + t;
#elif DTYPE == 3
                precise float t = (float(isum) * unpackHalf2x16(lh[v * U + j]).x) * dy;
                precise float r = acc[ai] + t;
#else
                vec2 dd = unpackHalf2x16(h.x);
                precise float t = (dd.x * dy) * float(isum) - (dd.y * dy) * float(mi);
                precise float r = acc[ai] + t;
#endif
                acc[ai] = r;
            }
        }
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
    const uint GROUPS = WG / L; // lane groups per workgroup
    uint p = tid % L;
    uint b = tid / L;
    [[dont_unroll]] for (; b + (U - 1u) * GROUPS < n_blocks; b += U * GROUPS) {
        [[unroll]] for (uint j = 0u; j < U; ++j) {
            [[unroll]] for (uint m = 0u; m < NMAT; ++m) {
                [[unroll]] for (uint r = 0u; r < R; ++r) {
                    load_block(m, r, j, b + j * GROUPS, p);
                }
            }
        }
        [[unroll]] for (uint j = 0u; j < U; ++j) {
            accumulate(b + j * GROUPS, j, p);
        }
    }
    [[dont_unroll]] for (; b < n_blocks; b += GROUPS) {
        [[unroll]] for (uint m = 0u; m < NMAT; ++m) {
            [[unroll]] for (uint r = 0u; r < R; ++r) {
                load_block(m, r, 0u, b, p);
            }
        }
        accumulate(b, 0u, p);
    }
    reduce_and_store(row0, tid);
}
