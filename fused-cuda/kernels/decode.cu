// The decode ops of fused_core::decode on the device: RoPE from a table, a
// row written at a position, the key/value append (RoPE of k into its
// cache row, with q's RoPE and the v row write: one launch for the four),
// one query token's attention over a cache (split over blocks, then
// merged) and the index of a maximum.
//
// The position is a one-element f32 tensor that every kernel reads itself
// (decode_position), so that a plan recorded once, or one captured CUDA
// graph, serves every token: the host writes four bytes before each run
// and no launch parameter changes.
//
// RoPE, the row write, the key/value append and the argmax equal the core
// bit for bit: RoPE rounds each product before its sum or difference
// (__fmul_rn, __fadd_rn, __fsub_rn; the file is also compiled with
// -fmad=false), the row write moves bits, the argmax compares as the core
// does. The attention uses CUDA's expf and another summation order, so it
// tracks the core within the verifier's tolerance.
#include "common.cuh"

// ------------------------------------------------------------ RoPE

// Parameters of one RoPE launch (src/params.rs: RopeParams).
struct RopeParams {
    const float *x;     // [head_dim, heads]
    const float *table; // [head_dim, rows]: cos θ_i, sin θ_i at 2i, 2i + 1
    const float *pos;   // one value
    float *out;         // x's shape; may be x itself
    uint32_t head_dim;
    uint32_t pairs; // heads · head_dim / 2
    uint32_t rows;  // the table's
    uint32_t mode;  // 0: pairs (2i, 2i + 1); 1: pairs (i, i + head_dim / 2)
};
static_assert(sizeof(RopeParams) == 48, "RopeParams");

// One thread per pair.
extern "C" __global__ void __launch_bounds__(256) fused_rope(const RopeParams p) {
    griddep_enter();
    const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= p.pairs) return;
    const float *row = p.table + (size_t)decode_position(p.pos, p.rows) * p.head_dim;
    rope_pair(p.x, p.out, row, p.head_dim, p.mode, i);
}

// ------------------------------------------------------------ row write

// Parameters of one row write (src/params.rs: SetRowParams). Values move
// as bits.
struct SetRowParams {
    const uint32_t *dst; // [n, rows], or null: out is dst itself
    const uint32_t *row; // n values
    const float *pos;    // one value
    uint32_t *out;       // [n, rows]
    uint32_t n;
    uint32_t rows;
    uint32_t total; // n · rows
    uint32_t pad;
};
static_assert(sizeof(SetRowParams) == 48, "SetRowParams");

// In place (dst null) only row pos of out is written, the KV-cache append;
// else out is dst with that row replaced, in one pass over out.
extern "C" __global__ void __launch_bounds__(256) fused_set_row(const SetRowParams p) {
    griddep_enter();
    const size_t lo = (size_t)decode_position(p.pos, p.rows) * p.n;
    const uint32_t stride = blockDim.x * gridDim.x;
    if (p.dst == nullptr) {
        for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < p.n; i += stride)
            p.out[lo + i] = p.row[i];
        return;
    }
    for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < p.total; i += stride)
        p.out[i] = (i >= lo && i < lo + p.n) ? p.row[i - lo] : p.dst[i];
}

// ------------------------------------------------------------ key/value append

// One thread an item over q's pairs, then k's pairs, then v's values. The
// k pairs are rotated straight into row pos of the key cache, so the
// RoPE's own result is never stored; each part clamps the position into
// its own rows (the table's, each cache's), as its unfused kernel does.
extern "C" __global__ void __launch_bounds__(256) fused_kv_append(const KvAppendParams p) {
    griddep_enter();
    uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    const float *row = p.table + (size_t)decode_position(p.pos, p.table_rows) * p.head_dim;
    if (i < p.q_pairs) {
        rope_pair(p.q, p.q_out, row, p.head_dim, p.mode, i);
        return;
    }
    i -= p.q_pairs;
    if (i < p.k_pairs) {
        float *dst = p.k_cache + (size_t)decode_position(p.pos, p.k_rows) * (2u * p.k_pairs);
        rope_pair(p.k, dst, row, p.head_dim, p.mode, i);
        return;
    }
    i -= p.k_pairs;
    if (i < p.v_n) p.v_cache[(size_t)decode_position(p.pos, p.v_rows) * p.v_n + i] = p.v[i];
}

// ------------------------------------------------------------ attention

// Parameters of both attention kernels (src/params.rs: AttnParams).
struct AttnParams {
    const float *q;   // [head_dim, n_head]
    const float *k;   // [head_dim, n_kv, rows]
    const float *v;   // the keys' shape
    const float *pos; // one value
    // Scratch: the splits' partial outputs [n_head][splits][head_dim],
    // then their (max, sum) pairs [n_head][splits][2].
    float *part;
    float *out; // q's shape
    uint32_t head_dim;
    uint32_t n_head;
    uint32_t n_kv;
    uint32_t group;  // n_head / n_kv
    uint32_t rows;   // cache rows
    uint32_t splits; // blocks a (key/value head, head slice) pair
    uint32_t slices; // head slices of a group (a block takes G heads)
    float scale;
    // The combine's 0, or its output also written quantized as the next
    // GEMV reads it (one column, heads of a multiple of 32 values): 1 Q8_0,
    // 2 Q8_1, into qout's arrays (qout.x unused).
    uint32_t qmode;
    uint32_t qpad;
    QuantParams qout;
};
static_assert(sizeof(AttnParams) == 136, "AttnParams");

// Warps of a split block, the fewest positions a split takes (so that a
// short context runs on few blocks), and the most splits the combine
// kernel takes (src/params.rs mirrors all three).
#define ATTN_WARPS 4u
#define ATTN_MIN_CHUNK 32u
#define ATTN_MAX_SPLITS 256u

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// The warp sums of N values at once (N a power of two): each step halves
// the values a lane keeps, the lanes with bit o set keeping the upper half
// and adding their partner's copy of it, so N − 1 exchanges (N ≥ 32) do
// what N warp_sums' 5·N would. Afterwards the sum of value k is in slot k
// mod R of lane ⌊k / R⌋ (R = N / 32, N ≥ 32), or of lanes k·32/N and the
// 32/N − 1 after it (N < 32); warp_sum_many_get reads it.
template <int C, int O, int N>
__device__ __forceinline__ void warp_sum_halves(float (&d)[N], uint32_t lane) {
    if constexpr (O > 0) {
        if constexpr (C >= 2) {
            constexpr int h = C / 2;
            const bool hi = (lane & (uint32_t)O) != 0u;
#pragma unroll
            for (int k = 0; k < h; ++k) {
                const float send = hi ? d[k] : d[k + h];
                const float keep = hi ? d[k + h] : d[k];
                d[k] = keep + __shfl_xor_sync(0xffffffffu, send, O);
            }
            warp_sum_halves<h, O / 2, N>(d, lane);
        } else {
            d[0] += __shfl_xor_sync(0xffffffffu, d[0], O);
            warp_sum_halves<1, O / 2, N>(d, lane);
        }
    }
}

template <int N>
__device__ __forceinline__ void warp_sum_many(float (&d)[N], uint32_t lane) {
    warp_sum_halves<N, 16, N>(d, lane);
}

// The sum of value k (each lane its own k, below N) after warp_sum_many.
template <int N>
__device__ __forceinline__ float warp_sum_many_get(const float (&d)[N], uint32_t k) {
    constexpr int R = N >= 32 ? N / 32 : 1;
    constexpr uint32_t S = N >= 32 ? 1u : 32u / (uint32_t)N;
    float v = 0.0f;
#pragma unroll
    for (int r = 0; r < R; ++r) {
        const float x = __shfl_sync(0xffffffffu, d[r], (k / (uint32_t)R) * S);
        if (k % (uint32_t)R == (uint32_t)r) v = x;
    }
    return v;
}

// The (max, sum) pairs of the splits, after the partial outputs.
__device__ __forceinline__ float *attn_ml(const AttnParams &p) {
    return p.part + (size_t)p.n_head * p.splits * p.head_dim;
}

// The positions [start, end) a split takes for a context of len rows: an
// even share of the context (at least ATTN_MIN_CHUNK), so that the splits
// stay balanced at every position; the splits past the context get none.
__device__ __forceinline__ void attn_range(uint32_t len, uint32_t splits, uint32_t split,
                                           uint32_t &start, uint32_t &end) {
    const uint32_t chunk = max((len + splits - 1u) / splits, ATTN_MIN_CHUNK);
    const uint64_t s = (uint64_t)split * chunk;
    start = s >= len ? len : (uint32_t)s;
    end = min((uint64_t)start + chunk, (uint64_t)len);
}

// Rows base + ATTN_WARPS·j, j < T, of a cache (rows kvs values apart,
// from b) into r: lane l takes head elements l, l + 32, ...; rows from n
// on and elements past d read as zeros. All are loaded before any is
// used, so their reads are in flight together.
template <int T, int E>
__device__ __forceinline__ void attn_load(float (&r)[T][E], const float *b, size_t kvs,
                                          uint32_t base, uint32_t n, uint32_t lane, uint32_t d) {
#pragma unroll
    for (int j = 0; j < T; ++j) {
        const size_t t = base + ATTN_WARPS * (uint32_t)j;
#pragma unroll
        for (int e = 0; e < E; ++e) {
            const uint32_t x = lane + 32u * e;
            r[j][e] = ((uint32_t)j < n && x < d) ? b[t * kvs + x] : 0.0f;
        }
    }
}

// The key and value rows [start, end) of key/value head g asked of L2,
// a row's head_dim values a bulk prefetch, before the split waits for the
// kernel before it: the rows before the newest were written by earlier
// tokens, so they stream in while the GEMV before finishes, and the
// newest, which that GEMV's tail writes, is only read after the wait (L2
// is where writes land, so asking for it early leaves nothing stale).
// None below sm_90, or where a row is not 16-byte aligned.
__device__ __forceinline__ void attn_l2_rows(const AttnParams &p, uint32_t g, uint32_t start,
                                             uint32_t end) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    const uint32_t bytes = p.head_dim * 4u;
    const size_t kvs = (size_t)p.n_kv * p.head_dim;
    for (uint32_t u = threadIdx.x; u < 2u * (end - start); u += blockDim.x) {
        const float *row = (u & 1u ? p.v : p.k) + (size_t)(start + u / 2u) * kvs +
                           (size_t)g * p.head_dim;
        if (bytes % 16u != 0u || (uintptr_t)row % 16u != 0u) return;
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(row), "r"(bytes)
                     : "memory");
    }
#endif
}

// One split of the context for one key/value head and G of its query
// heads (a head slice; the heads past the group are computed on zeros and
// not stored). Lane l holds head elements l, l + 32, ... (E of them,
// head_dim ≤ 32·E), so every key or value row is read by the warp as whole
// 128-byte lines. Warp w takes the split's positions start + w, start + w
// + ATTN_WARPS, ... in tiles of up to 32 / E rows (16 for E = 1), each
// tile's key and value rows loaded at once (one wait for memory a tile),
// its dot products summed over the warp together (warp_sum_many: the
// shuffles, not memory, bounded a long context) and lane j keeping
// position j's score, with the online softmax per tile: a running max,
// the sum and output rescaled when it grows. The warps then merge in
// shared memory and the block writes its partial output, max and sum per
// head; a split with no positions writes max -inf and sum 0, which the
// combine skips.
template <int E, int G>
__device__ __forceinline__ void attn_split(const AttnParams &p, const L2Ahead &ahead) {
    l2_ahead(ahead, L2_AHEAD_START, blockIdx.x, gridDim.x);
    __shared__ float sh_m[ATTN_WARPS][G], sh_l[ATTN_WARPS][G];
    __shared__ float sh_acc[ATTN_WARPS][G][32 * E];
    const uint32_t warp = threadIdx.x >> 5, lane = threadIdx.x & 31u;
    const uint32_t split = blockIdx.x % p.splits, rest = blockIdx.x / p.splits;
    const uint32_t slice = rest % p.slices, g = rest / p.slices;
    const uint32_t h0 = g * p.group + slice * (uint32_t)G;
    const uint32_t nh = min((uint32_t)G, p.group - slice * (uint32_t)G);
    const uint32_t d = p.head_dim, splits = p.splits;
    // The position is the host's, written before the run: it may be read
    // before the wait (decode.cu's header).
    const uint32_t len = decode_position(p.pos, p.rows) + 1u;
    uint32_t start, end;
    attn_range(len, splits, split, start, end);
    attn_l2_rows(p, g, start, end);
    griddep_enter();
    float *ml = attn_ml(p);
    if (start >= end) {
        if (threadIdx.x < nh) {
            const size_t at = 2 * ((size_t)(h0 + threadIdx.x) * splits + split);
            ml[at] = -INFINITY;
            ml[at + 1] = 0.0f;
        }
        return;
    }
    float qv[G][E], acc[G][E], m[G], l[G];
#pragma unroll
    for (int i = 0; i < G; ++i) {
        m[i] = -INFINITY;
        l[i] = 0.0f;
#pragma unroll
        for (int e = 0; e < E; ++e) {
            const uint32_t x = lane + 32u * e;
            qv[i][e] = ((uint32_t)i < nh && x < d) ? p.q[(size_t)(h0 + i) * d + x] : 0.0f;
            acc[i][e] = 0.0f;
        }
    }
    const size_t kvs = (size_t)p.n_kv * d;
    const float *kb = p.k + (size_t)g * d, *vb = p.v + (size_t)g * d;
    // Rows a warp takes at once, keys and values loaded together: 32
    // values of each a lane (16 with one a row, where 32 rows spill).
    constexpr int T = E == 1 ? 16 : 32 / E;
    for (uint32_t base = start + warp; base < end; base += ATTN_WARPS * (uint32_t)T) {
        // Positions base + ATTN_WARPS·j, j < n (n is the same in every lane).
        const uint32_t n = min((uint32_t)T, (end - base + ATTN_WARPS - 1u) / ATTN_WARPS);
        float kr[T][E], vr[T][E];
        attn_load<T, E>(kr, kb, kvs, base, n, lane, d);
        attn_load<T, E>(vr, vb, kvs, base, n, lane, d);
        // Scores: every lane's share of the tile's T·G dot products, summed
        // over the warp together; then lane j keeps position j's.
        constexpr int N = T * G;
        float dots[N];
#pragma unroll
        for (int j = 0; j < T; ++j) {
#pragma unroll
            for (int i = 0; i < G; ++i) {
                float dot = 0.0f;
#pragma unroll
                for (int e = 0; e < E; ++e) dot = fmaf(qv[i][e], kr[j][e], dot);
                dots[j * G + i] = dot;
            }
        }
        warp_sum_many<N>(dots, lane);
        float s[G];
#pragma unroll
        for (int i = 0; i < G; ++i) {
            const float dot = warp_sum_many_get<N>(dots, lane * (uint32_t)G + (uint32_t)i);
            s[i] = lane < n ? dot * p.scale : -INFINITY;
        }
        // The tile's max; the running sum and output rescaled to it; lane
        // j's weight e^(s_j − max) kept in s.
#pragma unroll
        for (int i = 0; i < G; ++i) {
            const float mn = fmaxf(m[i], warp_max(s[i]));
            const float corr = m[i] == -INFINITY ? 0.0f : expf(m[i] - mn);
            const float w = lane < n ? expf(s[i] - mn) : 0.0f;
            l[i] = l[i] * corr + w;
#pragma unroll
            for (int e = 0; e < E; ++e) acc[i][e] *= corr;
            s[i] = w;
            m[i] = mn;
        }
        // Values.
#pragma unroll
        for (int j = 0; j < T; ++j) {
            if ((uint32_t)j >= n) break;
#pragma unroll
            for (int i = 0; i < G; ++i) {
                const float w = __shfl_sync(0xffffffffu, s[i], j);
#pragma unroll
                for (int e = 0; e < E; ++e) acc[i][e] = fmaf(w, vr[j][e], acc[i][e]);
            }
        }
    }
    // Merge the warps (a warp with no position has max -inf: weight 0).
#pragma unroll
    for (int i = 0; i < G; ++i) {
        const float lw = warp_sum(l[i]);
        if (lane == 0) {
            sh_m[warp][i] = m[i];
            sh_l[warp][i] = lw;
        }
#pragma unroll
        for (int e = 0; e < E; ++e) sh_acc[warp][i][lane + 32 * e] = acc[i][e];
    }
    __syncthreads();
    for (uint32_t u = threadIdx.x; u < nh * d; u += blockDim.x) {
        const uint32_t i = u / d, x = u % d;
        float mx = -INFINITY;
#pragma unroll
        for (uint32_t w = 0; w < ATTN_WARPS; ++w) mx = fmaxf(mx, sh_m[w][i]);
        float a = 0.0f, sum = 0.0f;
#pragma unroll
        for (uint32_t w = 0; w < ATTN_WARPS; ++w) {
            const float mw = sh_m[w][i];
            const float f = mw == -INFINITY ? 0.0f : expf(mw - mx);
            a = fmaf(f, sh_acc[w][i][x], a);
            sum = fmaf(f, sh_l[w][i], sum);
        }
        const size_t at = (size_t)(h0 + i) * splits + split;
        p.part[at * d + x] = a;
        if (x == 0) {
            ml[2 * at] = mx;
            ml[2 * at + 1] = sum;
        }
    }
}

#define ATTN_SPLIT(E, G)                                                                         \
    extern "C" __global__ void __launch_bounds__(ATTN_WARPS * 32)                                \
        fused_attn_split_e##E##_g##G(const AttnParams p, const L2Ahead ahead) {                  \
        attn_split<E, G>(p, ahead);                                                              \
    }
#define ATTN_SPLITS_E(E) ATTN_SPLIT(E, 1) ATTN_SPLIT(E, 2) ATTN_SPLIT(E, 4) ATTN_SPLIT(E, 8)
ATTN_SPLITS_E(1)
ATTN_SPLITS_E(2)
ATTN_SPLITS_E(4)
ATTN_SPLITS_E(8)

// The combine's qmode for Q8_K: its blocks take 256 / head_dim heads each,
// so that a block's outputs are one Q8_K block.
#define ATTN_QMODE_Q8_K 3u

// Each block merges the splits of its query heads (one, or with qmode
// ATTN_QMODE_Q8_K the 256 / head_dim heads of one Q8_K block, a group of
// head_dim threads each): each split weighted by e^(max_s − max), skipped
// where that is 0 (no positions, or nothing left after the rescale); the
// sum of weighted outputs divided by the sum of weighted sums. With qmode
// set, the outputs are also written quantized as the quantizer kernel
// writes them: each warp's 32 values one Q8_0 / Q8_1 block (the head's
// size is then a multiple of 32), or the block's 256 values one Q8_K
// block, quantized by its first warp.
extern "C" __global__ void __launch_bounds__(256) fused_attn_combine(const AttnParams p,
                                                                       const L2Ahead ahead) {
    griddep_enter_ahead(ahead);
    __shared__ float red[8];
    // A group's weights at [group · splits + s] (the plan keeps groups ·
    // splits within ATTN_MAX_SPLITS), then, with Q8_K, the block's outputs
    // in wt. As little shared memory as the other decode kernels take, so
    // that an early launch finds room beside the kernel it waits for.
    __shared__ __align__(16) float wt[ATTN_MAX_SPLITS];
    __shared__ float ws[ATTN_MAX_SPLITS];
    const uint32_t d = p.head_dim, splits = p.splits;
    const bool q8k = p.qmode == ATTN_QMODE_Q8_K;
    const uint32_t per_block = q8k ? 256u / d : 1u, group_size = 256u / per_block;
    const uint32_t g = threadIdx.x / group_size, t = threadIdx.x - g * group_size;
    const uint32_t h = blockIdx.x * per_block + g;
    const float *ml = attn_ml(p) + (size_t)h * splits * 2;
    // The group's largest max: its warps' (group_size is a multiple of 32).
    float mx = -INFINITY;
    for (uint32_t s = t; s < splits; s += group_size) mx = fmaxf(mx, ml[2 * s]);
    mx = warp_max(mx);
    if ((threadIdx.x & 31u) == 0) red[threadIdx.x >> 5] = mx;
    __syncthreads();
    const uint32_t w0 = g * (group_size / 32u);
    mx = red[w0];
    for (uint32_t w = 1; w < group_size / 32u; ++w) mx = fmaxf(mx, red[w0 + w]);
    float *gwt = wt + g * splits, *gws = ws + g * splits;
    for (uint32_t s = t; s < splits; s += group_size) {
        const float ms = ml[2 * s];
        const float f = ms == -INFINITY ? 0.0f : expf(ms - mx);
        gwt[s] = f;
        gws[s] = f * ml[2 * s + 1];
    }
    __syncthreads();
    // head_dim ≤ 256 = group_size for one head a block, = group_size for
    // more: a thread has at most one output.
    float y = 0.0f;
    if (t < d) {
        float sum = 0.0f;
        for (uint32_t s = 0; s < splits; ++s) sum += gws[s];
        const float *part = p.part + (size_t)h * splits * d;
        float a = 0.0f;
        for (uint32_t s = 0; s < splits; ++s) {
            const float f = gwt[s];
            if (f != 0.0f) a = fmaf(f, part[(size_t)s * d + t], a);
        }
        y = __fdiv_rn(a, sum);
        p.out[(size_t)h * d + t] = y;
        const uint32_t blk = (h * d + t) / 32u, lane = t & 31u;
        if (p.qmode == 1u) quantize_block_32<false>(p.qout, blk, lane, y);
        if (p.qmode == 2u) quantize_block_32<true>(p.qout, blk, lane, y);
    }
    if (q8k) {
        __syncthreads(); // every weight read
        wt[threadIdx.x] = y; // t < d: group_size is d
        __syncthreads();
        if (threadIdx.x < 32u) {
            const float4 *yb = reinterpret_cast<const float4 *>(wt + 8 * threadIdx.x);
            quantize_block_256(p.qout, blockIdx.x, threadIdx.x, yb[0], yb[1]);
        }
    }
}

// ------------------------------------------------------------ argmax

// Parameters of one argmax launch (src/params.rs: ArgmaxParams).
struct ArgmaxParams {
    const float *x; // [n, cols]
    float *out;     // [1, cols]
    // Scratch: (value bits, index) of every block, then one counter a
    // column, zero before and after every launch.
    uint2 *part;
    uint32_t *counters;
    uint32_t n;
    uint32_t cols;
    uint32_t blocks; // blocks a column
    uint32_t chunk;  // values a block
};
static_assert(sizeof(ArgmaxParams) == 48, "ArgmaxParams");

// Whether (va, ia) comes before (vb, ib): a value before NaN, a larger
// value first, the lower index on ties, so that merging in any order
// yields the first maximum.
__device__ __forceinline__ bool argmax_before(float va, uint32_t ia, float vb, uint32_t ib) {
    if (isnan(va)) return false;
    return isnan(vb) || va > vb || (va == vb && ia < ib);
}

// The block's best (value, index) pair, in thread 0 (256 threads, all
// calling it).
__device__ __forceinline__ void argmax_block(float &v, uint32_t &i, float *sv, uint32_t *si) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_down_sync(0xffffffffu, v, o);
        const uint32_t oi = __shfl_down_sync(0xffffffffu, i, o);
        if (argmax_before(ov, oi, v, i)) {
            v = ov;
            i = oi;
        }
    }
    if ((threadIdx.x & 31u) == 0) {
        sv[threadIdx.x >> 5] = v;
        si[threadIdx.x >> 5] = i;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (uint32_t w = 1; w < blockDim.x / 32u; ++w) {
            if (argmax_before(sv[w], si[w], v, i)) {
                v = sv[w];
                i = si[w];
            }
        }
    }
}

// Blocks of 256 threads, `blocks` of them a column, each over `chunk`
// consecutive values. Each thread scans its values in increasing index
// as the core does (a larger value or the first non-NaN replaces); the
// block's best goes to scratch; the column's last block to finish (a
// counter, after a fence) merges the blocks' and writes the index as an
// f32 (0 when every value is NaN), then zeroes the counter for the next
// launch.
extern "C" __global__ void __launch_bounds__(256) fused_argmax(const ArgmaxParams p) {
    griddep_enter();
    __shared__ float sv[8];
    __shared__ uint32_t si[8];
    __shared__ uint32_t is_last;
    const uint32_t col = blockIdx.x / p.blocks, b = blockIdx.x % p.blocks;
    const float *x = p.x + (size_t)col * p.n;
    const uint32_t lo = min(b * p.chunk, p.n), hi = min(lo + p.chunk, p.n);
    float v = __int_as_float(0x7fc00000); // NaN: nothing yet
    uint32_t i = 0xffffffffu;
    for (uint32_t j = lo + threadIdx.x; j < hi; j += blockDim.x) {
        const float y = x[j];
        if (y > v || (isnan(v) && !isnan(y))) {
            v = y;
            i = j;
        }
    }
    argmax_block(v, i, sv, si);
    if (threadIdx.x == 0) {
        p.part[blockIdx.x] = make_uint2(__float_as_uint(v), i);
        __threadfence();
        is_last = atomicAdd(&p.counters[col], 1u) == p.blocks - 1u;
    }
    __syncthreads();
    if (!is_last) return;
    __threadfence();
    v = __int_as_float(0x7fc00000);
    i = 0xffffffffu;
    for (uint32_t j = threadIdx.x; j < p.blocks; j += blockDim.x) {
        const uint2 e = __ldcg(&p.part[(size_t)col * p.blocks + j]);
        const float y = __uint_as_float(e.x);
        if (argmax_before(y, e.y, v, i)) {
            v = y;
            i = e.y;
        }
    }
    __syncthreads(); // sv and si are reused
    argmax_block(v, i, sv, si);
    if (threadIdx.x == 0) {
        p.out[col] = isnan(v) ? 0.0f : __uint2float_rn(i);
        p.counters[col] = 0u;
    }
}
