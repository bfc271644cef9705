//! fused-cpu: the CPU backend of `fused` (skeleton).
//!
//! Nothing is implemented yet: the SIMD GEMV kernels with fused epilogues and
//! the run-time ISA dispatch come in their own issue. Until then this crate
//! only proves that the backend builds as `#![no_std]`, with the standard
//! library behind the `std` feature (on by default).
#![no_std]

#[cfg(feature = "std")]
extern crate std;

/// The format names this backend will accept, re-exported so the dependency
/// on `fused-core` is real from the start.
pub use fused_core::DType;
