// GEMV with a fused epilogue, and the gated dual GEMV, for 1..8 columns.
//
//   y[c*rows + r] = epilogue(sum_k W[r][k] * x[c*k_len + k])            (plain)
//   y[c*rows + r] = epilogue(act(W_g[r]·x_c) * (W_u[r]·x_c))              (GLU)
//
// Two activation schemes: f32 activations (the core reference's
// ActQuant::F32 mode, up to rounding; this first part of the file), and
// activations quantized on the device with integer dot products (GGML's
// Q8_0 / Q8_K modes; the second part, "Quantized activations" below).
// Both reduce and apply the epilogue the same way (the end of gemv()).
//
// f32 activations: A block of WARPS warps computes R
// output rows (RowsPerBlock); its warps split K between them, each lane sums
// its own elements in a fixed order, the 32 lane sums of a warp are combined
// by a fixed butterfly of shuffles and the warps' sums in warp order through
// shared memory. The order never depends on the epilogue, so the same call
// with and without an epilogue gives the same accumulators, bit for bit.
//
// Weights:
// - F32 / F16 / BF16: the core's layout; 8-element units (16-byte loads),
//   each element converted exactly and multiplied into the accumulator with
//   fmaf.
// - Q4_1 / Q5_0 / Q5_1 / IQ4_NL / Q5_K / Q6_K / TQ2_0: the core's block
//   layout (blocks.cuh); each lane dequantizes groups of 4 elements exactly
//   as the core does and multiplies them into the accumulator with fmaf.
// - Q8_0 / Q4_0 / Q4_K: the lane-interleaved tiles of src/layout.rs (16 bytes
//   of codes per lane, coalesced f32 activation loads), the K % tile rest in
//   the core's block layout. Per 4-element chunk of one 32-element block,
//   a lane forms sum_i c_i·x_i with codes c_i that are exact f32 values
//   (Q8_0: q; Q4_0, Q4_K: 1 + q/16) and scales it by the block's factors in
//   f32: Q8_0 d·sum q_i·x_i; Q4_0 d·(16·sum c_i·x_i − 24·sum x_i), which is
//   d·sum (q_i − 8)·x_i; Q4_K (16·d·sc)·sum c_i·x_i − (16·d·sc + dmin·m)·sum
//   x_i, which is sum (d·sc·q_i − dmin·m)·x_i: the core's dequantized
//   products regrouped per chunk, so equal to the reference up to f32
//   rounding (worst NMSE seen: tests/gemv.rs).
#include "common.cuh"
#include <stddef.h>

// ------------------------------------------------ argmax tail
// A one-column GEMV may also write the index of its largest output, as
// fused_argmax (decode.cu) would from y, the core's argmax: the first
// maximum, NaN never chosen, 0 when every output is NaN
// (src/launch.rs: Launch::set_argmax_tail). Each block orders the outputs
// it stored by a 64-bit key, the value's bits made monotone above the
// index's complement (a larger value first, the lower index on ties, -0
// and +0 equal, NaN key 0), and merges it by atomic maximum into its
// group's key (ARGMAX_GROUP consecutive blocks); the group's last block
// to count itself done merges the group's key into the launch's, and the
// launch's last group writes the index. Two levels, because the output
// head's 64 K blocks on one address serialized: 100 us a token. Every key
// and count is left zero for the next launch.
#define ARGMAX_GROUP 64u
struct ArgmaxTail {
    unsigned long long *best; // each group's largest key, then the launch's; 0 between launches
    uint32_t *done;           // each group's blocks done, then the groups done; 0 between launches
    float *out;               // the index as an f32; null: no tail
};
static_assert(sizeof(ArgmaxTail) == 24, "ArgmaxTail");

__device__ __forceinline__ unsigned long long argmax_key(float v, uint32_t i) {
    if (isnan(v)) return 0ull;
    const uint32_t b = __float_as_uint(v == 0.0f ? 0.0f : v);
    const uint32_t m = (b & 0x80000000u) ? ~b : (b | 0x80000000u);
    return ((unsigned long long)m << 32) | (0xffffffffu - i);
}

// Merges `key` into slot `at` (of `n` arrivals); true in the last arrival,
// with the slot's merged key in `key` and the slot left zero. The count is
// acquire-release: each arrival's maximum is ordered before its count,
// and the last arrival's exchange after every count.
__device__ __forceinline__ bool argmax_merge(const ArgmaxTail &a, uint32_t at, uint32_t n,
                                             unsigned long long &key) {
    if (key != 0ull) atomicMax(&a.best[at], key);
    uint32_t before;
    asm volatile("atom.acq_rel.gpu.global.inc.u32 %0, [%1], %2;"
                 : "=r"(before)
                 : "l"(&a.done[at]), "r"(n - 1)
                 : "memory");
    if (before != n - 1) return false;
    key = atomicExch(&a.best[at], 0ull);
    return true;
}

// After a block of R rows from row0 has stored its outputs: thread i the
// output of row row0 + i, which it passes (finish_block's; NaN for none).
template <int R>
__device__ __forceinline__ void argmax_tail(const ArgmaxTail &a, uint32_t row0, uint32_t rows,
                                            float stored) {
    static_assert(R <= 32, "the block's outputs in its first warp");
    if (threadIdx.x >= 32) return;
    unsigned long long key = argmax_key(stored, row0 + threadIdx.x);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const unsigned long long k = __shfl_xor_sync(0xffffffffu, key, o);
        key = k > key ? k : key;
    }
    if (threadIdx.x != 0) return;
    // The blocks that reach the tail, and this one's group.
    const uint32_t blocks = (rows + R - 1) / R, block = row0 / R;
    const uint32_t groups = (blocks + ARGMAX_GROUP - 1) / ARGMAX_GROUP, g = block / ARGMAX_GROUP;
    const uint32_t in_group = min(ARGMAX_GROUP, blocks - g * ARGMAX_GROUP);
    if (!argmax_merge(a, g, in_group, key) || !argmax_merge(a, groups, groups, key)) return;
    *a.out = key == 0ull ? 0.0f : (float)(0xffffffffu - (uint32_t)key);
}

// Parameters of one launch (src/params.rs: GemvParams).
struct GemvParams {
    const uint8_t *w;    // weights (gate weights for GLU), device layout
    const uint8_t *w_up; // GLU: up weights, same shape; else null
    const float *x;      // n_cols columns of k floats
    float *y;            // n_cols columns of rows floats
    uint32_t rows;
    uint32_t k;
    uint32_t row_bytes;
    uint32_t glu_act; // GLU: the activation code
    uint32_t deps;    // DEPS_* (common.cuh)
    uint32_t pad;
    EpiParams epi;
    L2Ahead ahead; // the next GEMV's first weights, asked of L2
    // One column: the index of the largest output too (argmax_tail),
    // unless argmax.out is null.
    ArgmaxTail argmax;
};
// The layouts src/params.rs asserts for its mirrors.
static_assert(sizeof(EpiParams) == 136 && offsetof(EpiParams, operand) == 72, "EpiParams");
static_assert(offsetof(GemvParams, deps) == 48 && offsetof(GemvParams, epi) == 56 &&
                  offsetof(GemvParams, ahead) == 192 && offsetof(GemvParams, argmax) == 208 &&
                  sizeof(GemvParams) == 232,
              "GemvParams");

// A group launch: up to GROUP_MAX independent GEMVs of one kernel shape
// (one column, no GLU) in one grid. Job j (of n) owns the blocks from
// first_block[j] (first_block[0] = 0, increasing) up to first_block[j + 1]
// or the end of the grid, and each of them runs exactly the block that a
// launch of job j alone would run at that index, so a group computes the
// same bits as its jobs launched one by one. The jobs' parameters stay in
// the kernel's parameter space (__grid_constant__: indexed there, not
// copied). src/group.rs builds it; src/params.rs mirrors it.
constexpr uint32_t GROUP_MAX = 8;
template <class P> struct Group {
    uint32_t n;
    uint32_t first_block[GROUP_MAX];
    uint32_t pad;
    P job[GROUP_MAX];
};
static_assert(sizeof(Group<GemvParams>) == 40 + 8 * 232, "Group<GemvParams>");

// The job whose blocks include this one.
template <class P> __device__ __forceinline__ uint32_t group_job(const Group<P> &g) {
    uint32_t j = 0;
#pragma unroll
    for (uint32_t i = 1; i < GROUP_MAX; ++i) j += (i < g.n && blockIdx.x >= g.first_block[i]);
    return j;
}

#define FMT_F32 0
#define FMT_F16 1
#define FMT_Q8_0 2
#define FMT_Q4_0 3
#define FMT_Q4_K 4
#define FMT_BF16 5
#define FMT_Q4_1 6
#define FMT_Q5_0 7
#define FMT_Q5_1 8
#define FMT_IQ4_NL 9
#define FMT_Q5_K 10
#define FMT_Q6_K 11
#define FMT_TQ2_0 12

// The float formats: F32, F16 and BF16 (read in 8-element units).
__host__ __device__ constexpr bool is_float_fmt(int fmt) { return fmt == FMT_F32 || fmt == FMT_F16 || fmt == FMT_BF16; }
// The formats with a lane-interleaved device layout (src/layout.rs); the
// other quantized formats are read in the core's block layout (blocks.cuh).
__host__ __device__ constexpr bool is_tiled_fmt(int fmt) { return fmt == FMT_Q8_0 || fmt == FMT_Q4_0 || fmt == FMT_Q4_K; }

// Warps per block; src/params.rs (GEMV_BLOCK) launches 32·WARPS threads.
// 8 warps ran slower on the H200 (BENCHMARKS.md).
constexpr int WARPS = 4;
static_assert(WARPS * 32 == GEMV_TEAM_THREADS, "a team is a block's warps");

// Output rows per block. src/kernel_choice.rs (gemv_rows_per_block) mirrors this.
// The float formats read 2–4 bytes of weights per activation float, the
// quantized ones 0.56–1.06: these share each activation load between 2 rows
// (Q4_K, whose chunks also need the activation sums, and any format from 3
// columns up: 4), so that activation traffic through L1 stays well below
// the weights' share of L1 bandwidth. Measured on the H200, 1 column: Q4_K
// 4 rows ran 1.04–1.08x faster than 2; Q4_0 and Q8_0 4 rows mixed (up to
// 0.94x).
template <int FMT, int NC> struct RowsPerBlock {
    static constexpr int value = is_float_fmt(FMT)
                                     ? 1
                                     : ((NC >= 3 || FMT == FMT_Q4_K) ? 4 : 2);
};

// ---------------------------------------------------------------- loads
// Weights are read once per call: 16-byte loads that bypass L1, so that L1
// keeps the activations, which every row group re-reads.
//
// Every weight load (all widths below) is volatile asm so that none moves
// across griddepcontrol.wait: the integer GEMV requests its first weights
// before it waits.
__device__ __forceinline__ uint4 ld_stream(const uint8_t *p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(p));
    return v;
}

__device__ __forceinline__ uint2 ld_stream2(const uint8_t *p) {
    uint2 v;
    asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];"
                 : "=r"(v.x), "=r"(v.y)
                 : "l"(p));
    return v;
}

__device__ __forceinline__ uint32_t ld_stream_u32(const uint8_t *p) {
    uint32_t v;
    asm volatile("ld.global.nc.L1::no_allocate.u32 %0, [%1];" : "=r"(v) : "l"(p));
    return v;
}

__device__ __forceinline__ uint32_t ld_stream_u16(const uint8_t *p) {
    unsigned short v;
    asm volatile("ld.global.nc.L1::no_allocate.u16 %0, [%1];" : "=h"(v) : "l"(p));
    return v;
}

// Activations: read-only for the whole launch, cached in L1.
__device__ __forceinline__ float4 ld_x4(const float *p) {
    float4 v;
    asm("ld.global.nc.v4.f32 {%0, %1, %2, %3}, [%4];"
        : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
        : "l"(p));
    return v;
}

__device__ __forceinline__ uint32_t word(const uint4 &v, int i) {
    return i == 0 ? v.x : (i == 1 ? v.y : (i == 2 ? v.z : v.w));
}

// ------------------------------------------------------- code to f32, exact
// Byte i of `w` (a value v < 256) as the f32 2^23 + v: the byte becomes the
// low mantissa bits under the exponent of 2^23 (one byte permute).
__device__ __forceinline__ float magic_byte(uint32_t w, int i) {
    return __uint_as_float(__byte_perm(w, 0x4B000000u, 0x7540u | (uint32_t)i));
}
constexpr float MAGIC = 8388608.0f; // 2^23

// sum_i c_i·x_i over a chunk, the codes c_i = magic_byte(w, i) − bias exact.
__device__ __forceinline__ float chunk_dot(uint32_t w, float bias, const float4 &x) {
    float s = __fmul_rn(__fsub_rn(magic_byte(w, 0), bias), x.x);
    s = fmaf(__fsub_rn(magic_byte(w, 1), bias), x.y, s);
    s = fmaf(__fsub_rn(magic_byte(w, 2), bias), x.z, s);
    return fmaf(__fsub_rn(magic_byte(w, 3), bias), x.w, s);
}

__device__ __forceinline__ float sum4(const float4 &x) {
    return __fadd_rn(__fadd_rn(__fadd_rn(x.x, x.y), x.z), x.w);
}

// 4-bit codes as f = 1 + q/16, exact: the four codes of chunk t of a lane's
// 16 bytes (src/layout.rs: the low nibbles of word t/2 for even t, the high
// ones for odd t) moved to bits 3..6 of their bytes, bit 7 set; then byte i
// placed in bits 16..23 under the exponent byte 0x3F is the f32 1 + q/16.
// Against exact codes (q = permuted magic − 2^23) this saves one
// subtraction per element; the chunk sums then carry the constant part,
// which the per-chunk scale factors take off again (relative error of a
// chunk's sum a few f32 ulps).
__device__ __forceinline__ uint32_t unit_codes(const uint4 &q, int t) {
    const uint32_t w = word(q, t >> 1);
    return ((t & 1) ? (w >> 1) & 0x78787878u : (w << 3) & 0x78787878u) | 0x80808080u;
}
__device__ __forceinline__ float unit_byte(uint32_t w, int i) {
    return __uint_as_float(__byte_perm(w, 0x3F000000u, 0x7044u | ((uint32_t)i << 8)));
}
// sum_i (1 + q_i/16)·x_i over a chunk: one permute and one fmaf per element.
__device__ __forceinline__ float unit_dot(uint32_t w, const float4 &x) {
    float s = __fmul_rn(unit_byte(w, 0), x.x);
    s = fmaf(unit_byte(w, 1), x.y, s);
    s = fmaf(unit_byte(w, 2), x.z, s);
    return fmaf(unit_byte(w, 3), x.w, s);
}

// ---------------------------------------------------------------- F32, F16
// acc[c] += sum over the unit's 8 elements of w[e] * x_c[e], in element order.
template <int NC>
__device__ __forceinline__ void fma8(const float *w, const float *x, uint32_t k, float *acc) {
#pragma unroll
    for (int c = 0; c < NC; ++c) {
        const float4 a = ld_x4(x + (size_t)c * k), b = ld_x4(x + (size_t)c * k + 4);
        const float xv[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[c] = fmaf(w[e], xv[e], acc[c]);
    }
}

template <int FMT> struct Unit;

// F32: 8 elements (two 16-byte loads) when k % 8 == 0, else 1.
template <> struct Unit<FMT_F32> {
    struct Raw {
        uint4 a, b;
    };
    __device__ static Raw load(const uint8_t *wr, uint32_t u) {
        return Raw{ld_stream(wr + 32 * (size_t)u), ld_stream(wr + 32 * (size_t)u + 16)};
    }
    __device__ static void unpack(const Raw &r, float *w) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            w[j] = __uint_as_float(word(r.a, j));
            w[4 + j] = __uint_as_float(word(r.b, j));
        }
    }
    __device__ static float one(const uint8_t *wr, uint32_t i) {
        return reinterpret_cast<const float *>(wr)[i];
    }
};

// 16-bit floats: 8 elements (one 16-byte load) when k % 8 == 0, else 1;
// `Widen::f` turns the low 16 bits of its argument into the exact f32.
template <class Widen> struct Unit16 {
    struct Raw {
        uint4 a;
    };
    __device__ static Raw load(const uint8_t *wr, uint32_t u) {
        return Raw{ld_stream(wr + 16 * (size_t)u)};
    }
    __device__ static void unpack(const Raw &r, float *w) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            w[2 * j] = Widen::f(word(r.a, j));
            w[2 * j + 1] = Widen::f(word(r.a, j) >> 16);
        }
    }
    __device__ static float one(const uint8_t *wr, uint32_t i) {
        return Widen::f(reinterpret_cast<const uint16_t *>(wr)[i]);
    }
};
struct WidenF16 {
    __device__ static float f(uint32_t bits) { return half_bits_to_float(bits); }
};
// A bfloat16 is the high half of its f32.
struct WidenBF16 {
    __device__ static float f(uint32_t bits) { return __uint_as_float(bits << 16); }
};
template <> struct Unit<FMT_F16> : Unit16<WidenF16> {};
template <> struct Unit<FMT_BF16> : Unit16<WidenBF16> {};

// Units of 8 elements a lane has in flight at once (the default; the
// one-column F16 kernels also come with 8 and 16: GEMV_KERNELS_SHAPE).
constexpr int FLOAT_UNROLL = 4;

// One step of a lane's float weights: units first, first + STRIDE, …
// (FLOAT_UNROLL of them, those below `units`); empty for the other formats.
template <int FMT, int FU = FLOAT_UNROLL, bool IS_FLOAT = is_float_fmt(FMT)> struct FloatStep {
    typename Unit<FMT>::Raw raw[FU];
    __device__ void load(const uint8_t *wr, uint32_t u, uint32_t units) {
#pragma unroll
        for (int j = 0; j < FU; ++j)
            if (u + j * WARPS * 32 < units) raw[j] = Unit<FMT>::load(wr, u + j * WARPS * 32);
    }
};
template <int FMT, int FU> struct FloatStep<FMT, FU, false> {};

// The first step of row wr for this lane, requested before the block's
// griddep_wait (weights are constant: under programmatic dependent launch
// they stream in while the kernel before finishes); nothing when k % 8 != 0
// (the one-element path loads as it goes).
template <int FMT, int FU>
__device__ __forceinline__ FloatStep<FMT, FU> float_first_step(const uint8_t *wr, uint32_t k,
                                                               uint32_t lane, uint32_t warp) {
    FloatStep<FMT, FU> s;
    if ((k & 7u) == 0) s.load(wr, warp * 32 + lane, k / 8);
    return s;
}

// acc[c] += row wr · x_c; the block's warps take interleaved units; the
// lane's first step is `first` (float_first_step of the same row).
template <int FMT, int NC, int FU>
__device__ __forceinline__ void float_row_dot(const uint8_t *wr, const float *x, uint32_t k,
                                              uint32_t lane, uint32_t warp, float *acc,
                                              const FloatStep<FMT, FU> &first) {
    using U = Unit<FMT>;
    const uint32_t u0 = warp * 32 + lane;
    constexpr uint32_t STRIDE = WARPS * 32;
    if ((k & 7u) != 0) {
        for (uint32_t i = u0; i < k; i += STRIDE) {
            const float w = U::one(wr, i);
#pragma unroll
            for (int c = 0; c < NC; ++c) acc[c] = fmaf(w, x[(size_t)c * k + i], acc[c]);
        }
        return;
    }
    const uint32_t units = k / 8;
    auto consume = [&](const FloatStep<FMT, FU> &step, uint32_t u) {
#pragma unroll
        for (int j = 0; j < FU; ++j) {
            if (u + j * STRIDE < units) {
                float w[8];
                U::unpack(step.raw[j], w);
                fma8<NC>(w, x + 8 * (size_t)(u + j * STRIDE), k, acc);
            }
        }
    };
    consume(first, u0);
    for (uint32_t u = u0 + FU * STRIDE; u < units; u += FU * STRIDE) {
        FloatStep<FMT, FU> step;
        step.load(wr, u, units);
        consume(step, u);
    }
}

// ------------------------------------------------- quantized: whole tiles
// One tile of R rows (src/layout.rs), lane `lane`: codes and scales.
template <int FMT> struct Tile;

// Q4_0: 1024 elements; 8 chunks per lane, chunk t in block 4t + lane/8;
// the lane's 8 block scales d (f16) in one 16-byte word set.
template <> struct Tile<FMT_Q4_0> {
    static constexpr uint32_t ELEMS = 1024, SCALE_BYTES = 64, CHUNKS = 8;
    struct Raw {
        uint4 q, d;
    };
    __device__ static Raw load(const uint8_t *codes, const uint8_t *scales, uint32_t lane) {
        return Raw{ld_stream(codes + 16 * lane), ld_stream(scales + 16 * (lane >> 3))};
    }
    __device__ static void prepare(Raw &, uint32_t) {}
    // acc[c] += the chunk's contribution; xs[c]: the chunk's sum of x.
    template <int NC>
    __device__ static void chunk(const Raw &r, int t, const float4 *xv, const float *xs,
                                 float *acc) {
        const float d = half_bits_to_float(word(r.d, t >> 1) >> (16 * (t & 1)));
        // sum (q_i − 8)·x_i = 16·sum (1 + q_i/16)·x_i − 24·sum x_i.
        const uint32_t w = unit_codes(r.q, t);
#pragma unroll
        for (int c = 0; c < NC; ++c)
            acc[c] = fmaf(d, fmaf(16.0f, unit_dot(w, xv[c]), __fmul_rn(-24.0f, xs[c])), acc[c]);
    }
};

// Q8_0: 512 elements; 4 chunks per lane, chunk t in block 4t + lane/8; the
// lane's 4 scales in 8 bytes.
template <> struct Tile<FMT_Q8_0> {
    static constexpr uint32_t ELEMS = 512, SCALE_BYTES = 32, CHUNKS = 4;
    struct Raw {
        uint4 q;
        uint2 d;
    };
    __device__ static Raw load(const uint8_t *codes, const uint8_t *scales, uint32_t lane) {
        return Raw{ld_stream(codes + 16 * lane), ld_stream2(scales + 8 * (lane >> 3))};
    }
    __device__ static void prepare(Raw &, uint32_t) {}
    template <int NC>
    __device__ static void chunk(const Raw &r, int t, const float4 *xv, const float *,
                                 float *acc) {
        // Signed codes biased to 0..255: q + 128 = magic − 2^23.
        const uint32_t w = word(r.q, t) ^ 0x80808080u;
        const float d = half_bits_to_float((t < 2 ? r.d.x : r.d.y) >> (16 * (t & 1)));
#pragma unroll
        for (int c = 0; c < NC; ++c) acc[c] = fmaf(d, chunk_dot(w, MAGIC + 128.0f, xv[c]), acc[c]);
    }
};

// Q4_K sub-block j's 6-bit scale and min from the packed bytes in words
// h.y, h.z, h.w of a header (the core's scale_min).
__device__ __forceinline__ void q4k_scale_min(const uint4 &h, uint32_t j, uint32_t &sc,
                                              uint32_t &m) {
    auto byte = [&](uint32_t i) {
        const uint32_t w = i < 4 ? h.y : (i < 8 ? h.z : h.w);
        return (w >> (8 * (i & 3u))) & 0xffu;
    };
    if (j < 4) {
        sc = byte(j) & 63u;
        m = byte(j + 4) & 63u;
    } else {
        sc = (byte(j + 4) & 0x0fu) | ((byte(j - 4) >> 6) << 4);
        m = (byte(j + 4) >> 4) | ((byte(j) >> 6) << 4);
    }
}

// Q4_K: 1024 elements = 4 super-blocks; chunk t of lane l in super-block t/2,
// sub-block 4(t mod 2) + l/8. Lane 8g + i decodes the factors of its group's
// chunk t = i (d·sc and dmin·m, in f32 as the core) and passes them round.
template <> struct Tile<FMT_Q4_K> {
    static constexpr uint32_t ELEMS = 1024, SCALE_BYTES = 64, CHUNKS = 8;
    struct Raw {
        uint4 q, h;   // h: the header of super-block (lane mod 8) / 2
        float dd, mm; // after prepare: the factors of chunk lane mod 8
    };
    __device__ static Raw load(const uint8_t *codes, const uint8_t *scales, uint32_t lane) {
        Raw r;
        r.q = ld_stream(codes + 16 * lane);
        r.h = ld_stream(scales + 16 * ((lane & 7u) >> 1));
        return r;
    }
    // Sub-block j = 4(lane mod 2) + lane/8 of super-block (lane mod 8)/2:
    // bytes g, g + 4, g + 8 (g = lane/8) of the packed scales give its scale
    // and min (the core's scale_min, without branches).
    __device__ static void prepare(Raw &r, uint32_t lane) {
        const uint32_t sh = 8 * (lane >> 3);
        const uint32_t a = (r.h.y >> sh) & 0xffu, b = (r.h.z >> sh) & 0xffu,
                       c = (r.h.w >> sh) & 0xffu;
        const bool high = (lane & 1u) != 0;
        const uint32_t sc = high ? (c & 0x0fu) | ((a >> 6) << 4) : a & 63u;
        const uint32_t m = high ? (c >> 4) | ((b >> 6) << 4) : b & 63u;
        r.dd = __fmul_rn(half_bits_to_float(r.h.x), (float)sc);
        r.mm = __fmul_rn(half_bits_to_float(r.h.x >> 16), (float)m);
        // dd·q − mm with q = 16(f − 1): 16dd·f − (16dd + mm).
        r.mm = -__fadd_rn(__fmul_rn(16.0f, r.dd), r.mm);
        r.dd = __fmul_rn(16.0f, r.dd);
    }
    template <int NC>
    __device__ static void chunk(const Raw &r, int t, const float4 *xv, const float *xs,
                                 float *acc) {
        const float dd = __shfl_sync(0xffffffffu, r.dd, t, 8);
        const float mm = __shfl_sync(0xffffffffu, r.mm, t, 8);
        // (16dd)·sum (1 + q_i/16)·x_i − (16dd + mm)·sum x_i.
        const uint32_t w = unit_codes(r.q, t);
#pragma unroll
        for (int c = 0; c < NC; ++c) acc[c] = fmaf(mm, xs[c], fmaf(dd, unit_dot(w, xv[c]), acc[c]));
    }
};

// How a warp steps through its tiles, per format and rows per block
// (A/B runs on the H200, 1 column): Q8_0 takes 2 tiles per step, loads then
// computes (software pipelining ran 0.87x at 32768 x 8192); Q4_0 and Q4_K
// take 1 tile per step, software-pipelined (1.02–1.04x over 2 tiles
// unpipelined). 4 rows: 1 tile per step (registers).
template <int FMT, int R> struct TileStep {
    static constexpr bool PIPELINED = FMT != FMT_Q8_0;
    static constexpr int UNROLL = (R >= 4 || PIPELINED) ? 1 : 2;
};

// acc[r][c] += rows' full tiles · x_c; tile j goes to warp j mod WARPS. A
// warp takes TileStep::UNROLL tiles per step; software-pipelined, it issues
// the next step's weight loads before it computes the current one, so that
// its loads stay in flight while it computes.
template <int FMT, int NC, int R>
__device__ __forceinline__ void tiles_dot(const uint8_t *const *codes, const uint8_t *const *scales,
                                          const float *x, uint32_t k, uint32_t nt, uint32_t lane,
                                          uint32_t warp, float (*acc)[NC]) {
    using T = Tile<FMT>;
    using Raw = typename T::Raw;
    constexpr int TILE_UNROLL = TileStep<FMT, R>::UNROLL;
    constexpr uint32_t STEP = TILE_UNROLL * WARPS;
    auto load = [&](Raw (*raw)[R], uint32_t j0) {
#pragma unroll
        for (int u = 0; u < TILE_UNROLL; ++u) {
            const uint32_t j = j0 + u * WARPS;
            if (j < nt) {
#pragma unroll
                for (int r = 0; r < R; ++r)
                    raw[u][r] = T::load(codes[r] + (size_t)j * 512,
                                        scales[r] + (size_t)j * T::SCALE_BYTES, lane);
            }
        }
    };
    auto compute = [&](Raw (*raw)[R], uint32_t j0) {
#pragma unroll
        for (int u = 0; u < TILE_UNROLL; ++u) {
            const uint32_t j = j0 + u * WARPS;
            if (j >= nt) break;
#pragma unroll
            for (int r = 0; r < R; ++r) T::prepare(raw[u][r], lane);
            const float *xt = x + (size_t)j * T::ELEMS + 4 * lane;
#pragma unroll
            for (int t = 0; t < (int)T::CHUNKS; ++t) {
                float4 xv[NC];
                float xs[NC];
#pragma unroll
                for (int c = 0; c < NC; ++c) {
                    xv[c] = ld_x4(xt + (size_t)c * k + 128 * t);
                    xs[c] = sum4(xv[c]);
                }
#pragma unroll
                for (int r = 0; r < R; ++r) T::template chunk<NC>(raw[u][r], t, xv, xs, acc[r]);
            }
        }
    };
    if constexpr (TileStep<FMT, R>::PIPELINED) {
        Raw cur[TILE_UNROLL][R], next[TILE_UNROLL][R];
        if (warp < nt) load(cur, warp);
        for (uint32_t j0 = warp; j0 < nt; j0 += STEP) {
            if (j0 + STEP < nt) load(next, j0 + STEP);
            compute(cur, j0);
#pragma unroll
            for (int u = 0; u < TILE_UNROLL; ++u)
#pragma unroll
                for (int r = 0; r < R; ++r) cur[u][r] = next[u][r];
        }
    } else {
        for (uint32_t j0 = warp; j0 < nt; j0 += STEP) {
            Raw raw[TILE_UNROLL][R];
            load(raw, j0);
            compute(raw, j0);
        }
    }
}

// ------------------------------------------------- quantized: by blocks
// Blocks read in the core's block layout: the rest after the last full tile
// of the tiled formats, whole rows of the others (blocks.cuh). A block is
// split across L lanes; lane s takes GROUPS groups of 4 consecutive
// elements (16-byte activation loads). Per group a format gives
//   codes(raw, s, g)  4 code bytes c_i (byte i: element i), with
//   BIAS              such that magic_byte(codes, i) − BIAS is the exact
//                     f32 integer q_i the format scales (BIAS = 2^23 + the
//                     format's code offset: the subtraction is exact)
//   scale(raw, s, g)  and, where HAS_MIN, minimum(raw, s, g): the group's
//                     values are scale·q_i (+ min), as the core dequantizes
// and the lane adds scale·Σ q_i·x_i (+ min·Σ x_i): the core's dequantized
// products regrouped per 4 elements, equal up to f32 rounding.
template <int FMT> struct Block;

// Q8_0: 34-byte blocks (2-byte aligned): d (f16), 32 signed codes. L = 8:
// lane s takes elements 4s..4s+3 (code bytes 4s..4s+3), biased to 0..255.
template <> struct Block<FMT_Q8_0> {
    static constexpr int L = 8, BLOCK = 32, BYTES = 34, GROUPS = 1;
    static constexpr bool HAS_MIN = false;
    static constexpr float BIAS = MAGIC + 128.0f;
    struct Raw {
        uint32_t d, q;
    };
    __device__ static Raw load(const uint8_t *wr, uint32_t blk, uint32_t s) {
        const uint16_t *b = reinterpret_cast<const uint16_t *>(wr + (size_t)blk * 34);
        return Raw{b[0], (uint32_t)b[1 + 2 * s] | ((uint32_t)b[2 + 2 * s] << 16)};
    }
    __device__ static uint32_t codes(const Raw &r, uint32_t, int) { return r.q ^ 0x80808080u; }
    __device__ static float scale(const Raw &r, uint32_t, int) { return half_bits_to_float(r.d); }
    __device__ static float minimum(const Raw &, uint32_t, int) { return 0.0f; }
    __device__ static size_t x_offset(uint32_t blk, uint32_t s, int) { return (size_t)blk * 32 + 4 * s; }
};

// Q4_0: 18-byte blocks (2-byte aligned): d (f16), 16 bytes of nibbles; byte
// j holds element j (low) and j + 16 (high); value (q − 8)·d. L = 8: lane s
// takes elements 4s..4s+3: the low (s < 4) or high (s >= 4) nibbles of
// bytes 4(s mod 4)..4(s mod 4)+3.
template <> struct Block<FMT_Q4_0> {
    static constexpr int L = 8, BLOCK = 32, BYTES = 18, GROUPS = 1;
    static constexpr bool HAS_MIN = false;
    static constexpr float BIAS = MAGIC + 8.0f;
    struct Raw {
        uint32_t d, q;
    };
    __device__ static Raw load(const uint8_t *wr, uint32_t blk, uint32_t s) {
        const uint16_t *b = reinterpret_cast<const uint16_t *>(wr + (size_t)blk * 18);
        const uint32_t j = 2 * (s & 3u);
        return Raw{b[0], (uint32_t)b[1 + j] | ((uint32_t)b[2 + j] << 16)};
    }
    __device__ static uint32_t codes(const Raw &r, uint32_t s, int) {
        return (r.q >> (s >= 4 ? 4u : 0u)) & 0x0f0f0f0fu;
    }
    __device__ static float scale(const Raw &r, uint32_t, int) { return half_bits_to_float(r.d); }
    __device__ static float minimum(const Raw &, uint32_t, int) { return 0.0f; }
    __device__ static size_t x_offset(uint32_t blk, uint32_t s, int) { return (size_t)blk * 32 + 4 * s; }
};

// Q4_K: 144-byte super-blocks (16-byte aligned): d, dmin (f16), 12 bytes of
// packed 6-bit scales/mins, 128 bytes of nibbles; in chunk c (64 elements),
// qs[32c + l] holds element 64c + l (low) and 64c + 32 + l (high), value
// d·sc·q − dmin·m. L = 32: lane s takes chunk c = s/8, bytes l = 4(s mod 8)..+3:
// group 0 the elements 64c + l (low nibbles, sub-block 2c), group 1 the
// elements 64c + 32 + l (high nibbles, sub-block 2c + 1).
// Q4_K and Q5_K lanes (L = 32): lane s takes chunk c = s/8 (64 elements),
// bytes 4(s mod 8)..+3 of its codes; group g is sub-block 2c + g. From the
// super-block header h (d, dmin, packed scales): the group's factor d·sc and
// minus its min dmin·m (the core's dequantization factors, in f32), and the
// activation index of its first element.
__device__ __forceinline__ float kq_scale(const uint4 &h, uint32_t s, int g) {
    uint32_t sc, m;
    q4k_scale_min(h, 2 * (s >> 3) + (uint32_t)g, sc, m);
    return __fmul_rn(half_bits_to_float(h.x), (float)sc);
}
__device__ __forceinline__ float kq_minimum(const uint4 &h, uint32_t s, int g) {
    uint32_t sc, m;
    q4k_scale_min(h, 2 * (s >> 3) + (uint32_t)g, sc, m);
    return -__fmul_rn(half_bits_to_float(h.x >> 16), (float)m);
}
__device__ __forceinline__ size_t kq_x_offset(uint32_t blk, uint32_t s, int g) {
    return (size_t)blk * 256 + 64 * (s >> 3) + 4 * (s & 7u) + 32 * (uint32_t)g;
}

template <> struct Block<FMT_Q4_K> {
    static constexpr int L = 32, BLOCK = 256, BYTES = 144, GROUPS = 2;
    static constexpr bool HAS_MIN = true;
    static constexpr float BIAS = MAGIC;
    struct Raw {
        uint4 h;
        uint32_t q;
    };
    __device__ static Raw load(const uint8_t *wr, uint32_t blk, uint32_t s) {
        const uint8_t *b = wr + (size_t)blk * 144;
        Raw r;
        r.h = *reinterpret_cast<const uint4 *>(b);
        r.q = *reinterpret_cast<const uint32_t *>(b + 16 + 32 * (s >> 3) + 4 * (s & 7u));
        return r;
    }
    __device__ static uint32_t codes(const Raw &r, uint32_t, int g) { return (r.q >> (4 * g)) & 0x0f0f0f0fu; }
    __device__ static float scale(const Raw &r, uint32_t s, int g) { return kq_scale(r.h, s, g); }
    __device__ static float minimum(const Raw &r, uint32_t s, int g) { return kq_minimum(r.h, s, g); }
    __device__ static size_t x_offset(uint32_t blk, uint32_t s, int g) { return kq_x_offset(blk, s, g); }
};

#include "blocks.cuh"

// acc[r][c] += the blocks (nb of them, rows wr[r], activations x from the
// first of them on) · x_c; the block's warps take interleaved blocks. A lane
// issues the loads of BU of its blocks before it computes them (memory-level
// parallelism for the formats read in the core's layout); each lane still
// takes its blocks in increasing order.
template <int FMT, int NC, int R, int BU>
__device__ __forceinline__ void blocks_dot(const uint8_t *const *wr, const float *x, uint32_t k,
                                           uint32_t nb, uint32_t lane, uint32_t warp,
                                           float (*acc)[NC]) {
    using U = Block<FMT>;
    constexpr uint32_t G = 32 / U::L; // blocks per warp step
    constexpr uint32_t STEP = WARPS * G;
    const uint32_t s = lane % U::L;
    for (uint32_t b0 = warp * G + lane / U::L; b0 < nb; b0 += BU * STEP) {
        typename U::Raw raw[BU][R];
#pragma unroll
        for (int u = 0; u < BU; ++u)
            if (b0 + u * STEP < nb) {
#pragma unroll
                for (int r = 0; r < R; ++r) raw[u][r] = U::load(wr[r], b0 + u * STEP, s);
            }
#pragma unroll
        for (int u = 0; u < BU; ++u) {
            const uint32_t b = b0 + u * STEP;
            if (b >= nb) break;
#pragma unroll
            for (int g = 0; g < U::GROUPS; ++g) {
                const size_t off = U::x_offset(b, s, g);
                float4 xv[NC];
                float xs[NC];
#pragma unroll
                for (int c = 0; c < NC; ++c) {
                    xv[c] = ld_x4(x + (size_t)c * k + off);
                    xs[c] = U::HAS_MIN ? sum4(xv[c]) : 0.0f;
                }
#pragma unroll
                for (int r = 0; r < R; ++r) {
                    const uint32_t cw = U::codes(raw[u][r], s, g);
                    const float sc = U::scale(raw[u][r], s, g);
#pragma unroll
                    for (int c = 0; c < NC; ++c) {
                        acc[r][c] = fmaf(sc, chunk_dot(cw, U::BIAS, xv[c]), acc[r][c]);
                        if constexpr (U::HAS_MIN)
                            acc[r][c] = fmaf(U::minimum(raw[u][r], s, g), xs[c], acc[r][c]);
                    }
                }
            }
        }
    }
}

// Blocks a lane loads ahead in the formats read in the core's layout: 4,
// or 2 where a lane's share of a block takes more than 12 bytes of registers.
template <int FMT> struct BlockUnroll {
    static constexpr int value = sizeof(typename Block<FMT>::Raw) <= 12 ? 4 : 2;
};

// The float formats' first steps of rows r0 .. r0 + R − 1 (clamped) of w.
template <int FMT, int R, int FU> struct FloatFirst {
    FloatStep<FMT, FU> s[R];
};

template <int FMT, int R, int FU>
__device__ __forceinline__ FloatFirst<FMT, R, FU> float_rows_first(const GemvParams &p,
                                                                   const uint8_t *w, uint32_t row0,
                                                                   uint32_t lane, uint32_t warp) {
    FloatFirst<FMT, R, FU> f;
#pragma unroll
    for (int r = 0; r < R; ++r)
        f.s[r] = float_first_step<FMT, FU>(
            w + (size_t)min(row0 + (uint32_t)r, p.rows - 1) * p.row_bytes, p.k, lane, warp);
    return f;
}

// acc[r][c] += row (w, rows r0 + r, clamped) · x_c, for every format; the
// float formats start from `first` (float_rows_first of the same rows).
template <int FMT, int NC, int R, int FU>
__device__ __forceinline__ void rows_dot(const GemvParams &p, const uint8_t *w, uint32_t row0,
                                         uint32_t lane, uint32_t warp, float (*acc)[NC],
                                         const FloatFirst<FMT, R, FU> *first) {
    uint32_t row[R];
#pragma unroll
    for (int r = 0; r < R; ++r) row[r] = min(row0 + (uint32_t)r, p.rows - 1);
    if constexpr (is_float_fmt(FMT)) {
#pragma unroll
        for (int r = 0; r < R; ++r)
            float_row_dot<FMT, NC, FU>(w + (size_t)row[r] * p.row_bytes, p.x, p.k, lane, warp,
                                       acc[r], first->s[r]);
    } else if constexpr (!is_tiled_fmt(FMT)) {
        // The core's block layout, whole rows.
        const uint8_t *rows[R];
#pragma unroll
        for (int r = 0; r < R; ++r) rows[r] = w + (size_t)row[r] * p.row_bytes;
        blocks_dot<FMT, NC, R, BlockUnroll<FMT>::value>(rows, p.x, p.k, p.k / Block<FMT>::BLOCK,
                                                         lane, warp, acc);
    } else {
        using T = Tile<FMT>;
        using U = Block<FMT>;
        const uint32_t nt = p.k / T::ELEMS;
        const size_t codes_bytes = (size_t)p.rows * nt * 512;
        const size_t scales_bytes = (size_t)p.rows * nt * T::SCALE_BYTES;
        const uint32_t nb = (p.k - nt * T::ELEMS) / U::BLOCK;
        const size_t rest_bytes = (size_t)nb * U::BYTES;
        const uint8_t *codes[R], *scales[R], *rest[R];
#pragma unroll
        for (int r = 0; r < R; ++r) {
            codes[r] = w + (size_t)row[r] * nt * 512;
            scales[r] = w + codes_bytes + (size_t)row[r] * nt * T::SCALE_BYTES;
            rest[r] = w + codes_bytes + scales_bytes + (size_t)row[r] * rest_bytes;
        }
        tiles_dot<FMT, NC, R>(codes, scales, p.x, p.k, nt, lane, warp, acc);
        if (nb != 0)
            blocks_dot<FMT, NC, R, 1>(rest, p.x + (size_t)nt * T::ELEMS, p.k, nb, lane, warp, acc);
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

// The early epilogue operands of the output this thread stores at the end
// (finish_block: thread i < R·NC stores row row0 + i / NC, column i mod NC).
template <int NC, int R, class Epi, int G = 1>
__device__ __forceinline__ EpiEarly block_epilogue_early(const EpiParams &epi, uint32_t row0,
                                                         uint32_t rows) {
    // (G written out at each use, not through Team<G>: the G = 1 kernels
    // compile to the same code as before teams existed.)
    const uint32_t i = G == 1 ? threadIdx.x : threadIdx.x % GEMV_TEAM_THREADS;
    if (i < (uint32_t)(R * NC) && row0 + i / NC < rows)
        return Epi::early(epi, row0 + i / NC, i % NC, rows);
    return EpiEarly{};
}

// The sums of the block's rows from partial[v][w][i] (warp w's sum of
// output i = row·NC + column), added in warp order, the GLU and the
// epilogue chain (Epi, common.cuh) applied, the outputs of rows row0 ..
// row0 + R − 1 (those below `rows`) stored, after the barrier that makes
// every warp's partials visible; returns the output the thread stored
// (argmax_tail), NaN for none.
template <int NC, int R, int V, bool GLU, class Epi, int G = 1>
__device__ __forceinline__ float finish_rows(float (*partial)[WARPS][R * NC], uint32_t row0,
                                            uint32_t rows, uint32_t glu_act, const EpiParams &epi,
                                            const EpiEarly &early, float *y) {
    static_assert(R * NC <= WARPS * 32, "one output per thread");
    // One column, G = 1: the output this thread stored (argmax_tail), NaN
    // for none.
    float stored = __int_as_float(0x7fc00000);
    if constexpr (G == 1)
        __syncthreads();
    else
        Team<G>::sync();
    for (uint32_t i = G == 1 ? threadIdx.x : threadIdx.x % GEMV_TEAM_THREADS;
         i < (uint32_t)(R * NC); i += G == 1 ? blockDim.x : GEMV_TEAM_THREADS) {
        const uint32_t row = row0 + i / NC, c = i % NC;
        if (row >= rows) continue;
        float sum[V];
#pragma unroll
        for (int v = 0; v < V; ++v) {
            sum[v] = partial[v][0][i];
#pragma unroll
            for (int wi = 1; wi < WARPS; ++wi) sum[v] = __fadd_rn(sum[v], partial[v][wi][i]);
        }
        const float val = GLU ? glu_apply(glu_act, sum[0], sum[V - 1]) : sum[0];
        const float out = Epi::apply(epi, early, val, row, c, rows);
        y[(size_t)c * rows + row] = out;
        if constexpr (NC == 1 && G == 1) stored = out;
    }
    return stored;
}

// The end of every GEMV block: each warp's accumulators combined by the
// butterfly into `partial`, then finish_rows.
template <int NC, int R, int V, bool GLU, class Epi, int G = 1>
__device__ __forceinline__ float finish_block(float (*acc)[R][NC], float (*partial)[WARPS][R * NC],
                                             uint32_t row0, uint32_t lane, uint32_t warp,
                                             uint32_t rows, uint32_t glu_act, const EpiParams &epi,
                                             const EpiEarly &early, float *y) {
#pragma unroll
    for (int v = 0; v < V; ++v)
#pragma unroll
        for (int r = 0; r < R; ++r) {
            warp_sum<NC>(acc[v][r]);
            if (lane == 0) {
#pragma unroll
                for (int c = 0; c < NC; ++c) partial[v][warp][r * NC + c] = acc[v][r][c];
            }
        }
    return finish_rows<NC, R, V, GLU, Epi, G>(partial, row0, rows, glu_act, epi, early, y);
}

// Block b computes rows R·b .. R·b + R − 1 (RowsPerBlock); rows past the end
// are computed on the last row (in bounds) and not stored.
// `block` is the block's index within its GEMV (blockIdx.x, or its place in
// its job's share of a group launch).
template <int FMT, int NC, bool GLU, int R = RowsPerBlock<FMT, NC>::value,
          int FU = FLOAT_UNROLL, class Epi = GenericEpi>
__device__ void gemv(const GemvParams &p, uint32_t block) {
    constexpr int V = GLU ? 2 : 1;
    __shared__ float partial[V][WARPS][R * NC];
    const uint32_t row0 = block * R;
    const uint32_t lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
    griddep_begin(p.deps);
    if (row0 >= p.rows) return; // the whole block leaves together
    const uint32_t blocks = (p.rows + R - 1) / R;
    // The float formats request their first weights (the gate's, for GLU)
    // before the wait; the other formats, and the up weights, after it.
    FloatFirst<FMT, R, FU> first[V];
    if constexpr (is_float_fmt(FMT))
        first[0] = float_rows_first<FMT, R, FU>(p, p.w, row0, lane, warp);
    l2_ahead(p.ahead, L2_AHEAD_START, block, blocks);
    griddep_ready(p.deps);
    const EpiEarly early = block_epilogue_early<NC, R, Epi>(p.epi, row0, p.rows);
    float acc[V][R][NC];
#pragma unroll
    for (int v = 0; v < V; ++v)
#pragma unroll
        for (int r = 0; r < R; ++r)
#pragma unroll
            for (int c = 0; c < NC; ++c) acc[v][r][c] = 0.0f;
    rows_dot<FMT, NC, R, FU>(p, p.w, row0, lane, warp, acc[0], &first[0]);
    if constexpr (GLU) {
        if constexpr (is_float_fmt(FMT))
            first[V - 1] = float_rows_first<FMT, R, FU>(p, p.w_up, row0, lane, warp);
        rows_dot<FMT, NC, R, FU>(p, p.w_up, row0, lane, warp, acc[V - 1], &first[V - 1]);
    }
    l2_ahead(p.ahead, L2_AHEAD_END, block, blocks);
    const float stored = finish_block<NC, R, V, GLU, Epi>(
        acc, partial, row0, lane, warp, p.rows, p.glu_act, p.epi, early, p.y);
    if constexpr (NC == 1) {
        if (p.argmax.out != nullptr) argmax_tail<R>(p.argmax, row0, p.rows, stored);
    }
    griddep_end(p.deps);
}

// Blocks an SM the one-column float kernels of Q8_0, Q4_0 and Q4_K are
// held to, and their fixed-chain copies with them (FIXED_EPI_BOUNDS): left
// free, the argmax tail's code cost each a block an SM. 1 (no bound) for
// the others.
template <int FMT, int NC> constexpr int gemv_min_blocks() {
    if (NC != 1) return 1;
    return FMT == FMT_Q8_0 || FMT == FMT_Q4_0 ? 9 : FMT == FMT_Q4_K ? 5 : 1;
}

#define GEMV_KERNELS_NC(name, FMT, NC)                                                         \
    extern "C" __global__ void __launch_bounds__(WARPS * 32, (gemv_min_blocks<FMT, NC>()))     \
        fused_gemv_##name##_c##NC(const GemvParams p) {                                        \
        gemv<FMT, NC, false>(p, blockIdx.x);                                                   \
    }                                                                                          \
    extern "C" __global__ void __launch_bounds__(WARPS * 32)                                   \
        fused_gemv_glu_##name##_c##NC(const GemvParams p) {                                    \
        gemv<FMT, NC, true>(p, blockIdx.x);                                                    \
    }

// One-column float kernels of another shape, fused_gemv[_glu]_<fmt>_<tag>_c1:
// R rows per block and FU units of 8 weights in flight per lane (the
// defaults: 1 and FLOAT_UNROLL). src/kernel_choice.rs (f16_shape) picks FU so that
// a lane's first step, requested before griddep_wait, covers its whole row;
// R = 2 is kept for A/B runs (a `Tuning` picks it). The same sums in the same order as the
// defaults.
#define GEMV_KERNELS_SHAPE(name, FMT, tag, R, FU)                                              \
    extern "C" __global__ void __launch_bounds__(WARPS * 32)                                   \
        fused_gemv_##name##_##tag##_c1(const GemvParams p) {                                   \
        gemv<FMT, 1, false, R, FU>(p, blockIdx.x);                                             \
    }                                                                                          \
    extern "C" __global__ void __launch_bounds__(WARPS * 32)                                   \
        fused_gemv_glu_##name##_##tag##_c1(const GemvParams p) {                               \
        gemv<FMT, 1, true, R, FU>(p, blockIdx.x);                                              \
    }                                                                                          \
    extern "C" __global__ void __launch_bounds__(WARPS * 32)                                   \
        fused_gemv_group_##name##_##tag##_c1(const __grid_constant__ Group<GemvParams> g) {    \
        const uint32_t j = group_job(g);                                                       \
        gemv<FMT, 1, false, R, FU>(g.job[j], blockIdx.x - g.first_block[j]);                   \
    }

// The group kernel of the default one-column shape, fused_gemv_group_<fmt>_c1.
#define GEMV_GROUP_KERNEL(name, FMT)                                                           \
    extern "C" __global__ void __launch_bounds__(WARPS * 32)                                   \
        fused_gemv_group_##name##_c1(const __grid_constant__ Group<GemvParams> g) {            \
        const uint32_t j = group_job(g);                                                       \
        gemv<FMT, 1, false>(g.job[j], blockIdx.x - g.first_block[j]);                          \
    }

#define GEMV_KERNELS(name, FMT)                                                                \
    GEMV_KERNELS_NC(name, FMT, 1)                                                              \
    GEMV_GROUP_KERNEL(name, FMT)                                                               \
    GEMV_KERNELS_NC(name, FMT, 2)                                                              \
    GEMV_KERNELS_NC(name, FMT, 3)                                                              \
    GEMV_KERNELS_NC(name, FMT, 4)                                                              \
    GEMV_KERNELS_NC(name, FMT, 5)                                                              \
    GEMV_KERNELS_NC(name, FMT, 6)                                                              \
    GEMV_KERNELS_NC(name, FMT, 7)                                                              \
    GEMV_KERNELS_NC(name, FMT, 8)

GEMV_KERNELS(f32, FMT_F32)
GEMV_KERNELS(f16, FMT_F16)
GEMV_KERNELS_SHAPE(f16, FMT_F16, r2, 2, FLOAT_UNROLL)
GEMV_KERNELS_SHAPE(f16, FMT_F16, u8, 1, 8)
GEMV_KERNELS_SHAPE(f16, FMT_F16, u16, 1, 16)
GEMV_KERNELS(q8_0, FMT_Q8_0)
GEMV_KERNELS(q4_0, FMT_Q4_0)
GEMV_KERNELS(q4_K, FMT_Q4_K)
GEMV_KERNELS(bf16, FMT_BF16)
GEMV_KERNELS(q4_1, FMT_Q4_1)
GEMV_KERNELS(q5_0, FMT_Q5_0)
GEMV_KERNELS(q5_1, FMT_Q5_1)
GEMV_KERNELS(iq4_nl, FMT_IQ4_NL)
GEMV_KERNELS(q5_K, FMT_Q5_K)
GEMV_KERNELS(q6_K, FMT_Q6_K)
GEMV_KERNELS(tq2_0, FMT_TQ2_0)

// One-column kernels with a chain fixed at compile time (common.cuh:
// FixedEpi; src/fixed_epi.rs picks them), fused_gemv_<fmt>[_<tag>]_c1_e<chain>,
// for the chains `add` and `silu_mul_add`: copies of the default
// one-column kernels of F16 at K from 8193 (u16), and of Q8_0, Q4_0 and
// Q4_K on f32 activations.
//
// A copy must run at its base kernel's blocks per SM, or it trades the
// chain's cost for another occupancy's, which moved results more than the
// chain did on the H200 (BENCHMARKS.md). Left free, ptxas gives the copies
// more registers than their base; BOUNDS caps them at the base's registers
// rounded up to 8 (65536 / (128 · that) blocks), or is FREE where the free
// copies took no more (`cuobjdump -res-usage`). Kernels whose copies came
// out below their base's registers (more blocks an SM: F16 c1 and u8,
// integer Q8_0 r2) have none.
#define FIXED_EPI_BOUNDS_FREE __launch_bounds__(WARPS * 32)
#define FIXED_EPI_BOUNDS(MIN_BLOCKS) __launch_bounds__(WARPS * 32, MIN_BLOCKS)
#define GEMV_FIXED_EPI_KERNEL(kname, FMT, R, FU, BOUNDS, chain, EPI)                           \
    extern "C" __global__ void BOUNDS kname##_e##chain(const GemvParams p) {                   \
        gemv<FMT, 1, false, R, FU, EPI>(p, blockIdx.x);                                        \
    }
#define GEMV_FIXED_EPI_KERNELS(kname, FMT, R, FU, BOUNDS)                                      \
    GEMV_FIXED_EPI_KERNEL(kname, FMT, R, FU, BOUNDS, add, EpiAdd)                              \
    GEMV_FIXED_EPI_KERNEL(kname, FMT, R, FU, BOUNDS, silu_mul_add, EpiSiluMulAdd)
GEMV_FIXED_EPI_KERNELS(fused_gemv_f16_u16_c1, FMT_F16, 1, 16, FIXED_EPI_BOUNDS_FREE)
GEMV_FIXED_EPI_KERNELS(fused_gemv_q8_0_c1, FMT_Q8_0, (RowsPerBlock<FMT_Q8_0, 1>::value), FLOAT_UNROLL, FIXED_EPI_BOUNDS((gemv_min_blocks<FMT_Q8_0, 1>())))
GEMV_FIXED_EPI_KERNELS(fused_gemv_q4_0_c1, FMT_Q4_0, (RowsPerBlock<FMT_Q4_0, 1>::value), FLOAT_UNROLL, FIXED_EPI_BOUNDS((gemv_min_blocks<FMT_Q4_0, 1>())))
GEMV_FIXED_EPI_KERNELS(fused_gemv_q4_K_c1, FMT_Q4_K, (RowsPerBlock<FMT_Q4_K, 1>::value), FLOAT_UNROLL, FIXED_EPI_BOUNDS((gemv_min_blocks<FMT_Q4_K, 1>())))

// ====================================================================
// Quantized activations and integer dot products (GGML's CPU modes, the
// core's ActQuant::ggml: Q8_0 activations for Q8_0 / Q4_0 / Q5_0 / IQ4_NL
// weights, Q8_1 for Q4_1 / Q5_1, Q8_K for Q4_K / Q5_K / Q6_K / TQ2_0).
//
// The activation columns are quantized on the device exactly as
// fused_core::quant::quantize_row does (same codes, same scales), into a
// device layout of three arrays (src/qacts.rs, QactsLayout):
//   codes  int8  [n_cols][k]          the codes in element order
//   scales f32   [n_cols][k / B]      Q8_0: the f16 d, as f32; Q8_1: the
//                                     pair (d, s) of f16s, as f32; Q8_K: d
//   sums   int32 [n_cols][k / S]      Q8_0: each block's sum of codes;
//                                     Q8_1: none; Q8_K: the 16-element
//                                     bsums, ordered per 256-block as the
//                                     Q4_K GEMV reads them (bsum_slot)
// Weights in the integer layout (src/layout.rs, to_device_int): the
// 32-element formats one lane per block, Q4_K one lane per 32 bytes of
// codes (64 elements), Q5_K and Q6_K one lane per 16 bytes, TQ2_0 four
// lanes per block. Each lane forms its unit's integer
// sum exactly (dp4a), scales it in f32 with GGML's formula for that block,
// and adds it to its accumulator; the accumulators are combined, and the
// epilogue applied, as in the f32 kernels. So every block's integer sum is
// the reference's (TQ2_0: its 4 lanes' sums added exactly first), and only
// the f32 sum of the scaled block terms runs in another order. (The
// K-quants with 6-bit scales, Q4_K / Q5_K / Q6_K, where the reference
// itself splits a block's scaled sum into 8 f32 lanes, scale each unit's
// part of the block with the block's factors: the same products, regrouped.)
// ====================================================================

// QuantParams, code_offset, quantize_block_32 and quantize_block_256:
// common.cuh (the attention writes its output quantized with them too).

template <bool S>
__device__ __forceinline__ void quantize_32(const QuantParams &p, const L2Ahead &ahead) {
    griddep_enter_ahead(ahead);
    const uint32_t blk = blockIdx.x * 8 + (threadIdx.x >> 5), lane = threadIdx.x & 31u;
    if (blk >= p.n_blocks) return; // whole warps leave together
    quantize_block_32<S>(p, blk, lane, p.x[(size_t)blk * 32 + lane]);
}

extern "C" __global__ void __launch_bounds__(256) fused_quantize_q8_0(const QuantParams p,
                                                                        const L2Ahead ahead) {
    quantize_32<false>(p, ahead);
}

extern "C" __global__ void __launch_bounds__(256) fused_quantize_q8_1(const QuantParams p,
                                                                        const L2Ahead ahead) {
    quantize_32<true>(p, ahead);
}

extern "C" __global__ void __launch_bounds__(256) fused_quantize_q8_K(const QuantParams p,
                                                                        const L2Ahead ahead) {
    griddep_enter_ahead(ahead);
    const uint32_t blk = blockIdx.x * 8 + (threadIdx.x >> 5), lane = threadIdx.x & 31u;
    if (blk >= p.n_blocks) return;
    const float4 *xb = reinterpret_cast<const float4 *>(p.x + (size_t)blk * 256 + 8 * lane);
    quantize_block_256(p, blk, lane, xb[0], xb[1]);
}

// ------------------------------------------------ RMS norm and its prologue
// fused_core::norm's definition, bit for bit: lane j of a warp sums x[i]²
// for i ≡ j (mod 32) in increasing i (product, then sum: __fmul_rn /
// __fadd_rn keep the compiler from contracting them into an FMA), the 32
// partials are reduced by the shuffle-down tree p[j] += p[j + w] (w = 16 ..
// 1), then mean = sum / K and s = 1 / sqrt(mean + eps) with the correctly
// rounded division and square root. A normed element is x·s, or (x·s)·g
// with a weight (the unfused op order: the norm's product, then the mul).

// Parameters of one RMS-norm launch (src/params.rs: NormParams).
struct NormParams {
    const float *x; // n_cols columns of k floats
    const float *g; // k weights, or null
    float *y;       // n_cols columns of k floats (may be x)
    uint32_t k;
    uint32_t n_cols;
    float eps;
    uint32_t pad;
};
static_assert(sizeof(NormParams) == 40, "NormParams");

// Parameters of one norm-and-quantize launch (src/params.rs:
// NormQuantParams): the quantizer's arrays, its input the norm's.
struct NormQuantParams {
    QuantParams q; // q.x: the norm's input
    const float *g;
    float eps;
    uint32_t n_cols;
};
static_assert(sizeof(NormQuantParams) == 64, "NormQuantParams");

// The scale s of the column of k values at x, in every lane of the warp
// (the whole warp calls it). Lane j sums its elements j, j + 32, ... in
// order (the core's 32 partial sums); NORM_LOADS of them are requested at
// once, so the lane waits for memory k / (32 · NORM_LOADS) times, not
// k / 32.
constexpr uint32_t NORM_LOADS = 16;
__device__ __forceinline__ float norm_scale_warp(const float *x, uint32_t k, float eps,
                                                 uint32_t lane) {
    float p = 0.0f;
    uint32_t i = lane;
    for (; i + 32 * (NORM_LOADS - 1) < k; i += 32 * NORM_LOADS) {
        float v[NORM_LOADS];
#pragma unroll
        for (uint32_t u = 0; u < NORM_LOADS; ++u) v[u] = x[i + 32 * u];
#pragma unroll
        for (uint32_t u = 0; u < NORM_LOADS; ++u) p = __fadd_rn(p, __fmul_rn(v[u], v[u]));
    }
    for (; i < k; i += 32) {
        const float v = x[i];
        p = __fadd_rn(p, __fmul_rn(v, v));
    }
#pragma unroll
    for (int w = 16; w > 0; w >>= 1) p = __fadd_rn(p, __shfl_down_sync(0xffffffffu, p, w));
    const float sum = __shfl_sync(0xffffffffu, p, 0);
    const float mean = __fdiv_rn(sum, (float)k);
    return __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean, eps)));
}

// y = x·s (or (x·s)·g), one warp per column, 8 columns a block. Lane j
// writes only the elements it read, so y may be x.
extern "C" __global__ void __launch_bounds__(256) fused_rms_norm(const NormParams p) {
    griddep_enter();
    const uint32_t col = blockIdx.x * 8 + (threadIdx.x >> 5), lane = threadIdx.x & 31u;
    if (col >= p.n_cols) return; // whole warps leave together
    const float *x = p.x + (size_t)col * p.k;
    float *y = p.y + (size_t)col * p.k;
    const float s = norm_scale_warp(x, p.k, p.eps, lane);
    for (uint32_t i = lane; i < p.k; i += 32) {
        const float t = __fmul_rn(x[i], s);
        y[i] = p.g ? __fmul_rn(t, p.g[i]) : t;
    }
}

// The scale s of the column of k values at x, in every thread of the block
// (the whole block calls it; n_warps warps). Lane j's running partial is
// the core's partial j, its elements j, j + 32, ... in order; the block
// loads a round of n_warps segments of NORM_SEG elements at once, a
// segment a warp, then hands the partials from warp to warp through shared
// memory in element order. One wait for memory a round, not NORM_LOADS of
// them as in norm_scale_warp, whose single warp loads everything itself.
constexpr uint32_t NORM_SEG = 32 * NORM_LOADS;
__device__ __forceinline__ float norm_scale_block(const float *x, uint32_t k, float eps,
                                                  uint32_t warp, uint32_t lane,
                                                  uint32_t n_warps) {
    __shared__ float part[32];
    for (uint32_t round = 0; round * n_warps * NORM_SEG < k; ++round) {
        const uint32_t base = (round * n_warps + warp) * NORM_SEG + lane;
        // Past k a square is +0, which leaves a partial (never below +0) as it is.
        float sq[NORM_LOADS];
#pragma unroll
        for (uint32_t u = 0; u < NORM_LOADS; ++u) {
            const uint32_t i = base + 32 * u;
            const float v = i < k ? x[i] : 0.0f;
            sq[u] = __fmul_rn(v, v);
        }
        for (uint32_t w = 0; w < n_warps; ++w) {
            if (warp == w) {
                float q = round == 0 && w == 0 ? 0.0f : part[lane];
#pragma unroll
                for (uint32_t u = 0; u < NORM_LOADS; ++u) q = __fadd_rn(q, sq[u]);
                part[lane] = q;
            }
            __syncthreads();
        }
    }
    float p = part[lane];
#pragma unroll
    for (int w = 16; w > 0; w >>= 1) p = __fadd_rn(p, __shfl_down_sync(0xffffffffu, p, w));
    const float sum = __shfl_sync(0xffffffffu, p, 0);
    const float mean = __fdiv_rn(sum, (float)k);
    return __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean, eps)));
}

// A GEMV's norm prologue with quantized activations: blocks of 256
// threads, each quantizing 8 of a column's quantizer blocks (a warp each:
// src/launch.rs, norm_quantize, launches ceil(blocks / 8) per column),
// after the block computed the column's scale (every block of the column
// computes the same one: one block per column left the GPU idle behind a
// single SM). Each warp loads its quantizer block's values before the
// scale, so they arrive with the scale's. The warps quantize (x·s)·g with
// the quantizer's own code, so the codes and scales are those of
// quantizing the unfused normed vector.
template <int MODE> // 0: Q8_0, 1: Q8_1, 2: Q8_K
__device__ __forceinline__ void norm_quantize(const NormQuantParams &p, const L2Ahead &ahead) {
    griddep_enter_ahead(ahead);
    constexpr uint32_t B = MODE == 2 ? 256 : 32;
    constexpr uint32_t PER = B / 32; // values a lane quantizes
    const uint32_t k = p.q.k, per_col = k / B, per_block = (per_col + 7) / 8;
    const uint32_t col = blockIdx.x / per_block, warp = threadIdx.x >> 5, lane = threadIdx.x & 31u;
    if (col >= p.n_cols) return; // the whole block leaves together
    const uint32_t b = (blockIdx.x % per_block) * 8 + warp;
    const float *x = p.q.x + (size_t)col * k;
    const bool quantizes = b < per_col;
    const uint32_t e = B * b + PER * lane;
    float v[PER], g[PER];
#pragma unroll
    for (uint32_t i = 0; i < PER; ++i) {
        v[i] = quantizes ? x[e + i] : 0.0f;
        g[i] = quantizes ? p.g[e + i] : 0.0f;
    }
    const float s = norm_scale_block(x, k, p.eps, warp, lane, blockDim.x >> 5);
    if (!quantizes) return;
#pragma unroll
    for (uint32_t i = 0; i < PER; ++i) v[i] = __fmul_rn(__fmul_rn(v[i], s), g[i]);
    if constexpr (MODE == 2) {
        quantize_block_256(p.q, col * per_col + b, lane, make_float4(v[0], v[1], v[2], v[3]),
                           make_float4(v[4], v[5], v[6], v[7]));
    } else {
        quantize_block_32<MODE == 1>(p.q, col * per_col + b, lane, v[0]);
    }
}

extern "C" __global__ void __launch_bounds__(256)
    fused_norm_quantize_q8_0(const NormQuantParams p, const L2Ahead ahead) {
    norm_quantize<0>(p, ahead);
}

extern "C" __global__ void __launch_bounds__(256)
    fused_norm_quantize_q8_1(const NormQuantParams p, const L2Ahead ahead) {
    norm_quantize<1>(p, ahead);
}

extern "C" __global__ void __launch_bounds__(256)
    fused_norm_quantize_q8_K(const NormQuantParams p, const L2Ahead ahead) {
    norm_quantize<2>(p, ahead);
}

// ------------------------------------------------ the key/value tail
// A one-column integer GEMV whose rows hold q, k and v (stacked) may also
// do their key/value append (src/plan_exec.rs: gemv_kv_append): after the
// block has stored its R rows of y, the thread of each even row of q or k
// rotates the pair it starts (rope_pair, as fused_kv_append does: q into
// q_out, k into row pos of the key cache) and the thread of each row of v
// copies it into row pos of the value cache. kv.q, kv.k and kv.v point
// into y, each part starting at an even row, and R is even, so both rows
// of every pair are this block's (the planner's proof: fused_core's
// check_gemv_tail).
template <int R>
__device__ __forceinline__ void kv_tail(const KvAppendParams &p, uint32_t row0, uint32_t rows,
                                        const float *y) {
    static_assert(R % 2 == 0, "a pair's two rows in one block");
    __syncthreads(); // the block's rows of y are stored
    const uint32_t t = threadIdx.x;
    if (t >= (uint32_t)R || row0 + t >= rows) return;
    const uint32_t r = row0 + t;
    const float *trow = p.table + (size_t)decode_position(p.pos, p.table_rows) * p.head_dim;
    // The index of row r in a part that starts at row `at` of y (beyond
    // its end, or wrapped, when r is not in it).
    const auto in_part = [&](const void *at) { return r - (uint32_t)((const float *)at - y); };
    if (p.q != nullptr) {
        const uint32_t i = in_part(p.q);
        if (i < 2u * p.q_pairs && i % 2u == 0u) rope_pair(p.q, p.q_out, trow, p.head_dim, p.mode, i / 2u);
    }
    const uint32_t i = in_part(p.k);
    if (i < 2u * p.k_pairs && i % 2u == 0u) {
        float *dst = p.k_cache + (size_t)decode_position(p.pos, p.k_rows) * (2u * p.k_pairs);
        rope_pair(p.k, dst, trow, p.head_dim, p.mode, i / 2u);
    }
    if (p.v != nullptr) {
        const uint32_t j = in_part(p.v);
        if (j < p.v_n) p.v_cache[(size_t)decode_position(p.pos, p.v_rows) * p.v_n + j] = p.v[j];
    }
}

// ------------------------------------------------ quantized GEMV outputs
// A one-column integer GEMV may also write its output y quantized for the
// next integer GEMV (src/launch.rs: Launch::set_quant_out), which then
// needs no quantizer launch of its own. Each block stores its R outputs,
// then counts itself done for the activation block (32 or 256 rows) its
// rows lie in; the block that completes the count quantizes that block of
// y with the quantizer's own code (quantize_block_32 / _256), so the codes
// are the bits the quantizer launch would write from the same y.
#define QOUT_NONE 0u
#define QOUT_Q8_0 1u
#define QOUT_Q8_1 2u
#define QOUT_Q8_K 3u
struct QuantOut {
    QuantParams q;      // x unused; k = the GEMV's rows; n_blocks its activation blocks
    uint32_t *counters; // per activation block: blocks done, 0 between launches
    uint32_t mode;      // QOUT_*
    uint32_t pad;
};
static_assert(sizeof(QuantOut) == 64, "QuantOut");

// After a block of R rows from row0 has stored its outputs to y (the
// GEMV's rows a multiple of the activation block, which R divides).
template <int R>
__device__ __forceinline__ void quantize_output(const QuantOut &o, uint32_t row0, const float *y) {
    __shared__ uint32_t last;
    const uint32_t len = o.mode == QOUT_Q8_K ? 256u : 32u, blk = row0 / len;
    // One fence a block, not one a thread: the barrier orders every
    // thread's stores of y before thread 0's count, whose release (at GPU
    // scope, cumulative) publishes them; the last block's acquire, and the
    // barrier after it, order the other blocks' stores before its reads.
    __syncthreads();
    if (threadIdx.x == 0) {
        const uint32_t n = len / R; // blocks of this activation block; wraps to 0
        uint32_t before;
        asm volatile("atom.acq_rel.gpu.global.inc.u32 %0, [%1], %2;"
                     : "=r"(before)
                     : "l"(&o.counters[blk]), "r"(n - 1)
                     : "memory");
        last = before == n - 1;
    }
    __syncthreads();
    if (!last || threadIdx.x >= 32) return;
    const uint32_t lane = threadIdx.x;
    if (o.mode == QOUT_Q8_K) {
        const float4 *yb = reinterpret_cast<const float4 *>(y + (size_t)blk * 256 + 8 * lane);
        quantize_block_256(o.q, blk, lane, __ldcg(yb), __ldcg(yb + 1));
    } else {
        const float v = __ldcg(y + (size_t)blk * 32 + lane);
        if (o.mode == QOUT_Q8_1)
            quantize_block_32<true>(o.q, blk, lane, v);
        else
            quantize_block_32<false>(o.q, blk, lane, v);
    }
}

// Parameters of one integer GEMV launch (src/params.rs: GemvQParams).
struct GemvQParams {
    const uint8_t *w;    // weights (GLU: gate), integer layout
    const uint8_t *w_up; // GLU: up weights; else null
    const int8_t *codes; // quantized activations (QuantParams' arrays)
    const float *scales;
    const int32_t *sums;
    float *y;
    uint32_t rows;
    uint32_t k;
    uint32_t glu_act;
    uint32_t deps; // DEPS_* (common.cuh)
    EpiParams epi;
    QuantOut qout; // one column: y quantized too, unless mode is QOUT_NONE
    L2Ahead ahead; // the next GEMV's first weights, asked of L2
    // One column, an even R: the key/value append of rows of y (kv_tail),
    // unless kv.k is null.
    KvAppendParams kv;
    // One column: the index of the largest output too (argmax_tail),
    // unless argmax.out is null.
    ArgmaxTail argmax;
};
static_assert(offsetof(GemvQParams, deps) == 60 && offsetof(GemvQParams, epi) == 64 &&
                  offsetof(GemvQParams, qout) == 200 && offsetof(GemvQParams, ahead) == 264 &&
                  offsetof(GemvQParams, kv) == 280 && offsetof(GemvQParams, argmax) == 376 &&
                  sizeof(GemvQParams) == 400,
              "GemvQParams");
static_assert(sizeof(Group<GemvQParams>) == 40 + 8 * 400, "Group<GemvQParams>");

// Activation codes: read by every row group of the launch, cached in L1.
__device__ __forceinline__ uint4 ld_xq(const int8_t *p) {
    uint4 v;
    asm("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(p));
    return v;
}

__device__ __forceinline__ int dp4(uint32_t a, uint32_t b, int c) {
    return __dp4a((int)a, (int)b, c);
}

// One lane's unit of work per format: its weights (WRaw), its activations
// for one column (XRaw) and the f32 term they add to the accumulator
// (`term(w, x, u)`, u the unit's index in the row).
template <int FMT> struct QUnit;

// The activations of a 32-element unit u (one block) in the Q8_0 mode:
// codes of elements 0..15 (a) and 16..31 (b), the block's d and code sum.
struct XQ8_0 {
    uint4 a, b;
    float d;
    int s;
    template <bool IL>
    __device__ static XQ8_0 xload(const GemvQParams &p, uint32_t col, uint32_t u) {
        const size_t at = (size_t)col * (p.k / 32) + u;
        return XQ8_0{ld_xq(codes_at<Q8_32_CHUNK, IL>(p.codes, p.k, col, 32 * u)),
                     ld_xq(codes_at<Q8_32_CHUNK, IL>(p.codes, p.k, col, 32 * u + 16)), p.scales[at],
                     p.sums[at]};
    }
};

// The same in the Q8_1 mode: d and s (the f16 d·Σq, as f32) of the block.
struct XQ8_1 {
    uint4 a, b;
    float2 ds;
    template <bool IL>
    __device__ static XQ8_1 xload(const GemvQParams &p, uint32_t col, uint32_t u) {
        const size_t at = (size_t)col * (p.k / 32) + u;
        return XQ8_1{ld_xq(codes_at<Q8_32_CHUNK, IL>(p.codes, p.k, col, 32 * u)),
                     ld_xq(codes_at<Q8_32_CHUNK, IL>(p.codes, p.k, col, 32 * u + 16)),
                     reinterpret_cast<const float2 *>(p.scales)[at]};
    }
};

// Weights of the 32-element formats in the integer layout (src/layout.rs):
// per block the 16 bytes of nibbles (the core's qs: byte j holds element j
// low, j + 16 high) at 16·at (at = row·nb + b), then, where the format has
// them, the 4 bytes of fifth bits (qh) at 16·N + 4·at (N = rows·nb), then
// the block's header (d, or d and m) at B + H·at, B the bytes before it.
template <bool QH, int H> struct W32 {
    uint4 q;
    uint32_t qh, h;
    __device__ static W32 load(const uint8_t *w, uint32_t rows, uint32_t units, uint32_t row,
                               uint32_t u) {
        const size_t at = (size_t)row * units + u, n = (size_t)rows * units;
        W32 r;
        r.q = ld_stream(w + 16 * at);
        r.qh = QH ? ld_stream_u32(w + 16 * n + 4 * at) : 0u;
        const uint8_t *hp = w + (QH ? 20 : 16) * n + H * at;
        r.h = H == 2 ? ld_stream_u16(hp) : ld_stream_u32(hp);
        return r;
    }
    // The codes of elements 4j..4j+3 (g = 0) or 16 + 4j..+3 (g = 1), the
    // fifth bits added where the format has them.
    __device__ uint32_t codes(int j, int g) const {
        return QH ? q5_codes(word(q, j), qh, (uint32_t)j, g) : nibbles(word(q, j), g);
    }
    // Σ c_e·y_e over the block (codes c_e), from `init`.
    template <class X> __device__ int dot(const X &x, int init) const {
        int s = init;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            s = dp4(codes(j, 0), word(x.a, j), s);
            s = dp4(codes(j, 1), word(x.b, j), s);
        }
        return s;
    }
};

// A 32-element-block unit whose weights (W) and activations (X) load
// themselves: QUnit's ELEMS, WRaw, XRaw, load and xload.
template <class W, class X> struct UnitLoads {
    static constexpr uint32_t ELEMS = 32;
    using WRaw = W;
    using XRaw = X;
    __device__ static WRaw load(const uint8_t *w, uint32_t rows, uint32_t units, uint32_t row,
                                uint32_t u) {
        return W::load(w, rows, units, row, u);
    }
    template <bool IL>
    __device__ static XRaw xload(const GemvQParams &p, uint32_t col, uint32_t u) {
        return X::template xload<IL>(p, col, u);
    }
};

// Q4_0 × Q8_0: a unit is a 32-element block (W32 without fifth bits, the f16
// d). Term: GGML's ((isum as f32)·dx)·dy with isum = Σ q_j·y_j − 8·Σ y_j.
template <> struct QUnit<FMT_Q4_0> : UnitLoads<W32<false, 2>, XQ8_0> {
    __device__ static float term(const WRaw &w, const XRaw &x, uint32_t) {
        const int s = w.dot(x, -8 * x.s);
        return __fmul_rn(__fmul_rn((float)s, half_bits_to_float(w.h)), x.d);
    }
};

// Q5_0 × Q8_0: a unit is a block (W32 with fifth bits, the f16 d). Term:
// GGML's (dx·dy)·(isum as f32), isum = Σ q5_j·y_j − 16·Σ y_j.
template <> struct QUnit<FMT_Q5_0> : UnitLoads<W32<true, 2>, XQ8_0> {
    __device__ static float term(const WRaw &w, const XRaw &x, uint32_t) {
        const int s = w.dot(x, -16 * x.s);
        return __fmul_rn(__fmul_rn(half_bits_to_float(w.h), x.d), (float)s);
    }
};

// IQ4_NL × Q8_0: a unit is a block (W32 without fifth bits, the f16 d); the
// 4-bit indices looked up as signed table entries, 8 at a time. Term:
// GGML's (dy·dx)·(isum as f32), isum = Σ table[q_j]·y_j.
template <> struct QUnit<FMT_IQ4_NL> : UnitLoads<W32<false, 2>, XQ8_0> {
    __device__ static float term(const WRaw &w, const XRaw &x, uint32_t) {
        int s = 0;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const uint2 v = iq4nl_values(word(w.q, j));
            s = dp4(v.x, word(x.a, j), s);
            s = dp4(v.y, word(x.b, j), s);
        }
        return __fmul_rn(__fmul_rn(x.d, half_bits_to_float(w.h)), (float)s);
    }
};

// Q4_1 and Q5_1 × Q8_1: a unit is a block (W32, the f16 d and m in one
// word). Term: GGML's (dx·dy)·(isum as f32) + mx·sy, isum = Σ q_j·y_j
// (unsigned codes).
template <bool QH> struct QUnitQ8_1 : UnitLoads<W32<QH, 4>, XQ8_1> {
    using typename UnitLoads<W32<QH, 4>, XQ8_1>::WRaw;
    using typename UnitLoads<W32<QH, 4>, XQ8_1>::XRaw;
    __device__ static float term(const WRaw &w, const XRaw &x, uint32_t) {
        const int s = w.dot(x, 0);
        const float dx = half_bits_to_float(w.h), mx = half_bits_to_float(w.h >> 16);
        return __fadd_rn(__fmul_rn(__fmul_rn(dx, x.ds.x), (float)s), __fmul_rn(mx, x.ds.y));
    }
};
template <> struct QUnit<FMT_Q4_1> : QUnitQ8_1<false> {};
template <> struct QUnit<FMT_Q5_1> : QUnitQ8_1<true> {};

// Q8_0 × Q8_0: a unit is a 32-element block. Weights: per row, blocks in
// groups of 32 (the last group g < 32 blocks), each group its blocks'
// first 16 codes then their last 16 (block j of a group of g: at 16·j and
// 16·(g + j)), so that a warp's loads are contiguous; then the f16 d of
// every block at 2·(row·nb + b). Term: GGML's (isum as f32)·(dx·dy).
template <> struct QUnit<FMT_Q8_0> {
    static constexpr uint32_t ELEMS = 32;
    struct WRaw {
        uint4 a, b;
        uint32_t d;
    };
    struct XRaw {
        uint4 a, b;
        float d;
    };
    __device__ static WRaw load(const uint8_t *w, uint32_t rows, uint32_t units, uint32_t row,
                                uint32_t u) {
        const uint32_t grp = u >> 5, j = u & 31u, g = min(32u, units - 32 * grp);
        const uint8_t *base = w + (size_t)row * units * 32 + 1024 * (size_t)grp;
        const size_t at = (size_t)row * units + u;
        return WRaw{ld_stream(base + 16 * j), ld_stream(base + 16 * (g + j)),
                    ld_stream_u16(w + (size_t)rows * units * 32 + 2 * at)};
    }
    template <bool IL>
    __device__ static XRaw xload(const GemvQParams &p, uint32_t col, uint32_t u) {
        return XRaw{ld_xq(codes_at<Q8_32_CHUNK, IL>(p.codes, p.k, col, 32 * u)),
                    ld_xq(codes_at<Q8_32_CHUNK, IL>(p.codes, p.k, col, 32 * u + 16)),
                    p.scales[(size_t)col * (p.k / 32) + u]};
    }
    __device__ static float term(const WRaw &w, const XRaw &x, uint32_t) {
        int s = 0;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            s = dp4(word(w.a, j), word(x.a, j), s);
            s = dp4(word(w.b, j), word(x.b, j), s);
        }
        return __fmul_rn((float)s, __fmul_rn(half_bits_to_float(w.d), x.d));
    }
};

// Q4_K and Q5_K × Q8_K: a unit is 16 bytes of codes, u = 8·sb + 2c + h:
// bytes 16h..16h+15 of chunk c (64 elements) of super-block sb, whose low
// nibbles are elements 64c + 16h + i of sub-block 2c and high nibbles
// elements 64c + 32 + 16h + i of sub-block 2c + 1. Weights: the core's qs
// (128 bytes per super-block) at 128·(row·nsb + sb), then the 16-byte
// headers (d, dmin, packed scales) at 16·(row·nsb + sb); Q5_K then its qh
// (32 bytes per super-block, byte l: the fifth bits of element l of each
// chunk). Term: dd·(A as f32) − dm·(mi as f32), A = sc_2c·isum_lo +
// sc_2c+1·isum_hi, mi = m_2c·bsum_lo + m_2c+1·bsum_hi, dd = d·dy, dm =
// dmin·dy (GGML's per-block factors).
struct XQ8_K2 {
    uint4 lo, hi;
    float d;
    int2 s;
    template <bool IL>
    __device__ static XQ8_K2 xload(const GemvQParams &p, uint32_t col, uint32_t u) {
        const uint32_t sb = u >> 3, c = (u >> 1) & 3u, h = u & 1u;
        const uint32_t e = 256 * sb + 64 * c + 16 * h;
        const size_t blk = (size_t)col * (p.k / 256) + sb;
        return XQ8_K2{ld_xq(codes_at<Q8K_CHUNK, true>(p.codes, p.k, col, e)), ld_xq(codes_at<Q8K_CHUNK, true>(p.codes, p.k, col, e + 32)),
                      p.scales[blk],
                      *reinterpret_cast<const int2 *>(p.sums + 16 * blk + 2 * (u & 7u))};
    }
};

// The Q4_K / Q5_K term of codes in chunk c of a super-block (header h):
// lo, hi their integer sums with the activation codes in sub-blocks 2c and
// 2c + 1, slo, shi the activation code sums there, dy the activations' d.
__device__ __forceinline__ float kq_chunk_term(const uint4 &h, uint32_t c, int lo, int hi,
                                               int slo, int shi, float dy) {
    // Sub-blocks 2c and 2c + 1: their packed bytes sit at byte
    // 2(c mod 2) of the header's words y, z (c < 2: sc, m in 6 bits)
    // or w, with the top bits in y, z (c >= 2); the core's scale_min.
    const uint32_t sh = 16 * (c & 1u);
    const uint32_t y2 = (h.y >> sh) & 0xffffu, z2 = (h.z >> sh) & 0xffffu, w2 = (h.w >> sh) & 0xffffu;
    const uint32_t scs = c < 2 ? y2 & 0x3f3fu : (w2 & 0x0f0fu) | ((y2 >> 2) & 0x3030u);
    const uint32_t ms = c < 2 ? z2 & 0x3f3fu : ((w2 >> 4) & 0x0f0fu) | ((z2 >> 2) & 0x3030u);
    const int a = (int)(scs & 0xffu) * lo + (int)(scs >> 8) * hi;
    const int mi = (int)(ms & 0xffu) * slo + (int)(ms >> 8) * shi;
    const float dd = __fmul_rn(half_bits_to_float(h.x), dy);
    const float dm = __fmul_rn(half_bits_to_float(h.x >> 16), dy);
    return __fsub_rn(__fmul_rn(dd, (float)a), __fmul_rn(dm, (float)mi));
}

// The Q5_K term of unit u (16 code bytes, u = 8·sb + 2c + h).
__device__ __forceinline__ float kq_term(const uint4 &h, int lo, int hi, const XQ8_K2 &x,
                                         uint32_t u) {
    return kq_chunk_term(h, (u >> 1) & 3u, lo, hi, x.s.x, x.s.y, x.d);
}

// Q4_K × Q8_K: a unit is chunk c (64 elements, 32 code bytes) of
// super-block sb, u = 4·sb + c: its low nibbles are sub-block 2c, its high
// nibbles sub-block 2c + 1 (byte i: elements 64c + i and 64c + 32 + i).
// Weights: the codes in src/layout.rs's groups of 32 chunks per row (chunk
// j of a group of g at 16·j and 16·(g + j), so that a warp's loads are
// contiguous), then the 16-byte headers (d, dmin, packed scales) at
// 16·(row·nsb + sb). One header and one float term per 64 elements: the
// chunk's integer sums over both halves first (as Vulkan's shader does).
template <> struct QUnit<FMT_Q4_K> {
    static constexpr uint32_t ELEMS = 64;
    struct WRaw {
        uint4 a, b, h;
    };
    struct XRaw {
        uint4 x[4];
        float d;
        int4 s;
    };
    __device__ static WRaw load(const uint8_t *w, uint32_t rows, uint32_t units, uint32_t row,
                                uint32_t u) {
        const uint32_t grp = u >> 5, j = u & 31u, g = min(32u, units - 32 * grp);
        const uint8_t *base = w + (size_t)row * units * 32 + 1024 * (size_t)grp;
        const size_t sb = (size_t)row * (units >> 2) + (u >> 2);
        return WRaw{ld_stream(base + 16 * j), ld_stream(base + 16 * (g + j)),
                    ld_stream(w + (size_t)rows * units * 32 + 16 * sb)};
    }
    // Activation codes 64c .. 64c + 63 of super-block sb, its d and the
    // code sums of the chunk's four groups of 16 (bsum_slot's order: low
    // half 0, high half 0, low half 1, high half 1).
    template <bool IL>
    __device__ static XRaw xload(const GemvQParams &p, uint32_t col, uint32_t u) {
        const uint32_t sb = u >> 2, c = u & 3u;
        const uint32_t e = 256 * sb + 64 * c;
        const size_t blk = (size_t)col * (p.k / 256) + sb;
        XRaw r;
#pragma unroll
        for (int l = 0; l < 4; ++l) r.x[l] = ld_xq(codes_at<Q8K_CHUNK, true>(p.codes, p.k, col, e + 16 * l));
        r.d = p.scales[blk];
        r.s = *reinterpret_cast<const int4 *>(p.sums + 16 * blk + 4 * c);
        return r;
    }
    __device__ static float term(const WRaw &w, const XRaw &x, uint32_t u) {
        int lo = 0, hi = 0;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const uint32_t qa = word(w.a, j), qb = word(w.b, j);
            lo = dp4(nibbles(qa, 0), word(x.x[0], j), lo);
            lo = dp4(nibbles(qb, 0), word(x.x[1], j), lo);
            hi = dp4(nibbles(qa, 1), word(x.x[2], j), hi);
            hi = dp4(nibbles(qb, 1), word(x.x[3], j), hi);
        }
        return kq_chunk_term(w.h, u & 3u, lo, hi, x.s.x + x.s.z, x.s.y + x.s.w, x.d);
    }
};

// Q5_K: unit u also reads the 16 qh bytes 16h..16h+15 of its super-block
// (the 4 units of one h read the same bytes in the same warp load).
template <> struct QUnit<FMT_Q5_K> {
    static constexpr uint32_t ELEMS = 16 * 2;
    struct WRaw {
        uint4 q, h, qh;
    };
    using XRaw = XQ8_K2;
    __device__ static WRaw load(const uint8_t *w, uint32_t rows, uint32_t units, uint32_t row,
                                uint32_t u) {
        const size_t at = (size_t)row * units + u, n = (size_t)rows * units;
        return WRaw{ld_stream(w + 16 * at), ld_stream(w + 16 * n + 16 * (at >> 3)),
                    ld_stream(w + 18 * n + 32 * (at >> 3) + 16 * (u & 1u))};
    }
    template <bool IL>
    __device__ static XRaw xload(const GemvQParams &p, uint32_t col, uint32_t u) {
        return XRaw::template xload<IL>(p, col, u);
    }
    __device__ static float term(const WRaw &w, const XRaw &x, uint32_t u) {
        const uint32_t c = (u >> 1) & 3u;
        int lo = 0, hi = 0;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const uint32_t q = word(w.q, j), qh = word(w.qh, j);
            lo = dp4(q5k_codes(q, qh, c, 0), word(x.lo, j), lo);
            hi = dp4(q5k_codes(q, qh, c, 1), word(x.hi, j), hi);
        }
        return kq_term(w.h, lo, hi, x, u);
    }
};

// Q6_K × Q8_K: a unit is 16 bytes of ql, u = 8·sb + 4h + p: ql bytes
// 64h + 16p + i (i < 16), whose low nibbles are elements e = 128h +
// 32(p/2) + 16(p mod 2) + i (16-element group 8h + p) and high nibbles
// elements e + 64 (group 8h + 4 + p); their two top bits are bits 2(p/2) (low) and 2(p/2) + 4 (high) of qh
// byte 32h + 16(p mod 2) + i. Weights: the core's ql at 128·at (at = row·nsb
// + sb), then qh at 128·N + 64·at, the 16 signed scales at 192·N + 16·at,
// d at 208·N + 2·at (N = rows·nsb). Term: (d·dy)·(A as f32) with A =
// sc_g·(isum_g − 32·bsum_g) + sc_g'·(isum_g' − 32·bsum_g') (codes q − 32).
template <> struct QUnit<FMT_Q6_K> {
    static constexpr uint32_t ELEMS = 16 * 2;
    struct WRaw {
        uint4 ql, qh;
        uint2 sc; // the scales of groups 8h .. 8h + 7
        uint32_t d;
    };
    struct XRaw {
        uint4 lo, hi;
        float d;
        int slo, shi;
    };
    __device__ static WRaw load(const uint8_t *w, uint32_t rows, uint32_t units, uint32_t row,
                                uint32_t u) {
        const size_t at = (size_t)row * units + u, n = (size_t)rows * units / 8, sb = at >> 3;
        const uint32_t h = (u >> 2) & 1u, p = u & 3u;
        return WRaw{ld_stream(w + 16 * at), ld_stream(w + 128 * n + 64 * sb + 32 * h + 16 * (p & 1u)),
                    ld_stream2(w + 192 * n + 16 * sb + 8 * h), ld_stream_u16(w + 208 * n + 2 * sb)};
    }
    template <bool IL>
    __device__ static XRaw xload(const GemvQParams &p, uint32_t col, uint32_t u) {
        const uint32_t sb = u >> 3, h = (u >> 2) & 1u, q = u & 3u;
        const uint32_t e = 256 * sb + 128 * h + 32 * (q >> 1) + 16 * (q & 1u);
        const size_t blk = (size_t)col * (p.k / 256) + sb;
        // Groups 8h + q and 8h + 4 + q at their bsum slots (bsum_slot).
        const int32_t *s = p.sums + 16 * blk + 8 * h + 2 * (q & 1u) + (q >> 1);
        return XRaw{ld_xq(codes_at<Q8K_CHUNK, true>(p.codes, p.k, col, e)), ld_xq(codes_at<Q8K_CHUNK, true>(p.codes, p.k, col, e + 64)),
                    p.scales[blk], s[0], s[4]};
    }
    __device__ static float term(const WRaw &w, const XRaw &x, uint32_t u) {
        const uint32_t p = u & 3u, sh = 2 * (p >> 1);
        int lo = -32 * x.slo, hi = -32 * x.shi;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const uint32_t ql = word(w.ql, j), qh = word(w.qh, j);
            lo = dp4(q6k_codes(ql, qh, false, sh), word(x.lo, j), lo);
            hi = dp4(q6k_codes(ql, qh, true, sh + 4), word(x.hi, j), hi);
        }
        const int sc_lo = (int8_t)((w.sc.x >> (8 * p)) & 0xffu);
        const int sc_hi = (int8_t)((w.sc.y >> (8 * p)) & 0xffu);
        const int a = sc_lo * lo + sc_hi * hi;
        return __fmul_rn(__fmul_rn(half_bits_to_float(w.d), x.d), (float)a);
    }
};

// TQ2_0 × Q8_K: a unit is 16 bytes of codes, u = 4·sb + v, v = 2j + h:
// qs bytes 32j + 16h + i, whose code l is element 128j + 32l + 16h + i.
// Weights: the core's qs at 64·at (at = row·nsb + sb), then d at 64·N +
// 2·at. The 4 units of a super-block sit in 4 neighbouring lanes (lanes
// 4m..4m+3 take units 4m'..4m'+3), which add their integer sums
// (shuffles), so that the block's isum = Σ t_e·y_e − Σ y_e is formed
// whole; lane 4m returns GGML's (isum as f32)·(dy·dx), the others 0.
template <> struct QUnit<FMT_TQ2_0> {
    static constexpr uint32_t ELEMS = 64;
    struct WRaw {
        uint4 q;
        uint32_t d;
    };
    struct XRaw {
        uint4 x[4];
        float d;
        int s; // Σ y over a quarter of the block (bsum slots 4v..4v+3)
    };
    __device__ static WRaw load(const uint8_t *w, uint32_t rows, uint32_t units, uint32_t row,
                                uint32_t u) {
        const size_t at = (size_t)row * units + u;
        return WRaw{ld_stream(w + 16 * at), ld_stream_u16(w + (size_t)rows * units * 16 + 2 * (at >> 2))};
    }
    template <bool IL>
    __device__ static XRaw xload(const GemvQParams &p, uint32_t col, uint32_t u) {
        const uint32_t sb = u >> 2, v = u & 3u;
        const uint32_t e = 256 * sb + 128 * (v >> 1) + 16 * (v & 1u);
        const size_t blk = (size_t)col * (p.k / 256) + sb;
        const int4 s = *reinterpret_cast<const int4 *>(p.sums + 16 * blk + 4 * v);
        XRaw r;
#pragma unroll
        for (int l = 0; l < 4; ++l) r.x[l] = ld_xq(codes_at<Q8K_CHUNK, true>(p.codes, p.k, col, e + 32 * l));
        r.d = p.scales[blk];
        r.s = s.x + s.y + s.z + s.w;
        return r;
    }
    __device__ static float term(const WRaw &w, const XRaw &x, uint32_t) {
        int s = -x.s;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const uint32_t q = word(w.q, j);
#pragma unroll
            for (int l = 0; l < 4; ++l) s = dp4(tq2_codes(q, l), word(x.x[l], j), s);
        }
        const uint32_t lane = threadIdx.x & 31u, group = 0xfu << (lane & 28u);
        s += __shfl_xor_sync(group, s, 1);
        s += __shfl_xor_sync(group, s, 2);
        return (lane & 3u) == 0 ? __fmul_rn((float)s, __fmul_rn(x.d, half_bits_to_float(w.d))) : 0.0f;
    }
};

// ------------------------------------------------ timelines
// The traced GEMV kernels (`_trace`, src/timeline.rs) write, for every
// block (team), the global timer (ns) when it starts (after the rows
// check), when its dependency wait returns, when its own sums are done and
// when it has issued its stores: trace[4·block + TRACE_*]. Diagnostics of a
// dependent chain's handoff; the plain kernels have none of it.
#define TRACE_START 0u
#define TRACE_READY 1u
#define TRACE_SUMMED 2u
#define TRACE_STORED 3u
__device__ __forceinline__ void gemv_trace_mark(unsigned long long *trace, uint32_t block,
                                                uint32_t at, uint32_t tid) {
    if (tid != 0) return;
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    trace[4 * (size_t)block + at] = t;
}

// Units a lane has in flight at once (Q_UNROLL): 2, and 1 in the 1-column
// `_u1` kernels (src/kernel_choice.rs: gemvq_unroll; fewer registers, more blocks
// per SM).

// Block b computes rows R·b .. R·b + R − 1 (it requests its first
// weights, then waits for the quantizer: griddep_wait); its 4 warps take
// interleaved runs of 32 units (lane l of warp w: units 32w + l + 128i),
// each lane adds its units' terms in unit order; then the reduction and
// epilogue of the f32 kernels. (A
// variant in which each warp owned its rows and walked all of K, with no
// block barrier, ran 0.75–0.95x as fast on the H200.)
// S > 1 row groups (one unit in flight): the block's threads split into S
// groups of 128 / S, group i taking rows R·b + (R / S)·i .. R·b + (R /
// S)·(i + 1) − 1, so that rows of few units (Q4_K at K = 4096: 64) keep
// every thread loading. Thread t of a group stands for the plain kernel's
// lanes t + j·128 / S (j < S, its slots): it adds the units of lane t +
// j·128 / S into slot j's sums, in unit order, and each warp's slot-j sums,
// combined by the same butterfly, are the plain kernel's warp (t / 32 +
// j·4 / S)'s: the same partials in the same order, so the same bits.
// `block` as in gemv.
// G > 1: the block's team Team<G>::index() computes block `block`.
// TRACE: the team's first thread writes the global timer at four points to
// trace[4·block ..] (gemv_trace_mark).
template <int FMT, int NC, int R, bool GLU, int Q_UNROLL = 2, class Epi = GenericEpi, int G = 1,
          bool TRACE = false, int S = 1>
__device__ void gemvq(const GemvQParams &p, uint32_t block,
                      unsigned long long *trace = nullptr) {
    using U = QUnit<FMT>;
    constexpr int V = GLU ? 2 : 1;
    static_assert(R % S == 0 && WARPS % S == 0, "whole rows and warps a group");
    static_assert(S == 1 || (Q_UNROLL == 1 && G == 1), "row groups: one unit, one team");
    constexpr int RS = R / S;                   // rows a group
    constexpr uint32_t STRIDE = WARPS * 32 / S; // threads a group
    __shared__ float team_partial[G][V][WARPS][R * NC];
    float(*partial)[WARPS][R * NC] = team_partial[Team<G>::index()];
    const uint32_t row0 = block * R;
    const uint32_t tid = Team<G>::tid();
    const uint32_t lane = tid & 31u, warp = tid >> 5;
    const uint32_t group = S == 1 ? 0u : tid / STRIDE, gtid = tid - group * STRIDE;
    griddep_begin(p.deps);
    if (row0 >= p.rows) return;
    if constexpr (TRACE) gemv_trace_mark(trace, block, TRACE_START, tid);
    // Slot j's sums of the group's rows; f(j, v, r, c) for each of them.
    float acc[S][V][RS][NC];
    auto each_sum = [](auto &&f) {
#pragma unroll
        for (int j = 0; j < S; ++j)
#pragma unroll
            for (int v = 0; v < V; ++v)
#pragma unroll
                for (int r = 0; r < RS; ++r)
#pragma unroll
                    for (int c = 0; c < NC; ++c) f(j, v, r, c);
    };
    each_sum([&](int j, int v, int r, int c) { acc[j][v][r][c] = 0.0f; });
    uint32_t row[RS];
#pragma unroll
    for (int r = 0; r < RS; ++r) row[r] = min(row0 + group * RS + (uint32_t)r, p.rows - 1);
    const uint32_t units = p.k / U::ELEMS;
    // One step's weights: units u0 + j·STRIDE, j < Q_UNROLL, of every row.
    typename U::WRaw w[Q_UNROLL][V][RS];
    auto load_step = [&](uint32_t u0) {
#pragma unroll
        for (int j = 0; j < Q_UNROLL; ++j) {
            const uint32_t u = u0 + j * STRIDE;
            if (u < units) {
#pragma unroll
                for (int v = 0; v < V; ++v)
#pragma unroll
                    for (int r = 0; r < RS; ++r)
                        w[j][v][r] = U::load(v == 0 ? p.w : p.w_up, p.rows, units, row[r], u);
            }
        }
    };
    // Unit u's terms (its weights in w[j]) added to `sums`.
    auto add_unit = [&](uint32_t u, int j, float (*sums)[RS][NC]) {
#pragma unroll
        for (int c = 0; c < NC; ++c) {
            const typename U::XRaw x = U::template xload<(NC > 1)>(p, c, u);
#pragma unroll
            for (int v = 0; v < V; ++v)
#pragma unroll
                for (int r = 0; r < RS; ++r)
                    sums[v][r][c] = __fadd_rn(sums[v][r][c], U::term(w[j][v][r], x, u));
        }
    };
    // The first step's weights are requested before the wait (weights are
    // constant): under programmatic dependent launch they stream in while
    // the kernel before this one finishes.
    const uint32_t first = gtid;
    load_step(first);
    const uint32_t blocks = (p.rows + R - 1) / R;
    l2_ahead<G>(p.ahead, L2_AHEAD_START, block, blocks);
    griddep_ready(p.deps);
    if constexpr (TRACE) gemv_trace_mark(trace, block, TRACE_READY, tid);
    const EpiEarly early = block_epilogue_early<NC, R, Epi, G>(p.epi, row0, p.rows);
    if constexpr (S == 1) {
        for (uint32_t u0 = first; u0 < units; u0 += Q_UNROLL * STRIDE) {
            if (u0 != first) load_step(u0);
#pragma unroll
            for (int j = 0; j < Q_UNROLL; ++j) {
                const uint32_t u = u0 + j * STRIDE;
                if (u < units) add_unit(u, j, acc[0]);
            }
        }
    } else {
        // The group's threads take every STRIDE-th unit, as the plain
        // kernel's 128 lanes every 128th: the i-th into slot i mod S. One
        // unit at a time (not unrolled, the slot's sums moved in and out of
        // `cur` by selects), so that the next unit's loads wait for this
        // one's sums as in the plain one-unit kernel, in as many registers.
        uint32_t slot = 0;
#pragma unroll 1
        for (uint32_t u = first; u < units; u += STRIDE) {
            if (u != first) load_step(u);
            float cur[V][RS][NC];
            each_sum([&](int j, int v, int r, int c) {
                if (j == 0 || slot == (uint32_t)j) cur[v][r][c] = acc[j][v][r][c];
            });
            add_unit(u, 0, cur);
            each_sum([&](int j, int v, int r, int c) {
                if (slot == (uint32_t)j) acc[j][v][r][c] = cur[v][r][c];
            });
            slot = slot + 1 == S ? 0 : slot + 1;
        }
    }
    if constexpr (TRACE) gemv_trace_mark(trace, block, TRACE_SUMMED, tid);
    l2_ahead<G>(p.ahead, L2_AHEAD_END, block, blocks);
    float stored;
    if constexpr (S == 1) {
        stored = finish_block<NC, R, V, GLU, Epi, G>(acc[0], partial, row0, lane, warp, p.rows,
                                                     p.glu_act, p.epi, early, p.y);
    } else {
        // Slot j of this warp is the plain kernel's warp (warp within the
        // group) + j·(warps a group), for the group's rows.
        constexpr uint32_t GROUP_WARPS = WARPS / S;
#pragma unroll
        for (int j = 0; j < S; ++j)
#pragma unroll
            for (int v = 0; v < V; ++v)
#pragma unroll
                for (int r = 0; r < RS; ++r) {
                    warp_sum<NC>(acc[j][v][r]);
                    if (lane == 0) {
                        const uint32_t pw = warp - group * GROUP_WARPS + j * GROUP_WARPS;
#pragma unroll
                        for (int c = 0; c < NC; ++c)
                            partial[v][pw][(group * RS + r) * NC + c] = acc[j][v][r][c];
                    }
                }
        stored = finish_rows<NC, R, V, GLU, Epi, G>(partial, row0, p.rows, p.glu_act, p.epi,
                                                    early, p.y);
    }
    if constexpr (TRACE) gemv_trace_mark(trace, block, TRACE_STORED, tid);
    // The output quantizer and the argmax count whole blocks, and the
    // key/value tail pairs a block's rows: the host launches the team
    // kernels only without any of them.
    if constexpr (NC == 1 && G == 1) {
        if (p.qout.mode != QOUT_NONE) quantize_output<R>(p.qout, row0, p.y);
        if constexpr (R % 2 == 0) {
            if (p.kv.k != nullptr) kv_tail<R>(p.kv, row0, p.rows, p.y);
        }
        if (p.argmax.out != nullptr) argmax_tail<R>(p.argmax, row0, p.rows, stored);
    }
    griddep_end(p.deps);
}

// Kernels fused_gemvq[_glu]_<fmt>_r<R>_c<NC>; src/kernel_choice.rs picks R
// and the units in flight (gemvq_rows_per_block, gemvq_unroll).
#define GEMVQ_KERNEL(name, FMT, R, NC)                                                         \
    extern "C" __global__ void __launch_bounds__(WARPS * 32)                                   \
        fused_gemvq_##name##_r##R##_c##NC(const GemvQParams p) {                               \
        gemvq<FMT, NC, R, false>(p, blockIdx.x);                                               \
    }                                                                                          \
    extern "C" __global__ void __launch_bounds__(WARPS * 32)                                   \
        fused_gemvq_glu_##name##_r##R##_c##NC(const GemvQParams p) {                           \
        gemvq<FMT, NC, R, true>(p, blockIdx.x);                                                \
    }

// The launch bounds of the one-column `_u1` kernels. Declaring one block
// an SM as the minimum (GEMVQ_U1_BOUNDS) lets ptxas give them more
// registers, with which Q4_0 ran faster on the H200 (BENCHMARKS.md). Q4_K
// keeps the plain bounds (GEMVQ_PLAIN_BOUNDS): capped for 9 blocks an SM
// it spilled and slowed down.
#define GEMVQ_PLAIN_BOUNDS __launch_bounds__(WARPS * 32)
#define GEMVQ_U1_BOUNDS __launch_bounds__(WARPS * 32, 1)

// The group kernels of one column, fused_gemvq_group_<fmt>_r<R>_c1[_u1]:
// U units in flight (1: the `_u1` kernel's bounds, BOUNDS; 2: the plain ones).
#define GEMVQ_GROUP_KERNEL(name, FMT, R, U, SUFFIX, BOUNDS)                                    \
    extern "C" __global__ void BOUNDS fused_gemvq_group_##name##_r##R##_c1##SUFFIX(            \
        const __grid_constant__ Group<GemvQParams> g) {                                        \
        const uint32_t j = group_job(g);                                                       \
        gemvq<FMT, 1, R, false, U>(g.job[j], blockIdx.x - g.first_block[j]);                   \
    }

// Kernels fused_gemvq[_glu]_<fmt>_r<R>_c<NC>_u1: one unit in flight a lane;
// BOUNDS for the plain one (the GLU kernel keeps the plain bounds).
#define GEMVQ_KERNEL_U1_NC(name, FMT, R, NC, BOUNDS)                                           \
    extern "C" __global__ void BOUNDS                                                          \
        fused_gemvq_##name##_r##R##_c##NC##_u1(const GemvQParams p) {                          \
        gemvq<FMT, NC, R, false, 1>(p, blockIdx.x);                                            \
    }                                                                                          \
    extern "C" __global__ void __launch_bounds__(WARPS * 32)                                   \
        fused_gemvq_glu_##name##_r##R##_c##NC##_u1(const GemvQParams p) {                      \
        gemvq<FMT, NC, R, true, 1>(p, blockIdx.x);                                             \
    }
#define GEMVQ_KERNEL_U1(name, FMT, R, BOUNDS) GEMVQ_KERNEL_U1_NC(name, FMT, R, 1, BOUNDS)

#define GEMVQ_KERNELS_BOUNDS(name, FMT, U1_BOUNDS, R4_U1_BOUNDS)                               \
    GEMVQ_KERNEL(name, FMT, 1, 1)                                                              \
    GEMVQ_KERNEL(name, FMT, 2, 1)                                                              \
    GEMVQ_KERNEL(name, FMT, 4, 1)                                                              \
    GEMVQ_KERNEL_U1(name, FMT, 1, U1_BOUNDS)                                                   \
    GEMVQ_KERNEL_U1(name, FMT, 2, U1_BOUNDS)                                                   \
    GEMVQ_KERNEL_U1(name, FMT, 4, R4_U1_BOUNDS)                                                \
    GEMVQ_GROUP_KERNEL(name, FMT, 1, 1, _u1, U1_BOUNDS)                                        \
    GEMVQ_GROUP_KERNEL(name, FMT, 2, 1, _u1, U1_BOUNDS)                                        \
    GEMVQ_GROUP_KERNEL(name, FMT, 4, 1, _u1, U1_BOUNDS)                                        \
    GEMVQ_GROUP_KERNEL(name, FMT, 1, 2, , GEMVQ_PLAIN_BOUNDS)                                  \
    GEMVQ_GROUP_KERNEL(name, FMT, 2, 2, , GEMVQ_PLAIN_BOUNDS)                                  \
    GEMVQ_GROUP_KERNEL(name, FMT, 4, 2, , GEMVQ_PLAIN_BOUNDS)                                  \
    GEMVQ_KERNEL(name, FMT, 2, 2)                                                              \
    GEMVQ_KERNEL(name, FMT, 2, 3)                                                              \
    GEMVQ_KERNEL(name, FMT, 2, 4)                                                              \
    GEMVQ_KERNEL(name, FMT, 1, 5)                                                              \
    GEMVQ_KERNEL(name, FMT, 1, 6)                                                              \
    GEMVQ_KERNEL(name, FMT, 1, 7)                                                              \
    GEMVQ_KERNEL(name, FMT, 1, 8)
#define GEMVQ_KERNELS(name, FMT) GEMVQ_KERNELS_BOUNDS(name, FMT, GEMVQ_U1_BOUNDS, GEMVQ_U1_BOUNDS)

// The one-column Q4_0 kernel of 4 rows (the default) is held to 9 blocks
// an SM (54 registers; 59 and 8 blocks with GEMVQ_U1_BOUNDS), the
// occupancy its fixed-chain copies get: faster with its quantizer, a little
// slower on activations quantized beforehand, the decode layer the same
// (BENCHMARKS.md).
#define GEMVQ_Q4_0_R4_BOUNDS __launch_bounds__(WARPS * 32, 9)

GEMVQ_KERNELS(q8_0, FMT_Q8_0)
GEMVQ_KERNELS_BOUNDS(q4_0, FMT_Q4_0, GEMVQ_U1_BOUNDS, GEMVQ_Q4_0_R4_BOUNDS)
GEMVQ_KERNELS_BOUNDS(q4_K, FMT_Q4_K, GEMVQ_PLAIN_BOUNDS, GEMVQ_PLAIN_BOUNDS)

// Several-column kernels of the tiled formats with 2 and 4 rows a block
// and one unit in flight a lane, fused_gemvq[_glu]_<fmt>_r<R>_c<NC>_u1
// (src/kernel_choice.rs: mc_rows), so that each activation load (8 columns: ~40
// bytes a unit and column through L1) serves more rows; at 1 row an
// 8-column call moves ~16x the weights' bytes through L1. Which shapes take
// them by default: the table in src/tuning.rs, which a `Tuning` overrides.
// ptxas (sm_90), 8 columns: Q4_0 86 / 128 registers at R 2 / 4, Q8_0 72 /
// 128, Q4_K 128 with a few spills at R 2 (its R 4 needs 255: left out
// from 5 columns).
#define GEMVQ_MC_KERNELS(name, FMT, R, FROM_5)                                                 \
    GEMVQ_KERNEL_U1_NC(name, FMT, R, 2, GEMVQ_PLAIN_BOUNDS)                                    \
    GEMVQ_KERNEL_U1_NC(name, FMT, R, 3, GEMVQ_PLAIN_BOUNDS)                                    \
    GEMVQ_KERNEL_U1_NC(name, FMT, R, 4, GEMVQ_PLAIN_BOUNDS)                                    \
    FROM_5(name, FMT, R)
#define GEMVQ_MC_KERNELS_5_TO_8(name, FMT, R)                                                  \
    GEMVQ_KERNEL_U1_NC(name, FMT, R, 5, GEMVQ_PLAIN_BOUNDS)                                    \
    GEMVQ_KERNEL_U1_NC(name, FMT, R, 6, GEMVQ_PLAIN_BOUNDS)                                    \
    GEMVQ_KERNEL_U1_NC(name, FMT, R, 7, GEMVQ_PLAIN_BOUNDS)                                    \
    GEMVQ_KERNEL_U1_NC(name, FMT, R, 8, GEMVQ_PLAIN_BOUNDS)
#define GEMVQ_MC_NONE(name, FMT, R)
GEMVQ_MC_KERNELS(q8_0, FMT_Q8_0, 2, GEMVQ_MC_KERNELS_5_TO_8)
GEMVQ_MC_KERNELS(q8_0, FMT_Q8_0, 4, GEMVQ_MC_KERNELS_5_TO_8)
GEMVQ_MC_KERNELS(q4_0, FMT_Q4_0, 2, GEMVQ_MC_KERNELS_5_TO_8)
GEMVQ_MC_KERNELS(q4_0, FMT_Q4_0, 4, GEMVQ_MC_KERNELS_5_TO_8)
GEMVQ_MC_KERNELS(q4_K, FMT_Q4_K, 2, GEMVQ_MC_KERNELS_5_TO_8)
GEMVQ_MC_KERNELS(q4_K, FMT_Q4_K, 4, GEMVQ_MC_NONE)

// One-column kernels with a chain fixed at compile time (as the f32 ones
// above, the same rule for their bounds), fused_gemvq_<fmt>_r<R>_c1_u1_e<chain>:
// the shapes src/kernel_choice.rs picks by default for Q4_0 (4 rows; base 54
// registers, copies 56 capped at 8 blocks: 9 blocks an SM both) and Q4_K
// (2 rows, and 4 from MANY_ROWS rows; base 64 / 93, free copies 63-64 /
// 93-94), one unit in flight.
#define GEMVQ_FIXED_EPI_KERNEL(name, FMT, R, BOUNDS, chain, EPI)                               \
    extern "C" __global__ void BOUNDS fused_gemvq_##name##_r##R##_c1_u1_e##chain(              \
        const GemvQParams p) {                                                                 \
        gemvq<FMT, 1, R, false, 1, EPI>(p, blockIdx.x);                                        \
    }
#define GEMVQ_FIXED_EPI_KERNELS(name, FMT, R, BOUNDS)                                          \
    GEMVQ_FIXED_EPI_KERNEL(name, FMT, R, BOUNDS, add, EpiAdd)                                  \
    GEMVQ_FIXED_EPI_KERNEL(name, FMT, R, BOUNDS, silu_mul_add, EpiSiluMulAdd)
GEMVQ_FIXED_EPI_KERNELS(q4_0, FMT_Q4_0, 4, FIXED_EPI_BOUNDS(8))
GEMVQ_FIXED_EPI_KERNELS(q4_K, FMT_Q4_K, 2, GEMVQ_PLAIN_BOUNDS)
GEMVQ_FIXED_EPI_KERNELS(q4_K, FMT_Q4_K, 4, GEMVQ_PLAIN_BOUNDS)

// Q4_K's one-column kernels of 4 rows in 2 row groups (gemvq's S; at K
// 4096, 64 units a row, 2 rows a block leave half the threads without a
// unit): fused_gemvq[_glu]_q4_K_r4s2_c1_u1 and the fixed-chain copies
// fused_gemvq_q4_K_r4s2_c1_u1_e<chain> (src/kernel_choice.rs: gemvq_shape;
// their sums are the plain kernels').
// Held to the plain 2-row kernels' blocks an SM (8, and 5 gated): with
// both slots' loads in flight ptxas would take 72 and 116 registers.
#define GEMVQ_Q4_K_S2_BOUNDS(MIN_BLOCKS) __launch_bounds__(WARPS * 32, MIN_BLOCKS)
#define GEMVQ_Q4_K_S2_KERNEL(NAME, GLU, EPI, MIN_BLOCKS)                                       \
    extern "C" __global__ void GEMVQ_Q4_K_S2_BOUNDS(MIN_BLOCKS) NAME(const GemvQParams p) {     \
        gemvq<FMT_Q4_K, 1, 4, GLU, 1, EPI, 1, false, 2>(p, blockIdx.x);                          \
    }
GEMVQ_Q4_K_S2_KERNEL(fused_gemvq_q4_K_r4s2_c1_u1, false, GenericEpi, 8)
GEMVQ_Q4_K_S2_KERNEL(fused_gemvq_glu_q4_K_r4s2_c1_u1, true, GenericEpi, 5)
GEMVQ_Q4_K_S2_KERNEL(fused_gemvq_q4_K_r4s2_c1_u1_eadd, false, EpiAdd, 8)
GEMVQ_Q4_K_S2_KERNEL(fused_gemvq_q4_K_r4s2_c1_u1_esilu_mul_add, false, EpiSiluMulAdd, 8)
// Its group kernel (independent one-column jobs in one launch), as
// GEMVQ_GROUP_KERNEL's.
extern "C" __global__ void GEMVQ_Q4_K_S2_BOUNDS(8) fused_gemvq_group_q4_K_r4s2_c1_u1(
    const __grid_constant__ Group<GemvQParams> g) {
    const uint32_t j = group_job(g);
    gemvq<FMT_Q4_K, 1, 4, false, 1, GenericEpi, 1, false, 2>(g.job[j], blockIdx.x - g.first_block[j]);
}

// The default one-column Q4_0 kernel (4 rows a block) and its fixed-chain
// copies also with 3 teams a block (Team, common.cuh),
// fused_gemvq_q4_0_r4_c1_u1[_e<chain>]_t3 (src/teams.rs, `lab` feature):
// the same rows for each team as for one block of the plain kernel, in a
// grid of a third as many blocks of 384 threads, held to 3 blocks an SM (9
// teams: the plain kernel's 9 blocks). A dependent launch's handoff grows
// with its grid's blocks, so fewer, larger blocks may hand off sooner
// (BENCHMARKS.md). The host runs them only with the lab's `Knob::Teams`,
// off by default. No output quantizer: it counts whole blocks (the host
// keeps the plain kernel).
#define GEMVQ_TEAM_KERNEL(name, FMT, R, G, MIN_BLOCKS, SUFFIX, EPI)                            \
    extern "C" __global__ void __launch_bounds__(GEMV_TEAM_THREADS * G, MIN_BLOCKS)            \
        fused_gemvq_##name##_r##R##_c1_u1##SUFFIX##_t##G(const GemvQParams p) {                \
        gemvq<FMT, 1, R, false, 1, EPI, G>(p, blockIdx.x * G + Team<G>::index());             \
    }
GEMVQ_TEAM_KERNEL(q4_0, FMT_Q4_0, 4, 3, 3, , GenericEpi)
GEMVQ_TEAM_KERNEL(q4_0, FMT_Q4_0, 4, 3, 3, _eadd, EpiAdd)
GEMVQ_TEAM_KERNEL(q4_0, FMT_Q4_0, 4, 3, 3, _esilu_mul_add, EpiSiluMulAdd)

// Traced copies (gemv_trace_mark; src/timeline.rs, `lab` feature) of the one-column
// kernels whose dependent calls stay below 90 % of copy at 4096 x 14336:
// Q4_0 r4 (plain and 3 teams), Q4_K r2 and r4s2 (4 rows in S = 2 row
// groups, the default below MANY_ROWS rows), generic chain, the bounds of
// the kernels they trace, fused_gemvq_<fmt>_<ROWS>_c1_u1[_t<G>]_trace(params,
// trace).
#define GEMVQ_TRACE_KERNEL(name, FMT, ROWS, R, S, G, BOUNDS, SUFFIX)                           \
    extern "C" __global__ void BOUNDS fused_gemvq_##name##_##ROWS##_c1_u1##SUFFIX##_trace(     \
        const GemvQParams p, unsigned long long *trace) {                                      \
        gemvq<FMT, 1, R, false, 1, GenericEpi, G, true, S>(                                    \
            p, blockIdx.x * G + Team<G>::index(), trace);                                      \
    }
GEMVQ_TRACE_KERNEL(q4_0, FMT_Q4_0, r4, 4, 1, 1, GEMVQ_Q4_0_R4_BOUNDS, )
GEMVQ_TRACE_KERNEL(q4_0, FMT_Q4_0, r4, 4, 1, 3, __launch_bounds__(GEMV_TEAM_THREADS * 3, 3), _t3)
GEMVQ_TRACE_KERNEL(q4_K, FMT_Q4_K, r2, 2, 1, 1, GEMVQ_PLAIN_BOUNDS, )
GEMVQ_TRACE_KERNEL(q4_K, FMT_Q4_K, r4s2, 4, 2, 1, GEMVQ_Q4_K_S2_BOUNDS(8), )

GEMVQ_KERNELS(q5_0, FMT_Q5_0)
GEMVQ_KERNELS(iq4_nl, FMT_IQ4_NL)
GEMVQ_KERNELS(q6_K, FMT_Q6_K)
GEMVQ_KERNELS(q5_K, FMT_Q5_K)
GEMVQ_KERNELS(tq2_0, FMT_TQ2_0)
GEMVQ_KERNELS(q4_1, FMT_Q4_1)
GEMVQ_KERNELS(q5_1, FMT_Q5_1)
