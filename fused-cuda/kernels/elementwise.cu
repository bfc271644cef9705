// The unfused element-wise kernels. Each applies exactly one device function
// of common.cuh (the ones the GEMV epilogue applies), so a chain run as
// separate passes equals the fused epilogue bit for bit.
//
// Grid-stride loops over n elements (n < 2^31, checked on the host).
#include "common.cuh"

// Every kernel first waits for the kernel before it (griddep_enter).
#define GRID_STRIDE(i, n)                                                                  \
    griddep_enter();                                                                       \
    for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < (n);                      \
         i += blockDim.x * gridDim.x)

// out = a + b
extern "C" __global__ void fused_ew_add(const float *__restrict__ a, const float *__restrict__ b,
                                        float *__restrict__ out, uint32_t n) {
    GRID_STRIDE(i, n) { out[i] = add_rn(a[i], b[i]); }
}

// out = a * b
extern "C" __global__ void fused_ew_mul(const float *__restrict__ a, const float *__restrict__ b,
                                        float *__restrict__ out, uint32_t n) {
    GRID_STRIDE(i, n) { out[i] = mul_rn(a[i], b[i]); }
}

// out[i] = a[i] * b[i mod b_len]: a vector repeated along the rows (the
// unfused sign multiply in front of an FWHT).
extern "C" __global__ void fused_ew_mul_cyclic(const float *__restrict__ a,
                                               const float *__restrict__ b,
                                               float *__restrict__ out, uint32_t n,
                                               uint32_t b_len) {
    GRID_STRIDE(i, n) { out[i] = mul_rn(a[i], b[i % b_len]); }
}

// out = act(a)
extern "C" __global__ void fused_ew_unary(uint32_t act, const float *__restrict__ a,
                                          float *__restrict__ out, uint32_t n) {
    GRID_STRIDE(i, n) { out[i] = act_apply(act, a[i]); }
}

// out = act(gate) * up
extern "C" __global__ void fused_ew_glu(uint32_t act, const float *__restrict__ gate,
                                        const float *__restrict__ up, float *__restrict__ out,
                                        uint32_t n) {
    GRID_STRIDE(i, n) { out[i] = glu_apply(act, gate[i], up[i]); }
}

// out[col*rows + r] = a[col*rows + r] + bias[r]
extern "C" __global__ void fused_ew_add_row_bias(const float *__restrict__ a,
                                                 const float *__restrict__ bias,
                                                 float *__restrict__ out, uint32_t n,
                                                 uint32_t rows) {
    GRID_STRIDE(i, n) { out[i] = add_rn(a[i], bias[i % rows]); }
}

// out = a (the bandwidth ceiling of the benches: 16-byte loads and stores;
// n4 float4 elements).
extern "C" __global__ void fused_ew_copy4(const float4 *__restrict__ a, float4 *__restrict__ out,
                                          uint32_t n4) {
    GRID_STRIDE(i, n4) { out[i] = a[i]; }
}
