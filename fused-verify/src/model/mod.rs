//! The `model FILE` mode: a Llama-architecture GGUF model run by the
//! example runtime (`fused-llama`) on every backend, checked against an f64
//! reference forward pass written here, independently of the runtime.
//!
//! - [`config`]: the hyperparameters, read from the file's metadata;
//! - [`weights`]: every weight dequantized once with fused-core's
//!   dequantizers and kept as f32 (exact values);
//! - [`reference`](mod@reference): the f64 forward pass with its key/value cache;
//! - [`decoding`]: greedy and teacher-forced token sequences over any
//!   [`decoding::Decoder`] (the reference, or the runtime on a backend);
//! - [`checks`]: the verdicts (the logits' NMSE thresholds per activation
//!   mode, greedy divergences, " Paris");
//! - [`mode`]: the run: reference first, then every backend and mode;
//! - [`report`]: the checks, measurements and summary table;
//! - [`par`]: the reference's threads; [`error`]: [`ModelError`].

pub mod checks;
pub mod config;
pub mod decoding;
pub mod error;
pub mod mode;
pub mod par;
pub mod reference;
pub mod report;
pub mod weights;

pub use error::ModelError;
pub use mode::{PROMPT, run_model};
pub use reference::Reference;
pub use report::ModelReport;
