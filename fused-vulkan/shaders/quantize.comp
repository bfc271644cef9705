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

const uint ABS_MASK = 0x7fffffffu;
const uint INF_BITS = 0x7f800000u;

// The normalized 24-bit significand and the exponent (value = m 2^(e-150))
// of a positive finite f32.
void unpack_pos(float v, out uint m, out int e) {
    uint b = floatBitsToUint(v);
    e = int(b >> 23u);
    m = b & 0x7fffffu;
    if (e == 0) {
        int s = 23 - findMSB(m);
        m <<= uint(s);
        e = 1 - s;
    } else {
        m |= 0x800000u;
    }
}

// floor(ma 2^24 / mb) (25 bits) for mb in [2^23, 2^24) and ma in
// [mb, 2 mb); `sticky`: the remainder is not zero. The float estimate is
// within a few units (a shader's division: 2.5 ULP, here about 14 units
// at most); the remainder of the estimate, ma 2^24 - c mb, is then below
// 2^31 in magnitude, so its low 32 bits (wrapping integer arithmetic) are
// exact, and a second estimate, e / mb, is off by at most 1 (|e / mb| <
// 2^7, its error below 2^-13), which the exact remainder corrects.
uint quotient_bits(uint ma, uint mb, out bool sticky) {
    float rb = 1.0 / float(mb);
    precise float est = float(ma) * rb * 16777216.0;
    uint c = uint(est);
    int e = int((ma << 24u) - c * mb);
    int dq = int(floor(float(e) * rb));
    int r = e - dq * int(mb);
    if (r < 0) {
        dq -= 1;
        r += int(mb);
    } else if (r >= int(mb)) {
        dq += 1;
        r -= int(mb);
    }
    sticky = r != 0;
    return uint(int(c) + dq);
}

// The float nearest (ties to even) to qt 2^(e - 151) (plus a little when
// `sticky`: the bits below qt are not all zero), qt in [2^24, 2^25): a
// quotient's 25 leading bits and its biased exponent e.
float round_quotient(uint qt, bool sticky, int e) {
    if (e >= 255) {
        return uintBitsToFloat(INF_BITS);
    }
    if (e >= 1) {
        uint m = qt >> 1u;
        if ((qt & 1u) != 0u && (sticky || (m & 1u) != 0u)) {
            m += 1u;
        }
        // A carry out of the significand steps the exponent (to infinity
        // at the top).
        return uintBitsToFloat((uint(e) << 23u) + (m - 0x800000u));
    }
    // Subnormal quotient: drop 2 - e bits.
    int s = 2 - e;
    if (s > 25) {
        return 0.0;
    }
    uint m = qt >> uint(s);
    uint rem = qt & ((1u << uint(s)) - 1u);
    uint half_ulp = 1u << uint(s - 1);
    if (rem > half_ulp || (rem == half_ulp && (sticky || (m & 1u) != 0u))) {
        m += 1u;
    }
    return uintBitsToFloat(m);
}

// a / b rounded to nearest even, for positive a and b, finite or infinite
// (IEEE division; a finite / 0 is infinite, finite / infinite 0, infinite
// / finite infinite).
float div_pos(float a, float b) {
    uint ba = floatBitsToUint(a);
    uint bb = floatBitsToUint(b);
    if (ba == INF_BITS || bb == 0u) {
        return uintBitsToFloat(INF_BITS);
    }
    if (bb == INF_BITS) {
        return 0.0;
    }
    uint ma, mb;
    int ea, eb;
    unpack_pos(a, ma, ea);
    unpack_pos(b, mb, eb);
    int e = ea - eb + 127; // biased exponent of the quotient in [1, 2)
    if (ma < mb) {
        ma <<= 1u;
        e -= 1;
    }
    // 25 quotient bits (24 significant and a guard bit), remainder sticky.
    bool sticky;
    uint qt = quotient_bits(ma, mb, sticky);
    return round_quotient(qt, sticky, e);
}

// a / 127 rounded to nearest even, for a positive finite (Q8_0's d): the
// significand's quotient by the constant in one 32-bit integer division
// (which compilers make a multiplication).
float div_127(float a) {
    uint ma;
    int ea;
    unpack_pos(a, ma, ea);
    // a / 127 = (ma 2^8 / 127) 2^(ea - 158), ma 2^8 / 127 in [2^24, 2^25.01).
    uint n = ma << 8u;
    uint qt = n / 127u;
    bool sticky = n != qt * 127u;
    int e = ea - 7;
    if (qt >= 0x2000000u) {
        sticky = sticky || (qt & 1u) != 0u;
        qt >>= 1u;
        e += 1;
    }
    return round_quotient(qt, sticky, e);
}

// The f16 bits of v rounded to nearest even (GGML_FP32_TO_FP16).
uint f16_bits(float v) {
    uint x = floatBitsToUint(v);
    uint sign = (x >> 16u) & 0x8000u;
    uint e = (x >> 23u) & 0xffu;
    uint m = x & 0x7fffffu;
    if (e == 0xffu) {
        return sign | 0x7c00u | (m != 0u ? 0x200u : 0u) | (m >> 13u);
    }
    int ee = int(e) - 112;
    if (ee >= 31) {
        return sign | 0x7c00u;
    }
    if (ee <= 0) {
        if (ee < -10) {
            return sign;
        }
        m |= 0x800000u;
        uint s = uint(14 - ee);
        uint h = m >> s;
        uint rem = m & ((1u << s) - 1u);
        uint mid = 1u << (s - 1u);
        if (rem > mid || (rem == mid && (h & 1u) != 0u)) {
            h += 1u;
        }
        return sign | h;
    }
    uint h = sign | (uint(ee) << 10u) | (m >> 13u);
    uint rem = m & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u) != 0u)) {
        h += 1u;
    }
    return h;
}

// NaN by its bits: drivers may compile isnan() and the NaN cases of
// comparisons under no-NaN assumptions (NVIDIA's did: a NaN last in a Q8_0
// block was lost by the amax fold).
bool nan_bits(float x) {
    return (floatBitsToUint(x) & 0x7fffffffu) > 0x7f800000u;
}

// C's roundf (ties away from zero) of |p| < 2^23, clamped to ±127 as the
// core's Q8_0 / Q8_1 quantizer (NaN: 0).
int round_away_i8(float p) {
    if (nan_bits(p)) {
        return 0;
    }
    float t = trunc(p);
    precise float f = p - t; // exact
    if (abs(f) >= 0.5) {
        t += sign(p);
    }
    return int(clamp(t, -127.0, 127.0));
}

// GGML's nearest_int (ties to even) through the 1.5 * 2^23 trick (NaN: 0,
// what the trick gives for the CPU's default NaN).
int nearest_int(float p) {
    if (nan_bits(p)) {
        return 0;
    }
    precise float v = p + 12582912.0;
    return int(floatBitsToUint(v) & 0x7fffffu) - 0x400000;
}

uint pack_codes(ivec4 c) {
    return uint(c.x & 0xff) | (uint(c.y & 0xff) << 8u) | (uint(c.z & 0xff) << 16u)
        | (uint(c.w & 0xff) << 24u);
}

// The fold of a Q8_0 block's amax as the core has it, `amax = if amax > a
// { amax } else { a }` from 0 (a NaN on either side gives a), for a run of
// values: its result from 0 with the sign bit set when the run holds a NaN
// (the result is then the same from any start). A run's fold from a start
// `acc` is its result where it holds a NaN or where acc is NaN, else the
// larger of acc and its result; joining two runs in order is associative.
uint amax_step(uint acc, uint a) {
    return (a > INF_BITS || acc > INF_BITS) ? a : max(acc, a);
}

uint amax_join(uint l, uint r) {
    uint v = amax_step(l & ABS_MASK, r & ABS_MASK);
    if ((r & ~ABS_MASK) != 0u) {
        v = r & ABS_MASK;
    }
    return v | ((l | r) & ~ABS_MASK);
}

// Q8_K: the bits of the first value of largest magnitude of two runs in
// order (a later one only when strictly larger).
uint first_max_join(uint l, uint r) {
    return (r & ABS_MASK) > (l & ABS_MASK) ? r : l;
}

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
    uint amax = f[0] & ABS_MASK;
    // A NaN last in the block is the maximum (as the core's fold has it);
    // NaN / 127 is that NaN, quieted.
    float d = amax > INF_BITS ? uintBitsToFloat(amax | 0x400000u)
                              : (amax == INF_BITS ? uintBitsToFloat(INF_BITS)
                                 : (amax != 0u ? div_127(uintBitsToFloat(amax)) : 0.0));
    // d is tested by its bits: a subnormal d (id infinite) is not zero
    // (NVIDIA's driver flushed it in `d != 0.0`).
    uint db = floatBitsToUint(d);
    float id = nan_bits(d) ? d : (db != 0u ? div_pos(1.0, d) : 0.0);
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
