//! The hyperparameters of a Llama GGUF file as the reference reads them:
//! from the metadata, with fused-gguf alone (not through the runtime under
//! test, so that a misread key there is caught here).

use fused_gguf::{Gguf, GgufError, Value};

use super::error::ModelError;

/// Most layers, heads or elements in one dimension: far above published
/// models, low enough that a hostile file cannot make the reference
/// allocate without bound before a tensor's shape is checked.
const MAX_DIM: usize = 1 << 20;

/// A Llama model's hyperparameters, in f64 where they are reals.
#[derive(Clone, Debug, PartialEq)]
pub struct Hyper {
    /// Decoder layers (`llama.block_count`).
    pub n_layer: usize,
    /// Hidden size (`llama.embedding_length`).
    pub hidden: usize,
    /// Feed-forward size (`llama.feed_forward_length`).
    pub ffn: usize,
    /// Query heads (`llama.attention.head_count`).
    pub n_head: usize,
    /// Key/value heads (`llama.attention.head_count_kv`, else `n_head`).
    pub n_head_kv: usize,
    /// Elements per head: `hidden / n_head`.
    pub head_dim: usize,
    /// Tokens in the vocabulary (rows of `token_embd.weight`).
    pub vocab: usize,
    /// RMSNorm epsilon (`llama.attention.layer_norm_rms_epsilon`).
    pub norm_eps: f64,
    /// RoPE frequency base (`llama.rope.freq_base`, 10000 when absent).
    pub rope_base: f64,
    /// RoPE position scale: `1 / llama.rope.scaling.factor` for linear
    /// scaling, else 1.
    pub rope_freq_scale: f64,
}

impl Hyper {
    /// Reads the hyperparameters of a `llama` file; any other architecture
    /// is [`ModelError::NotLlama`].
    pub fn from_gguf(g: &Gguf<'_>) -> Result<Hyper, ModelError> {
        let arch = g.get_str("general.architecture")?;
        if arch != "llama" {
            return Err(ModelError::NotLlama {
                found: arch.to_string(),
            });
        }
        let n_layer = dim(g, "llama.block_count")?;
        let hidden = dim(g, "llama.embedding_length")?;
        let ffn = dim(g, "llama.feed_forward_length")?;
        let n_head = dim(g, "llama.attention.head_count")?;
        let n_head_kv = match g.get("llama.attention.head_count_kv") {
            Some(_) => dim(g, "llama.attention.head_count_kv")?,
            None => n_head,
        };
        let bad = |what: &str, why: String| ModelError::Config {
            what: what.to_string(),
            why,
        };
        if !hidden.is_multiple_of(n_head) {
            return Err(bad(
                "llama.attention.head_count",
                format!("{n_head} heads do not divide the hidden size {hidden}"),
            ));
        }
        if !n_head.is_multiple_of(n_head_kv) {
            return Err(bad(
                "llama.attention.head_count_kv",
                format!("{n_head_kv} KV heads do not divide the {n_head} query heads"),
            ));
        }
        let head_dim = hidden / n_head;
        if !head_dim.is_multiple_of(2) {
            return Err(bad("head size", format!("{head_dim} is odd")));
        }
        if g.get("llama.rope.dimension_count").is_some() {
            let n = uint(g, "llama.rope.dimension_count")?;
            if n != head_dim as u64 {
                return Err(bad(
                    "llama.rope.dimension_count",
                    format!("{n}: the reference rotates whole heads of {head_dim}"),
                ));
            }
        }
        let norm_eps = float_or(g, "llama.attention.layer_norm_rms_epsilon", None)?;
        let rope_base = float_or(g, "llama.rope.freq_base", Some(10_000.0))?;
        let rope_freq_scale = match g.get("llama.rope.scaling.type") {
            None => 1.0,
            Some(_) => match g.get_str("llama.rope.scaling.type")? {
                "none" => 1.0,
                "linear" => 1.0 / float_or(g, "llama.rope.scaling.factor", Some(1.0))?,
                other => {
                    return Err(bad(
                        "llama.rope.scaling.type",
                        format!(
                            "`{}` (the reference has none, linear)",
                            other.escape_debug()
                        ),
                    ));
                }
            },
        };
        if !(norm_eps.is_finite() && norm_eps >= 0.0) {
            return Err(bad(
                "llama.attention.layer_norm_rms_epsilon",
                format!("{norm_eps}"),
            ));
        }
        for (what, v) in [
            ("llama.rope.freq_base", rope_base),
            ("llama.rope.scaling.factor", rope_freq_scale),
        ] {
            if !(v.is_finite() && v > 0.0) {
                return Err(bad(what, format!("{v}")));
            }
        }
        let vocab = match g.tensor("token_embd.weight") {
            Some(t) => usize::try_from(t.ne()[1]).unwrap_or(usize::MAX),
            None => {
                return Err(ModelError::tensor("token_embd.weight", "not in the file"));
            }
        };
        if vocab == 0 || vocab > u32::MAX as usize {
            return Err(bad("vocabulary", format!("{vocab} tokens")));
        }
        Ok(Hyper {
            n_layer,
            hidden,
            ffn,
            n_head,
            n_head_kv,
            head_dim,
            vocab,
            norm_eps,
            rope_base,
            rope_freq_scale,
        })
    }

    /// Query elements per position: `n_head · head_dim`.
    pub fn q_dim(&self) -> usize {
        self.n_head * self.head_dim
    }

    /// Key (or value) elements per position and layer.
    pub fn kv_dim(&self) -> usize {
        self.n_head_kv * self.head_dim
    }
}

/// The unsigned integer `key`, stored as any GGUF integer type.
fn uint(g: &Gguf<'_>, key: &str) -> Result<u64, ModelError> {
    let v = g
        .get(key)
        .ok_or_else(|| GgufError::MissingKey { key: key.into() })?;
    let n = v.as_uint();
    n.ok_or_else(|| ModelError::Config {
        what: key.to_string(),
        why: format!("expected a non-negative integer, found {v:?}"),
    })
}

/// [`uint`] as a dimension: 1 to [`MAX_DIM`].
fn dim(g: &Gguf<'_>, key: &str) -> Result<usize, ModelError> {
    let n = uint(g, key)?;
    usize::try_from(n)
        .ok()
        .filter(|n| (1..=MAX_DIM).contains(n))
        .ok_or_else(|| ModelError::Config {
            what: key.to_string(),
            why: format!("{n} is outside 1..={MAX_DIM}"),
        })
}

/// The real `key` (`FLOAT32` or `FLOAT64`), or `default` when absent (an
/// error when there is none).
fn float_or(g: &Gguf<'_>, key: &str, default: Option<f64>) -> Result<f64, ModelError> {
    match (g.get(key), default) {
        (Some(Value::F32(x)), _) => Ok(f64::from(*x)),
        (Some(Value::F64(x)), _) => Ok(*x),
        (None, Some(d)) => Ok(d),
        (None, None) => Err(GgufError::MissingKey { key: key.into() }.into()),
        (Some(v), _) => Err(ModelError::Config {
            what: key.to_string(),
            why: format!("expected a float, found {v:?}"),
        }),
    }
}
