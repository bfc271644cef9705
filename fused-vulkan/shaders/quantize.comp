#version 450
// Quantizes f32 activation columns for the Q8-mode GEMV (gemv_q8.comp)
// exactly as fused_core::quant::quantize_row does: DTYPE 2 Q8_0 (GGML's
// quantize_row_q8_0_ref: d = amax / 127, id = 1 / d, q = roundf(x id), d
// stored as f16), DTYPE 4 Q8_K (quantize_row_q8_K_ref: max = the first value
// of largest magnitude, iscale = -127 / max, q = min(nearest_int(iscale x),
// 127), d = 1 / iscale, sums of the codes).
//
// Output (32-bit words, for `n_cols` columns of K values, K a multiple of 32
// (Q8_0) or 256 (Q8_K)):
//   [0, n_cols K / 4)        the int8 codes, column after column, 4 a word;
//   [S, S + n_cols K / BLK)  one scale per block: Q8_0 the f16 bits of d,
//                            Q8_K the f32 bits of d (S = n_cols K / 4);
//   Q8_K only: [S2, S2 + n_cols K / 32) the sum of each 32 codes (an int;
//                            S2 = S + n_cols K / 256).
//
// One thread quantizes 32 values (group g of all columns' groups); for Q8_K
// the 8 threads of a block share their maxima through shared memory.
// Divisions are correctly rounded in integer arithmetic (a shader's `/` need
// not be), the f16 conversion rounds to nearest even in integer arithmetic,
// and every float product and sum is `precise`. The codes equal the core's
// for activations that are zero, normal or infinite (a device may flush
// subnormal activations to zero; NaN codes are 0, as on x86 and Arm).
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"

layout(local_size_x = 64) in;

layout(std430, binding = 0) readonly buffer X { vec4 x4[]; };
layout(std430, binding = 1) writeonly buffer Q { uint q[]; };

layout(push_constant) uniform PC {
    uint K;
    uint n_cols;
} pc;

#if DTYPE == 4
shared float s_amax[64];
shared float s_max[64];
#endif

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

// a / b rounded to nearest even, for positive a and b, finite or infinite
// (IEEE division, by long division of the significands; a finite / 0 is
// infinite, finite / infinite 0, infinite / finite infinite).
float div_pos(float a, float b) {
    if (isinf(a) || b == 0.0) {
        return uintBitsToFloat(0x7f800000u);
    }
    if (isinf(b)) {
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
    uint qt = 0u;
    uint r = ma;
    [[unroll]] for (int i = 0; i < 25; ++i) {
        qt <<= 1u;
        if (r >= mb) {
            r -= mb;
            qt |= 1u;
        }
        r <<= 1u;
    }
    bool sticky = r != 0u;
    if (e >= 255) {
        return uintBitsToFloat(0x7f800000u);
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

// C's roundf (ties away from zero) of |p| < 2^23, saturated to int8 as
// Rust's `as i8` (NaN: 0).
int round_away_i8(float p) {
    if (nan_bits(p)) {
        return 0;
    }
    float t = trunc(p);
    precise float f = p - t; // exact
    if (abs(f) >= 0.5) {
        t += sign(p);
    }
    return int(clamp(t, -128.0, 127.0));
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

void main() {
    uint tid = gl_LocalInvocationIndex;
    uint g = flat_group() * 64u + tid; // 32-value group of all columns
    uint n_groups = pc.n_cols * (pc.K / 32u);
    bool live = g < n_groups;
    uint soff = pc.n_cols * (pc.K / 4u);
    vec4 v[8];
    [[unroll]] for (uint i = 0u; i < 8u; ++i) {
        v[i] = live ? x4[g * 8u + i] : vec4(0.0);
    }
#if DTYPE == 2
    if (!live) {
        return;
    }
    float amax = 0.0;
    [[unroll]] for (uint i = 0u; i < 8u; ++i) {
        [[unroll]] for (uint k = 0u; k < 4u; ++k) {
            // The core's fold `if amax > a { amax } else { a }`: a NaN
            // operand on either side gives a.
            float a = abs(v[i][k]);
            amax = (nan_bits(amax) || nan_bits(a) || !(amax > a)) ? a : amax;
        }
    }
    // A NaN last in the block is the maximum (as the core's fold has it);
    // NaN / 127 is that NaN, quieted.
    float d = nan_bits(amax) ? uintBitsToFloat(floatBitsToUint(amax) | 0x400000u)
                          : (amax > 0.0 ? div_pos(amax, 127.0) : 0.0);
    float id = nan_bits(d) ? d : (d != 0.0 ? div_pos(1.0, d) : 0.0);
    [[unroll]] for (uint i = 0u; i < 8u; ++i) {
        precise vec4 p = v[i] * id;
        q[g * 8u + i] = pack_codes(ivec4(round_away_i8(p.x), round_away_i8(p.y),
                                         round_away_i8(p.z), round_away_i8(p.w)));
    }
    q[soff + g] = f16_bits(d);
#else
    // This thread's first value of largest magnitude, then the block's:
    // the 8 groups' in order, a later one only when strictly larger.
    float amax = 0.0;
    float mx = 0.0;
    [[unroll]] for (uint i = 0u; i < 8u; ++i) {
        [[unroll]] for (uint k = 0u; k < 4u; ++k) {
            if (abs(v[i][k]) > amax) {
                amax = abs(v[i][k]);
                mx = v[i][k];
            }
        }
    }
    s_amax[tid] = amax;
    s_max[tid] = mx;
    barrier();
    uint first = tid & ~7u;
    amax = 0.0;
    mx = 0.0;
    [[unroll]] for (uint j = 0u; j < 8u; ++j) {
        if (s_amax[first + j] > amax) {
            amax = s_amax[first + j];
            mx = s_max[first + j];
        }
    }
    if (!live) {
        return;
    }
    uint blk = g / 8u;
    uint sums = soff + pc.n_cols * (pc.K / 256u);
    if (amax == 0.0) {
        [[unroll]] for (uint i = 0u; i < 8u; ++i) {
            q[g * 8u + i] = 0u;
        }
        q[sums + g] = 0u;
        if ((g & 7u) == 0u) {
            q[soff + blk] = 0u;
        }
        return;
    }
    float mag = div_pos(127.0, abs(mx));
    float iscale = mx > 0.0 ? -mag : mag; // -127 / max
    int total = 0;
    [[unroll]] for (uint i = 0u; i < 8u; ++i) {
        precise vec4 p = v[i] * iscale;
        ivec4 c = min(ivec4(nearest_int(p.x), nearest_int(p.y), nearest_int(p.z),
                            nearest_int(p.w)), ivec4(127));
        total += c.x + c.y + c.z + c.w;
        q[g * 8u + i] = pack_codes(c);
    }
    q[sums + g] = uint(total);
    if ((g & 7u) == 0u) {
        float dm = div_pos(1.0, mag);
        q[soff + blk] = floatBitsToUint(mx > 0.0 ? -dm : dm);
    }
#endif
}
