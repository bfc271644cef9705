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

use std::sync::{Arc, Mutex};

use crate::attention::{AttentionShape, KvCache, Rows};
use crate::config::{DEFAULT_MAX_CONTEXT, LlamaConfig};
use crate::error::LlamaError;
use crate::file::{Matrix, ModelFile, check_shape, matrix, tensor, vector};
use crate::ops::{Rope, rms_norm};
use crate::plans::{HeadPlan, Norm, PlanSummary, Qkv, QkvPlan, ResidualPlan, Supported};
use crate::profile::{Phase, Profile};
use crate::token::{LayerWeights, TokenPlan, TokenShape};
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
    /// for a backend that refuses the norm prologue (`--host-norm`); implies
    /// [`DecodePath::Layered`].
    pub host_norm: bool,
    /// How a token runs: one plan for the whole token where the backend
    /// runs it on its device, or plans per layer around host attention.
    pub decode: DecodePath,
    /// The whole token planned unfused: every element-wise op and norm its
    /// own launch, to measure what fusion gains (`--unfused`).
    #[cfg(feature = "lab")]
    pub unfused: bool,
}

impl LoadOptions {
    /// Whether the whole token is planned unfused (only with `lab`).
    fn unfused(&self) -> bool {
        #[cfg(feature = "lab")]
        return self.unfused;
        #[cfg(not(feature = "lab"))]
        false
    }
}

/// How a token runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodePath {
    /// One plan for the whole token ([`crate::token::TokenPlan`]): norms,
    /// RoPE, the key/value caches, attention, the head and the greedy
    /// choice on the backend; one write, run and read a token. Where the
    /// backend cannot, the layered path runs and
    /// [`Model::norm_fallbacks`] says why.
    WholeToken,
    /// Plans per layer (q/k/v, then the rest of the layer) and the head,
    /// with RoPE and attention over a host cache between them (`--layered`).
    Layered,
}

impl Default for LoadOptions {
    fn default() -> LoadOptions {
        LoadOptions {
            mode: GemvMode::Ggml,
            max_context: DEFAULT_MAX_CONTEXT,
            host_norm: false,
            decode: DecodePath::WholeToken,
            #[cfg(feature = "lab")]
            unfused: false,
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

/// The sequence a whole-token plan's caches hold: its identity, its store
/// of host rows (which lags behind) and its positions on the device.
#[derive(Debug)]
struct Resident {
    id: u64,
    rows: Arc<Mutex<Rows>>,
    len: usize,
}

/// What a pass reads back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Want {
    /// The logits.
    Logits,
    /// The greedy token alone.
    Next,
    /// Nothing (the keys and values are the point).
    Nothing,
}

/// How the model's tokens run.
enum Decode<'b, B: Backend + 'b> {
    /// Plans per layer and the head, attention on the host.
    Layered {
        layers: Vec<Layer<'b, B>>,
        /// The final norm's weight when it runs on the host.
        output_norm: Option<Vec<f32>>,
        head: Box<HeadPlan<'b, B>>,
    },
    /// One plan a token.
    Token(Box<TokenPlan<'b, B>>),
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
    decode: Decode<'b, B>,
    /// The sequence whose rows the whole-token plan's caches hold.
    resident: Option<Resident>,
    fallbacks: Vec<(&'static str, String)>,
    rope: Rope,
    attention: AttentionShape,
    tokenizer: Tokenizer,
    max_context: usize,
    backend: String,
    weight_formats: Vec<(DType, usize)>,
    /// Bytes of weights a token reads.
    weight_bytes: u64,
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
        let mut weights = Vec::with_capacity(cfg.n_layer);
        for l in 0..cfg.n_layer {
            let name = |t: &str| format!("blk.{l}.{t}.weight");
            let w = LayerWeights {
                wq: matrix(&g, &name("attn_q"), hidden, q_dim)?,
                wk: matrix(&g, &name("attn_k"), hidden, kv_dim)?,
                wv: matrix(&g, &name("attn_v"), hidden, kv_dim)?,
                wo: matrix(&g, &name("attn_output"), q_dim, hidden)?,
                wg: matrix(&g, &name("ffn_gate"), hidden, ffn)?,
                wu: matrix(&g, &name("ffn_up"), hidden, ffn)?,
                wd: matrix(&g, &name("ffn_down"), ffn, hidden)?,
                attn_norm: vector(&g, &name("attn_norm"), hidden)?,
                ffn_norm: vector(&g, &name("ffn_norm"), hidden)?,
            };
            for m in [&w.wq, &w.wk, &w.wv, &w.wo, &w.wg, &w.wu, &w.wd] {
                count(m.dtype);
            }
            weights.push(w);
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
        let weight_bytes = weights
            .iter()
            .flat_map(|w| [&w.wq, &w.wk, &w.wv, &w.wo, &w.wg, &w.wu, &w.wd])
            .chain([&w_out])
            .map(|m| m.data.len() as u64)
            .sum();
        let factors = match g.tensor("rope_freqs.weight") {
            Some(_) => vector(&g, "rope_freqs.weight", cfg.head_dim / 2)?,
            None => Vec::new(),
        };
        let rope = Rope::new(cfg.head_dim, cfg.rope_base, cfg.rope_freq_scale, factors);
        let max_context = opts.max_context.min(cfg.context_length).max(1);
        let whole = match (opts.decode, fuse) {
            (DecodePath::WholeToken, true) => {
                let shape = TokenShape {
                    hidden,
                    n_head: cfg.n_head,
                    n_kv: cfg.n_head_kv,
                    head_dim: cfg.head_dim,
                    max_context,
                    eps,
                    unfused: opts.unfused(),
                };
                match TokenPlan::new(backend, mode, shape, &weights, &output_norm, &w_out, &rope)? {
                    // A plan run step by step through the host would move
                    // every weight to the device for every token.
                    Ok(p) if p.summary().host_steps => {
                        fallbacks.push((
                            KIND_TOKEN,
                            format!(
                                "{} runs the whole token step by step through the host",
                                backend.name()
                            ),
                        ));
                        None
                    }
                    Ok(p) => Some(p),
                    Err(why) => {
                        fallbacks.push((KIND_TOKEN, why.to_string()));
                        None
                    }
                }
            }
            _ => None,
        };
        let decode = match whole {
            Some(p) => Decode::Token(Box::new(p)),
            None => layered(
                backend,
                mode,
                eps,
                fuse,
                &weights,
                &output_norm,
                &w_out,
                head_name,
                &mut fallbacks,
            )?,
        };
        let embedding = embedding(&g, &file, hidden, cfg.vocab)?;
        let attention = AttentionShape {
            n_head: cfg.n_head,
            n_head_kv: cfg.n_head_kv,
            head_dim: cfg.head_dim,
        };
        drop(weights);
        drop(g);
        Ok(Model {
            cfg,
            file,
            embedding,
            decode,
            resident: None,
            fallbacks,
            rope,
            attention,
            tokenizer,
            max_context,
            backend: format!("{} ({})", backend.name(), backend.device()),
            weight_formats: formats,
            weight_bytes,
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
    /// head, or the whole token's): `(name, summary)`.
    pub fn plan_summaries(&self) -> Vec<(&'static str, &PlanSummary)> {
        let mut out = Vec::new();
        let (layers, output_norm, head) = match &self.decode {
            Decode::Token(p) => return vec![("whole token", p.summary())],
            Decode::Layered {
                layers,
                output_norm,
                head,
            } => (layers, output_norm, head),
        };
        if let Some(l) = layers.first() {
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
        match output_norm {
            None => out.push(("output_norm → head", head.summary())),
            Some(_) => out.push(("head (host output_norm)", head.summary())),
        }
        out
    }

    /// The kinds of plan the backend refused, with its reason, once per
    /// kind: a norm prologue (the plan then reads a host-normed input) or
    /// the whole token (the layered path runs instead).
    pub fn norm_fallbacks(&self) -> &[(&'static str, String)] {
        &self.fallbacks
    }

    /// Plan runs per token: per layer, then for the head; `(0, 1)` for the
    /// whole-token plan.
    pub fn plan_runs(&self) -> (usize, usize) {
        match &self.decode {
            Decode::Token(_) => (0, 1),
            Decode::Layered { layers, .. } => {
                let per_layer = layers.first().map_or(0, |l| match l.post {
                    Post::Fused(_) => 2,
                    Post::Host { .. } => 3,
                });
                (per_layer, 1)
            }
        }
    }

    /// Kernel launches a token issues on the whole-token path (known once a
    /// token ran on a host plan); `None` on the layered path.
    pub fn launches_per_token(&self) -> Option<u64> {
        match &self.decode {
            Decode::Token(p) => Some(p.launches()),
            Decode::Layered { .. } => None,
        }
    }

    /// The backend's plan of the whole token; `None` on the layered path
    /// (for measurements the contract does not cover: the lab).
    #[cfg(feature = "lab")]
    pub fn token_plan(&self) -> Option<&B::Plan<'b>> {
        match &self.decode {
            Decode::Token(p) => Some(p.plan()),
            Decode::Layered { .. } => None,
        }
    }

    /// `runs` timed runs of the whole-token plan as the last token left its
    /// inputs (`ResidentPlan::time_once`: device time where the backend
    /// has a timer, and host time); `None` on the layered path. The lab:
    /// what a token costs the device against what it costs the caller.
    #[cfg(feature = "lab")]
    pub fn time_token(
        &mut self,
        runs: usize,
    ) -> Result<Option<Vec<fused_core::backend::PlanTiming>>, LlamaError> {
        let Decode::Token(p) = &mut self.decode else {
            return Ok(None);
        };
        (0..runs)
            .map(|_| {
                fused_core::backend::ResidentPlan::time_once(p.plan_mut())
                    .map_err(|e| LlamaError::backend("timing the whole token".to_string(), e))
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some)
    }

    /// Bytes of weights a token reads: every matrix but the embedding
    /// table (one row of it is read), the head included.
    pub fn weight_bytes_per_token(&self) -> u64 {
        self.weight_bytes
    }

    /// Why the whole token does not run as one plan, where it was asked
    /// for and the backend could not ([`DecodePath::WholeToken`]).
    pub fn whole_token_refusal(&self) -> Option<&str> {
        self.fallbacks
            .iter()
            .find(|(k, _)| *k == KIND_TOKEN)
            .map(|(_, why)| why.as_str())
    }

    /// Whether a token runs as one plan ([`DecodePath::WholeToken`]).
    pub fn whole_token(&self) -> bool {
        matches!(self.decode, Decode::Token(_))
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
        self.step(token, cache, Want::Logits)?;
        Ok(&self.scratch.logits)
    }

    /// Runs `token` at the next position of `cache` and returns the greedy
    /// next token (the first largest logit, as
    /// [`fused_core::decode::argmax`] picks it). On the whole-token path
    /// the logits stay on the backend: four bytes come back instead of
    /// the vocabulary's logits, and [`Model::logits`] is empty after it.
    pub fn forward_greedy(&mut self, token: u32, cache: &mut KvCache) -> Result<u32, LlamaError> {
        self.step(token, cache, Want::Next)
    }

    /// Runs `token` at the next position of `cache` for its keys and values
    /// alone (a prompt token whose successor is known): nothing comes back
    /// on the whole-token path, and [`Model::logits`] is empty after it.
    pub fn feed(&mut self, token: u32, cache: &mut KvCache) -> Result<(), LlamaError> {
        self.step(token, cache, Want::Nothing).map(|_| ())
    }

    /// One token through the model, reading back what `want` says: the
    /// greedy token for [`Want::Next`] (0 otherwise).
    fn step(&mut self, token: u32, cache: &mut KvCache, want: Want) -> Result<u32, LlamaError> {
        let pos = cache.len();
        cache.check_next(pos)?;
        match &mut self.decode {
            Decode::Token(plan) => make_resident(plan, &mut self.resident, cache)?,
            Decode::Layered { .. } => cache.own_rows(),
        }
        let mut scratch = std::mem::take(&mut self.scratch);
        let r = self.forward_at(token, pos, cache, &mut scratch, want);
        self.scratch = scratch;
        match r {
            Ok(next) => {
                cache.advance();
                let whole = self.whole_token();
                match &mut self.resident {
                    Some(r) if whole => r.len = cache.len(),
                    _ => cache.complete_rows(),
                }
                Ok(next)
            }
            Err(e) => {
                cache.rollback();
                Err(e)
            }
        }
    }

    /// The logits of the last [`Model::forward`] (empty before the first,
    /// and after a [`Model::forward_greedy`] or [`Model::feed`] on the
    /// whole-token path, which leave them on the backend).
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

    /// [`Model::step`] at position `pos`: the logits into `s.logits` where
    /// read, the greedy token for [`Want::Next`].
    fn forward_at(
        &mut self,
        token: u32,
        pos: usize,
        cache: &mut KvCache,
        s: &mut Scratch,
        want: Want,
    ) -> Result<u32, LlamaError> {
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
        let (layers, output_norm, head) = match &mut self.decode {
            Decode::Token(p) => {
                let next = timed!(Phase::Token, {
                    p.run(&s.h, pos)?;
                    match want {
                        Want::Logits => p.read_logits(&mut s.logits).map(|()| 0),
                        Want::Next => {
                            s.logits.clear();
                            p.read_next()
                        }
                        Want::Nothing => {
                            s.logits.clear();
                            Ok(0)
                        }
                    }
                })?;
                if let Some(p) = &mut self.profile {
                    p.token();
                }
                return Ok(next);
            }
            Decode::Layered {
                layers,
                output_norm,
                head,
            } => (layers, output_norm, head),
        };
        s.x.resize(self.cfg.hidden, 0.0);
        s.attn.resize(self.cfg.n_head * self.cfg.head_dim, 0.0);
        for (l, layer) in layers.iter_mut().enumerate() {
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
            )?;
            match &mut layer.post {
                Post::Fused(p) => timed!(Phase::Post, p.run(&mut s.h, &s.attn))?,
                Post::Host { ffn_norm, out, ffn } => {
                    timed!(Phase::Post, out.run(&mut s.h, &s.attn))?;
                    timed!(Phase::HostNorm, rms_norm(&s.h, ffn_norm, eps, &mut s.x));
                    timed!(Phase::Post, ffn.run(&mut s.h, &s.x))?;
                }
            }
        }
        match output_norm {
            None => timed!(Phase::Head, head.run(&s.h, &mut s.logits))?,
            Some(w) => {
                timed!(Phase::HostNorm, rms_norm(&s.h, w, eps, &mut s.x));
                timed!(Phase::Head, head.run(&s.x, &mut s.logits))?
            }
        }
        if let Some(p) = &mut self.profile {
            p.token();
        }
        // The layered head reads the logits whatever is wanted.
        Ok(match want {
            Want::Next => fused_core::decode::argmax(&s.logits) as u32,
            Want::Logits | Want::Nothing => 0,
        })
    }
}

/// Makes `cache`'s sequence the one `plan`'s caches hold: nothing to do
/// when they hold it already; else the rows of the sequence they held go
/// to its host store, and this one's rows to the caches.
fn make_resident<B: Backend>(
    plan: &mut TokenPlan<'_, B>,
    resident: &mut Option<Resident>,
    cache: &mut KvCache,
) -> Result<(), LlamaError> {
    if let Some(r) = resident
        && r.id == cache.id()
        && cache.shares_rows(&r.rows)
        && cache.len() <= r.len
    {
        return Ok(());
    }
    if let Some(r) = resident.take() {
        let mut rows = r.rows.lock().unwrap_or_else(|p| p.into_inner());
        // A store no cache holds any more is not worth the read.
        if Arc::strong_count(&r.rows) > 1 && rows.owner() == r.id && rows.complete() < r.len {
            let from = rows.complete();
            let Rows { k, v, .. } = &mut *rows;
            plan.read_rows(from, r.len, k, v)?;
            rows.set_complete(r.len);
        }
    }
    cache.own_rows();
    {
        let rows = cache.lock();
        if rows.complete() < cache.len() {
            return Err(LlamaError::Usage(format!(
                "the cache holds {} of its {} positions: its rows were lost",
                rows.complete(),
                cache.len()
            )));
        }
        plan.write_rows(cache.len(), &rows.k, &rows.v)?;
    }
    *resident = Some(Resident {
        id: cache.id(),
        rows: cache.rows(),
        len: cache.len(),
    });
    Ok(())
}

/// The plans of the layered path: per layer q/k/v and the rest of the
/// layer, then the head; each with its norm as a prologue unless `fuse` is
/// off or the backend refuses it (noted in `fallbacks`).
#[allow(clippy::too_many_arguments)]
fn layered<'b, B: Backend + 'b>(
    backend: &'b B,
    mode: GemvMode,
    eps: f32,
    fuse: bool,
    weights: &[LayerWeights<'_>],
    output_norm: &[f32],
    w_out: &Matrix<'_>,
    head_name: &str,
    fallbacks: &mut Vec<(&'static str, String)>,
) -> Result<Decode<'b, B>, LlamaError> {
    let mut layers = Vec::with_capacity(weights.len());
    for (l, w) in weights.iter().enumerate() {
        let what = format!("layer {l} q/k/v");
        let norm = Norm {
            weight: &w.attn_norm,
            eps,
        };
        let (qkv, attn_norm) = match prologue_or(
            fuse.then(|| QkvPlan::with_norm(backend, mode, &norm, &w.wq, &w.wk, &w.wv, &what)),
            || QkvPlan::new(backend, mode, &w.wq, &w.wk, &w.wv, &what),
            fallbacks,
            KIND_QKV,
        )? {
            Ok(p) => (p, None),
            Err(p) => (p, Some(w.attn_norm.clone())),
        };
        let what = format!("layer {l} post-attention");
        let norm = Norm {
            weight: &w.ffn_norm,
            eps,
        };
        let post = match prologue_or(
            fuse.then(|| {
                ResidualPlan::post_attn(backend, mode, &w.wo, &norm, &w.wg, &w.wu, &w.wd, &what)
            }),
            || {
                Ok((
                    ResidualPlan::out_proj(
                        backend,
                        mode,
                        &w.wo,
                        &format!("layer {l} output projection"),
                    )?,
                    ResidualPlan::ffn(
                        backend,
                        mode,
                        &w.wg,
                        &w.wu,
                        &w.wd,
                        &format!("layer {l} feed-forward"),
                    )?,
                ))
            },
            fallbacks,
            KIND_POST,
        )? {
            Ok(p) => Post::Fused(Box::new(p)),
            Err((out, ffn)) => Post::Host {
                ffn_norm: w.ffn_norm.clone(),
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
    let what = format!("the output head ({head_name})");
    let norm = Norm {
        weight: output_norm,
        eps,
    };
    let (head, output_norm) = match prologue_or(
        fuse.then(|| HeadPlan::with_norm(backend, mode, &norm, w_out, &what)),
        || HeadPlan::new(backend, mode, w_out, &what),
        fallbacks,
        KIND_HEAD,
    )? {
        Ok(p) => (p, None),
        Err(p) => (p, Some(output_norm.to_vec())),
    };
    Ok(Decode::Layered {
        layers,
        output_norm,
        head: Box::new(head),
    })
}

/// The kinds of plan, as [`Model::norm_fallbacks`] names them.
const KIND_QKV: &str = "attn_norm → q/k/v";
const KIND_POST: &str = "o-proj + residual, ffn_norm → GLU → down + residual";
const KIND_HEAD: &str = "output_norm → head";
const KIND_TOKEN: &str = "whole token";

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
