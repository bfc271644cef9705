// The probe kernel: y[i] = a * x[i] + y[i] for i < n.
//
// It exists to prove the whole path end to end: nvcc (build.rs) -> PTX embedded
// in the crate -> module load through the driver -> launch -> results checked
// by the test in tests/probe.rs.
extern "C" __global__ void fused_probe_axpy_f32(float a, const float *__restrict__ x,
                                                float *__restrict__ y, unsigned int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = fmaf(a, x[i], y[i]);
    }
}

// ------------------------------------------------------------ handoff
// How fast one kernel of a dependent chain can start on the results of the
// kernel before it (src/handoff.rs, cuda-bench's handoff table). Each
// block of a chain's kernel reads 128 elements spread over the whole
// vector the previous kernel wrote (thread t: element (b + t·s) mod n,
// s = max(1, n / 128)), so that every block depends on blocks all over
// the previous grid while its work stays the same at any grid size, and
// writes
//     out[b] = 3 · (sum of those elements) + b + 1   (u32, wrapping),
// so a value read before its writer finished makes the end result wrong
// (the host recomputes the chain). `mode` says how a kernel waits:
#include "common.cuh"

#define HANDOFF_STREAM 0u    // launched normally: the stream orders the kernels
#define HANDOFF_GRID 1u      // PDL: griddepcontrol.wait for the previous grid
#define HANDOFF_FLAG 2u      // PDL: spin on a counter the previous grid's blocks raise
#define HANDOFF_FLAG_NAP 3u  // the same, with a short sleep between polls
#define HANDOFF_UNORDERED 4u // PDL and no wait at all: timing only, results undefined

__device__ __forceinline__ uint32_t load_acquire(const uint32_t *p) {
    uint32_t v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

// Block size 128 (src/handoff.rs). `wait_flag` is null for the first
// kernel of a chain; a flag kernel waits until it reaches `wait_count` (the
// previous grid's block count), and raises `signal_flag` once per block
// after its block's writes.
extern "C" __global__ void __launch_bounds__(128)
    fused_probe_handoff(const uint32_t *in, uint32_t *out, uint32_t n, uint32_t mode,
                        const uint32_t *wait_flag, uint32_t *signal_flag,
                        uint32_t wait_count) {
    __shared__ uint32_t partial[4];
    const bool flag = mode == HANDOFF_FLAG || mode == HANDOFF_FLAG_NAP;
    if (mode != HANDOFF_STREAM) griddep_launch_dependents();
    if (mode == HANDOFF_GRID) griddep_wait();
    if (flag && wait_flag != nullptr) {
        if (threadIdx.x == 0) {
            while (load_acquire(wait_flag) < wait_count) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
                if (mode == HANDOFF_FLAG_NAP) __nanosleep(64);
#endif
            }
        }
        // Thread 0's acquire, then the barrier, orders every thread's reads
        // below after the writer blocks' releases.
        __syncthreads();
    }
    // An L2 load (.cg): a line of `in` that an earlier kernel left in this
    // SM's L1 must not be read stale when no griddepcontrol.wait ran.
    const uint32_t stride = n / 128u > 1u ? n / 128u : 1u;
    uint32_t s = __ldcg(in + (uint32_t)(((uint64_t)blockIdx.x + (uint64_t)threadIdx.x * stride) % n));
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = s;
    __syncthreads();
    if (threadIdx.x == 0) {
        const uint32_t total = partial[0] + partial[1] + partial[2] + partial[3];
        if (blockIdx.x < n) out[blockIdx.x] = 3u * total + blockIdx.x + 1u;
        if (flag) {
            // The block's one write, then its release: a reader that sees
            // the raised counter sees the write.
            asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(signal_flag) : "memory");
        }
    }
}

// Keeps the device busy for `cycles` SM clocks (one thread), so that the
// host has enqueued a whole chain before the chain's first kernel runs.
extern "C" __global__ void fused_probe_spin(unsigned long long cycles) {
    const unsigned long long start = clock64();
    while (clock64() - start < cycles) {
    }
}
