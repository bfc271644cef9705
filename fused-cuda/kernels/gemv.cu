// GEMV with a fused epilogue, and the gated dual GEMV, for 1..8 columns.
//
//   y[c*rows + r] = epilogue(sum_k W[r][k] * x[c*k_len + k])            (plain)
//   y[c*rows + r] = epilogue(act(W_g[r]·x_c) * (W_u[r]·x_c))              (GLU)
//
// Activation scheme: the activations stay f32; each weight is dequantized in
// registers to the f32 value the core's dequantizer gives (fused_core::quant::
// dequantize_row: e.g. Q4_0 (q-8)·d, Q4_K d·sc·q − dmin·m) and multiplied into
// an f32 accumulator with fmaf. This is the core reference's ActQuant::F32
// mode, up to the summation order: a warp computes one output row (or 4 rows
// for the quantized formats from 3 columns up); each lane sums its own
// elements in a fixed order (F32/F16: 8-element vectors, lane-strided;
// quantized: 4 elements of a block that L lanes share, see below), then the
// 32 lane sums are combined by a fixed butterfly of shuffles. The order never
// depends on the epilogue, so the same call with and without an epilogue
// gives the same accumulators.
#include "common.cuh"

// Parameters of one launch (src/params.rs: GemvParams).
struct GemvParams {
    const uint8_t *w;    // weights (gate weights for GLU), rows x row_bytes
    const uint8_t *w_up; // GLU: up weights, same shape; else null
    const float *x;      // n_cols columns of k floats
    float *y;            // n_cols columns of rows floats
    uint32_t rows;
    uint32_t k;
    uint32_t row_bytes;
    uint32_t glu_act; // GLU: the activation code
    EpiParams epi;
};

#define FMT_F32 0
#define FMT_F16 1
#define FMT_Q8_0 2
#define FMT_Q4_0 3
#define FMT_Q4_K 4

// ---------------------------------------------------------------- units
// acc[c] += sum over the unit's elements of w[e] * x_c[e], in element order.
template <int NC>
__device__ __forceinline__ void fma_cols(const float *w, int n, const float *x, uint32_t k,
                                         float *acc) {
    // n is a multiple of 4 here; x is 16-byte aligned.
#pragma unroll
    for (int c = 0; c < NC; ++c) {
        const float4 *xc = reinterpret_cast<const float4 *>(x + (size_t)c * k);
#pragma unroll
        for (int e = 0; e < n / 4; ++e) {
            float4 xv = xc[e];
            acc[c] = fmaf(w[4 * e + 0], xv.x, acc[c]);
            acc[c] = fmaf(w[4 * e + 1], xv.y, acc[c]);
            acc[c] = fmaf(w[4 * e + 2], xv.z, acc[c]);
            acc[c] = fmaf(w[4 * e + 3], xv.w, acc[c]);
        }
    }
}

template <int FMT> struct Unit;

// F32: 8 elements (two 16-byte loads) when k % 8 == 0, else 1.
template <> struct Unit<FMT_F32> {
    static constexpr int LEN = 8;
    template <int NC>
    __device__ static void vec(const uint8_t *wr, uint32_t u, const float *x, uint32_t k,
                               float *acc) {
        const float4 *w4 = reinterpret_cast<const float4 *>(wr) + 2 * u;
        float4 a = w4[0], b = w4[1];
        float w[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
        fma_cols<NC>(w, 8, x + (size_t)u * 8, k, acc);
    }
    __device__ static float one(const uint8_t *wr, uint32_t i) {
        return reinterpret_cast<const float *>(wr)[i];
    }
};

// F16: 8 elements (one 16-byte load) when k % 8 == 0, else 1.
template <> struct Unit<FMT_F16> {
    static constexpr int LEN = 8;
    template <int NC>
    __device__ static void vec(const uint8_t *wr, uint32_t u, const float *x, uint32_t k,
                               float *acc) {
        uint4 raw = reinterpret_cast<const uint4 *>(wr)[u];
        uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
        float w[8];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            w[2 * j] = half_bits_to_float(words[j]);
            w[2 * j + 1] = half_bits_to_float(words[j] >> 16);
        }
        fma_cols<NC>(w, 8, x + (size_t)u * 8, k, acc);
    }
    __device__ static float one(const uint8_t *wr, uint32_t i) {
        return half_bits_to_float(reinterpret_cast<const uint16_t *>(wr)[i]);
    }
};

// The quantized formats split each block across L lanes of the warp, each
// lane taking groups of 4 consecutive elements, so that the lanes' f32
// activation loads are 16-byte and contiguous (a full 128-byte line per 8
// lanes). A warp computes R rows at once (RowsPerWarp below): one
// activation load feeds the same 4 elements of every row. A warp covers
// 32/L blocks per step and issues the weight loads of UNROLL steps before
// using them, to keep enough bytes in flight.
// Steps whose weight loads are issued together. 8 was tried on the H200
// with one row per warp and 1 column: mixed (faster for Q4_0, slower for
// Q8_0 and Q4_K; BENCHMARKS-cuda-draft.md).
constexpr int UNROLL = 4;

// Output rows per warp. src/backend.rs (gemv_rows_per_warp) mirrors this
// rule. Measured on the H200 (BENCHMARKS-cuda-draft.md): with 1 column, 2
// rows per warp ran slower than 1 (fewer warps in flight); with 8 columns,
// 4 rows per warp ran 1.4x faster than 1 (one activation load per 4 rows).
template <int FMT, int NC> struct RowsPerWarp {
    static constexpr int value = (FMT == FMT_F32 || FMT == FMT_F16) ? 1 : (NC >= 3 ? 4 : 1);
};

// Q8_0: 34-byte blocks (2-byte aligned): d (f16), 32 signed codes. L = 8:
// lane s takes elements 4s..4s+3 (code bytes 4s..4s+3).
template <> struct Unit<FMT_Q8_0> {
    static constexpr int L = 8;
    static constexpr int BLOCK = 32;
    static constexpr int GROUPS = 1;
    struct Raw {
        uint32_t d, q;
    };
    __device__ static Raw load(const uint8_t *wr, uint32_t blk, uint32_t s) {
        const uint16_t *b = reinterpret_cast<const uint16_t *>(wr + (size_t)blk * 34);
        Raw r;
        r.d = b[0];
        r.q = (uint32_t)b[1 + 2 * s] | ((uint32_t)b[2 + 2 * s] << 16);
        return r;
    }
    __device__ static void dequant(const Raw &r, uint32_t, int, float *w) {
        float d = half_bits_to_float(r.d);
#pragma unroll
        for (int i = 0; i < 4; ++i) w[i] = __fmul_rn((float)(int8_t)((r.q >> (8 * i)) & 0xffu), d);
    }
    __device__ static size_t x_offset(uint32_t blk, uint32_t s, int) { return (size_t)blk * 32 + 4 * s; }
};

// Q4_0: 18-byte blocks (2-byte aligned): d (f16), 16 bytes of nibbles; byte
// j holds element j (low) and j + 16 (high); value (q - 8)·d. L = 8: lane s
// takes elements 4s..4s+3: the low (s < 4) or high (s >= 4) nibbles of bytes
// 4(s mod 4)..4(s mod 4)+3.
template <> struct Unit<FMT_Q4_0> {
    static constexpr int L = 8;
    static constexpr int BLOCK = 32;
    static constexpr int GROUPS = 1;
    struct Raw {
        uint32_t d, q;
    };
    __device__ static Raw load(const uint8_t *wr, uint32_t blk, uint32_t s) {
        const uint16_t *b = reinterpret_cast<const uint16_t *>(wr + (size_t)blk * 18);
        const uint32_t j = 2 * (s & 3u);
        Raw r;
        r.d = b[0];
        r.q = (uint32_t)b[1 + j] | ((uint32_t)b[2 + j] << 16);
        return r;
    }
    __device__ static void dequant(const Raw &r, uint32_t s, int, float *w) {
        float d = half_bits_to_float(r.d);
        const uint32_t shift = s >= 4 ? 4u : 0u;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            int q = (int)((r.q >> (8 * i + shift)) & 15u);
            w[i] = __fmul_rn((float)(q - 8), d);
        }
    }
    __device__ static size_t x_offset(uint32_t blk, uint32_t s, int) { return (size_t)blk * 32 + 4 * s; }
};

// Q4_K: 144-byte super-blocks (16-byte aligned): d, dmin (f16), 12 bytes of
// packed 6-bit scales/mins, 128 bytes of nibbles; in chunk c (64 elements),
// qs[32c + l] holds element 64c + l (low) and 64c + 32 + l (high), value
// d·sc·q − dmin·m. L = 32: lane s takes chunk c = s/8, bytes l = 4(s mod 8)..+3:
// group 0 the elements 64c + l (low nibbles, sub-block 2c), group 1 the
// elements 64c + 32 + l (high nibbles, sub-block 2c + 1).
template <> struct Unit<FMT_Q4_K> {
    static constexpr int L = 32;
    static constexpr int BLOCK = 256;
    static constexpr int GROUPS = 2;
    struct Raw {
        uint4 h;
        uint32_t q;
    };
    // Byte i (0..11) of the packed scales: header byte 4 + i.
    __device__ static uint32_t scale_byte(const uint4 &h, uint32_t i) {
        uint32_t w = i < 4 ? h.y : (i < 8 ? h.z : h.w);
        return (w >> (8 * (i & 3u))) & 0xffu;
    }
    // Sub-block j's 6-bit scale and min (the core's scale_min).
    __device__ static void scale_min(const uint4 &h, uint32_t j, uint32_t &sc, uint32_t &m) {
        if (j < 4) {
            sc = scale_byte(h, j) & 63u;
            m = scale_byte(h, j + 4) & 63u;
        } else {
            sc = (scale_byte(h, j + 4) & 0x0fu) | ((scale_byte(h, j - 4) >> 6) << 4);
            m = (scale_byte(h, j + 4) >> 4) | ((scale_byte(h, j) >> 6) << 4);
        }
    }
    __device__ static Raw load(const uint8_t *wr, uint32_t blk, uint32_t s) {
        const uint8_t *b = wr + (size_t)blk * 144;
        Raw r;
        r.h = *reinterpret_cast<const uint4 *>(b);
        r.q = *reinterpret_cast<const uint32_t *>(b + 16 + 32 * (s >> 3) + 4 * (s & 7u));
        return r;
    }
    __device__ static void dequant(const Raw &r, uint32_t s, int g, float *w) {
        uint32_t sc, m;
        scale_min(r.h, 2 * (s >> 3) + (uint32_t)g, sc, m);
        float d = half_bits_to_float(r.h.x); // low half of word 0
        float dmin = half_bits_to_float(r.h.x >> 16);
        float dd = __fmul_rn(d, (float)sc), mm = __fmul_rn(dmin, (float)m);
        const uint32_t shift = g == 0 ? 0u : 4u;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            uint32_t q = (r.q >> (8 * i + shift)) & 15u;
            w[i] = __fsub_rn(__fmul_rn(dd, (float)q), mm);
        }
    }
    __device__ static size_t x_offset(uint32_t blk, uint32_t s, int g) {
        return (size_t)blk * 256 + 64 * (s >> 3) + 4 * (s & 7u) + 32 * (uint32_t)g;
    }
};

// ---------------------------------------------------------------- kernels
template <int FMT> struct HasScalar {
    static constexpr bool value = FMT == FMT_F32 || FMT == FMT_F16;
};

// acc[c] += one lane's share of one block of one row, dotted with the NC
// columns of x.
template <typename U, int NC>
__device__ __forceinline__ void unit_dot(const typename U::Raw &raw, const float *x, uint32_t k,
                                         uint32_t blk, uint32_t s, float *acc) {
#pragma unroll
    for (int g = 0; g < U::GROUPS; ++g) {
        float w[4];
        U::dequant(raw, s, g, w);
        fma_cols<NC>(w, 4, x + U::x_offset(blk, s, g), k, acc);
    }
}

// acc[r][c] += the dot products of rows wr[r] with the NC columns of x.
template <int FMT, int NC, int R>
__device__ __forceinline__ void rows_dot(const uint8_t *const *wr, const float *x, uint32_t k,
                                         uint32_t lane, float (*acc)[NC]) {
    if constexpr (HasScalar<FMT>::value) {
        static_assert(R == 1, "float formats run one row per warp");
        if ((k & 7u) != 0) {
            for (uint32_t i = lane; i < k; i += 32) {
                float w = Unit<FMT>::one(wr[0], i);
#pragma unroll
                for (int c = 0; c < NC; ++c) acc[0][c] = fmaf(w, x[(size_t)c * k + i], acc[0][c]);
            }
            return;
        }
        const uint32_t units = k / Unit<FMT>::LEN;
        for (uint32_t u = lane; u < units; u += 32)
            Unit<FMT>::template vec<NC>(wr[0], u, x, k, acc[0]);
    } else {
        using U = Unit<FMT>;
        constexpr uint32_t G = 32 / U::L; // blocks per warp step
        const uint32_t s = lane % U::L;
        const uint32_t nb = k / U::BLOCK;
        uint32_t b = lane / U::L;
        auto step = [&](const typename U::Raw *raw, uint32_t blk) {
#pragma unroll
            for (int g = 0; g < U::GROUPS; ++g) {
                float w[R][4];
#pragma unroll
                for (int r = 0; r < R; ++r) U::dequant(raw[r], s, g, w[r]);
                const size_t off = U::x_offset(blk, s, g);
#pragma unroll
                for (int c = 0; c < NC; ++c) {
                    float4 xv = *reinterpret_cast<const float4 *>(x + (size_t)c * k + off);
#pragma unroll
                    for (int r = 0; r < R; ++r) {
                        acc[r][c] = fmaf(w[r][0], xv.x, acc[r][c]);
                        acc[r][c] = fmaf(w[r][1], xv.y, acc[r][c]);
                        acc[r][c] = fmaf(w[r][2], xv.z, acc[r][c]);
                        acc[r][c] = fmaf(w[r][3], xv.w, acc[r][c]);
                    }
                }
            }
        };
        if constexpr (R == 1) {
            // One row: the plain loop (measured the fastest for 1-2 columns).
            for (; b + (UNROLL - 1) * G < nb; b += UNROLL * G) {
                typename U::Raw raw[UNROLL];
#pragma unroll
                for (int u = 0; u < UNROLL; ++u) raw[u] = U::load(wr[0], b + u * G, s);
#pragma unroll
                for (int u = 0; u < UNROLL; ++u) unit_dot<U, NC>(raw[u], x, k, b + u * G, s, acc[0]);
            }
            for (; b < nb; b += G) unit_dot<U, NC>(U::load(wr[0], b, s), x, k, b, s, acc[0]);
            return;
        }
        for (; b + (UNROLL - 1) * G < nb; b += UNROLL * G) {
            typename U::Raw raw[UNROLL][R];
#pragma unroll
            for (int u = 0; u < UNROLL; ++u)
#pragma unroll
                for (int r = 0; r < R; ++r) raw[u][r] = U::load(wr[r], b + u * G, s);
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) step(raw[u], b + u * G);
        }
        for (; b < nb; b += G) {
            typename U::Raw raw[R];
#pragma unroll
            for (int r = 0; r < R; ++r) raw[r] = U::load(wr[r], b, s);
            step(raw, b);
        }
    }
}

template <int NC> __device__ __forceinline__ void warp_sum(float *acc) {
#pragma unroll
    for (int c = 0; c < NC; ++c) {
#pragma unroll
        for (int off = 16; off > 0; off >>= 1)
            acc[c] = __fadd_rn(acc[c], __shfl_xor_sync(0xffffffffu, acc[c], off));
    }
}

// R = RowsPerWarp output rows per warp; 8 warps (256 threads) per block.
// Rows past the end are computed on the last row (in bounds) and not stored.
template <int FMT, int NC, bool GLU> __device__ void gemv(const GemvParams &p) {
    constexpr int R = RowsPerWarp<FMT, NC>::value;
    const uint32_t row0 = ((blockIdx.x * blockDim.x + threadIdx.x) >> 5) * R;
    const uint32_t lane = threadIdx.x & 31u;
    if (row0 >= p.rows) return; // whole warps leave together
    const uint8_t *wg[R];
    const uint8_t *wu[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
        const uint32_t row = min(row0 + (uint32_t)r, p.rows - 1);
        wg[r] = p.w + (size_t)row * p.row_bytes;
        wu[r] = GLU ? p.w_up + (size_t)row * p.row_bytes : nullptr;
    }
    float g[R][NC], up[R][NC];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int c = 0; c < NC; ++c) g[r][c] = up[r][c] = 0.0f;
    rows_dot<FMT, NC, R>(wg, p.x, p.k, lane, g);
    if constexpr (GLU) rows_dot<FMT, NC, R>(wu, p.x, p.k, lane, up);
#pragma unroll
    for (int r = 0; r < R; ++r) {
        warp_sum<NC>(g[r]);
        if constexpr (GLU) warp_sum<NC>(up[r]);
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
        const uint32_t row = row0 + (uint32_t)r;
#pragma unroll
        for (int c = 0; c < NC; ++c) {
            if (lane == (uint32_t)(r * NC + c) % 32u && row < p.rows) {
                float v = GLU ? glu_apply(p.glu_act, g[r][c], up[r][c]) : g[r][c];
                p.y[(size_t)c * p.rows + row] =
                    epilogue_apply(p.epi, v, row, (uint32_t)c, p.rows);
            }
        }
    }
}

#define GEMV_KERNELS_NC(name, FMT, NC)                                                         \
    extern "C" __global__ void __launch_bounds__(256)                                          \
        fused_gemv_##name##_c##NC(const GemvParams p) {                                        \
        gemv<FMT, NC, false>(p);                                                               \
    }                                                                                          \
    extern "C" __global__ void __launch_bounds__(256)                                          \
        fused_gemv_glu_##name##_c##NC(const GemvParams p) {                                    \
        gemv<FMT, NC, true>(p);                                                                \
    }

#define GEMV_KERNELS(name, FMT)                                                                \
    GEMV_KERNELS_NC(name, FMT, 1)                                                              \
    GEMV_KERNELS_NC(name, FMT, 2)                                                              \
    GEMV_KERNELS_NC(name, FMT, 3)                                                              \
    GEMV_KERNELS_NC(name, FMT, 4)                                                              \
    GEMV_KERNELS_NC(name, FMT, 5)                                                              \
    GEMV_KERNELS_NC(name, FMT, 6)                                                              \
    GEMV_KERNELS_NC(name, FMT, 7)                                                              \
    GEMV_KERNELS_NC(name, FMT, 8)

GEMV_KERNELS(f32, FMT_F32)
GEMV_KERNELS(f16, FMT_F16)
GEMV_KERNELS(q8_0, FMT_Q8_0)
GEMV_KERNELS(q4_0, FMT_Q4_0)
GEMV_KERNELS(q4_K, FMT_Q4_K)
