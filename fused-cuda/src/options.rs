//! Launch options of the CUDA backend (the same type in builds without the
//! `cuda` feature, whose backend cannot be created).

/// How a [`CudaBackend`](crate::CudaBackend) launches its kernels. The
/// defaults are the fastest measured on the H200 (BENCHMARKS.md);
/// `FUSED_CUDA_PDL=0` in the environment turns programmatic dependent launch
/// off when the backend is created,
/// [`CudaBackend::set_options`](crate::CudaBackend::set_options) changes
/// the options later.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchOptions {
    /// Programmatic dependent launch (`src/pdl.rs`): every kernel may start
    /// while the kernel before it on the stream still runs (its blocks are
    /// scheduled as the previous kernel's blocks retire) and waits for that
    /// kernel's results before it touches them. Only where the device
    /// supports it ([`CudaBackend::options`](crate::CudaBackend::options)).
    pub pdl: bool,
}

impl Default for LaunchOptions {
    fn default() -> LaunchOptions {
        LaunchOptions { pdl: true }
    }
}

impl LaunchOptions {
    /// The defaults, with `pdl` off where `FUSED_CUDA_PDL=0` is set.
    pub fn from_env() -> LaunchOptions {
        LaunchOptions {
            pdl: std::env::var("FUSED_CUDA_PDL").map_or(LaunchOptions::default().pdl, |v| v != "0"),
        }
    }
}
