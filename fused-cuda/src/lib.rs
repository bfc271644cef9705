//! fused-cuda: the CUDA backend of `fused`.
//!
//! [`CudaBackend`] runs the fused kernels on the first GPU through the driver
//! API (`cust`):
//!
//! - [`CudaBackend::gemv_batch`]: `y = epilogue(W·x)` for 1..=8 activation
//!   columns, one or several GEMVs ([`GemvJob`], plain or gated:
//!   `act(W_g·x) ⊙ (W_u·x)` in one pass) over the same activations
//!   (quantized once), weights in any of the core's weight formats
//!   ([`GEMV_DTYPES`]), the epilogue chain (activations, adds, multiplies,
//!   row biases) applied in registers before the store; each job after the
//!   first overlapping the one before it and runs of one-column jobs of one
//!   kernel sent as one launch, where the [`Tuning`] says so (the default;
//!   same bits);
//! - [`CudaBackend::fwht`]: the signed or unsigned FWHT of every
//!   N = 2^k (2..=32768), the sign multiply fused into the load;
//! - [`CudaBackend::rms_norm`]: RMS normalisation per column, times a
//!   weight where given (`fused_core::norm`'s definition, bit for bit);
//! - [`CudaBackend::elementwise`]: the unfused element-wise kernels
//!   ([`Elementwise`]: add, mul, unary activation, GLU, row bias, copy),
//!   built from the same device functions as the epilogue;
//! - `fused_core::exec::StepKernels` for [`CudaBackend`]: the core's plan
//!   executor runs a plan on the GPU through host slices (the activation
//!   modes of [`check_gemv_mode`]; formats, modes and column counts it
//!   lacks are refused as `fused_core::Error::Unsupported`);
//! - [`DevicePlan`]: a device-resident plan executor (every graph buffer on
//!   the device, uploaded once; GEMV weights prepared once; the plan's
//!   launches enqueued on one stream and synchronised once per run, or
//!   replayed as a captured CUDA graph, see [`Submission`]; independent
//!   one-column GEMV steps of one kernel, such as q, k and v, grouped into
//!   one launch; the core's decode ops, RoPE, the KV-cache row write,
//!   the fused key/value append, split attention and argmax, as kernels that read the token position
//!   from device memory, so that one captured graph serves every token);
//! - [`CudaBackend::copy_bandwidth_gbs`]: the device-to-device copy rate,
//!   the ceiling a GEMV's bytes are measured against.
//!
//! Every backend of a process shares device 0's primary context, and
//! backends and their plans may be used from several threads. A CUDA graph
//! capture ([`DevicePlan::capture_graph`], the contract's
//! `record_for_replay`) is invalidated by work another thread asks of the
//! context meanwhile, so it holds a process-wide lock alone while every
//! other driver call of the crate shares it: a capture waits for the calls
//! in flight, and they wait for it.
//!
//! Which kernel shape a launch takes, whether GEMVs overlap or are grouped
//! and how far a GEMV asks L2 ahead is a pure function of the device, the
//! call's shape and format and the backend's [`Tuning`]: the tuned table by
//! default (`src/tuning.rs`), overridden programmatically by [`Knob`]s
//! ([`CudaBackend::set_tuning`]). The crate reads no environment variable.
//!
//! # Example
//!
//! A runtime reaches this backend through the core's contract
//! ([`fused_core::backend::Backend`]): a planned graph compiled into a
//! resident plan (every buffer on the device, launches built once),
//! written, run and read; the same code runs on `fused_cpu::CpuBackend` or
//! `fused_vulkan::VulkanBackend` with another constructor. `no_run`: it
//! needs a GPU.
//!
//! ```no_run
//! use fused_core::acts::GemvMode;
//! use fused_core::backend::{Backend, ResidentPlan};
//! use fused_core::element::Activation;
//! use fused_core::graph::{Graph, Place};
//! use fused_core::planner::plan;
//! use fused_core::tensor::{BufferId, TensorDesc};
//! use fused_core::DType;
//! use fused_cuda::{CudaBackend, CudaError};
//!
//! fn main() -> Result<(), CudaError> {
//!     let be = CudaBackend::new()?;
//!     let (k, m) = (256, 64);
//!     let mut g = Graph::new();
//!     let wt = TensorDesc::contiguous(DType::Q8_0, [k, m, 1, 1], BufferId(0), 0)?;
//!     let xt = TensorDesc::contiguous(DType::F32, [k, 1, 1, 1], BufferId(1), 0)?;
//!     let (w, x) = (g.input(wt)?, g.input(xt)?);
//!     let y = g.mul_mat(w, x, Place::at(1, 4 * k))?;
//!     let out = g.unary(Activation::Silu, y, Place::at(1, 4 * (k + m)))?;
//!     g.mark_output(out)?;
//!     let p = plan(&g); // the GEMV with SiLU in its epilogue: one launch
//!     let mut rp = be.compile(&g, &p, GemvMode::Ggml, &[m * DType::Q8_0.row_bytes(k)?, 4 * (k + 2 * m)])?;
//!     rp.write(BufferId(0), 0, &vec![0x11; m * DType::Q8_0.row_bytes(k)?])?; // once
//!     rp.write_f32(&xt, &vec![0.5; k])?; // every token
//!     rp.run()?;
//!     let silu = rp.read_f32(g.tensor(out)?)?;
//!     assert_eq!(silu.len(), m);
//!     Ok(())
//! }
//! ```
//!
//! The feed-forward block of a decode step on Q4_0 weights, in GGML's mode
//! (activations quantized to Q8_0 on the device, integer dot products): the
//! gated GEMV in one pass over both weights, then the down projection with
//! the residual added in registers; and the same down projection unfused
//! (bare GEMV, then the add kernel), equal bit for bit. `no_run`: it needs a
//! GPU; without one (or without the `cuda` feature) `CudaBackend::new`
//! returns the error that says so.
//!
//! ```no_run
//! use fused_core::DType;
//! use fused_core::element::Activation;
//! use fused_core::epilogue::Epilogue;
//! use fused_core::quant::quantize_row;
//! use fused_core::acts::ActQuant;
//! use fused_core::weights::WeightMatrix;
//! use fused_cuda::{CudaBackend, CudaError, Elementwise, GemvJob};
//!
//! /// `rows × cols` Q4_0 weights from a smooth pattern.
//! fn q4_0(rows: usize, cols: usize, seed: f32) -> Result<Vec<u8>, CudaError> {
//!     let row_bytes = DType::Q4_0.row_bytes(cols)?;
//!     let mut bytes = vec![0u8; rows * row_bytes];
//!     for (r, row) in bytes.chunks_mut(row_bytes).enumerate() {
//!         let v: Vec<f32> = (0..cols).map(|c| ((r * 7 + c * 3) as f32 * seed).sin()).collect();
//!         quantize_row(DType::Q4_0, &v, row)?;
//!     }
//!     Ok(bytes)
//! }
//!
//! fn main() -> Result<(), CudaError> {
//!     let be = CudaBackend::new()?;
//!     let (d, ff) = (256, 512);
//!     let (g, u, dn) = (q4_0(ff, d, 0.1)?, q4_0(ff, d, 0.2)?, q4_0(d, ff, 0.3)?);
//!     let gate = be.upload_weights(&WeightMatrix::new(DType::Q4_0, ff, d, &g)?)?;
//!     let up = be.upload_weights(&WeightMatrix::new(DType::Q4_0, ff, d, &u)?)?;
//!     let down = be.upload_weights(&WeightMatrix::new(DType::Q4_0, d, ff, &dn)?)?;
//!     let x: Vec<f32> = (0..d).map(|i| (i as f32 * 0.01).cos()).collect();
//!     let x = be.upload(&x)?;
//!     let mode = ActQuant::ggml(DType::Q4_0);
//!
//!     // h = silu(W_g·x) ⊙ (W_u·x): one launch (plus the activations' quantizer).
//!     let mut h = be.alloc(ff)?;
//!     let glu = GemvJob::new(&gate, &mut h).with_glu(&up, Activation::Silu);
//!     be.gemv_batch(&x, 1, mode, &mut [glu])?;
//!     // out = W_d·h + x: the residual add is the GEMV's epilogue.
//!     let mut out = be.alloc(d)?;
//!     be.gemv_batch(&h, 1, mode, &mut [GemvJob::new(&down, &mut out).with_epilogue(&Epilogue::NONE.then_add()?, &[&x])])?;
//!
//!     // Unfused: the bare GEMV, then the element-wise add.
//!     let (mut bare, mut unfused) = (be.alloc(d)?, be.alloc(d)?);
//!     be.gemv_batch(&h, 1, mode, &mut [GemvJob::new(&down, &mut bare)])?;
//!     be.elementwise(Elementwise::Add(&bare, &x), &mut unfused)?;
//!
//!     let (mut a, mut b) = (vec![0.0f32; d], vec![0.0f32; d]);
//!     be.download(&out, &mut a)?;
//!     be.download(&unfused, &mut b)?;
//!     assert!(a.iter().zip(&b).all(|(p, q)| p.to_bits() == q.to_bits()));
//!     Ok(())
//! }
//! ```
//!
//! # Modules, in layers
//!
//! Each module uses only modules of the layers above it in this list
//! (`scripts/module-cycles fused-cuda` finds no cycle); each type's
//! inherent methods sit in one file a concern.
//!
//! 1. Plain data and the ABI: `error` (`CudaError`), `knob` and `tuning`
//!    (the tuned table, [`Tuning`]), `plan` (run statistics), `qacts` and
//!    `layout` (device layouts of activations and weights), `schedule`
//!    (which launches may overlap), `pdl` (the raw dependent launch),
//!    `params` (`#[repr(C)]` mirrors of the kernels' parameter blocks,
//!    block sizes).
//! 2. Kernel choice: `kernel_choice` (rows a block, units a lane, kernel
//!    names: a pure function of format, shape and [`Tuning`]),
//!    `fixed_epi` (the chains compiled into kernels of their own).
//! 3. Launch descriptions: `launch` (one kernel, grid and parameter block
//!    as device addresses), `group` (independent GEMVs as one launch),
//!    `decode` (the decode ops' launches: RoPE, row write, key/value
//!    append, attention, argmax).
//! 4. The device and its memory: `device` (context, stream, modules),
//!    `memory` ([`DeviceVec`], [`DeviceWeights`], [`DeviceActs`]), `job`
//!    ([`GemvJob`], [`Elementwise`]).
//! 5. `backend`: [`CudaBackend`], its checks and the one place that
//!    enqueues a launch.
//! 6. On top of the backend: `cuda_graph`, `plan_exec` ([`DevicePlan`]),
//!    `exec` (`StepKernels`), `contract` (the core's backend contract:
//!    trait impls only).
//! 7. The lab (the `lab` feature, off by default): `lab`, `handoff`,
//!    `timeline`, `launch_profile`, `teams` (the team kernels' choice,
//!    beside `fixed_epi`).
//!
//! # Numerics
//!
//! Every GEMV entry point takes the activation mode (`ActQuant`,
//! [`check_gemv_mode`]).
//!
//! Quantized activations (GGML's CPU modes, `ActQuant::ggml`: `Q8_0` for
//! Q8_0 / Q4_0 / Q5_0 / IQ4_NL weights, `Q8_1` for Q4_1 / Q5_1, `Q8_K` for
//! Q4_K / Q5_K / Q6_K / TQ2_0): one quantizer launch per
//! call writes the columns' codes and scales exactly as
//! `fused_core::quant::quantize_row` (bit for bit, in a layout of its own:
//! `src/qacts.rs`; a gated GEMV quantizes once for both weights); the GEMV
//! then forms each block's integer dot product exactly with `dp4a`
//! (weights in a second, block-per-lane layout: `layout::to_device_int`)
//! and scales it with GGML's f32 formula for that block; only the f32 sum
//! of the scaled block terms runs in another order than the core's
//! reference (within fused-verify's ulp budget).
//!
//! On compute capability 9.0 and up every kernel is a programmatic
//! dependent launch (`src/pdl.rs`): its blocks start as the previous
//! kernel's blocks retire and wait for that kernel's results
//! (`griddepcontrol.wait`) before they touch them, so the gap between two
//! launches on the stream mostly disappears.
//!
//! f32 activations (`ActQuant::F32`): the weights are decoded in registers
//! (no activation-quantization launch). Quantized weights are uploaded once in a
//! lane-interleaved layout (same bytes, rearranged; `src/layout.rs`) so that
//! every lane reads 16 bytes of codes and the activations stay coalesced;
//! each 4-element chunk of a block is dotted with its codes as exact f32
//! values (4-bit codes as `1 + q/16`: one byte permute per element) and
//! then scaled by the block's factors (Q4_0: `d·Σ(q−8)·x`, Q4_K:
//! `(d·sc)·Σq·x − (dmin·m)·Σx`), the core's dequantized products
//! regrouped. The dot products accumulate with `fmaf` in a fixed order (per
//! lane, a shuffle butterfly per warp, then the block's warps in order), so
//! they track the core's f32 reference within rounding, not bit for bit. The element
//! functions are CUDA's `expf`/`erff`/`tanhf` (within 2 ulp of libm), so
//! epilogues track the core within a tolerance; but every stage is one device
//! function with contraction off (`-fmad=false` and `__f*_rn` intrinsics), so
//! a fused epilogue and the same chain run as unfused kernels agree bit for
//! bit. The FWHT does the reference's operations in the reference's order
//! and equals `fused_core::fwht::fwht` bit for bit.
//!
//! # Features
//!
//! `cuda`, off by default. Without it the crate has the same public API,
//! needs no CUDA toolkit at all, and every constructor returns
//! [`CudaError::NotCompiled`] ("fused-cuda was built without the `cuda`
//! feature"), so code downstream compiles the same way in both cases.
//! With it, the crate depends on `cust` 0.3.2 and its build script compiles
//! every kernel in `kernels/` with nvcc to a cubin for `sm_90` (override with
//! `FUSED_CUDA_ARCH` at build time) and to portable `compute_80` PTX; the
//! device loads the cubin when it can run it, else JIT-compiles the PTX.
//! nvcc is taken from `$FUSED_NVCC`, else from the wheels that
//! `scripts/test` installs in `.tools/cuda`, else from `PATH`. `cust` links
//! against `libcuda`, which it looks for in `$CUDA_LIBRARY_PATH/lib64` and
//! `$CUDA_LIBRARY_PATH/lib64/stubs`; on a machine without a driver,
//! `scripts/gen-libcuda-stub` makes a stand-in. A missing device is an
//! `Err` at run time ([`CudaError::Driver`]), never a panic.
//!
//! `lab` (implies `cuda`, off by default): what exists to measure or to
//! A/B, not to run a model: event timing, the copy kernel, the device's
//! name and occupancy probes, the handoff chains, traced GEMV chains, a
//! plan run timed launch by launch, the team kernels, GEMVs that write their output quantized, the lab's
//! [`Knob`]s, and `cuda-bench`.

// The core's backend contract on this backend (trait impls only).
#[cfg(any(feature = "cuda", test))]
mod context_lock;
mod contract;
mod error;
mod job;
mod knob;
mod plan;
mod qacts;
mod tuning;

#[cfg(feature = "cuda")]
mod backend;
#[cfg(feature = "cuda")]
mod cuda_graph;
#[cfg(feature = "cuda")]
mod decode;
#[cfg(feature = "cuda")]
mod device;
#[cfg(feature = "cuda")]
mod exec;
#[cfg(feature = "cuda")]
mod fixed_epi;
#[cfg(feature = "cuda")]
mod group;
#[cfg(feature = "cuda")]
mod kernel_choice;
#[cfg(feature = "cuda")]
mod launch;
#[cfg(any(feature = "cuda", test))]
mod layout;
#[cfg(feature = "cuda")]
mod memory;
#[cfg(feature = "cuda")]
mod params;
#[cfg(feature = "cuda")]
mod pdl;
#[cfg(feature = "cuda")]
mod plan_exec;
#[cfg(any(feature = "cuda", test))]
mod schedule;

#[cfg(feature = "lab")]
mod handoff;
#[cfg(feature = "lab")]
mod lab;
#[cfg(feature = "lab")]
mod launch_profile;
#[cfg(feature = "lab")]
mod teams;
#[cfg(feature = "lab")]
mod timeline;

#[cfg(not(feature = "cuda"))]
mod stub;

#[cfg(feature = "cuda")]
pub use backend::CudaBackend;
pub use error::CudaError;
pub use job::{Elementwise, GemvJob};
pub use knob::Knob;
#[cfg(feature = "cuda")]
pub use memory::{DeviceActs, DeviceVec, DeviceWeights};
pub use plan::{DevicePlanStats, Submission};
#[cfg(feature = "cuda")]
pub use plan_exec::DevicePlan;
#[cfg(not(feature = "cuda"))]
pub use stub::{CudaBackend, DeviceActs, DevicePlan, DeviceVec, DeviceWeights};
pub use tuning::Tuning;

#[cfg(feature = "lab")]
pub use device::{CudaDevice, KernelForm};
#[cfg(feature = "lab")]
pub use fixed_epi::FixedEpilogueCopy;
#[cfg(feature = "lab")]
pub use fused_core::launch_profile::{KernelTotal, LaunchTime, kernel_totals};
#[cfg(feature = "lab")]
pub use handoff::{HANDOFF_MAX_BLOCKS, HANDOFF_MAX_KERNELS, Handoff, HandoffRun, handoff_expected};
#[cfg(feature = "lab")]
pub use job::AheadAt;
#[cfg(feature = "lab")]
pub use lab::{L2_AHEAD_DEFAULT, LaunchOptions};
#[cfg(feature = "lab")]
pub use qacts::QuantizedActs;
#[cfg(feature = "lab")]
pub use teams::TeamKernel;
#[cfg(feature = "lab")]
pub use timeline::{BlockTimes, CallHandoff, GemvTimeline};

use fused_core::DType;
use fused_core::acts::ActQuant;
use fused_core::error::Unsupported;

/// The weight formats the CUDA GEMV kernels take: every weight format of
/// the core (the activation-only Q8_1 and Q8_K aside).
pub const GEMV_DTYPES: [DType; 13] = [
    DType::F32,
    DType::F16,
    DType::BF16,
    DType::Q4_0,
    DType::Q4_1,
    DType::Q5_0,
    DType::Q5_1,
    DType::Q8_0,
    DType::Q4_K,
    DType::Q5_K,
    DType::Q6_K,
    DType::IQ4_NL,
    DType::TQ2_0,
];

/// Whether the CUDA GEMV kernels take weights of `dtype` with activations
/// fed per `mode`: every format of [`GEMV_DTYPES`] with f32 activations
/// ([`ActQuant::F32`]), and every quantized one in GGML's CPU mode
/// ([`ActQuant::ggml`]: Q8_0 activations for Q8_0, Q4_0, Q5_0 and IQ4_NL
/// weights, Q8_1 for Q4_1 and Q5_1, Q8_K for Q4_K, Q5_K, Q6_K and TQ2_0;
/// quantized on the device, integer dot products).
pub fn check_gemv_mode(dtype: DType, mode: ActQuant) -> Result<(), Unsupported> {
    if !GEMV_DTYPES.contains(&dtype) {
        return Err(Unsupported::WeightFormat(dtype));
    }
    if mode == ActQuant::F32 || mode == ActQuant::ggml(dtype) {
        Ok(())
    } else {
        Err(Unsupported::ActQuant(mode))
    }
}

/// The most activation columns one GEMV launch takes.
pub const MAX_COLS: usize = 8;

/// Whether this build of the crate can talk to a GPU (the `cuda` feature).
pub const CUDA_ENABLED: bool = cfg!(feature = "cuda");
