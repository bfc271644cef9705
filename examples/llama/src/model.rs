//! A Llama model loaded onto a backend: the hyperparameters and the
//! embedding table on the host, every matrix in a resident plan
//! ([`crate::plans`]) with the RMSNorms as the prologues of the GEMVs that
//! read them (on the host where the backend refuses that), and the forward
//! pass of one token.

use std::fmt;
use std::time::Instant;

use fused_core::DType;
use fused_core::acts::GemvMode;
use fused_core::backend::Backend;
use fused_core::quant::dequantize_row;
use fused_gguf::Gguf;

use crate::attention::{AttentionShape, KvCache};
use crate::config::{DEFAULT_MAX_CONTEXT, LlamaConfig};
use crate::error::LlamaError;
use crate::file::{ModelFile, check_shape, matrix, tensor, vector};
use crate::ops::{Rope, rms_norm};
use crate::plans::{HeadPlan, Norm, PlanSummary, Qkv, QkvPlan, ResidualPlan, Supported};
use crate::profile::{Phase, Profile};
use crate::tokenizer::Tokenizer;

/// How a model is loaded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoadOptions {
    /// How the GEMVs feed activations: f32, or GGML's Q8 quantization.
    pub mode: GemvMode,
    /// The most positions to allow (further capped by the model's
    /// `llama.context_length`).
    pub max_context: usize,
    /// Run every RMSNorm on the host and the plans over normed inputs, as
    /// for a backend that refuses the norm prologue (`--host-norm`).
    pub host_norm: bool,
}

impl Default for LoadOptions {
    fn default() -> LoadOptions {
        LoadOptions {
            mode: GemvMode::Ggml,
            max_context: DEFAULT_MAX_CONTEXT,
            host_norm: false,
        }
    }
}

/// One decoder layer: its matrices in plans, its norms in them too unless
/// the backend refused the prologue.
struct Layer<'b, B: Backend + 'b> {
    /// The attention norm's weight when it runs on the host; `None` when
    /// the q/k/v plan computes it.
    attn_norm: Option<Vec<f32>>,
    qkv: QkvPlan<'b, B>,
    post: Post<'b, B>,
}

/// The layer after attention (its plans boxed: the variants' sizes differ).
enum Post<'b, B: Backend + 'b> {
    /// One plan: output projection + residual, the FFN norm as the GLU's
    /// prologue, down projection + residual.
    Fused(Box<ResidualPlan<'b, B>>),
    /// Two plans around a host RMSNorm.
    Host {
        ffn_norm: Vec<f32>,
        out: Box<ResidualPlan<'b, B>>,
        ffn: Box<ResidualPlan<'b, B>>,
    },
}

/// A plan built with the norm as its prologue, or the host-norm plan
/// `fallback` builds where `prologue` is `None` (not asked for) or the
/// backend refused it; the refusal is noted in `fallbacks` under `kind`
/// (once per kind).
fn prologue_or<T, U>(
    prologue: Option<Result<Supported<T>, LlamaError>>,
    fallback: impl FnOnce() -> Result<U, LlamaError>,
    fallbacks: &mut Vec<(&'static str, String)>,
    kind: &'static str,
) -> Result<Result<T, U>, LlamaError> {
    match prologue.transpose()? {
        Some(Ok(plan)) => Ok(Ok(plan)),
        refused => {
            if let Some(Err(why)) = refused
                && !fallbacks.iter().any(|(k, _)| *k == kind)
            {
                fallbacks.push((kind, why.to_string()));
            }
            Ok(Err(fallback()?))
        }
    }
}

/// Where the embedding table lies in the mapped file.
#[derive(Clone, Copy, Debug)]
struct Embedding {
    dtype: DType,
    offset: usize,
    row_bytes: usize,
    rows: usize,
}

/// A Llama model resident on backend `B`.
pub struct Model<'b, B: Backend + 'b> {
    cfg: LlamaConfig,
    file: ModelFile,
    embedding: Embedding,
    layers: Vec<Layer<'b, B>>,
    /// The final norm's weight when it runs on the host.
    output_norm: Option<Vec<f32>>,
    head: HeadPlan<'b, B>,
    fallbacks: Vec<(&'static str, String)>,
    rope: Rope,
    attention: AttentionShape,
    tokenizer: Tokenizer,
    max_context: usize,
    backend: String,
    weight_formats: Vec<(DType, usize)>,
    /// Time per phase, while profiling ([`Model::profile_tokens`]).
    profile: Option<Profile>,
    /// The vectors of a forward pass, kept from token to token.
    scratch: Scratch,
}

/// The vectors a forward pass writes, allocated once: a token's pass then
/// allocates nothing (the logits alone are `4 · vocab` bytes, whose
/// allocation and page faults cost about 1.5 % of a token).
#[derive(Debug, Default)]
struct Scratch {
    /// The residual stream.
    h: Vec<f32>,
    /// The host-normed input of a plan without the norm prologue.
    x: Vec<f32>,
    qkv: Qkv,
    /// The attention output.
    attn: Vec<f32>,
    logits: Vec<f32>,
}

impl<'b, B: Backend + 'b> fmt::Debug for Model<'b, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Model")
            .field("cfg", &self.cfg)
            .field("file", &self.file.path())
            .field("backend", &self.backend)
            .field("max_context", &self.max_context)
            .finish_non_exhaustive()
    }
}

impl<'b, B: Backend + 'b> Model<'b, B> {
    /// Loads the Llama model in `file` onto `backend`: checks the
    /// hyperparameters, every tensor's presence, shape and format, builds
    /// and compiles the plans and writes their weights, and reads the
    /// tokenizer.
    pub fn load(file: ModelFile, backend: &'b B, opts: LoadOptions) -> Result<Self, LlamaError> {
        let g = file.parse()?;
        let cfg = LlamaConfig::from_gguf(&g)?;
        let tokenizer = Tokenizer::from_gguf(&g, cfg.vocab)?;
        let (hidden, ffn, q_dim, kv_dim) =
            (cfg.hidden, cfg.ffn, cfg.n_head * cfg.head_dim, cfg.kv_dim());
        let (mode, eps, fuse) = (opts.mode, cfg.norm_eps, !opts.host_norm);
        let mut fallbacks = Vec::new();
        let mut formats: Vec<(DType, usize)> = Vec::new();
        let mut count = |d: DType| match formats.iter_mut().find(|(f, _)| *f == d) {
            Some((_, n)) => *n += 1,
            None => formats.push((d, 1)),
        };
        let mut layers = Vec::with_capacity(cfg.n_layer);
        for l in 0..cfg.n_layer {
            let name = |t: &str| format!("blk.{l}.{t}.weight");
            let wq = matrix(&g, &name("attn_q"), hidden, q_dim)?;
            let wk = matrix(&g, &name("attn_k"), hidden, kv_dim)?;
            let wv = matrix(&g, &name("attn_v"), hidden, kv_dim)?;
            let wo = matrix(&g, &name("attn_output"), q_dim, hidden)?;
            let wg = matrix(&g, &name("ffn_gate"), hidden, ffn)?;
            let wu = matrix(&g, &name("ffn_up"), hidden, ffn)?;
            let wd = matrix(&g, &name("ffn_down"), ffn, hidden)?;
            for m in [&wq, &wk, &wv, &wo, &wg, &wu, &wd] {
                count(m.dtype);
            }
            let attn_norm = vector(&g, &name("attn_norm"), hidden)?;
            let ffn_norm = vector(&g, &name("ffn_norm"), hidden)?;
            let what = format!("layer {l} q/k/v");
            let norm = Norm {
                weight: &attn_norm,
                eps,
            };
            let (qkv, attn_norm) = match prologue_or(
                fuse.then(|| QkvPlan::with_norm(backend, mode, &norm, &wq, &wk, &wv, &what)),
                || QkvPlan::new(backend, mode, &wq, &wk, &wv, &what),
                &mut fallbacks,
                KIND_QKV,
            )? {
                Ok(p) => (p, None),
                Err(p) => (p, Some(attn_norm)),
            };
            let what = format!("layer {l} post-attention");
            let norm = Norm {
                weight: &ffn_norm,
                eps,
            };
            let post = match prologue_or(
                fuse.then(|| {
                    ResidualPlan::post_attn(backend, mode, &wo, &norm, &wg, &wu, &wd, &what)
                }),
                || {
                    Ok((
                        ResidualPlan::out_proj(
                            backend,
                            mode,
                            &wo,
                            &format!("layer {l} output projection"),
                        )?,
                        ResidualPlan::ffn(
                            backend,
                            mode,
                            &wg,
                            &wu,
                            &wd,
                            &format!("layer {l} feed-forward"),
                        )?,
                    ))
                },
                &mut fallbacks,
                KIND_POST,
            )? {
                Ok(p) => Post::Fused(Box::new(p)),
                Err((out, ffn)) => Post::Host {
                    ffn_norm,
                    out: Box::new(out),
                    ffn: Box::new(ffn),
                },
            };
            layers.push(Layer {
                attn_norm,
                qkv,
                post,
            });
        }
        let output_norm = vector(&g, "output_norm.weight", hidden)?;
        // A file without `output.weight` ties the head to the embeddings.
        let head_name = if g.tensor("output.weight").is_some() {
            "output.weight"
        } else {
            "token_embd.weight"
        };
        let w_out = matrix(&g, head_name, hidden, cfg.vocab)?;
        count(w_out.dtype);
        let what = format!("the output head ({head_name})");
        let norm = Norm {
            weight: &output_norm,
            eps,
        };
        let (head, output_norm) = match prologue_or(
            fuse.then(|| HeadPlan::with_norm(backend, mode, &norm, &w_out, &what)),
            || HeadPlan::new(backend, mode, &w_out, &what),
            &mut fallbacks,
            KIND_HEAD,
        )? {
            Ok(p) => (p, None),
            Err(p) => (p, Some(output_norm)),
        };
        let embedding = embedding(&g, &file, hidden, cfg.vocab)?;
        let factors = match g.tensor("rope_freqs.weight") {
            Some(_) => vector(&g, "rope_freqs.weight", cfg.head_dim / 2)?,
            None => Vec::new(),
        };
        let rope = Rope::new(cfg.head_dim, cfg.rope_base, cfg.rope_freq_scale, factors);
        let attention = AttentionShape {
            n_head: cfg.n_head,
            n_head_kv: cfg.n_head_kv,
            head_dim: cfg.head_dim,
        };
        let max_context = opts.max_context.min(cfg.context_length).max(1);
        drop(g);
        Ok(Model {
            cfg,
            file,
            embedding,
            layers,
            output_norm,
            head,
            fallbacks,
            rope,
            attention,
            tokenizer,
            max_context,
            backend: format!("{} ({})", backend.name(), backend.device()),
            weight_formats: formats,
            profile: None,
            scratch: Scratch::default(),
        })
    }

    /// The hyperparameters.
    pub fn config(&self) -> &LlamaConfig {
        &self.cfg
    }

    /// The tokenizer read from the same file.
    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    /// The most positions a cache of this model holds.
    pub fn max_context(&self) -> usize {
        self.max_context
    }

    /// The backend, in words.
    pub fn backend(&self) -> &str {
        &self.backend
    }

    /// Weight matrices per format.
    pub fn weight_formats(&self) -> &[(DType, usize)] {
        &self.weight_formats
    }

    /// What the planner made of each kind of plan (those of layer 0 and the
    /// head): `(name, summary)`.
    pub fn plan_summaries(&self) -> Vec<(&'static str, &PlanSummary)> {
        let mut out = Vec::new();
        if let Some(l) = self.layers.first() {
            match l.attn_norm {
                None => out.push(("attn_norm → q/k/v", l.qkv.summary())),
                Some(_) => out.push(("q/k/v (host attn_norm)", l.qkv.summary())),
            }
            match &l.post {
                Post::Fused(p) => out.push((
                    "o-proj + residual, ffn_norm → GLU → down + residual",
                    p.summary(),
                )),
                Post::Host { out: o, ffn, .. } => {
                    out.push(("o-proj + residual", o.summary()));
                    out.push(("GLU → down + residual (host ffn_norm)", ffn.summary()));
                }
            }
        }
        match self.output_norm {
            None => out.push(("output_norm → head", self.head.summary())),
            Some(_) => out.push(("head (host output_norm)", self.head.summary())),
        }
        out
    }

    /// The kinds of plan built with host norms because the backend refused
    /// the norm prologue: `(kind, the backend's reason)`, once per kind.
    pub fn norm_fallbacks(&self) -> &[(&'static str, String)] {
        &self.fallbacks
    }

    /// Plan runs per token: per layer, then for the head.
    pub fn plan_runs(&self) -> (usize, usize) {
        let per_layer = self.layers.first().map_or(0, |l| match l.post {
            Post::Fused(_) => 2,
            Post::Host { .. } => 3,
        });
        (per_layer, 1)
    }

    /// An empty key/value cache for this model.
    pub fn new_cache(&self) -> KvCache {
        KvCache::new(self.cfg.n_layer, self.cfg.kv_dim(), self.max_context)
    }

    /// The embedding of `token`, dequantized into `out`.
    fn embed(&self, token: u32, out: &mut Vec<f32>) -> Result<(), LlamaError> {
        let e = self.embedding;
        let row = token as usize;
        if row >= e.rows {
            return Err(LlamaError::Tokenizer(format!(
                "token id {token} is outside the vocabulary of {} tokens",
                e.rows
            )));
        }
        let start = e.offset + row * e.row_bytes;
        let bytes = self
            .file
            .bytes()
            .get(start..start + e.row_bytes)
            .ok_or_else(|| LlamaError::MissingTensor {
                name: "token_embd.weight (row outside the file)".into(),
            })?;
        out.resize(self.cfg.hidden, 0.0);
        dequantize_row(e.dtype, bytes, out)
            .map_err(|err| LlamaError::format("token_embd.weight", e.dtype, err.to_string()))
    }

    /// Runs `token` at the next position of `cache` through every layer and
    /// returns the logits of the token after it (held by the model until
    /// the next pass).
    pub fn forward(&mut self, token: u32, cache: &mut KvCache) -> Result<&[f32], LlamaError> {
        let pos = cache.len();
        cache.check_next(pos)?;
        let mut scratch = std::mem::take(&mut self.scratch);
        let r = self.forward_at(token, pos, cache, &mut scratch);
        self.scratch = scratch;
        match r {
            Ok(()) => {
                cache.advance();
                Ok(&self.scratch.logits)
            }
            Err(e) => {
                cache.rollback();
                Err(e)
            }
        }
    }

    /// The logits of the last [`Model::forward`] (empty before the first).
    pub fn logits(&self) -> &[f32] {
        &self.scratch.logits
    }

    /// Starts timing the phases of every later token ([`Model::profile`]),
    /// from zero.
    pub fn profile_tokens(&mut self) {
        self.profile = Some(Profile::default());
    }

    /// The time per phase of the tokens since [`Model::profile_tokens`].
    pub fn profile(&self) -> Option<&Profile> {
        self.profile.as_ref()
    }

    /// Adds the time since `start` to `phase` while profiling.
    pub(crate) fn add_time(&mut self, phase: Phase, start: Instant) {
        if let Some(p) = &mut self.profile {
            p.add(phase, start);
        }
    }

    /// [`Model::forward`] at position `pos`, into `s.logits`.
    fn forward_at(
        &mut self,
        token: u32,
        pos: usize,
        cache: &mut KvCache,
        s: &mut Scratch,
    ) -> Result<(), LlamaError> {
        // Runs `$body`, adding its time to `$phase` while profiling.
        macro_rules! timed {
            ($phase:expr, $body:expr) => {{
                let t = Instant::now();
                let r = $body;
                if let Some(p) = &mut self.profile {
                    p.add($phase, t);
                }
                r
            }};
        }
        let eps = self.cfg.norm_eps;
        timed!(Phase::Embed, self.embed(token, &mut s.h))?;
        s.x.resize(self.cfg.hidden, 0.0);
        s.attn.resize(self.cfg.n_head * self.cfg.head_dim, 0.0);
        for (l, layer) in self.layers.iter_mut().enumerate() {
            match &layer.attn_norm {
                None => timed!(Phase::Qkv, layer.qkv.run(&s.h, &mut s.qkv))?,
                Some(w) => {
                    timed!(Phase::HostNorm, rms_norm(&s.h, w, eps, &mut s.x));
                    timed!(Phase::Qkv, layer.qkv.run(&s.x, &mut s.qkv))?
                }
            }
            let Qkv { q, k, v } = &mut s.qkv;
            timed!(Phase::Rope, {
                self.rope.apply(q, pos);
                self.rope.apply(k, pos);
            });
            timed!(
                Phase::Attention,
                self.attention.attend(cache, l, q, k, v, &mut s.attn)
            );
            match &mut layer.post {
                Post::Fused(p) => timed!(Phase::Post, p.run(&mut s.h, &s.attn))?,
                Post::Host { ffn_norm, out, ffn } => {
                    timed!(Phase::Post, out.run(&mut s.h, &s.attn))?;
                    timed!(Phase::HostNorm, rms_norm(&s.h, ffn_norm, eps, &mut s.x));
                    timed!(Phase::Post, ffn.run(&mut s.h, &s.x))?;
                }
            }
        }
        match &self.output_norm {
            None => timed!(Phase::Head, self.head.run(&s.h, &mut s.logits))?,
            Some(w) => {
                timed!(Phase::HostNorm, rms_norm(&s.h, w, eps, &mut s.x));
                timed!(Phase::Head, self.head.run(&s.x, &mut s.logits))?
            }
        }
        if let Some(p) = &mut self.profile {
            p.token();
        }
        Ok(())
    }
}

/// The kinds of plan, as [`Model::norm_fallbacks`] names them.
const KIND_QKV: &str = "attn_norm → q/k/v";
const KIND_POST: &str = "o-proj + residual, ffn_norm → GLU → down + residual";
const KIND_HEAD: &str = "output_norm → head";

/// Where `token_embd.weight` (`[hidden, vocab]`, any format with a
/// dequantizer) lies in `file`.
fn embedding(
    g: &Gguf<'_>,
    file: &ModelFile,
    hidden: usize,
    vocab: usize,
) -> Result<Embedding, LlamaError> {
    let name = "token_embd.weight";
    let t = tensor(g, name)?;
    check_shape(&t, &[hidden as u64, vocab as u64])?;
    let dtype = t.dtype()?;
    if !dtype.is_weight_format() {
        return Err(LlamaError::format(name, dtype, "not a weight format"));
    }
    let row_bytes = dtype
        .row_bytes(hidden)
        .map_err(|e| LlamaError::format(name, dtype, e.to_string()))?;
    let offset = usize::try_from(t.file_offset()).unwrap_or(usize::MAX);
    let in_file = file
        .bytes()
        .get(offset..)
        .and_then(|b| b.get(..t.data().len()));
    if !in_file.is_some_and(|b| std::ptr::eq(b, t.data()))
        || row_bytes.checked_mul(vocab) != Some(t.data().len())
    {
        return Err(LlamaError::format(
            name,
            dtype,
            "its bytes do not match its shape",
        ));
    }
    Ok(Embedding {
        dtype,
        offset,
        row_bytes,
        rows: vocab,
    })
}
