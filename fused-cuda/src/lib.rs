//! fused-cuda: the CUDA backend of `fused` (skeleton).
//!
//! What exists so far is the bring-up path, end to end: [`CudaDevice::new`]
//! opens the first GPU through the driver API, loads the crate's PTX, and
//! [`CudaDevice::probe_axpy`] runs a trivial kernel (`kernels/probe.cu`,
//! `y = a·x + y` in `f32`) so that a test can prove the toolchain, the driver
//! and the device all work. The fused kernels come in later issues.
//!
//! # The `cuda` feature
//!
//! Off by default. Without it the crate has the same public API, needs no CUDA
//! toolkit at all, and every constructor returns
//! [`CudaError::NotCompiled`] ("fused-cuda was built without the `cuda`
//! feature"), so code downstream compiles the same way in both cases.
//!
//! With it, the crate depends on `cust` 0.3.2 and its build script compiles
//! every kernel in `kernels/` to PTX with `nvcc -ptx -arch=sm_90` (override
//! with `FUSED_CUDA_ARCH`), taking nvcc from `$FUSED_NVCC`, else from the
//! wheels that `scripts/test` installs in `.tools/cuda`, else from `PATH`.
//! `cust` links against `libcuda`, which it looks for in
//! `$CUDA_LIBRARY_PATH/lib64` and `$CUDA_LIBRARY_PATH/lib64/stubs`; on a
//! machine without a driver, `scripts/gen-libcuda-stub` makes a stand-in.
//!
//! A missing device is an `Err` at run time ([`CudaError::Driver`]), never a
//! panic.

mod error;

#[cfg(feature = "cuda")]
mod device;
#[cfg(not(feature = "cuda"))]
#[path = "stub.rs"]
mod device;

pub use device::CudaDevice;
pub use error::CudaError;

/// Whether this build of the crate can talk to a GPU (the `cuda` feature).
pub const CUDA_ENABLED: bool = cfg!(feature = "cuda");
