//! Launch options of the CUDA backend (the same type in builds without the
//! `cuda` feature, whose backend cannot be created).

/// How a [`CudaBackend`](crate::CudaBackend) launches its kernels. The defaults are the fastest
/// measured on the H200 (BENCHMARKS.md); the environment can change them
/// when the backend is created (`FUSED_CUDA_PDL=0`,
/// `FUSED_CUDA_PREFETCH=<bytes>`), [`CudaBackend::set_options`](crate::CudaBackend::set_options) later.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchOptions {
    /// Programmatic dependent launch (`src/pdl.rs`): every kernel may start
    /// while the kernel before it on the stream still runs, and waits for
    /// that kernel's results before it reads them. Only where the device
    /// supports it ([`CudaBackend::options`](crate::CudaBackend::options)).
    pub pdl: bool,
    /// Bytes of weights each GEMV block asks L2 for before it waits for
    /// the kernel before it (with `pdl` only): the weight stream of a GEMV
    /// starts during the end of the kernel before it.
    pub prefetch_bytes: u32,
}

impl Default for LaunchOptions {
    fn default() -> LaunchOptions {
        LaunchOptions {
            pdl: true,
            prefetch_bytes: 8192,
        }
    }
}

impl LaunchOptions {
    /// The defaults, changed by `FUSED_CUDA_PDL=0` and
    /// `FUSED_CUDA_PREFETCH=<bytes>` where set.
    pub fn from_env() -> LaunchOptions {
        let d = LaunchOptions::default();
        LaunchOptions {
            pdl: std::env::var("FUSED_CUDA_PDL").map_or(d.pdl, |v| v != "0"),
            prefetch_bytes: std::env::var("FUSED_CUDA_PREFETCH")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(d.prefetch_bytes),
        }
    }
}
