//! Launch options of the CUDA backend (the same type in builds without the
//! `cuda` feature, whose backend cannot be created).

/// How a [`CudaBackend`](crate::CudaBackend) launches its kernels. The
/// defaults are the fastest measured on the H200 (BENCHMARKS.md);
/// `FUSED_CUDA_PDL=0` and `FUSED_CUDA_EARLY_OPERANDS=0` in the environment
/// turn the options off when the backend is created (`FUSED_CUDA_OVERLAP=1`
/// turns `overlap` on),
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
    /// GEMV blocks load the operands of the first 4 epilogue stages when
    /// they start (after the dependency wait) instead of after their sums,
    /// so that the loads' latency passes while the weights stream.
    pub early_operands: bool,
    /// GEMVs that touch nothing the GEMVs just before them write, and write
    /// nothing those touch, start without waiting for them and overlap their
    /// tail (`src/schedule.rs`): the jobs of
    /// [`CudaBackend::gemv_batch`](crate::CudaBackend::gemv_batch) after
    /// the first, and such GEMV steps of a
    /// [`DevicePlan`](crate::DevicePlan). Needs `pdl`. Off by default until
    /// it is measured on the H200 (`FUSED_CUDA_OVERLAP=1` turns it on).
    pub overlap: bool,
}

impl Default for LaunchOptions {
    fn default() -> LaunchOptions {
        LaunchOptions {
            pdl: true,
            early_operands: true,
            overlap: false,
        }
    }
}

impl LaunchOptions {
    /// The defaults, with `pdl` off where `FUSED_CUDA_PDL=0` is set,
    /// `early_operands` off where `FUSED_CUDA_EARLY_OPERANDS=0` is, and
    /// `overlap` on where `FUSED_CUDA_OVERLAP` is set to anything but `0`.
    pub fn from_env() -> LaunchOptions {
        let d = LaunchOptions::default();
        let on = |var: &str, default: bool| std::env::var(var).map_or(default, |v| v != "0");
        LaunchOptions {
            pdl: on("FUSED_CUDA_PDL", d.pdl),
            early_operands: on("FUSED_CUDA_EARLY_OPERANDS", d.early_operands),
            overlap: on("FUSED_CUDA_OVERLAP", d.overlap),
        }
    }
}
