// Shared device code of the fused-cuda kernels: the element functions, the
// epilogue chain and the parameter structs that the host fills in
// (src/params.rs mirrors them field for field, #[repr(C)]).
//
// Every .cu file of this crate is compiled with -fmad=false, and every
// element-wise operation below also uses the explicit round-to-nearest
// intrinsics (__fadd_rn, __fmul_rn, __fdiv_rn), so that an epilogue stage
// applied inside a GEMV and the same stage run as an unfused element-wise
// kernel give the same bits: both call these functions, and nothing can be
// contracted into a fused multiply-add. Only the dot products use fmaf,
// explicitly.
#pragma once
#include <stdint.h>

// ------------------------------------------------ dependent launches
// Programmatic dependent launch (sm_90, src/pdl.rs): on the H200 every
// kernel of this crate is launched so that it may start while the kernel
// before it on the stream still runs. Each kernel lets the next one start
// at once (griddep_launch_dependents: the next grid is scheduled once every
// block of this one has started) and waits for the previous kernel's
// results (griddep_wait: that grid complete, its writes visible) before it
// reads or writes anything another kernel may touch; before the wait it
// may only read constant data (GEMV weights). Below sm_90 (the portable
// PTX), and when launched normally, both are no-ops.
__device__ __forceinline__ void griddep_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void griddep_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
// Entry of a kernel with nothing to do before the wait.
__device__ __forceinline__ void griddep_enter() {
    griddep_launch_dependents();
    griddep_wait();
}

// How a GEMV launch orders itself against the kernel before it (the
// `deps` parameter; src/params.rs: Deps). Only the GEMV kernels take it.
//
// DEPS_WAIT (the default): as above — let the next kernel start at once,
// wait before touching shared data.
// DEPS_TRIGGER_AFTER_WAIT: wait first, then let the next kernel start, so
// that once the next kernel runs, the kernel before this one has completed
// (what a following DEPS_INDEPENDENT launch relies on).
// DEPS_INDEPENDENT: the host guarantees that the kernel before this one is
// a GEMV launched DEPS_TRIGGER_AFTER_WAIT or DEPS_INDEPENDENT, so that when
// this one starts every kernel before the run of GEMVs it joins (back to
// the last DEPS_TRIGGER_AFTER_WAIT one) has completed, and that it reads
// nothing a GEMV of that run writes and writes nothing they read or write
// (src/schedule.rs). It works without waiting, and waits only before it
// exits: its completion still implies its predecessor's, so a later
// kernel's wait covers them all.
#define DEPS_WAIT 0u
#define DEPS_TRIGGER_AFTER_WAIT 1u
#define DEPS_INDEPENDENT 2u

// First statement of a GEMV: lets the next kernel start unless that must
// wait for griddep_ready. An independent GEMV then invalidates its SM's L1
// before its first load: no griddepcontrol.wait (ACQBULK in SASS) orders
// its reads after the earlier kernels' writes, so a line an earlier kernel
// left in L1 could otherwise be read stale; fence.acq_rel.gpu compiles to
// MEMBAR.ALL.GPU and CCTL.IVALL (checked with cuobjdump on sm_90), and with
// no load in flight yet it costs one fence per thread.
__device__ __forceinline__ void griddep_begin(uint32_t deps) {
    if (deps != DEPS_TRIGGER_AFTER_WAIT) griddep_launch_dependents();
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (deps == DEPS_INDEPENDENT) asm volatile("fence.acq_rel.gpu;" ::: "memory");
#endif
}
// Before a GEMV reads its activations or epilogue operands, or writes.
__device__ __forceinline__ void griddep_ready(uint32_t deps) {
    if (deps != DEPS_INDEPENDENT) griddep_wait();
    if (deps == DEPS_TRIGGER_AFTER_WAIT) griddep_launch_dependents();
}
// Last statement of a GEMV block.
__device__ __forceinline__ void griddep_end(uint32_t deps) {
    if (deps == DEPS_INDEPENDENT) griddep_wait();
}

// ------------------------------------------------ teams
// A GEMV block's threads (kernels/gemv.cu: WARPS warps).
constexpr uint32_t GEMV_TEAM_THREADS = 128;

// The threads that compute one GEMV block's rows: the whole CUDA block
// (G = 1), or one of G teams of GEMV_TEAM_THREADS threads in a block of G
// times as many (the `_t<G>` kernels: a grid of G times fewer, larger
// blocks, each team doing what one block of the plain kernel does, with
// its own barrier; src/teams.rs, `lab` feature).
template <int G> struct Team {
    __device__ static __forceinline__ uint32_t tid() {
        if constexpr (G == 1)
            return threadIdx.x;
        else
            return threadIdx.x % GEMV_TEAM_THREADS;
    }
    __device__ static __forceinline__ uint32_t index() {
        if constexpr (G == 1)
            return 0u;
        else
            return threadIdx.x / GEMV_TEAM_THREADS;
    }
    // Barrier id 0 is __syncthreads'; team t takes 1 + t.
    __device__ static __forceinline__ void sync() {
        if constexpr (G == 1)
            __syncthreads();
        else
            asm volatile("bar.sync %0, %1;" ::"r"(1u + index()), "r"(GEMV_TEAM_THREADS) : "memory");
    }
};

// ------------------------------------------------ the next call's weights
// A GEMV may ask L2 for the first bytes of the weights the GEMV after it
// will read (src/job.rs: GemvJob::with_l2_ahead), so that the memory keeps
// streaming while this launch's last sums, its exit and the next launch's
// start go by. `at` says when each block asks: L2_AHEAD_END after its own
// weights have all arrived (its dot loop done), L2_AHEAD_START when it
// starts. Each block asks for its share of [addr, addr + bytes) (bytes a
// multiple of 16, addr 16-byte aligned: the host checks), one bulk
// prefetch from one thread; none below sm_90.
#define L2_AHEAD_END 0u
#define L2_AHEAD_START 1u
struct L2Ahead {
    const uint8_t *addr;
    uint32_t bytes; // 0: none
    uint32_t at;    // L2_AHEAD_*
};

// G: the GEMV's teams a block (Team); `block` and `blocks` count teams.
template <int G = 1>
__device__ __forceinline__ void l2_ahead(const L2Ahead &a, uint32_t at, uint32_t block,
                                         uint32_t blocks) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (a.bytes == 0 || a.at != at || (G == 1 ? threadIdx.x : threadIdx.x % GEMV_TEAM_THREADS) != 0)
        return;
    const uint32_t share = ((a.bytes / 16 + blocks - 1) / blocks) * 16;
    const uint64_t lo = (uint64_t)block * share;
    if (lo >= a.bytes) return;
    const uint32_t n = (uint32_t)min((uint64_t)share, (uint64_t)a.bytes - lo);
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(a.addr + lo), "r"(n)
                 : "memory");
#endif
}

// The entry of a kernel between two GEMVs (a quantizer, a norm quantizer,
// the attention's kernels): its blocks ask L2 for their share of `ahead`
// (the next GEMV's weights, or none), which no kernel writes, and then
// wait for the kernel before, so that the memory streams the next weights
// while these short kernels run (src/launch.rs: chain_l2_ahead).
__device__ __forceinline__ void griddep_enter_ahead(const L2Ahead &ahead) {
    l2_ahead(ahead, L2_AHEAD_START, blockIdx.x, gridDim.x);
    griddep_enter();
}

// ------------------------------------------------------------ activations
// The numbering matches src/params.rs (act_code).
#define ACT_IDENTITY 0u
#define ACT_SILU 1u
#define ACT_SIGMOID 2u
#define ACT_GELU_ERF 3u
#define ACT_GELU_TANH 4u
#define ACT_RELU 5u

// The core's formulas (fused_core::element::Activation::apply), left to
// right, one rounding per operation. expf/erff/tanhf are CUDA's (within 2
// ulp), not libm's, so results track the core within a tolerance, and equal
// themselves between fused and unfused kernels bit for bit.
//
// Dispatched by comparisons, not a switch: a switch of this size compiles
// to a jump table in constant bank 2 and an indirect branch, and a GEMV
// reaches its epilogue only at a block's end, where that table's first
// read misses the SM's constant cache on the block's critical path.
__device__ __forceinline__ float act_apply(uint32_t act, float x) {
    if (act == ACT_SILU) return __fdiv_rn(x, __fadd_rn(1.0f, expf(-x)));
    if (act == ACT_SIGMOID) return __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-x)));
    if (act == ACT_RELU) return (x > 0.0f || x != x) ? x : 0.0f;
    if (act == ACT_GELU_ERF)
        return __fmul_rn(__fmul_rn(0.5f, x),
                         __fadd_rn(1.0f, erff(__fmul_rn(x, 0.70710678118654752440f))));
    if (act == ACT_GELU_TANH) {
        float inner = __fadd_rn(1.0f, __fmul_rn(__fmul_rn(0.044715f, x), x));
        float t = tanhf(__fmul_rn(__fmul_rn(0.7978846f, x), inner));
        return __fmul_rn(__fmul_rn(0.5f, x), __fadd_rn(1.0f, t));
    }
    return x;
}

// act(gate) * up (fused_core::element::glu).
__device__ __forceinline__ float glu_apply(uint32_t act, float gate, float up) {
    return __fmul_rn(act_apply(act, gate), up);
}

// IEEE half (its 16 bits, in the low half of `bits`) to f32; exact. The
// wheel nvcc has no CCCL headers, so cuda_fp16.h is not used.
__device__ __forceinline__ float half_bits_to_float(uint32_t bits) {
    unsigned short h = (unsigned short)(bits & 0xffffu);
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}

__device__ __forceinline__ float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ float mul_rn(float a, float b) { return __fmul_rn(a, b); }

// ------------------------------------------------------------ epilogue
// Stage kinds (src/params.rs: STAGE_*).
#define STAGE_ACT 0u
#define STAGE_ADD 1u
#define STAGE_MUL 2u
#define STAGE_ROW_BIAS 3u
#define MAX_STAGES 8

// One epilogue chain, passed by value as a kernel parameter.
struct EpiParams {
    uint32_t n_stages;
    uint32_t kind[MAX_STAGES];
    // ACT: the activation code; otherwise unused.
    uint32_t act[MAX_STAGES];
    // GEMV kernels: 1 to load the first operands when a block starts
    // (epilogue_load_early), 0 to load them all at the end.
    uint32_t early;
    // ADD/MUL: a rows x cols f32 operand (column-major); ROW_BIAS: rows f32.
    const float *operand[MAX_STAGES];
};

// Where stage s (ADD, MUL, ROW_BIAS) reads its operand for output
// (row, col) of a rows-row output.
__device__ __forceinline__ const float *epilogue_operand(const EpiParams &e, uint32_t s,
                                                         uint32_t row, uint32_t col,
                                                         uint32_t rows) {
    return e.operand[s] + (e.kind[s] == STAGE_ROW_BIAS ? (size_t)row : (size_t)col * rows + row);
}

// The operands of the first EPI_EARLY stages of one output, loaded when a
// GEMV block starts (after griddep_wait: earlier kernels write them), so
// that their memory latency passes while the weights stream instead of
// after the block's sums. The asm is volatile: the loads stay up front.
constexpr uint32_t EPI_EARLY = 4;
struct EpiEarly {
    float v[EPI_EARLY];
};

__device__ __forceinline__ EpiEarly epilogue_load_early(const EpiParams &e, uint32_t row,
                                                        uint32_t col, uint32_t rows) {
    EpiEarly o;
#pragma unroll
    for (uint32_t s = 0; s < EPI_EARLY; ++s) {
        o.v[s] = 0.0f;
        if (e.early && s < e.n_stages && e.kind[s] != STAGE_ACT)
            asm volatile("ld.global.f32 %0, [%1];"
                         : "=f"(o.v[s])
                         : "l"(epilogue_operand(e, s, row, col, rows)));
    }
    return o;
}

// One ADD/MUL/ROW_BIAS stage applied to v with its operand o.
__device__ __forceinline__ float epilogue_operand_stage(uint32_t kind, float v, float o) {
    if (kind == STAGE_MUL) return mul_rn(v, o);
    if (kind == STAGE_ADD || kind == STAGE_ROW_BIAS) return add_rn(v, o);
    return v;
}

// The chain applied to v for output (row, col) of a rows-row output, in
// order, with the same per-stage functions as the unfused kernels; the
// first EPI_EARLY operands from `early` (epilogue_load_early for this
// output), later ones loaded here.
//
// It runs at the end of every GEMV block, on the path to the block's exit
// (and, in a one-wave launch, to the next kernel's start), so its latency
// is what it costs: each stage reads its kind and activation code together
// (neither waits for a branch on the other), and the early operands move
// down a queue of registers one stage at a time, so that a stage takes the
// queue's head instead of choosing among EPI_EARLY registers by its index
// (a chain of compares and branches).
__device__ __forceinline__ float epilogue_apply(const EpiParams &e, const EpiEarly &early,
                                                float v, uint32_t row, uint32_t col,
                                                uint32_t rows) {
    EpiEarly queue = early;
    const bool from_queue = e.early != 0;
    for (uint32_t s = 0; s < e.n_stages; ++s) {
        const uint32_t kind = e.kind[s], act = e.act[s];
        if (kind == STAGE_ACT) {
            v = act_apply(act, v);
        } else {
            const float o = from_queue && s < EPI_EARLY ? queue.v[0]
                                                        : *epilogue_operand(e, s, row, col, rows);
            v = epilogue_operand_stage(kind, v, o);
        }
#pragma unroll
        for (uint32_t i = 0; i + 1 < EPI_EARLY; ++i) queue.v[i] = queue.v[i + 1];
    }
    return v;
}

// ------------------------------------------------ the chain as a policy
// How a GEMV kernel runs its epilogue: `early` loads the operands when a
// block starts, `apply` runs the chain on one output at the block's end.
//
// GenericEpi runs the chain the launch passes (EpiParams): one kernel for
// every chain. FixedEpi<S...> runs a chain known when the kernel is
// compiled (S: STAGE_* | ACT_* << 8, one per stage, at most EPI_EARLY,
// every operand loaded early), so that a block's end has no stage loop,
// no kind or activation compares and no parameter reads left: on the
// H200 the generic chain's control flow alone cost as much as its
// arithmetic (BENCHMARKS.md). Both call the same stage functions in the
// same order, so their outputs are equal bit for bit. The host launches a
// FixedEpi kernel only for the chain it was compiled for, with operands
// loaded early (src/fixed_epi.rs); its EpiParams still carry the operand
// addresses.
struct GenericEpi {
    __device__ static EpiEarly early(const EpiParams &e, uint32_t row, uint32_t col,
                                     uint32_t rows) {
        return epilogue_load_early(e, row, col, rows);
    }
    __device__ static float apply(const EpiParams &e, const EpiEarly &early, float v,
                                  uint32_t row, uint32_t col, uint32_t rows) {
        return epilogue_apply(e, early, v, row, col, rows);
    }
};

#define EPI_STAGE(kind, act) ((kind) | ((act) << 8))

// Stages I, I + 1, … of a fixed chain.
template <uint32_t I, uint32_t... S> struct FixedStages {
    __device__ static void load(const EpiParams &, uint32_t, uint32_t, uint32_t, EpiEarly &) {}
    __device__ static float apply(const EpiEarly &, float v) { return v; }
};
template <uint32_t I, uint32_t S0, uint32_t... S> struct FixedStages<I, S0, S...> {
    static constexpr uint32_t KIND = S0 & 0xffu, ACT = S0 >> 8;
    static_assert(I < EPI_EARLY, "a fixed chain loads every operand early");
    __device__ static void load(const EpiParams &e, uint32_t row, uint32_t col, uint32_t rows,
                                EpiEarly &o) {
        o.v[I] = 0.0f;
        if constexpr (KIND != STAGE_ACT) {
            // epilogue_operand's address, with the kind known here. Written
            // out twice on purpose: routing epilogue_operand through one
            // shared helper changed the SASS of many GEMV kernels (sm_90
            // cubin compared), none of it measured.
            const float *at =
                e.operand[I] + (KIND == STAGE_ROW_BIAS ? (size_t)row : (size_t)col * rows + row);
            asm volatile("ld.global.f32 %0, [%1];" : "=f"(o.v[I]) : "l"(at));
        }
        FixedStages<I + 1, S...>::load(e, row, col, rows, o);
    }
    __device__ static float apply(const EpiEarly &o, float v) {
        if constexpr (KIND == STAGE_ACT)
            v = act_apply(ACT, v);
        else
            v = epilogue_operand_stage(KIND, v, o.v[I]);
        return FixedStages<I + 1, S...>::apply(o, v);
    }
};

template <uint32_t... S> struct FixedEpi {
    __device__ static EpiEarly early(const EpiParams &e, uint32_t row, uint32_t col,
                                     uint32_t rows) {
        EpiEarly o{};
        FixedStages<0, S...>::load(e, row, col, rows, o);
        return o;
    }
    __device__ static float apply(const EpiParams &, const EpiEarly &early, float v, uint32_t,
                                  uint32_t, uint32_t) {
        return FixedStages<0, S...>::apply(early, v);
    }
};

// The fixed chains (src/fixed_epi.rs: FixedChain), kernel name suffixes
// _e<name>: a residual add, and silu(v)·m + r.
using EpiAdd = FixedEpi<EPI_STAGE(STAGE_ADD, 0u)>;
using EpiSiluMulAdd = FixedEpi<EPI_STAGE(STAGE_ACT, ACT_SILU), EPI_STAGE(STAGE_MUL, 0u),
                               EPI_STAGE(STAGE_ADD, 0u)>;

// ------------------------------------------------ decode (kernels/decode.cu)
// What the decode kernels and the GEMV's key/value tail share.

// The row that the position value at pos addresses among rows rows, as
// fused_core::decode::position: 0 for NaN or a value below 1, the last row
// from there on, else the value truncated. Every thread reads it itself.
__device__ __forceinline__ uint32_t decode_position(const float *pos, uint32_t rows) {
    const float v = *pos;
    const uint32_t last = rows == 0 ? 0u : rows - 1u;
    if (!(v >= 1.0f)) return 0u; // NaN too
    if (v >= __uint2float_rn(last)) return last;
    return min((uint32_t)v, last);
}

// Pair i (counted over all heads of head_dim values) of x rotated by the
// table row into out at the same indices. Both elements are read before
// either is written, so out may be x; the RoPE kernel, the key/value
// append and the GEMV's key/value tail share it so that all three round
// exactly as the core does.
__device__ __forceinline__ void rope_pair(const float *x, float *out, const float *row,
                                          uint32_t head_dim, uint32_t mode, uint32_t i) {
    const uint32_t half = head_dim / 2u;
    const uint32_t head = i / half, j = i % half;
    const uint32_t a = mode == 0u ? 2u * j : j;
    const uint32_t b = mode == 0u ? 2u * j + 1u : j + half;
    const float c = row[2u * j], s = row[2u * j + 1u];
    const size_t at = (size_t)head * head_dim;
    const float xa = x[at + a], xb = x[at + b];
    out[at + a] = __fsub_rn(__fmul_rn(xa, c), __fmul_rn(xb, s));
    out[at + b] = __fadd_rn(__fmul_rn(xa, s), __fmul_rn(xb, c));
}

// Parameters of one key/value append (src/params.rs: KvAppendParams):
// RoPE of k into its cache row, with the RoPE of q and the v row write of
// the same position where they joined.
struct KvAppendParams {
    const float *q;        // [head_dim, n_head], or null: no q part
    float *q_out;          // q's shape; may be q itself
    const float *k;        // [head_dim, n_kv]
    float *k_cache;        // [2 · k_pairs, k_rows]
    const uint32_t *v;     // v_n values, or null: no v part
    uint32_t *v_cache;     // [v_n, v_rows]
    const float *table;    // [head_dim, table_rows]
    const float *pos;      // one value
    uint32_t head_dim;
    uint32_t q_pairs; // 0 without the q part
    uint32_t k_pairs;
    uint32_t v_n; // 0 without the v part
    uint32_t table_rows;
    uint32_t k_rows;
    uint32_t v_rows;
    uint32_t mode; // 0: pairs (2i, 2i + 1); 1: pairs (i, i + head_dim / 2)
};
static_assert(sizeof(KvAppendParams) == 96, "KvAppendParams");

// ------------------------------------------------ activation quantizers

// Parameters of one quantizer launch (src/params.rs: QuantParams).
struct QuantParams {
    const float *x; // n_cols columns of k floats
    int8_t *codes;
    float *scales;
    int32_t *sums;
    uint32_t k;
    uint32_t n_blocks;   // n_cols · k / block length: the warps that work
    uint32_t interleave; // Q8_0 / Q8_1: 1 to write the codes as code_offset places them
    uint32_t pad;
};
static_assert(sizeof(QuantParams) == 48, "QuantParams");

// f32 to IEEE half bits, round to nearest even (as the core's f16_from).
__device__ __forceinline__ uint32_t float_to_half_bits(float f) {
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}

// Byte offset, within a column of k activation codes, of the 16 codes
// from element e (e a multiple of 16). The codes lie in groups of 32
// chunks of CHUNK elements (the last group of a column has g < 32 chunks):
// piece l (elements 16l .. 16l + 15) of chunk j at 16·(g·l + j) in its
// group, so that 32 lanes taking one chunk each read piece l of their
// chunks as one contiguous 512 bytes. CHUNK is a lane's unit: 64 for Q8_K
// (a Q4_K chunk), 32 for Q8_0 and Q8_1 (a block); k is a multiple of it
// (src/qacts.rs: code_offset, the same map). Q8_K codes always lie so; Q8_0
// and Q8_1 codes only for more than one column (QuantParams::interleave,
// the GEMV kernels' NC > 1): the interleave speeds up several columns but
// slows one column, whose lanes read 32 contiguous bytes anyway
// (BENCHMARKS.md).
template <uint32_t CHUNK> __device__ __forceinline__ uint32_t code_offset(uint32_t k, uint32_t e) {
    constexpr uint32_t GROUP = 32 * CHUNK, PIECES = CHUNK / 16;
    const uint32_t base = e & ~(GROUP - 1u);
    const uint32_t g = min(32u, (k - base) / CHUNK);
    return base + 16 * (g * ((e >> 4) & (PIECES - 1u)) + (e - base) / CHUNK);
}

// The 16 codes of column col from element e: interleaved (IL) as
// code_offset places them, else in element order.
template <uint32_t CHUNK, bool IL>
__device__ __forceinline__ const int8_t *codes_at(const int8_t *codes, uint32_t k, uint32_t col,
                                                  uint32_t e) {
    return codes + (size_t)col * k + (IL ? code_offset<CHUNK>(k, e) : e);
}
#define Q8K_CHUNK 64u
#define Q8_32_CHUNK 32u

// Q8_0 and Q8_1 (S): one warp per 32-element block, lane i quantizes
// element i: d = amax/127, id = 1/d (0 for d = 0), q = roundf(x·id) (ties
// away from zero), d stored as f16 (here: its f32 value). Non-finite inputs
// as the core: its amax fold (`if a > |v| { a } else { |v| }`) restarts
// after a NaN, so amax is the largest |v| after the block's last NaN (NaN
// when the last element is one); a code is the rounded value clamped to
// ±127 (NaN gives 0), as the core's quantizer. Q8_0 writes d and the block's code sum; Q8_1
// writes d and s = f16(Σq·d) (the f32 d) as a pair of f32, no sums.
// Block blk, lane `lane` holding its element v (the whole warp calls it).
template <bool S>
__device__ __forceinline__ void quantize_block_32(const QuantParams &p, uint32_t blk, uint32_t lane,
                                                  float v) {
    const uint32_t nans = __ballot_sync(0xffffffffu, v != v);
    const int last_nan = nans ? 31 - __clz((int)nans) : -1;
    float amax = (int)lane > last_nan ? fabsf(v) : 0.0f;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1)
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
    if (last_nan == 31) amax = __int_as_float(0x7fc00000);
    const float d = __fdiv_rn(amax, 127.0f);
    const float id = d != 0.0f ? __fdiv_rn(1.0f, d) : 0.0f;
    const float rv = roundf(__fmul_rn(v, id));
    const int q = rv != rv ? 0 : (int)fminf(fmaxf(rv, -127.0f), 127.0f);
    if (p.interleave) {
        const uint32_t per_col = p.k / 32, col = blk / per_col;
        const uint32_t e = 32 * (blk - col * per_col) + lane;
        p.codes[(size_t)col * p.k + code_offset<Q8_32_CHUNK>(p.k, e & ~15u) + (e & 15u)] = (int8_t)q;
    } else {
        // Element order: no divisions on the one-column path, whose
        // dependent GEMV waits for this kernel (BENCHMARKS.md).
        p.codes[(size_t)blk * 32 + lane] = (int8_t)q;
    }
    const int sum = __reduce_add_sync(0xffffffffu, q);
    if (lane == 0) {
        const float dh = half_bits_to_float(float_to_half_bits(d));
        if constexpr (S) {
            const float sh = half_bits_to_float(float_to_half_bits(__fmul_rn((float)sum, d)));
            reinterpret_cast<float2 *>(p.scales)[blk] = make_float2(dh, sh);
        } else {
            p.scales[blk] = dh;
            p.sums[blk] = sum;
        }
    }
}

// Where bsum g (0..15) of a 256-block lies among the block's 16 sums: the
// GEMV's unit v = 2c + h (16 bytes of Q4_K codes: chunk c, half h) reads
// its two groups 4c + h (low nibbles) and 4c + 2 + h (high) as one pair.
__device__ __forceinline__ uint32_t bsum_slot(uint32_t g) {
    return 2 * (2 * (g >> 2) + (g & 1u)) + ((g >> 1) & 1u);
}

// GGML's nearest_int: 1.5·2^23 added, the low mantissa bits read. A NaN
// gives 0, as on the CPU, where the sum keeps the quiet NaN's payload
// (mantissa 0x400000); the GPU's NaNs carry another.
__device__ __forceinline__ int nearest_int(float x) {
    const float v = __fadd_rn(x, 12582912.0f);
    return x != x ? 0 : (int)(__float_as_uint(v) & 0x007fffffu) - 0x00400000;
}

// Q8_K: one warp per 256-element block, lane l quantizes elements 8l..8l+7:
// max = the first element of largest magnitude (signed), iscale = −127/max,
// q = min(127, nearest_int(iscale·x)), d = 1/iscale, bsums of 16; an
// all-zero block gives zeros. Block blk, lane `lane` holding elements
// 8·lane .. 8·lane + 7 as a and b (the whole warp calls it).
__device__ __forceinline__ void quantize_block_256(const QuantParams &p, uint32_t blk,
                                                   uint32_t lane, float4 a, float4 b) {
    const float v[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
    float amax = 0.0f, mx = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        if (fabsf(v[i]) > amax) {
            amax = fabsf(v[i]);
            mx = v[i];
        }
    }
    // The block's largest magnitude; its first element is the first of
    // the lowest lane holding it (a lane keeps its own first), whose signed
    // value every lane then reads: one shuffle for the value instead of
    // three a round.
    float gmax = amax;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1)
        gmax = fmaxf(gmax, __shfl_xor_sync(0xffffffffu, gmax, off));
    const uint32_t first = __ffs(__ballot_sync(0xffffffffu, amax == gmax)) - 1u;
    mx = __shfl_sync(0xffffffffu, mx, first);
    amax = gmax;
    int q[8];
    float d = 0.0f;
    if (amax == 0.0f) {
#pragma unroll
        for (int i = 0; i < 8; ++i) q[i] = 0;
    } else {
        const float iscale = __fdiv_rn(-127.0f, mx);
#pragma unroll
        for (int i = 0; i < 8; ++i) q[i] = min(127, nearest_int(__fmul_rn(iscale, v[i])));
        d = __fdiv_rn(1.0f, iscale);
    }
    uint32_t lo = 0, hi = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        lo |= ((uint32_t)q[i] & 0xffu) << (8 * i);
        hi |= ((uint32_t)q[4 + i] & 0xffu) << (8 * i);
    }
    {
        const uint32_t per_col = p.k / 256, col = blk / per_col;
        const uint32_t e = 256 * (blk - col * per_col) + 8 * lane;
        int8_t *at = p.codes + (size_t)col * p.k + code_offset<Q8K_CHUNK>(p.k, e & ~15u) + (e & 8u);
        *reinterpret_cast<uint2 *>(at) = make_uint2(lo, hi);
    }
    int s = 0;
#pragma unroll
    for (int i = 0; i < 8; ++i) s += q[i];
    s += __shfl_xor_sync(0xffffffffu, s, 1);
    if ((lane & 1u) == 0) p.sums[(size_t)blk * 16 + bsum_slot(lane >> 1)] = s;
    if (lane == 0) p.scales[blk] = d;
}
