//! Helpers shared by the fuzz targets of `fused` (one concern per module):
//!
//! - [`data`]: deterministic, bounded test values (weights, activations,
//!   operands) so that oracles compare numbers, not garbage.
//! - [`bits`]: bit-equality of f32 slices with every NaN equal to every NaN.
//! - [`close`]: NMSE closeness, for results not bit-exact to a reference.
//! - [`gguf_write`]: writes a parsed GGUF header back to bytes (the
//!   re-read oracle of `gguf_parse`).
//! - [`gguf_check`]: the invariants a parsed GGUF file must satisfy.
//! - [`graph_gen`]: a small graph with arbitrary shapes, offsets and buffer
//!   layouts built through the public `Graph` builder (for `plan_eval`).
//! - [`punning`]: when NaN payloads may legitimately change a graph's
//!   outputs (a non-F32 view over F32 results).
//! - [`gemv_case`]: an arbitrary GEMV job's parts (for `cpu_backend`).
//! - [`cpu_ops`]: the CPU backend's FWHT, element-wise and packed-GEMV
//!   entry points against their references (for `cpu_backend`).

pub mod bits;
pub mod close;
pub mod cpu_ops;
pub mod data;
pub mod gemv_case;
pub mod gguf_check;
pub mod gguf_write;
pub mod graph_gen;
pub mod punning;
