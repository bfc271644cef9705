//! The hyperparameters of a Llama model, read from GGUF metadata (which is
//! authoritative) and checked for what this runtime supports.

use fused_gguf::Gguf;

use crate::error::LlamaError;
use crate::file::{get_float_or, get_uint, get_usize};

/// Most layers, heads, or elements in one dimension the runtime accepts:
/// far above published models, low enough that a hostile file cannot make
/// it allocate without bound before a tensor check fails.
const MAX_DIM: usize = 1 << 20;

/// The positions the runtime allows when neither the file nor the caller
/// says fewer.
pub const DEFAULT_MAX_CONTEXT: usize = 4096;

/// A Llama model's hyperparameters.
#[derive(Clone, Debug, PartialEq)]
pub struct LlamaConfig {
    /// Decoder layers (`llama.block_count`).
    pub n_layer: usize,
    /// Hidden size (`llama.embedding_length`).
    pub hidden: usize,
    /// Feed-forward size (`llama.feed_forward_length`).
    pub ffn: usize,
    /// Query heads (`llama.attention.head_count`).
    pub n_head: usize,
    /// Key/value heads (`llama.attention.head_count_kv`; grouped-query
    /// attention when fewer than `n_head`).
    pub n_head_kv: usize,
    /// Elements per head (`hidden / n_head`, or `llama.attention.key_length`).
    pub head_dim: usize,
    /// RMSNorm epsilon (`llama.attention.layer_norm_rms_epsilon`).
    pub norm_eps: f32,
    /// RoPE base (`llama.rope.freq_base`, 10000 when absent).
    pub rope_base: f32,
    /// RoPE position scale: `1 / llama.rope.scaling.factor` for linear
    /// scaling, else 1.
    pub rope_freq_scale: f32,
    /// The context the model was trained for (`llama.context_length`).
    pub context_length: usize,
    /// Tokens in the vocabulary (rows of the embedding table).
    pub vocab: usize,
}

impl LlamaConfig {
    /// Reads and checks the hyperparameters of a `llama` file.
    pub fn from_gguf(g: &Gguf<'_>) -> Result<LlamaConfig, LlamaError> {
        let arch = g.get_str("general.architecture")?;
        if arch != "llama" {
            return Err(LlamaError::Architecture {
                found: arch.to_string(),
            });
        }
        let n_layer = get_usize(g, "llama.block_count", MAX_DIM)?;
        let hidden = get_usize(g, "llama.embedding_length", MAX_DIM)?;
        let ffn = get_usize(g, "llama.feed_forward_length", MAX_DIM)?;
        let n_head = get_usize(g, "llama.attention.head_count", MAX_DIM)?;
        let n_head_kv = match g.get("llama.attention.head_count_kv") {
            Some(_) => get_usize(g, "llama.attention.head_count_kv", MAX_DIM)?,
            None => n_head,
        };
        let context_length = get_usize(g, "llama.context_length", usize::MAX)?;
        let norm_eps = g.get_f32("llama.attention.layer_norm_rms_epsilon")?;
        let rope_base = get_float_or(g, "llama.rope.freq_base", 10_000.0)?;
        let cfg_err = |what: &str, why: String| LlamaError::Config {
            what: what.to_string(),
            why,
        };
        if n_layer == 0 || hidden == 0 || ffn == 0 || n_head == 0 || n_head_kv == 0 {
            return Err(cfg_err(
                "hyperparameters",
                format!(
                    "zero in layers {n_layer}, hidden {hidden}, FFN {ffn}, heads {n_head}, \
                     KV heads {n_head_kv}"
                ),
            ));
        }
        if !hidden.is_multiple_of(n_head) {
            return Err(cfg_err(
                "llama.attention.head_count",
                format!("{n_head} heads do not divide the hidden size {hidden}"),
            ));
        }
        if !n_head.is_multiple_of(n_head_kv) {
            return Err(cfg_err(
                "llama.attention.head_count_kv",
                format!("{n_head_kv} KV heads do not divide the {n_head} query heads"),
            ));
        }
        let head_dim = hidden / n_head;
        for key in ["llama.attention.key_length", "llama.attention.value_length"] {
            if g.get(key).is_some() {
                let n = get_uint(g, key)?;
                if n != head_dim as u64 {
                    return Err(cfg_err(
                        key,
                        format!("{n}, but this runtime needs hidden / heads = {head_dim}"),
                    ));
                }
            }
        }
        if !head_dim.is_multiple_of(2) {
            return Err(cfg_err(
                "head size",
                format!("{head_dim} is odd; RoPE rotates pairs"),
            ));
        }
        if g.get("llama.rope.dimension_count").is_some() {
            let n = get_uint(g, "llama.rope.dimension_count")?;
            if n != head_dim as u64 {
                return Err(cfg_err(
                    "llama.rope.dimension_count",
                    format!(
                        "{n}: partial rotary embeddings are not supported (head size {head_dim})"
                    ),
                ));
            }
        }
        let rope_freq_scale = match g.get("llama.rope.scaling.type") {
            None => 1.0,
            Some(_) => match g.get_str("llama.rope.scaling.type")? {
                "none" => 1.0,
                "linear" => {
                    let f = get_float_or(g, "llama.rope.scaling.factor", 1.0)?;
                    if !(f.is_finite() && f > 0.0) {
                        return Err(cfg_err("llama.rope.scaling.factor", format!("{f}")));
                    }
                    1.0 / f
                }
                other => {
                    return Err(cfg_err(
                        "llama.rope.scaling.type",
                        format!("`{}` is not supported (none, linear)", other.escape_debug()),
                    ));
                }
            },
        };
        if !(norm_eps.is_finite() && norm_eps >= 0.0) {
            return Err(cfg_err(
                "llama.attention.layer_norm_rms_epsilon",
                format!("{norm_eps}"),
            ));
        }
        if !(rope_base.is_finite() && rope_base > 0.0) {
            return Err(cfg_err("llama.rope.freq_base", format!("{rope_base}")));
        }
        let vocab = match g.tensor("token_embd.weight") {
            Some(t) => usize::try_from(t.ne()[1]).unwrap_or(usize::MAX),
            None => {
                return Err(LlamaError::MissingTensor {
                    name: "token_embd.weight".into(),
                });
            }
        };
        if vocab == 0 || vocab > u32::MAX as usize {
            return Err(cfg_err("vocabulary", format!("{vocab} tokens")));
        }
        Ok(LlamaConfig {
            n_layer,
            hidden,
            ffn,
            n_head,
            n_head_kv,
            head_dim,
            norm_eps,
            rope_base,
            rope_freq_scale,
            context_length,
            vocab,
        })
    }

    /// Elements of one layer's keys (or values) for one position.
    pub fn kv_dim(&self) -> usize {
        self.n_head_kv * self.head_dim
    }

    /// Query heads that share one key/value head.
    pub fn group(&self) -> usize {
        self.n_head / self.n_head_kv
    }
}
