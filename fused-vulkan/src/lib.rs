//! fused-vulkan: the Vulkan compute backend of `fused`.
//!
//! - [`VulkanBackend`]: signed and unsigned FWHT for every `N = 2^k` up to
//!   32768 (subgroup-shuffle and shared-memory variants, picked from the
//!   device's subgroup properties), GEMV with the core's epilogue chain for
//!   every core weight format (1 to [`MAX_COLS`] f32 columns) and its gated
//!   dual form, with f32 activations or, for every quantized format,
//!   GGML's quantized activations (Q8_0 for Q8_0, Q4_0, Q5_0 and IQ4_NL
//!   weights, Q8_1 for Q4_1 and Q5_1, Q8_K for Q4_K, Q5_K, Q6_K and TQ2_0;
//!   quantized on the device exactly as the core does and dotted in
//!   integers), the unfused element-wise kernels built from the same
//!   shader functions as the epilogue (fused == unfused bit for bit), and
//!   the device's copy bandwidth ([`VulkanBackend::copy_bandwidth_gbs`]).
//!   It implements `fused_core::exec::StepKernels`, so the core's plan
//!   executor runs on it (formats, activation modes and column counts it
//!   lacks are refused as `fused_core::Error::Unsupported`).
//! - [`DevicePlan`]: a device-resident plan executor — the graph's buffers
//!   stay on the device, the whole plan is one recorded command buffer
//!   (one dispatch per kernel step, a barrier only between dependent
//!   commands), re-run with one submission and timed with timestamps.
//! - [`VulkanContext`]: the Vulkan loader is loaded at run time
//!   (`ash::Entry::load`), so a machine without Vulkan gets an `Err`, never a
//!   panic or a link failure. One device, one compute queue, its properties
//!   ([`DeviceInfo`]), storage buffers (host visible on unified-memory
//!   devices, device local with staging copies otherwise), explicit
//!   barriers between dispatches, timestamp queries, and the Khronos
//!   validation layer with a messenger that records every warning and
//!   error ([`ContextOptions::validation`]). Library code reads no
//!   environment variable: callers choose the options.
//! - [`Tuning`]: the tuned launch shapes and kernel variants are one table
//!   (its default); kernels are chosen from (device, shape, format,
//!   tuning) by pure functions. The `lab` feature opens every knob, the
//!   device-timed kernels of `timing`, a device plan's run timed dispatch
//!   by dispatch or leaving kernels out (`LaunchProfiler` on
//!   `DevicePlan`) and the bench binary.
//! - Shaders are GLSL in `shaders/`, compiled by `shaders/build-spirv.sh`
//!   (glslc) into the committed `spirv/`; building the crate needs no shader
//!   compiler (see the README for why).
//!
//! Modules, each using only those before it:
//! `error` <- `pipeline` (SPIR-V modules, formats, kernel keys, building a
//! pipeline) <- `context` (instance, device, buffers, the pipeline cache,
//! submission) <- `measure` (device-time medians) and `tuning` (the table
//! and the pure kernel choice) <- `backend` (dispatches and eager ops) <-
//! `decode` (the decode ops' dispatches) <- `exec` (the core's step
//! executor) and `plan_exec` ([`DevicePlan`]; its `profile` child with
//! feature `lab`) <-
//! `contract` (the core's backend contract: trait impls only), `lab` and
//! `timing` (feature `lab`).

mod backend;
mod context;
// The core's backend contract on this backend (trait impls only).
mod contract;
mod decode;
mod error;
mod exec;
#[cfg(feature = "lab")]
mod lab;
mod measure;
mod pipeline;
mod plan_exec;
#[cfg(feature = "lab")]
pub mod timing;
mod tuning;

pub use backend::VulkanBackend;
pub use context::{Buffer, ContextOptions, DeviceInfo, VulkanContext};
pub use error::VulkanError;
pub use pipeline::MAX_COLS;
pub use plan_exec::DevicePlan;
#[cfg(feature = "lab")]
pub use plan_exec::DevicePlanStats;
pub use tuning::Tuning;
#[cfg(feature = "lab")]
pub use tuning::{
    FWHT_MAX_SLABS, FwhtPlan, FwhtVariant, GEMV_MAX_ROWS, GEMV_MAX_UNROLL, GemvShape, QuantizeShape,
};
