// The scalar pieces of GGML's activation quantizers, shared by the
// quantizer (quantize.comp) and the kernels that write their output
// quantized themselves (attention.comp's joining pass): correctly rounded
// divisions, f16 rounding, the codes' roundings and the folds of a block's
// largest magnitude. Every kernel that includes it computes the bits the
// quantizer does from the same values.

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

// Q8_0's (and Q8_1's) d of a block whose amax fold is `amax` (amax_join's
// result without its sign bit): amax / 127. A NaN last in the block is the
// maximum (as the core's fold has it); NaN / 127 is that NaN, quieted.
float q8_0_scale(uint amax) {
    return amax > INF_BITS ? uintBitsToFloat(amax | 0x400000u)
                           : (amax == INF_BITS ? uintBitsToFloat(INF_BITS)
                              : (amax != 0u ? div_127(uintBitsToFloat(amax)) : 0.0));
}

// 1 / d, the factor of the codes (0 for d = 0; NaN for NaN). d is tested
// by its bits: a subnormal d (1 / d infinite) is not zero (NVIDIA's driver
// flushed it in `d != 0.0`).
float q8_0_inverse(float d) {
    uint db = floatBitsToUint(d);
    return nan_bits(d) ? d : (db != 0u ? div_pos(1.0, d) : 0.0);
}
