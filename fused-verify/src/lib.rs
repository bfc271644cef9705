//! # fused-verify: every backend against the reference, fused against unfused
//!
//! The project's main job (`cargo run --release -p fused-verify`). It needs
//! no GPU: the CPU backend runs in every instruction set the machine has
//! (scalar, AVX2, AVX-512), each as its own backend; the Vulkan backend
//! (feature `vulkan`, default) runs wherever a Vulkan driver opens (lavapipe
//! on a CPU-only machine) and the CUDA backend with the opt-in `cuda`
//! feature on a machine with an NVIDIA driver. Where a GPU backend cannot
//! open a device it is reported as skipped with the reason; cases it has no
//! kernel for are skipped one by one, with the reason.
//!
//! - [`backend`]: what the verifier's loops need of a backend
//!   ([`backend::Backend`]: name, availability, run a core plan fused or the
//!   graph unfused over host buffers, timing, bandwidth probe, counters),
//!   implemented once over the core's contract ([`backend::Contract`]) for
//!   every backend, and the registry.
//! - [`cases`]: the case generator (pattern × format × shape × columns ×
//!   chain × threads × seed) and the graph each case builds.
//! - [`metrics`]: NMSE, max abs error, ulps, bit identity, finiteness.
//! - [`tolerance`]: the documented tolerance table.
//! - [`verify`]: the checks of one case on the references and on a backend.
//! - [`run`]: the `test` mode; [`perf`]: the `perf` mode; [`decode`]: a
//!   stack of decode layers ([`stack`]: random weights or those of a GGUF
//!   file) fused vs unfused, per token; [`gguf`]: the GGUF reader, and the
//!   weight matrices of a GGUF file as cases; [`progress`]: the progress bar.
//! - [`model`]: `model FILE`, a Llama GGUF model through the example
//!   runtime (`fused-llama`) on every backend against an f64 reference
//!   forward pass: logits, greedy tokens, " Paris".
//! - [`plot`]: `--plot FILE.svg` for `perf` and `decode`.
//! - [`report`]: summary table, JSON, the closing `N passed, N failed, N skipped` line.
//! - [`selfcheck`]: the core's self-check, the first section of `test`.
//! - [`cli`]: the command line.
#![warn(missing_docs)]

pub mod backend;
pub mod cases;
pub mod cli;
pub mod decode;
pub mod gguf;
pub mod metrics;
pub mod model;
pub mod perf;
pub mod plot;
pub mod progress;
pub mod report;
pub mod run;
pub mod selfcheck;
pub mod stack;
pub mod tolerance;
pub mod verify;
