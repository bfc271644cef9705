//! # fused-llama: a Llama-architecture model through the crates
//!
//! A worked runtime written only against public APIs: the GGUF file is
//! read by `fused-gguf`; a whole decode token — RMSNorms as GEMV
//! prologues, the matrix products, RoPE, the key/value append, attention,
//! the head and the greedy argmax — runs as one resident plan that
//! `fused-core`'s planner fused and a backend compiled (`fused-cpu` by
//! default), with the key/value caches on the backend
//! ([`token::TokenPlan`]); the embedding lookup and sampling are host code
//! here. Where a backend cannot run the whole token on its device, plans
//! per layer run around host RoPE and attention ([`DecodePath::Layered`]).
//! The model is generic over [`fused_core::backend::Backend`]: switching
//! backend is one constructor.
//!
//! ```no_run
//! use fused_llama::{LoadOptions, Model, ModelFile, Sampler, generate};
//!
//! let backend = fused_cpu::CpuBackend::new(2)?;
//! let file = ModelFile::open("model.gguf".as_ref())?;
//! let mut model = Model::load(file, &backend, LoadOptions::default())?;
//! let prompt = model.tokenizer().encode("The capital of France is")?;
//! let mut sampler = Sampler::new(0.0, 1.0, 0);
//! let out = generate(&mut model, &prompt, 8, &mut sampler, true, |text| print!("{text}"))?;
//! println!("\n{:.1} tok/s", out.decode_tok_s());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod attention;
pub mod config;
pub mod error;
pub mod file;
pub mod generate;
mod gguf_meta;
pub mod model;
pub mod ops;
pub mod plans;
pub mod profile;
pub mod sampling;
pub mod synth;
pub mod token;
pub mod tokenizer;

pub use config::LlamaConfig;
pub use error::LlamaError;
pub use file::ModelFile;
pub use generate::{Generation, generate};
pub use model::{DecodePath, LoadOptions, Model};
pub use profile::{Phase, Profile};
pub use sampling::Sampler;
pub use tokenizer::Tokenizer;
