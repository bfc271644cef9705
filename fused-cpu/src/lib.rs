//! fused-cpu: the CPU backend of `fused`. SIMD, multi-threaded GEMV/GEMM
//! with the epilogue applied to each accumulator before the store, the
//! gated dual GEMV, the signed FWHT and the unfused element-wise ops, on
//! the ISA detected at run time (scalar, AVX2, AVX-512 VNNI, NEON, NEON +
//! dotprod), with fused == unfused bit for bit on every ISA and the
//! scalar ISA equal to the core's reference bit for bit.
//!
//! # Modules
//!
//! What a program that runs plans reads (with `std`, the default):
//!
//! - [`backend`]: [`CpuBackend`], the multi-threaded eager entry points
//!   (validated inputs, one parallel region each, [`Counters`] of regions
//!   and kernel calls), and the memory-bandwidth probe.
//! - [`exec`]: the plan executor ([`exec::Executor`]) over 4-byte-aligned
//!   buffers ([`exec::CpuMemory`]), one backend call per step.
//! - [`packed`]: prepared (row-interleaved) Q4_0 weights for
//!   [`CpuBackend::gemv_packed`].
//! - [`isa`]: the instruction sets ([`Isa`]), detected once.
//!
//! What a `no_std` program (no threads, no allocation in the kernels)
//! calls directly, and what the backend runs on each thread:
//!
//! - [`acts`]: activations quantized once per call into the Q8 format the
//!   weights' kernels take.
//! - [`gemv`]: `epilogue(W·x)` over a range of rows, each result handed to
//!   a callback ([`gemv::gemv_rows`], [`gemv::gemv_glu_rows`]).
//! - [`fwht`]: the signed FWHT over rows ([`fwht::fwht_rows`]).
//! - [`elementwise`]: the unfused ops, evaluating activations as the fused
//!   epilogues of the same ISA do.
//!
//! The kernels themselves (dot and GEMM micro-kernels per ISA and their
//! tuning constants, the worker pool, the activation side data, the
//! bandwidth probe's internals) are public only with the `lab` feature, for
//! the criterion benches and the kernel tests; without it they are not part
//! of the API.
//!
//! # Layers
//!
//! Each module uses only modules before it in this order (checked by
//! `scripts/module-cycles fused-cpu`):
//!
//! `isa` ← `activation` ← `acts` ← `kernels` ← `gemm` ← `gemv`, `packed`,
//! `fwht`, `elementwise` ← `pool` ← `region_acts` ← `probe` ← `backend` ←
//! `exec` ← `contract` (the core's backend contract implemented for
//! [`CpuBackend`]; trait impls only).
//!
//! # Example
//!
//! A Q4_0 feed-forward output projection with GGML's Q8_0 activations:
//! `y = silu(W·x) · gate + residual`, the whole chain applied to each
//! accumulator. On the scalar ISA it equals the core's reference bit for
//! bit; on the best ISA of this machine the fused call equals the same GEMV
//! followed by the unfused ops bit for bit.
//!
//! ```
//! # #[cfg(feature = "std")]
//! # fn main() -> Result<(), fused_core::Error> {
//! use fused_core::job::GemvJob;
//! use fused_core::DType;
//! use fused_core::element::Activation;
//! use fused_core::epilogue::Epilogue;
//! use fused_core::quant::quantize_row;
//! use fused_core::reference::gemv::gemm;
//! use fused_core::acts::ActQuant;
//! use fused_core::weights::WeightMatrix;
//! use fused_cpu::{CpuBackend, Isa};
//!
//! let (m, k) = (8, 64); // 8 output rows, 64 inputs: two Q4_0 blocks a row
//! let vals = |n: usize, s: f32| -> Vec<f32> {
//!     (0..n).map(|i| ((i as f32 * 0.37 + s).sin())).collect()
//! };
//! let mut w = vec![0u8; DType::Q4_0.row_bytes(k)? * m];
//! quantize_row(DType::Q4_0, &vals(m * k, 0.0), &mut w)?;
//! let w = WeightMatrix::new(DType::Q4_0, m, k, &w)?;
//! let (x, gate, residual) = (vals(k, 1.0), vals(m, 2.0), vals(m, 3.0));
//!
//! // silu(acc) · gate + residual, operands bound for one column.
//! let chain = Epilogue::NONE
//!     .then_act(Activation::Silu)?
//!     .then_mul()?
//!     .then_add()?;
//! let epilogue = chain.bind(&[&gate, &residual], m, 1)?;
//! let mode = ActQuant::ggml(DType::Q4_0); // Q8_0 activations
//!
//! // The scalar ISA is the core's reference arithmetic.
//! let mut want = vec![0.0; m];
//! gemm(&w, &x, 1, mode, &epilogue, &mut want)?;
//! let scalar = CpuBackend::with_isa(Isa::Scalar, 2)?;
//! let mut y = vec![0.0; m];
//! scalar.gemv(&GemvJob::new(&w, &x, 1).with_mode(mode).with_bound(&epilogue), &mut y)?;
//! assert_eq!(y, want);
//!
//! // The best ISA: fused equals unfused bit for bit.
//! let cpu = CpuBackend::new(2)?;
//! let mut fused = vec![0.0; m];
//! cpu.gemv(&GemvJob::new(&w, &x, 1).with_mode(mode).with_bound(&epilogue), &mut fused)?;
//! let none = Epilogue::NONE.bind(&[], m, 1)?;
//! let (mut acc, mut act, mut prod, mut unfused) =
//!     (vec![0.0; m], vec![0.0; m], vec![0.0; m], vec![0.0; m]);
//! cpu.gemv(&GemvJob::new(&w, &x, 1).with_mode(mode).with_bound(&none), &mut acc)?;
//! cpu.unary(Activation::Silu, &acc, &mut act)?;
//! cpu.mul(&act, &gate, &mut prod)?;
//! cpu.add(&prod, &residual, &mut unfused)?;
//! assert_eq!(fused, unfused);
//! # Ok(())
//! # }
//! # #[cfg(not(feature = "std"))]
//! # fn main() {}
//! ```
//!
//! # Through the backend contract
//!
//! A runtime written against the core's contract
//! ([`fused_core::backend::Backend`]) runs a planned graph on this backend,
//! and on `fused_vulkan::VulkanBackend` or `fused_cuda::CudaBackend` by
//! changing the constructor only:
//!
//! ```
//! # #[cfg(feature = "std")]
//! # fn main() -> Result<(), fused_core::Error> {
//! use fused_core::acts::GemvMode;
//! use fused_core::backend::{Backend, ResidentPlan};
//! use fused_core::element::Activation;
//! use fused_core::graph::{Graph, Place};
//! use fused_core::planner::plan;
//! use fused_core::quant::quantize_row;
//! use fused_core::tensor::{BufferId, TensorDesc};
//! use fused_core::DType;
//!
//! /// `silu(W·x) + r` for one column, fused, on any backend.
//! fn run<B: Backend>(be: &B, w: &[u8], x: &[f32], r: &[f32]) -> Result<Vec<f32>, B::Error> {
//!     let (k, m) = (x.len(), r.len());
//!     let mut g = Graph::new();
//!     let wt = TensorDesc::contiguous(DType::Q4_0, [k, m, 1, 1], BufferId(0), 0)?;
//!     let xt = TensorDesc::contiguous(DType::F32, [k, 1, 1, 1], BufferId(1), 0)?;
//!     let rt = TensorDesc::contiguous(DType::F32, [m, 1, 1, 1], BufferId(1), 4 * k)?;
//!     let (wn, xn, rn) = (g.input(wt)?, g.input(xt)?, g.input(rt)?);
//!     let y = g.mul_mat(wn, xn, Place::at(1, 4 * (k + m)))?;
//!     let s = g.unary(Activation::Silu, y, Place::at(1, 4 * (k + 2 * m)))?;
//!     let out = g.add(s, rn, Place::at(1, 4 * k))?; // in place on r
//!     g.mark_output(out)?;
//!     let p = plan(&g); // one fused step: the GEMV with silu and add
//!     be.supports(&g, &p, GemvMode::Ggml)?;
//!     let mut rp = be.compile(&g, &p, GemvMode::Ggml, &[w.len(), 4 * (k + 3 * m)])?;
//!     rp.write(BufferId(0), 0, w)?;
//!     rp.write_f32(&xt, x)?;
//!     rp.write_f32(&rt, r)?;
//!     rp.run()?;
//!     rp.read_f32(g.tensor(out)?)
//! }
//!
//! let (k, m) = (64, 8);
//! let rb = DType::Q4_0.row_bytes(k)?;
//! let mut w = vec![0u8; m * rb];
//! for (i, row) in w.chunks_exact_mut(rb).enumerate() {
//!     let v: Vec<f32> = (0..k).map(|j| ((i * k + j) % 7) as f32 / 7.0 - 0.5).collect();
//!     quantize_row(DType::Q4_0, &v, row)?;
//! }
//! let x: Vec<f32> = (0..k).map(|j| (j % 5) as f32 / 5.0).collect();
//! let r = vec![1.0f32; m];
//! let best = run(&fused_cpu::CpuBackend::new(2)?, &w, &x, &r)?;
//! let scalar = run(&fused_cpu::CpuBackend::with_isa(fused_cpu::Isa::Scalar, 1)?, &w, &x, &r)?;
//! assert_eq!(best.len(), m);
//! assert!(best.iter().zip(&scalar).all(|(a, b)| (a - b).abs() <= 1e-4 * b.abs().max(1.0)));
//! # Ok(())
//! # }
//! # #[cfg(not(feature = "std"))]
//! # fn main() {}
//! ```
//!
//! # Features
//!
//! - `std` (default): run-time ISA detection, [`backend`], [`exec`] and
//!   the worker pool; implies `alloc`. Without it the crate is `no_std` and
//!   the ISA is what the build targets statically.
//! - `alloc` (default, through `std`): [`packed`], the one part that
//!   allocates. Without `std` and `alloc` the crate links into a program
//!   that has no global allocator: [`acts`], [`gemv`], [`fwht`] and
//!   [`elementwise`] take the caller's buffers (see the README's "Without
//!   std" for the calls, their memory and their stack).
//! - `lab` (off): the kernels and their tuning public, for benches and
//!   kernel tests. Not for programs: nothing in it is stable.
#![no_std]

#[cfg(feature = "alloc")]
extern crate alloc;
#[cfg(feature = "std")]
extern crate std;

/// Declares module `$name`: `pub` with the `lab` feature, crate-private
/// without it (where its `pub` items are the crate's own business).
macro_rules! lab_mod {
    ($(#[$attr:meta])* $name:ident) => {
        $(#[$attr])*
        #[cfg(feature = "lab")]
        pub mod $name;
        $(#[$attr])*
        #[cfg(not(feature = "lab"))]
        #[allow(unreachable_pub, dead_code)]
        pub(crate) mod $name;
    };
}

/// One item (a function or a constant): `pub` with the `lab` feature,
/// `pub(crate)` without it.
macro_rules! lab_pub {
    ($(#[$attr:meta])* fn $($rest:tt)*) => {
        $(#[$attr])*
        #[cfg(feature = "lab")]
        pub fn $($rest)*
        $(#[$attr])*
        #[cfg(not(feature = "lab"))]
        #[allow(dead_code)]
        pub(crate) fn $($rest)*
    };
}

pub mod isa;
lab_mod! {
    activation
}
pub mod acts;
lab_mod! {
    kernels
}
lab_mod! {
    gemm
}
pub mod elementwise;
pub mod fwht;
pub mod gemv;
// The RMS norm (unfused op and GEMV prologue), bit for bit the core's.
#[cfg(feature = "std")]
mod norm;
#[cfg(feature = "alloc")]
pub mod packed;
lab_mod! {
    #[cfg(feature = "std")]
    pool
}
lab_mod! {
    #[cfg(feature = "std")]
    region_acts
}
lab_mod! {
    #[cfg(feature = "std")]
    probe
}
lab_mod! {
    #[cfg(feature = "std")]
    pages
}
#[cfg(feature = "std")]
pub mod backend;
// The core's backend contract on this backend (trait impls only).
#[cfg(feature = "std")]
mod contract;
#[cfg(feature = "std")]
pub mod exec;

#[cfg(feature = "std")]
pub use backend::{Counters, CpuBackend};
pub use fused_core::DType;
pub use isa::Isa;
