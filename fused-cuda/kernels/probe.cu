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
