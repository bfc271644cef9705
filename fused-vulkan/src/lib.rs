//! fused-vulkan: the Vulkan compute backend of `fused`.
//!
//! - [`VulkanContext`]: the Vulkan loader is loaded at run time
//!   (`ash::Entry::load`), so a machine without Vulkan gets an `Err`, never a
//!   panic or a link failure. One device, one compute queue, its subgroup
//!   properties and limits ([`DeviceInfo`]), storage buffers (host visible on
//!   unified-memory devices, device local with staging copies otherwise),
//!   explicit barriers between dispatches, timestamp queries, and the
//!   Khronos validation layer with a messenger that records every warning
//!   and error ([`ContextOptions::validation`]).
//! - Shaders are GLSL in `shaders/`, compiled by `shaders/build-spirv.sh`
//!   (glslc) into the committed `spirv/`; building the crate needs no shader
//!   compiler (see the README for why).
//! - [`VulkanBackend`]: signed and unsigned FWHT for every `N = 2^k` up to
//!   32768 (subgroup-shuffle and shared-memory variants, picked from the
//!   device's subgroup properties), GEMV with the core's epilogue chain for
//!   every core weight format (1 to 8 f32 columns) and its gated dual form,
//!   with f32 activations or, for every quantized format but Q4_1 and
//!   Q5_1, GGML's quantized activations (Q8_0 / Q8_K, quantized on the
//!   device exactly as
//!   the core does and dotted in integers), and the unfused element-wise
//!   kernels built from the same shader functions as the epilogue (fused ==
//!   unfused bit for bit).
//! - `exec`: the core's plan executor on this backend — [`VulkanBackend`]
//!   implements `fused_core::exec::StepKernels` (formats, activation modes
//!   and column counts it lacks are refused as
//!   `fused_core::Error::Unsupported`).
//! - [`DevicePlan`]: a device-resident plan executor — the graph's buffers
//!   stay on the device, the whole plan is one recorded command buffer
//!   (one dispatch per kernel step, a barrier only between dependent
//!   commands), re-run with one submission and timed with timestamps.
//! - [`timing`]: device-timed kernels for the bench binary.

mod backend;
mod context;
mod error;
mod exec;
mod kernels;
mod plan_exec;
pub mod timing;

pub use backend::{
    FWHT_MAX_SLABS, FwhtPlan, FwhtVariant, GEMV_MAX_ROWS, GEMV_MAX_UNROLL, GemvShape, MAX_COLS,
    QuantizeShape, VulkanBackend,
};
pub use context::{Buffer, ContextOptions, DeviceInfo, VulkanContext};
pub use error::VulkanError;
pub use plan_exec::{BINDING_ALIGN, DevicePlan, DevicePlanStats, PlanTiming};
