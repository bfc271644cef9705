//! The scalar reference every backend is checked against.
//!
//! - [`gemv`]: matrix–vector products for every weight format, in f32 with a
//!   fixed operation order and an explicit activation-quantization mode
//!   ([`ActQuant`](crate::acts::ActQuant)), plus an f64 mode for NMSE checks; with an epilogue
//!   applied to each accumulator.
//! - [`eval`] (with `alloc`): evaluates a [`crate::graph::Graph`] node by node
//!   (unfused) and a [`crate::planner::Plan`] step by step (fused) over a
//!   [`Memory`](crate::memory::Memory) of byte buffers, honouring aliasing. For every legal
//!   plan the two give bit-identical results.

#[cfg(feature = "alloc")]
pub mod eval;
pub mod gemv;
