// The (signed) fast Walsh-Hadamard transform of every row of N = 2^k floats,
// 2 <= N <= 32768, as fused_core::fwht defines it: each element is loaded as
// (x · sign) · scale (two f32 roundings, the sign multiply fused into the
// load), then butterflies (a, b) -> (a + b, a - b) run with half-width
// h = 1, 2, 4, ..., N/2 in that order. Every element sees exactly the
// reference's operations in the reference's order, so the result equals
// fused_core::fwht::fwht bit for bit.
//
// Layout: a row is held by T threads, E = N/T values each, thread t holding
// elements i = e·T + t. Then the stages h < 32 pair lanes (shuffles), the
// stages 32 <= h < T pair warps (shared memory), and the stages h >= T pair a
// thread's own values (registers); ascending h visits them in that order.
//
// - fused_fwht_warp_e<E>: N <= 1024; T = min(N, 32) lanes per row, 32/T rows
//   per warp, 8 warps per block, no shared memory.
// - fused_fwht_block_e<E>: N >= 2048; one row per block of T = 1024 threads,
//   N floats of dynamic shared memory (64 KiB at N = 16384, 128 KiB at 32768:
//   the host raises the function's dynamic shared-memory limit).
#include "common.cuh"

// Parameters of one launch (src/params.rs: FwhtParams).
struct FwhtParams {
    const float *x;
    const float *signs; // null when unsigned
    float *out;
    uint32_t rows;
    uint32_t n;
    uint32_t sign_blocks; // rows of the sign vector (>= 1 when signed)
    float scale;
};

// The row's sign vector (sign row `row mod sign_blocks`), or null.
__device__ __forceinline__ const float *fwht_signs(const FwhtParams &p, uint32_t row) {
    return p.signs == nullptr ? nullptr : p.signs + (size_t)(row % p.sign_blocks) * p.n;
}

// Element i of the row: (x · sign) · scale, two f32 roundings.
__device__ __forceinline__ float fwht_load(const FwhtParams &p, const float *xrow,
                                           const float *srow, uint32_t i) {
    float v = xrow[i];
    if (srow != nullptr) v = __fmul_rn(v, srow[i]);
    return __fmul_rn(v, p.scale);
}

// Stages h = 1 .. T/2 (T <= 32) between the lanes of a group of T.
template <int E> __device__ __forceinline__ void lane_stages(float *v, uint32_t t, uint32_t T) {
    for (uint32_t m = 1; m < T; m <<= 1) {
        const bool upper = (t & m) != 0;
#pragma unroll
        for (int e = 0; e < E; ++e) {
            float other = __shfl_xor_sync(0xffffffffu, v[e], m);
            v[e] = upper ? __fsub_rn(other, v[e]) : __fadd_rn(v[e], other);
        }
    }
}

// Stages h = T .. N/2: pairs of a thread's own values.
template <int E> __device__ __forceinline__ void register_stages(float *v) {
#pragma unroll
    for (int hm = 1; hm < E; hm <<= 1) {
#pragma unroll
        for (int e = 0; e < E; ++e) {
            if ((e & hm) == 0) {
                float a = v[e], b = v[e + hm];
                v[e] = __fadd_rn(a, b);
                v[e + hm] = __fsub_rn(a, b);
            }
        }
    }
}

template <int E> __device__ void fwht_warp(const FwhtParams &p) {
    const uint32_t T = p.n / E; // lanes per row: a power of two <= 32
    const uint32_t gwarp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const uint32_t lane = threadIdx.x & 31u;
    const uint32_t row = gwarp * (32u / T) + lane / T;
    const uint32_t t = lane % T;
    const bool active = row < p.rows;
    float v[E];
    if (active) {
        const float *xrow = p.x + (size_t)row * p.n;
        const float *srow = fwht_signs(p, row);
#pragma unroll
        for (int e = 0; e < E; ++e) v[e] = fwht_load(p, xrow, srow, (uint32_t)e * T + t);
    } else {
#pragma unroll
        for (int e = 0; e < E; ++e) v[e] = 0.0f;
    }
    lane_stages<E>(v, t, T); // every lane takes part in the shuffles
    register_stages<E>(v);
    if (!active) return;
    float *o = p.out + (size_t)row * p.n;
#pragma unroll
    for (int e = 0; e < E; ++e) o[(uint32_t)e * T + t] = v[e];
}

template <int E> __device__ void fwht_block(const FwhtParams &p) {
    extern __shared__ float buf[];
    const uint32_t T = blockDim.x; // 1024; p.n == E * T
    const uint32_t row = blockIdx.x;
    const uint32_t t = threadIdx.x;
    float v[E];
    const float *xrow = p.x + (size_t)row * p.n;
    const float *srow = fwht_signs(p, row);
#pragma unroll
    for (int e = 0; e < E; ++e) v[e] = fwht_load(p, xrow, srow, (uint32_t)e * T + t);
    lane_stages<E>(v, t & 31u, 32u);
    for (uint32_t h = 32; h < T; h <<= 1) {
#pragma unroll
        for (int e = 0; e < E; ++e) buf[(uint32_t)e * T + t] = v[e];
        __syncthreads();
        const bool upper = (t & h) != 0;
#pragma unroll
        for (int e = 0; e < E; ++e) {
            float other = buf[(uint32_t)e * T + (t ^ h)];
            v[e] = upper ? __fsub_rn(other, v[e]) : __fadd_rn(v[e], other);
        }
        __syncthreads();
    }
    register_stages<E>(v);
    float *o = p.out + (size_t)row * p.n;
#pragma unroll
    for (int e = 0; e < E; ++e) o[(uint32_t)e * T + t] = v[e];
}

#define FWHT_WARP(E)                                                                           \
    extern "C" __global__ void __launch_bounds__(256) fused_fwht_warp_e##E(const FwhtParams p) { \
        griddep_enter();                                                                       \
        fwht_warp<E>(p);                                                                       \
    }
#define FWHT_BLOCK(E)                                                                          \
    extern "C" __global__ void __launch_bounds__(1024)                                         \
        fused_fwht_block_e##E(const FwhtParams p) {                                            \
        griddep_enter();                                                                       \
        fwht_block<E>(p);                                                                      \
    }

FWHT_WARP(1)
FWHT_WARP(2)
FWHT_WARP(4)
FWHT_WARP(8)
FWHT_WARP(16)
FWHT_WARP(32)
FWHT_BLOCK(2)
FWHT_BLOCK(4)
FWHT_BLOCK(8)
FWHT_BLOCK(16)
FWHT_BLOCK(32)
