#version 450
// Quantizes f32 activation columns for the Q8-mode GEMV (gemv_q8.comp)
// exactly as fused_core::quant::quantize_row does: DTYPE 2 Q8_0 (GGML's
// quantize_row_q8_0_ref: d = amax / 127, id = 1 / d, q = roundf(x id), d
// stored as f16; with Q8_1 defined GGML's Q8_1, the same codes and d and
// s = f16(d * sum of the 32 codes)), DTYPE 4 Q8_K (quantize_row_q8_K_ref: max = the first value
// of largest magnitude, iscale = -127 / max, q = min(nearest_int(iscale x),
// 127), d = 1 / iscale, sums of the codes).
//
// Output (32-bit words, for `n_cols` columns of K values, K a multiple of 32
// (Q8_0) or 256 (Q8_K)):
//   [0, n_cols K / 4)        the int8 codes, column after column, 4 a word;
//   [S, S + n_cols K / BLK)  one scale per block: Q8_0 the f16 bits of d,
//                            Q8_1 those of d in the low half and of s in
//                            the high half, Q8_K the f32 bits of d
//                            (S = n_cols K / 4);
//   Q8_K only: [S2, S2 + n_cols K / 32) the sum of each 32 codes (an int;
//                            S2 = S + n_cols K / 256).
//
// Each thread loads VPT consecutive values (all its loads first) and folds
// them; the threads of a block (Q8_0: 32 values, Q8_K: 256) exchange their
// folds through shared memory once (the code sums of Q8_1's blocks and
// Q8_K's 32 values a second time), and each of them combines the block's folds as a tree and divides
// (every thread of a block the same divisions, so nothing is broadcast).
// Maxima are folded on the bits (positive floats order as their bits), so
// a driver's no-NaN assumptions cannot change them.
// Divisions are correctly rounded (a shader's `/` need not be): Q8_0's
// amax / 127 by an integer division of the significand by the constant,
// the others by a float estimate of the quotient's significand made exact
// by integer remainders; the f16 conversion rounds to nearest even in
// integer arithmetic, every float product and sum is `precise`, and scales
// are tested by their bits (a subnormal d is not zero). The codes equal the
// core's for activations that are zero, normal or infinite, also where d
// is subnormal or 127 / max overflows (a device may flush subnormal
// activations to zero; NaN codes are 0, as on x86 and Arm).
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"

// Threads per workgroup: a multiple of a block's threads (Q8_0: 32 / VPT,
// Q8_K: 256 / VPT).
layout(constant_id = 0) const uint WG = 64;
// Values per thread: 4, 8, 16 or 32.
layout(constant_id = 1) const uint VPT = 4;
layout(local_size_x_id = 0) in;

const uint NV = VPT / 4u;   // vec4 loads per thread
const uint TPG = 32u / VPT; // threads per 32 values
#if DTYPE == 2
const uint TPB = TPG;       // threads per block
#else
const uint TPB = 8u * TPG;
#endif

layout(std430, binding = 0) readonly buffer X { vec4 x4[]; };
layout(std430, binding = 1) writeonly buffer Q { uint q[]; };

layout(push_constant) uniform PC {
    uint K;
    uint n_cols;
#ifdef NORM
    float eps;
#endif
} pc;

#ifdef NORM
// The norm prologue of a GEMV or GLU step: the values quantized are
// (x * s) * g, s the RMS-norm scale of x's column (norm.glsl, as the
// unfused rms_norm computes it), g the norm's weight (K values). Each
// workgroup computes the scale of every column it touches.
layout(std430, binding = 2) readonly buffer G { float g[]; };
#define NORM_X(i) x4[(i) >> 2u][(i) & 3u]
#include "norm.glsl"
#endif

// Each thread's fold of its values (Q8_0: see amax_join; Q8_K: the bits
// of its first value of largest magnitude).
shared uint s_fold[WG];
#if DTYPE == 4 || defined(Q8_1)
// Each thread's sum of its codes.
shared int s_sum[WG];
#endif

#include "quant_math.glsl"

void main() {
    uint tid = gl_LocalInvocationIndex;
    uint t = flat_group() * WG + tid; // VPT values of all columns' values
    bool live = t < pc.n_cols * (pc.K / VPT);
    uint soff = pc.n_cols * (pc.K / 4u);
    vec4 v[NV];
    [[unroll]] for (uint i = 0u; i < NV; ++i) {
        v[i] = live ? x4[t * NV + i] : vec4(0.0);
    }
#ifdef NORM
    {
        // The columns of this workgroup's values, one after the other (a
        // thread's VPT values lie in one column: K is a multiple of 32).
        uint total = pc.n_cols * pc.K;
        uint lo = flat_group() * WG * VPT;
        uint hi = min(lo + WG * VPT, total);
        uint col = (t * VPT) / pc.K;
        float s = 0.0;
        if (lo < total) {
            for (uint c = lo / pc.K; c <= (hi - 1u) / pc.K; ++c) {
                float sc = norm_scale(c * pc.K, pc.K, pc.eps, tid, WG);
                if (c == col) {
                    s = sc;
                }
            }
        }
        uint gi = t * VPT - col * pc.K;
        [[unroll]] for (uint i = 0u; i < NV; ++i) {
            vec4 gv = live ? vec4(g[gi + 4u * i], g[gi + 4u * i + 1u], g[gi + 4u * i + 2u],
                                  g[gi + 4u * i + 3u])
                           : vec4(0.0);
            precise vec4 y = (v[i] * s) * gv;
            v[i] = y;
        }
    }
#endif
    uint first = tid - tid % TPB; // this block's first thread
#if DTYPE == 2
    uint fold = 0u;
    uint has_nan = 0u;
    [[unroll]] for (uint i = 0u; i < NV; ++i) {
        [[unroll]] for (uint k = 0u; k < 4u; ++k) {
            uint a = floatBitsToUint(v[i][k]) & ABS_MASK;
            fold = amax_step(fold, a);
            has_nan |= a > INF_BITS ? ~ABS_MASK : 0u;
        }
    }
    s_fold[tid] = fold | has_nan;
    barrier();
    uint f[TPB];
    [[unroll]] for (uint j = 0u; j < TPB; ++j) {
        f[j] = s_fold[first + j];
    }
    [[unroll]] for (uint w = TPB / 2u; w >= 1u; w /= 2u) {
        [[unroll]] for (uint j = 0u; j < w; ++j) {
            f[j] = amax_join(f[2u * j], f[2u * j + 1u]);
        }
    }
#ifndef Q8_1
    if (!live) {
        return;
    }
#endif
    float d = q8_0_scale(f[0] & ABS_MASK);
    float id = q8_0_inverse(d);
#ifdef Q8_1
    // Every thread of the workgroup reaches the barrier below; threads past
    // the end quantize zeros and write nothing.
    int total = 0;
    [[unroll]] for (uint i = 0u; i < NV; ++i) {
        precise vec4 p = v[i] * id;
        ivec4 c = ivec4(round_away_i8(p.x), round_away_i8(p.y), round_away_i8(p.z),
                        round_away_i8(p.w));
        total += c.x + c.y + c.z + c.w;
        if (live) {
            q[t * NV + i] = pack_codes(c);
        }
    }
    s_sum[tid] = total;
    barrier();
    if (live && tid == first) {
        int sum = 0;
        [[unroll]] for (uint j = 0u; j < TPB; ++j) {
            sum += s_sum[first + j];
        }
        // s = d * sum (exact sum, one rounded product), both as f16.
        precise float s = float(sum) * d;
        q[soff + t / TPB] = f16_bits(d) | (f16_bits(s) << 16u);
    }
#else
    [[unroll]] for (uint i = 0u; i < NV; ++i) {
        precise vec4 p = v[i] * id;
        q[t * NV + i] = pack_codes(ivec4(round_away_i8(p.x), round_away_i8(p.y),
                                         round_away_i8(p.z), round_away_i8(p.w)));
    }
    if (tid == first) {
        q[soff + t / TPB] = f16_bits(d);
    }
#endif
#else
    // This thread's first value of largest magnitude (NaNs never are), then
    // the block's.
    uint best = 0u;
    [[unroll]] for (uint i = 0u; i < NV; ++i) {
        [[unroll]] for (uint k = 0u; k < 4u; ++k) {
            uint b = floatBitsToUint(v[i][k]);
            uint a = b & ABS_MASK;
            if (a <= INF_BITS && a > (best & ABS_MASK)) {
                best = b;
            }
        }
    }
    s_fold[tid] = best;
    barrier();
    uint f[TPB];
    [[unroll]] for (uint j = 0u; j < TPB; ++j) {
        f[j] = s_fold[first + j];
    }
    [[unroll]] for (uint w = TPB / 2u; w >= 1u; w /= 2u) {
        [[unroll]] for (uint j = 0u; j < w; ++j) {
            f[j] = first_max_join(f[2u * j], f[2u * j + 1u]);
        }
    }
    uint amax = f[0] & ABS_MASK;
    bool negative = f[0] != amax;
    // iscale = -127 / max (0 when every value is zero or NaN: codes 0).
    float mag = amax != 0u ? div_pos(127.0, uintBitsToFloat(amax)) : 0.0;
    float iscale = negative ? mag : -mag;
    int total = 0;
    [[unroll]] for (uint i = 0u; i < NV; ++i) {
        precise vec4 p = v[i] * iscale;
        ivec4 c = min(ivec4(nearest_int(p.x), nearest_int(p.y), nearest_int(p.z),
                            nearest_int(p.w)), ivec4(127));
        // The codes as int8 (Rust's `as i8` wraps; the core sums those): an
        // infinite product (127 / max overflowed) gives -2^22, code 0.
        c = bitfieldExtract(c, 0, 8);
        total += c.x + c.y + c.z + c.w;
        if (live) {
            q[t * NV + i] = pack_codes(c);
        }
    }
    s_sum[tid] = total;
    barrier();
    if (!live) {
        return;
    }
    uint lane = tid % TPG;
    if (lane == 0u) {
        int sum = 0;
        [[unroll]] for (uint j = 0u; j < TPG; ++j) {
            sum += s_sum[tid + j];
        }
        uint sums = soff + pc.n_cols * (pc.K / 256u);
        q[sums + t / TPG] = uint(sum);
    }
    if (tid == first) {
        // d = 1 / iscale (+0 when every value is zero or NaN).
        float dm = div_pos(1.0, mag);
        q[soff + t / TPB] = amax == 0u ? 0u : floatBitsToUint(negative ? dm : -dm);
    }
#endif
}
