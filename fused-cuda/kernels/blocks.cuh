// The weight formats the GEMV reads in the core's own block layout only (no
// device re-layout): Q4_1, Q5_0, Q5_1, IQ4_NL, Q5_K, Q6_K, TQ2_0. Included by
// gemv.cu after its Block<FMT> template; the interface (load, codes, BIAS,
// scale, minimum, x_offset) is described there. Code bytes are built four
// at a time with word operations; constant code offsets (Q5_0's 16, Q6_K's
// 32, ...) go into BIAS, so that a group's sum needs no minimum term.
// Blocks whose size is not a multiple of 4 bytes are only 2-byte aligned:
// their 32-bit words are read as two 16-bit halves (ld_u32_a2).
#pragma once

// 32 bits at a 2-byte aligned address.
__device__ __forceinline__ uint32_t ld_u32_a2(const uint8_t *p) {
    const uint16_t *h = reinterpret_cast<const uint16_t *>(p);
    return (uint32_t)h[0] | ((uint32_t)h[1] << 16);
}

// Lane s of the 32-element formats (L = 4) takes code bytes 4s..4s+3: group
// 0 their low nibbles, elements 4s..4s+3, group 1 their high nibbles,
// elements 16 + 4s..+3 (byte j holds element j low and j + 16 high, GGML's
// nibble order).
__device__ __forceinline__ size_t x_offset32(uint32_t blk, uint32_t s, int g) {
    return (size_t)blk * 32 + 16 * (uint32_t)g + 4 * s;
}
__device__ __forceinline__ uint32_t nibbles(uint32_t q, int g) { return (q >> (4 * g)) & 0x0f0f0f0fu; }

// Bits 0..3 of `h` moved to bit 4 of bytes 0..3 (a fifth code bit per byte):
// h·0x204081 places bit i at bit 8i (the four shifted copies do not overlap).
__device__ __forceinline__ uint32_t fifth_bits(uint32_t h) {
    return (((h & 15u) * 0x00204081u) & 0x01010101u) << 4;
}

// Q4_1: 20-byte blocks (4-byte aligned): d, m (f16), 16 bytes of nibbles;
// value q·d + m.
template <> struct Block<FMT_Q4_1> {
    static constexpr int L = 4, BLOCK = 32, BYTES = 20, GROUPS = 2;
    static constexpr bool HAS_MIN = true;
    static constexpr float BIAS = MAGIC;
    struct Raw {
        uint32_t dm, q;
    };
    __device__ static Raw load(const uint8_t *wr, uint32_t blk, uint32_t s) {
        const uint32_t *b = reinterpret_cast<const uint32_t *>(wr + (size_t)blk * BYTES);
        return Raw{b[0], b[1 + s]};
    }
    __device__ static uint32_t codes(const Raw &r, uint32_t, int g) { return nibbles(r.q, g); }
    __device__ static float scale(const Raw &r, uint32_t, int) { return half_bits_to_float(r.dm); }
    __device__ static float minimum(const Raw &r, uint32_t, int) { return half_bits_to_float(r.dm >> 16); }
    __device__ static size_t x_offset(uint32_t blk, uint32_t s, int g) { return x_offset32(blk, s, g); }
};

// The IQ4_NL table entries (GGML's kvalues_iq4nl, signed bytes) of the 8
// 4-bit indices in the code bytes `q` (byte i: index lo_i in its low nibble,
// hi_i in its high one): x byte i the entry of lo_i, y byte i that of hi_i.
// The table's 16 signed bytes, entry e byte e mod 4 of word e / 4: −127,
// −104, −83, −65 | −49, −35, −22, −10 | 1, 13, 25, 38 | 53, 69, 89, 113.
// The nibbles of q are byte-permute selectors in element order (lo_0, hi_0,
// lo_1, hi_1, ...): with bit 3 cleared (in prmt it would be the sign mode)
// they look up both halves of the table, 4 nibbles per permute; a third
// permute per 4 nibbles keeps, per byte, the upper half's entry where the
// index has bit 3 set (selector n + 4); two last permutes sort the bytes
// into the low-nibble and high-nibble entries.
__device__ __forceinline__ uint2 iq4nl_values(uint32_t q) {
    constexpr uint32_t T0 = 0xBFAD9881u, T1 = 0xF6EADDCFu, T2 = 0x26190D01u, T3 = 0x71594535u;
    const uint32_t idx = q & 0x77777777u;
    const uint32_t pick = 0x32103210u | ((q & 0x88888888u) >> 1);
    const uint32_t c0 = __byte_perm(__byte_perm(T0, T1, idx), __byte_perm(T2, T3, idx), pick);
    const uint32_t c1 = __byte_perm(__byte_perm(T0, T1, idx >> 16), __byte_perm(T2, T3, idx >> 16),
                                    pick >> 16);
    return make_uint2(__byte_perm(c0, c1, 0x6420u), __byte_perm(c0, c1, 0x7531u));
}

// IQ4_NL: 18-byte blocks (2-byte aligned): d (f16), 16 bytes of 4-bit
// indices into GGML's kvalues_iq4nl table; value d·table[q].
template <> struct Block<FMT_IQ4_NL> {
    static constexpr int L = 4, BLOCK = 32, BYTES = 18, GROUPS = 2;
    static constexpr bool HAS_MIN = false;
    static constexpr float BIAS = MAGIC + 128.0f;
    struct Raw {
        uint32_t d, q;
    };
    __device__ static Raw load(const uint8_t *wr, uint32_t blk, uint32_t s) {
        const uint8_t *b = wr + (size_t)blk * BYTES;
        return Raw{*reinterpret_cast<const uint16_t *>(b), ld_u32_a2(b + 2 + 4 * s)};
    }
    // The signed table entries biased to 0..255 (BIAS).
    __device__ static uint32_t codes(const Raw &r, uint32_t, int g) {
        const uint2 v = iq4nl_values(r.q);
        return (g == 0 ? v.x : v.y) ^ 0x80808080u;
    }
    __device__ static float scale(const Raw &r, uint32_t, int) { return half_bits_to_float(r.d); }
    __device__ static float minimum(const Raw &, uint32_t, int) { return 0.0f; }
    __device__ static size_t x_offset(uint32_t blk, uint32_t s, int g) { return x_offset32(blk, s, g); }
};

// The 5-bit codes of lane s's group g in a Q5_0/Q5_1 block: the nibbles and
// bits e..e+3 (e = 16g + 4s, the group's first element) of the
// little-endian qh.
__device__ __forceinline__ uint32_t q5_codes(uint32_t q, uint32_t qh, uint32_t s, int g) {
    return nibbles(q, g) | fifth_bits(qh >> (16 * (uint32_t)g + 4 * s));
}

// Q5_0: 22-byte blocks (2-byte aligned): d (f16), qh (32 fifth bits),
// 16 bytes of nibbles; value (q − 16)·d.
template <> struct Block<FMT_Q5_0> {
    static constexpr int L = 4, BLOCK = 32, BYTES = 22, GROUPS = 2;
    static constexpr bool HAS_MIN = false;
    static constexpr float BIAS = MAGIC + 16.0f;
    struct Raw {
        uint32_t d, qh, q;
    };
    __device__ static Raw load(const uint8_t *wr, uint32_t blk, uint32_t s) {
        const uint8_t *b = wr + (size_t)blk * BYTES;
        return Raw{*reinterpret_cast<const uint16_t *>(b), ld_u32_a2(b + 2), ld_u32_a2(b + 6 + 4 * s)};
    }
    __device__ static uint32_t codes(const Raw &r, uint32_t s, int g) { return q5_codes(r.q, r.qh, s, g); }
    __device__ static float scale(const Raw &r, uint32_t, int) { return half_bits_to_float(r.d); }
    __device__ static float minimum(const Raw &, uint32_t, int) { return 0.0f; }
    __device__ static size_t x_offset(uint32_t blk, uint32_t s, int g) { return x_offset32(blk, s, g); }
};

// Q5_1: 24-byte blocks (4-byte aligned): d, m (f16), qh, 16 bytes of
// nibbles; value q·d + m.
template <> struct Block<FMT_Q5_1> {
    static constexpr int L = 4, BLOCK = 32, BYTES = 24, GROUPS = 2;
    static constexpr bool HAS_MIN = true;
    static constexpr float BIAS = MAGIC;
    struct Raw {
        uint32_t dm, qh, q;
    };
    __device__ static Raw load(const uint8_t *wr, uint32_t blk, uint32_t s) {
        const uint32_t *b = reinterpret_cast<const uint32_t *>(wr + (size_t)blk * BYTES);
        return Raw{b[0], b[1], b[2 + s]};
    }
    __device__ static uint32_t codes(const Raw &r, uint32_t s, int g) { return q5_codes(r.q, r.qh, s, g); }
    __device__ static float scale(const Raw &r, uint32_t, int) { return half_bits_to_float(r.dm); }
    __device__ static float minimum(const Raw &r, uint32_t, int) { return half_bits_to_float(r.dm >> 16); }
    __device__ static size_t x_offset(uint32_t blk, uint32_t s, int g) { return x_offset32(blk, s, g); }
};

// The 5-bit codes of 4 elements of a Q5_K chunk c: nibble g (0 low, 1 high)
// of the code bytes `q`, fifth bit 2c + g of the qh bytes `qh`.
__device__ __forceinline__ uint32_t q5k_codes(uint32_t q, uint32_t qh, uint32_t c, int g) {
    return nibbles(q, g) | (((qh >> (2 * c + (uint32_t)g)) & 0x01010101u) << 4);
}

// Q5_K: 176-byte super-blocks (16-byte aligned): d, dmin (f16), 12 bytes of
// packed 6-bit scales/mins (as Q4_K), qh[32], qs[128]. In chunk c (64
// elements) element 64c + l is the low nibble of qs[32c + l] plus 16·bit 2c
// of qh[l], element 64c + 32 + l the high nibble plus 16·bit 2c + 1; value
// d·sc·q − dmin·m. Lanes as Q4_K: L = 32, lane s takes chunk c = s/8,
// l = 4(s mod 8)..+3, group 0 low nibbles (sub-block 2c), group 1 high (2c + 1).
template <> struct Block<FMT_Q5_K> {
    static constexpr int L = 32, BLOCK = 256, BYTES = 176, GROUPS = 2;
    static constexpr bool HAS_MIN = true;
    static constexpr float BIAS = MAGIC;
    struct Raw {
        uint4 h;
        uint32_t qh, q;
    };
    __device__ static Raw load(const uint8_t *wr, uint32_t blk, uint32_t s) {
        const uint8_t *b = wr + (size_t)blk * BYTES;
        Raw r;
        r.h = *reinterpret_cast<const uint4 *>(b);
        r.qh = *reinterpret_cast<const uint32_t *>(b + 16 + 4 * (s & 7u));
        r.q = *reinterpret_cast<const uint32_t *>(b + 48 + 32 * (s >> 3) + 4 * (s & 7u));
        return r;
    }
    __device__ static uint32_t codes(const Raw &r, uint32_t s, int g) { return q5k_codes(r.q, r.qh, s >> 3, g); }
    __device__ static float scale(const Raw &r, uint32_t s, int g) { return kq_scale(r.h, s, g); }
    __device__ static float minimum(const Raw &r, uint32_t s, int g) { return kq_minimum(r.h, s, g); }
    __device__ static size_t x_offset(uint32_t blk, uint32_t s, int g) { return kq_x_offset(blk, s, g); }
};

// The 6-bit codes of 4 Q6_K elements: the low (high = false) or high nibbles
// of the ql bytes `ql` and bits shift..shift+1 of the qh bytes `qh`.
__device__ __forceinline__ uint32_t q6k_codes(uint32_t ql, uint32_t qh, bool high, uint32_t shift) {
    return ((ql >> (high ? 4u : 0u)) & 0x0f0f0f0fu) | (((qh >> shift) & 0x03030303u) << 4);
}

// Q6_K: 210-byte super-blocks (2-byte aligned): ql[128], qh[64], 16 signed
// 8-bit scales, d (f16) last. In half h (128 elements), for l in 0..32:
// element l is ql[64h + l] low | qh[32h + l] bits 0–1, l + 32 is
// ql[64h + 32 + l] low | bits 2–3, l + 64 is ql[64h + l] high | bits 4–5,
// l + 96 is ql[64h + 32 + l] high | bits 6–7 (the qh bits are code bits
// 4–5); value (d·scale[e/16])·(q − 32). L = 16: lane s takes half h = s/8
// and l = 4(s mod 8)..+3, group g the elements 128h + 32g + l.
template <> struct Block<FMT_Q6_K> {
    static constexpr int L = 16, BLOCK = 256, BYTES = 210, GROUPS = 4;
    static constexpr bool HAS_MIN = false;
    static constexpr float BIAS = MAGIC + 32.0f;
    struct Raw {
        uint32_t qa, qb, qh, sc_lo, sc_hi, d;
    };
    __device__ static Raw load(const uint8_t *wr, uint32_t blk, uint32_t s) {
        const uint8_t *b = wr + (size_t)blk * BYTES;
        const uint32_t h = s >> 3, l = 4 * (s & 7u);
        Raw r;
        r.qa = ld_u32_a2(b + 64 * h + l);
        r.qb = ld_u32_a2(b + 64 * h + 32 + l);
        r.qh = ld_u32_a2(b + 128 + 32 * h + l);
        // The half's 8 scales: group g uses scale 8h + 2g + l/16.
        r.sc_lo = ld_u32_a2(b + 192 + 8 * h);
        r.sc_hi = ld_u32_a2(b + 196 + 8 * h);
        r.d = *reinterpret_cast<const uint16_t *>(b + 208);
        return r;
    }
    __device__ static uint32_t codes(const Raw &r, uint32_t, int g) {
        return q6k_codes((g & 1) ? r.qb : r.qa, r.qh, g >= 2, 2 * (uint32_t)g);
    }
    __device__ static float scale(const Raw &r, uint32_t s, int g) {
        const uint32_t i = 2 * (uint32_t)g + ((s & 7u) >= 4 ? 1u : 0u); // in the half
        const int sc = (int8_t)(((i < 4 ? r.sc_lo : r.sc_hi) >> (8 * (i & 3u))) & 0xffu);
        return __fmul_rn(half_bits_to_float(r.d), (float)sc);
    }
    __device__ static float minimum(const Raw &, uint32_t, int) { return 0.0f; }
    __device__ static size_t x_offset(uint32_t blk, uint32_t s, int g) {
        return (size_t)blk * 256 + 128 * (s >> 3) + 32 * (uint32_t)g + 4 * (s & 7u);
    }
};

// Code l (0..3, bits 2l..2l+1) of each of the 4 TQ2_0 code bytes `q`.
__device__ __forceinline__ uint32_t tq2_codes(uint32_t q, int l) { return (q >> (2 * l)) & 0x03030303u; }

// TQ2_0: 66-byte super-blocks (2-byte aligned): qs[64], d (f16) last. Code
// l (bits 2l..2l+1) of qs[32j + m] is element 128j + 32l + m; value
// (q − 1)·d. L = 16: lane s takes j = s/8, m = 4(s mod 8)..+3, group g the
// codes l = g.
template <> struct Block<FMT_TQ2_0> {
    static constexpr int L = 16, BLOCK = 256, BYTES = 66, GROUPS = 4;
    static constexpr bool HAS_MIN = false;
    static constexpr float BIAS = MAGIC + 1.0f;
    struct Raw {
        uint32_t q, d;
    };
    __device__ static Raw load(const uint8_t *wr, uint32_t blk, uint32_t s) {
        const uint8_t *b = wr + (size_t)blk * BYTES;
        return Raw{ld_u32_a2(b + 32 * (s >> 3) + 4 * (s & 7u)),
                   *reinterpret_cast<const uint16_t *>(b + 64)};
    }
    __device__ static uint32_t codes(const Raw &r, uint32_t, int g) { return tq2_codes(r.q, g); }
    __device__ static float scale(const Raw &r, uint32_t, int) { return half_bits_to_float(r.d); }
    __device__ static float minimum(const Raw &, uint32_t, int) { return 0.0f; }
    __device__ static size_t x_offset(uint32_t blk, uint32_t s, int g) {
        return (size_t)blk * 256 + 128 * (s >> 3) + 32 * (uint32_t)g + 4 * (s & 7u);
    }
};
