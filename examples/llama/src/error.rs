//! The runtime's one error type: everything that can be wrong with a model
//! file, a prompt or a run, each variant naming what is at fault.

use std::fmt;
use std::path::PathBuf;

use fused_core::DType;
use fused_gguf::GgufError;

/// Why a model could not be loaded or run.
#[derive(Debug)]
#[non_exhaustive]
pub enum LlamaError {
    /// The model file could not be opened or mapped.
    Io {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// The GGUF reader refused the file, or a metadata key is missing or of
    /// the wrong type (the message names the key or tensor).
    Gguf(GgufError),
    /// `general.architecture` is not one this runtime runs.
    Architecture {
        /// The architecture the file declares.
        found: String,
    },
    /// A tensor the architecture needs is not in the file.
    MissingTensor {
        /// Its GGUF name.
        name: String,
    },
    /// A tensor has a shape other than the hyperparameters imply.
    Shape {
        /// Its GGUF name.
        name: String,
        /// The shape the model needs (GGML order).
        expected: Vec<u64>,
        /// The shape in the file.
        actual: Vec<u64>,
    },
    /// A tensor is stored in a format this runtime (or the chosen backend)
    /// cannot compute on.
    Format {
        /// Its GGUF name.
        name: String,
        /// Its format.
        dtype: String,
        /// Why it cannot be used.
        why: String,
    },
    /// A hyperparameter is out of what the runtime supports.
    Config {
        /// The metadata key or quantity.
        what: String,
        /// Why it is refused.
        why: String,
    },
    /// The tokenizer in the file cannot be used, or a token cannot be
    /// encoded or decoded.
    Tokenizer(String),
    /// A position past the context the model (or the runtime) allows.
    ContextOverflow {
        /// The position asked for (0-based).
        pos: usize,
        /// The context length: positions `0..max` are allowed.
        max: usize,
    },
    /// The backend refused or failed a plan.
    Backend {
        /// What the runtime was doing.
        during: String,
        /// The backend's message.
        message: String,
    },
    /// A bad command-line request (empty prompt, unknown backend, ...).
    Usage(String),
}

impl LlamaError {
    /// A backend error `e` raised while doing `during`.
    pub fn backend(during: impl Into<String>, e: impl fmt::Display) -> LlamaError {
        LlamaError::Backend {
            during: during.into(),
            message: e.to_string(),
        }
    }

    /// A tensor of format `dtype` that cannot be used, and why.
    pub fn format(name: &str, dtype: DType, why: impl Into<String>) -> LlamaError {
        LlamaError::Format {
            name: name.to_string(),
            dtype: dtype.to_string(),
            why: why.into(),
        }
    }
}

impl fmt::Display for LlamaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LlamaError::Io { path, source } => write!(f, "{}: {source}", path.display()),
            LlamaError::Gguf(e) => write!(f, "GGUF: {e}"),
            LlamaError::Architecture { found } => write!(
                f,
                "unsupported architecture `{}` (general.architecture); this runtime runs `llama`",
                found.escape_debug()
            ),
            LlamaError::MissingTensor { name } => {
                write!(f, "tensor `{}` is not in the file", name.escape_debug())
            }
            LlamaError::Shape {
                name,
                expected,
                actual,
            } => write!(
                f,
                "tensor `{}` has shape {actual:?}, the model needs {expected:?}",
                name.escape_debug()
            ),
            LlamaError::Format { name, dtype, why } => write!(
                f,
                "tensor `{}` is stored as {dtype}: {why}",
                name.escape_debug()
            ),
            LlamaError::Config { what, why } => write!(f, "{what}: {why}"),
            LlamaError::Tokenizer(why) => write!(f, "tokenizer: {why}"),
            LlamaError::ContextOverflow { pos, max } => write!(
                f,
                "context overflow: position {pos} is past the context of {max} tokens"
            ),
            LlamaError::Backend { during, message } => write!(f, "backend, {during}: {message}"),
            LlamaError::Usage(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for LlamaError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            LlamaError::Io { source, .. } => Some(source),
            LlamaError::Gguf(e) => Some(e),
            _ => None,
        }
    }
}

impl From<GgufError> for LlamaError {
    fn from(e: GgufError) -> LlamaError {
        LlamaError::Gguf(e)
    }
}

impl From<fused_core::Error> for LlamaError {
    fn from(e: fused_core::Error) -> LlamaError {
        LlamaError::backend("building a graph", e)
    }
}
