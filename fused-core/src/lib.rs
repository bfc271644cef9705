//! # fused-core: the contract every fused backend builds on
//!
//! LLM decode spends its time in matrix–vector products followed by tiny
//! element-wise ops (residual add, SiLU, sigmoid, SiLU(x)·y) and, in
//! Hadamard-rotated models, a sign multiply followed by a Hadamard transform.
//! `fused` folds those ops into the producing kernel. This crate says what
//! may be folded, and what the exact answer is:
//!
//! - [`dtype`], [`blocks`], [`quant`]: GGML/GGUF-compatible formats (F32, F16,
//!   BF16, Q4_0 … Q8_K, IQ4_NL, TQ2_0), byte-identical blocks, reference
//!   (de)quantization and the integer dot products.
//! - [`acts`], [`weights`], [`job`]: how a GEMV's activations reach its dot
//!   products (`ActQuant` for one GEMV, `GemvMode` for a plan), the weight
//!   matrices the kernels take (`WeightMatrix`, `GluWeights`), and one GEMV
//!   as every backend's eager entry point takes it (`GemvJob`).
//! - [`tensor`]: tensor descriptors — format, 4-D shape, byte strides, place
//!   in a buffer, contiguity, byte extent and overlap.
//! - [`element`], [`epilogue`], [`fwht`]: the element functions (defined once),
//!   the epilogue chain descriptor and the (signed) FWHT descriptor.
//! - [`norm`]: RMS normalisation, its reduction order defined once (the
//!   unfused `rms_norm` op and the fused GEMV prologue both follow it).
//! - [`graph`], [`legality`], [`planner`]: a small compute graph, the legality
//!   predicates (each refusal names its reason) and the planner.
//! - `backend` (with `alloc`): **the backend contract** every backend
//!   implements and every caller uses — `Backend` (what it supports, compile
//!   a plan into a resident plan), `ResidentPlan` (write, run, read, time),
//!   one `PlanStats` and one `PlanTiming`; `HostPlan` runs a plan step by
//!   step over host memory.
//! - `memory` (with `alloc`): host byte buffers (`Memory`, the `Buffers`
//!   trait) and the helpers that read a tensor out of them.
//! - `lower` (with `alloc`): what each plan step runs, its tensors looked
//!   up (`lower::Command`), and the one dispatch over it
//!   (`lower::CommandSink`, `lower::lower_into`) that the host executor and
//!   the CUDA and Vulkan device plans all use.
//! - `exec` (with `alloc`): the host executor — step dispatch, operand
//!   gathering and aliasing over host buffers — calling a backend's
//!   host-slice kernels (`exec::StepKernels`).
//! - `launch_profile` (with `alloc`): one run's launches each timed alone,
//!   as the backends' profilers (lab features) return them, and their sums
//!   by kernel; the runs a leave-out profile replays (each kernel left out
//!   in turn).
//! - `look_ahead` (with `alloc`): which window of which coming GEMV's
//!   weights each command of a device plan asks L2 for (both GPU
//!   backends' look-ahead).
//! - [`placement`]: byte regions of a device plan's buffers and the checks a
//!   device plan makes before it binds a tensor (contiguous, in bounds, f32,
//!   read in place only where the overlap rule allows).
//! - [`reuse`]: what a device plan may reuse from one step to a later one
//!   (the latest activation quantization, while its input and output stay
//!   unwritten).
//! - [`reference`](mod@reference): the scalar reference — GEMV in f32 with an explicit
//!   activation-quantization mode or in f64, and graph / plan evaluators.
//! - [`error`]: the one error type; nothing panics on bad input.
//!
//! ## Layers
//!
//! The modules import one another in one direction only, from the bottom:
//! the format enum, node ids and refusal reasons (private `format`, `ids`,
//! `refusal`, re-exported by [`dtype`], [`graph`] and [`legality`]) and
//! [`acts`]; then [`error`], which names them; then everything that returns
//! an error (descriptors, blocks, quantization, weights, the GEMV job,
//! graph, legality, planner, memory, lower, reference, exec) and, last,
//! `backend`.
//! `scripts/module-cycles fused-core` checks that no cycle creeps in.
//!
//! ## The path: graph → planner → plan → backend
//!
//! A caller describes a computation as a [`graph::Graph`], placing every
//! tensor in a buffer (that is how aliasing enters). [`planner::plan`] turns
//! it into a [`planner::Plan`]: fused steps ([`planner::Step::Gemv`],
//! [`planner::Step::GluGemv`], [`planner::Step::SignedFwht`]) and unfused
//! nodes, plus every refused candidate with its [`legality::Refusal`]. A
//! backend runs the plan's steps with its kernels; the reference runs the
//! same plan ([`reference::eval::eval_plan`]) and the unfused graph
//! ([`reference::eval::eval_graph`]), and the two agree bit for bit.
//!
//! ```
//! use fused_core::DType;
//! use fused_core::element::Activation;
//! use fused_core::graph::{Graph, Place};
//! use fused_core::planner::{plan, Step};
//! use fused_core::reference::eval::{eval_graph, eval_plan};
//! use fused_core::acts::GemvMode;
//! use fused_core::memory::Memory;
//! use fused_core::tensor::{BufferId, TensorDesc};
//!
//! # fn main() -> Result<(), fused_core::Error> {
//! let (k, m) = (64, 8);
//! let mut g = Graph::new();
//! // Buffer 0 holds the Q8_0 weights, buffer 1 the f32 activations.
//! let w = g.input(TensorDesc::contiguous(DType::Q8_0, [k, m, 1, 1], BufferId(0), 0)?)?;
//! let x = g.input(TensorDesc::contiguous(DType::F32, [k, 1, 1, 1], BufferId(1), 0)?)?;
//! let r = g.input(TensorDesc::contiguous(DType::F32, [m, 1, 1, 1], BufferId(1), 256)?)?;
//! let y = g.mul_mat(w, x, Place::at(1, 512))?;
//! let a = g.unary(Activation::Silu, y, Place::at(1, 1024))?;
//! let out = g.add(a, r, Place::at(1, 256))?; // in place on the residual
//! g.mark_output(out)?;
//!
//! let p = plan(&g);
//! assert_eq!(p.fused_steps(), 1);
//! assert!(matches!(&p.steps[0], Step::Gemv(s) if s.epilogue.len() == 2));
//!
//! let mut mem = Memory::new(&[m * DType::Q8_0.row_bytes(k)?, 2048]);
//! let w_bytes = vec![0x11u8; m * DType::Q8_0.row_bytes(k)?];
//! mem.write_rows(g.tensor(w)?, &w_bytes)?;
//! mem.write(g.tensor(x)?, &vec![0.5; k])?;
//! mem.write(g.tensor(r)?, &vec![1.0; m])?;
//! let mut fused = mem.clone();
//! eval_graph(&g, &mut mem, GemvMode::Ggml)?;
//! eval_plan(&g, &p, &mut fused, GemvMode::Ggml)?;
//! assert_eq!(mem.read(g.tensor(out)?)?, fused.read(g.tensor(out)?)?);
//! # Ok(())
//! # }
//! ```
//!
//! ## Features
//! - `std`: a monotonic clock for host plans (`backend::std_clock`); the
//!   backend crates turn it on.
//! - `alloc` (default): graphs, plans and the evaluators. Without it the crate
//!   is `#![no_std]` with no allocator: formats, descriptors, predicates and
//!   the GEMV reference on caller-provided buffers.
#![no_std]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

#[cfg(feature = "alloc")]
extern crate alloc;
#[cfg(feature = "std")]
extern crate std;

pub mod acts;
#[cfg(feature = "alloc")]
mod argmax_tail;
#[cfg(feature = "alloc")]
pub mod backend;
pub mod blocks;
pub mod decode;
pub mod dtype;
pub mod element;
pub mod epilogue;
pub mod error;
#[cfg(feature = "alloc")]
pub mod exec;
mod format;
pub mod fwht;
pub mod graph;
mod ids;
pub mod job;
#[cfg(feature = "alloc")]
mod kv_append;
#[cfg(feature = "alloc")]
pub mod launch_profile;
pub mod legality;
#[cfg(feature = "alloc")]
pub mod look_ahead;
#[cfg(feature = "alloc")]
pub mod lower;
#[cfg(feature = "alloc")]
pub mod memory;
pub mod norm;
pub mod placement;
#[cfg(feature = "alloc")]
pub mod planner;
pub mod quant;
pub mod reference;
mod refusal;
pub mod reuse;
#[cfg(feature = "alloc")]
mod step_order;
pub mod tensor;
pub mod weights;

pub use dtype::DType;
pub use error::Error;
