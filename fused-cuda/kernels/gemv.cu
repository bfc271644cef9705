// GEMV with a fused epilogue, and the gated dual GEMV, for 1..8 columns.
//
//   y[c*rows + r] = epilogue(sum_k W[r][k] * x[c*k_len + k])            (plain)
//   y[c*rows + r] = epilogue(act(W_g[r]·x_c) * (W_u[r]·x_c))              (GLU)
//
// Activation scheme: the activations stay f32; each weight is dequantized in
// registers to the f32 value the core's dequantizer gives (fused_core::quant::
// dequantize_row: e.g. Q4_0 (q-8)·d, Q4_K d·sc·q − dmin·m) and multiplied into
// an f32 accumulator with fmaf. This is the core reference's ActQuant::F32
// mode, up to the summation order: one warp per output row, each lane sums
// own elements in a fixed order (F32/F16: 8-element vectors, lane-strided;
// quantized: 4 elements of a block that L lanes share, see below), then the
// 32 lane sums are combined by a fixed butterfly of shuffles. The order never depends on the epilogue,
// so the same call with and without an epilogue gives the same accumulators.
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
// lane taking 4 consecutive elements at a time, so that the lanes' f32
// activation loads are 16-byte and contiguous (one full 128-byte line per 8
// lanes); a warp covers 32/L blocks per step and issues the weight loads of
// UNROLL steps before using them.
constexpr int UNROLL = 4;

// Q8_0: 34-byte blocks (2-byte aligned): d (f16), 32 signed codes. L = 8:
// lane s takes elements 4s..4s+3 (code bytes 4s..4s+3).
template <> struct Unit<FMT_Q8_0> {
    static constexpr int L = 8;
    static constexpr int BLOCK = 32;
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
    template <int NC>
    __device__ static void compute(const Raw &r, const float *x, uint32_t k, uint32_t blk,
                                   uint32_t s, float *acc) {
        float d = half_bits_to_float(r.d);
        float w[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) w[i] = __fmul_rn((float)(int8_t)((r.q >> (8 * i)) & 0xffu), d);
        fma_cols<NC>(w, 4, x + (size_t)blk * 32 + 4 * s, k, acc);
    }
};

// Q4_0: 18-byte blocks (2-byte aligned): d (f16), 16 bytes of nibbles; byte
// j holds element j (low) and j + 16 (high); value (q - 8)·d. L = 8: lane s
// takes elements 4s..4s+3: the low (s < 4) or high (s >= 4) nibbles of bytes
// 4(s mod 4)..4(s mod 4)+3.
template <> struct Unit<FMT_Q4_0> {
    static constexpr int L = 8;
    static constexpr int BLOCK = 32;
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
    template <int NC>
    __device__ static void compute(const Raw &r, const float *x, uint32_t k, uint32_t blk,
                                   uint32_t s, float *acc) {
        float d = half_bits_to_float(r.d);
        const uint32_t shift = s >= 4 ? 4u : 0u;
        float w[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            int q = (int)((r.q >> (8 * i + shift)) & 15u);
            w[i] = __fmul_rn((float)(q - 8), d);
        }
        fma_cols<NC>(w, 4, x + (size_t)blk * 32 + 4 * s, k, acc);
    }
};

// Q4_K: 144-byte super-blocks (16-byte aligned): d, dmin (f16), 12 bytes of
// packed 6-bit scales/mins, 128 bytes of nibbles; in chunk c (64 elements),
// qs[32c + l] holds element 64c + l (low) and 64c + 32 + l (high), value
// d·sc·q − dmin·m. L = 32: lane s takes chunk c = s/8, bytes l = 4(s mod 8)..+3,
// so elements 64c + l (low nibbles) and 64c + 32 + l (high nibbles).
template <> struct Unit<FMT_Q4_K> {
    static constexpr int L = 32;
    static constexpr int BLOCK = 256;
    struct Raw {
        uint4 h;
        uint32_t q;
    };
    __device__ static uint32_t byte_of(const uint32_t *w, int i) {
        return (w[i / 4] >> (8 * (i % 4))) & 0xffu;
    }
    // Sub-block j's 6-bit scale and min (the core's scale_min).
    __device__ static void scale_min(const uint32_t *hw, uint32_t j, uint32_t &sc, uint32_t &m) {
        uint32_t q[12];
#pragma unroll
        for (int i = 0; i < 12; ++i) q[i] = byte_of(hw, 4 + i);
        sc = 0;
        m = 0;
#pragma unroll
        for (int jj = 0; jj < 8; ++jj) {
            if ((uint32_t)jj == j) {
                if (jj < 4) {
                    sc = q[jj] & 63u;
                    m = q[jj + 4] & 63u;
                } else {
                    sc = (q[jj + 4] & 0x0fu) | ((q[jj - 4] >> 6) << 4);
                    m = (q[jj + 4] >> 4) | ((q[jj] >> 6) << 4);
                }
            }
        }
    }
    __device__ static Raw load(const uint8_t *wr, uint32_t blk, uint32_t s) {
        const uint8_t *b = wr + (size_t)blk * 144;
        Raw r;
        r.h = *reinterpret_cast<const uint4 *>(b);
        r.q = *reinterpret_cast<const uint32_t *>(b + 16 + 32 * (s >> 3) + 4 * (s & 7u));
        return r;
    }
    template <int NC>
    __device__ static void compute(const Raw &r, const float *x, uint32_t k, uint32_t blk,
                                   uint32_t s, float *acc) {
        const uint32_t c = s >> 3, l = 4 * (s & 7u);
        uint32_t hw[4] = {r.h.x, r.h.y, r.h.z, r.h.w};
        float d = half_bits_to_float(hw[0]);
        float dmin = half_bits_to_float(hw[0] >> 16);
        uint32_t sc1, m1, sc2, m2;
        scale_min(hw, 2 * c, sc1, m1);
        scale_min(hw, 2 * c + 1, sc2, m2);
        float d1 = __fmul_rn(d, (float)sc1), mm1 = __fmul_rn(dmin, (float)m1);
        float d2 = __fmul_rn(d, (float)sc2), mm2 = __fmul_rn(dmin, (float)m2);
        float lo[4], hi[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            uint32_t q = (r.q >> (8 * i)) & 0xffu;
            lo[i] = __fsub_rn(__fmul_rn(d1, (float)(q & 15u)), mm1);
            hi[i] = __fsub_rn(__fmul_rn(d2, (float)(q >> 4)), mm2);
        }
        const float *xb = x + (size_t)blk * 256 + 64 * c + l;
        fma_cols<NC>(lo, 4, xb, k, acc);
        fma_cols<NC>(hi, 4, xb + 32, k, acc);
    }
};

// ---------------------------------------------------------------- kernels
template <int FMT> struct HasScalar {
    static constexpr bool value = FMT == FMT_F32 || FMT == FMT_F16;
};

template <int FMT, int NC>
__device__ __forceinline__ void row_dot(const uint8_t *wr, const float *x, uint32_t k,
                                        uint32_t lane, float *acc) {
    if constexpr (HasScalar<FMT>::value) {
        if ((k & 7u) != 0) {
            for (uint32_t i = lane; i < k; i += 32) {
                float w = Unit<FMT>::one(wr, i);
#pragma unroll
                for (int c = 0; c < NC; ++c) acc[c] = fmaf(w, x[(size_t)c * k + i], acc[c]);
            }
            return;
        }
    }
    if constexpr (HasScalar<FMT>::value) {
        const uint32_t units = k / Unit<FMT>::LEN;
        for (uint32_t u = lane; u < units; u += 32) Unit<FMT>::template vec<NC>(wr, u, x, k, acc);
    } else {
        using U = Unit<FMT>;
        constexpr uint32_t G = 32 / U::L; // blocks per warp step
        const uint32_t s = lane % U::L;
        const uint32_t nb = k / U::BLOCK;
        uint32_t b = lane / U::L;
        for (; b + (UNROLL - 1) * G < nb; b += UNROLL * G) {
            typename U::Raw r[UNROLL];
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) r[u] = U::load(wr, b + u * G, s);
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) U::template compute<NC>(r[u], x, k, b + u * G, s, acc);
        }
        for (; b < nb; b += G) U::template compute<NC>(U::load(wr, b, s), x, k, b, s, acc);
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

// One warp per output row; 8 warps (256 threads) per block.
template <int FMT, int NC, bool GLU> __device__ void gemv(const GemvParams &p) {
    const uint32_t row = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const uint32_t lane = threadIdx.x & 31u;
    if (row >= p.rows) return; // whole warps leave together
    float g[NC], up[NC];
#pragma unroll
    for (int c = 0; c < NC; ++c) g[c] = up[c] = 0.0f;
    row_dot<FMT, NC>(p.w + (size_t)row * p.row_bytes, p.x, p.k, lane, g);
    if constexpr (GLU) row_dot<FMT, NC>(p.w_up + (size_t)row * p.row_bytes, p.x, p.k, lane, up);
    warp_sum<NC>(g);
    if constexpr (GLU) warp_sum<NC>(up);
#pragma unroll
    for (int c = 0; c < NC; ++c) {
        if (lane == (uint32_t)c) {
            float v = GLU ? glu_apply(p.glu_act, g[c], up[c]) : g[c];
            p.y[(size_t)c * p.rows + row] = epilogue_apply(p.epi, v, row, (uint32_t)c, p.rows);
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
