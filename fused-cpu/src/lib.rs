//! fused-cpu: the CPU backend of `fused`.
//!
//! - [`kernels`]: dot kernels per ISA ([`isa::Isa`], detected once at run
//!   time), scalar fallback = the core's reference arithmetic.
//! - [`gemv`]: single-threaded, `no_std` GEMV/GEMM over a row range with the
//!   epilogue applied to each accumulator tile before the store.
//! - [`gemm`]: the driver for two or more columns: weight tiles decoded
//!   once and swept by register-blocked micro-kernels
//!   ([`kernels::gemm`]), the epilogue applied to each accumulator.
//! - [`packed`]: prepared weights, rows interleaved by four (Q4_0), with
//!   their own GEMV driver; the epilogue applies as for plain weights.
//! - [`elementwise`]: the unfused fallback ops, built from the core's element
//!   functions, so fused == unfused bit for bit.
//! - [`fwht`]: signed and unsigned FWHT, the sign multiply fused into the load.
//! - `backend` (with `std`): [`CpuBackend`], the multi-threaded entry points
//!   with input validation and barrier / kernel-call counters.
//! - `region_acts` (with `std`): activations quantized inside a call's
//!   parallel region, each piece once, by the tasks that read it.
//! - `pool` (with `std`): the persistent worker pool behind the backend's
//!   parallel regions (sub-microsecond barriers while its workers spin).
//! - `exec` (with `std`): the executor that runs a core plan (or a graph
//!   unfused) step by step over 4-byte-aligned buffers, counting kernel
//!   steps and barriers.
#![no_std]

extern crate alloc;
#[cfg(feature = "std")]
extern crate std;

pub mod activation;
pub mod acts;
#[cfg(feature = "std")]
pub mod backend;
pub mod elementwise;
#[cfg(feature = "std")]
pub mod exec;
pub mod fwht;
pub mod gemm;
pub mod gemv;
pub mod isa;
pub mod kernels;
pub mod packed;
#[cfg(feature = "std")]
pub mod pool;
#[cfg(feature = "std")]
pub mod probe;
#[cfg(feature = "std")]
pub mod region_acts;

#[cfg(feature = "std")]
pub use backend::{Counters, CpuBackend};
pub use fused_core::DType;
pub use isa::Isa;
