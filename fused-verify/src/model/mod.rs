//! An f64 reference forward pass of a Llama-architecture GGUF model,
//! written here independently of the example runtime (`fused-llama`).
//!
//! - [`config`]: the hyperparameters, read from the file's metadata;
//! - [`weights`]: every weight dequantized once with fused-core's
//!   dequantizers and kept as f32 (exact values);
//! - [`reference`](mod@reference): the f64 forward pass with its key/value cache;
//! - [`par`]: the reference's threads; [`error`]: [`ModelError`].

pub mod config;
pub mod error;
pub mod par;
pub mod reference;
pub mod weights;

pub use error::ModelError;
pub use reference::Reference;
