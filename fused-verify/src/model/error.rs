//! Why the `model` mode could not check a file: each variant names what is
//! at fault (the file, a metadata key, a tensor, the runtime's step).

use std::fmt;
use std::path::PathBuf;

use fused_gguf::GgufError;
use fused_llama::LlamaError;

/// Why a model file could not be read, referenced or run.
#[derive(Debug)]
#[non_exhaustive]
pub enum ModelError {
    /// The file could not be opened or mapped.
    Io {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// The GGUF reader refused the file, or a metadata key is missing or of
    /// the wrong type (the message names the key or tensor).
    Gguf(GgufError),
    /// `general.architecture` is not `llama`.
    NotLlama {
        /// The architecture the file declares.
        found: String,
    },
    /// A hyperparameter the reference cannot use.
    Config {
        /// The metadata key or quantity.
        what: String,
        /// Why it is refused.
        why: String,
    },
    /// A tensor the reference needs is missing, misshapen or in a format
    /// without a dequantizer.
    Tensor {
        /// Its GGUF name.
        name: String,
        /// What is wrong with it.
        why: String,
    },
    /// The runtime under test (`fused-llama`) refused or failed.
    Runtime {
        /// What the mode was doing.
        during: String,
        /// The runtime's error.
        source: LlamaError,
    },
    /// A request the mode cannot honour (an empty prompt, a token outside
    /// the vocabulary, no position left).
    Usage(String),
}

impl ModelError {
    /// A runtime error met while `during`.
    pub fn runtime(during: impl Into<String>, source: LlamaError) -> ModelError {
        ModelError::Runtime {
            during: during.into(),
            source,
        }
    }

    /// A tensor error.
    pub fn tensor(name: &str, why: impl Into<String>) -> ModelError {
        ModelError::Tensor {
            name: name.to_string(),
            why: why.into(),
        }
    }
}

impl fmt::Display for ModelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ModelError::Io { path, source } => write!(f, "{}: {source}", path.display()),
            ModelError::Gguf(e) => write!(f, "{e}"),
            ModelError::NotLlama { found } => write!(
                f,
                "general.architecture is `{}`: the model mode checks Llama-architecture \
                 files only (`llama`)",
                found.escape_debug()
            ),
            ModelError::Config { what, why } => write!(f, "{what}: {why}"),
            ModelError::Tensor { name, why } => write!(f, "tensor {name}: {why}"),
            ModelError::Runtime { during, source } => write!(f, "{during}: {source}"),
            ModelError::Usage(why) => write!(f, "{why}"),
        }
    }
}

impl std::error::Error for ModelError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ModelError::Io { source, .. } => Some(source),
            ModelError::Gguf(e) => Some(e),
            ModelError::Runtime { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl From<GgufError> for ModelError {
    fn from(e: GgufError) -> ModelError {
        ModelError::Gguf(e)
    }
}
