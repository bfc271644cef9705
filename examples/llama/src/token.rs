//! The whole decode token as one plan ([`TokenPlan`]): every layer's
//! attention norm, q/k/v, RoPE, key/value append, attention, output
//! projection and feed-forward, then the final norm, the output head and
//! the greedy choice, in one graph the core plans and a backend makes
//! resident once.
//!
//! The position is a value in the plan's memory, written with the token's
//! embedding in one write (`[embedding..., position]`), and the key/value
//! caches live in the plan as state ([`fused_core::graph::Graph::state`]),
//! so every token is the same run: one write, one run, one read (the
//! logits, or the four bytes of the greedy token). RoPE's angles are a
//! table of `cos, sin` per position and pair, computed on the host once
//! (by [`crate::ops::Rope`], so both paths rotate alike).
//!
//! Buffers: 0 holds the head's weights, 1 the activations, the norms'
//! weights, the RoPE table and the input; then each layer has a buffer of
//! weights and one of caches (keys then values, `[kv_dim, max_context]`
//! each), so no allocation grows with the model beyond one layer's.

use fused_core::DType;
use fused_core::acts::GemvMode;
use fused_core::backend::{Backend, ResidentPlan};
use fused_core::decode::RopeMode;
use fused_core::graph::{NodeId, Place};
use fused_core::tensor::{BufferId, TensorDesc};

use crate::error::LlamaError;
use crate::file::Matrix;
use crate::ops::Rope;
use crate::plans::{
    Builder, Compiled, Norm, PlanSummary, Supported, ffn_graph, out_graph, qkv_nodes,
};

/// One layer's weights, as the file holds them.
#[derive(Debug)]
pub(crate) struct LayerWeights<'w> {
    pub(crate) attn_norm: Vec<f32>,
    pub(crate) wq: Matrix<'w>,
    pub(crate) wk: Matrix<'w>,
    pub(crate) wv: Matrix<'w>,
    pub(crate) wo: Matrix<'w>,
    pub(crate) ffn_norm: Vec<f32>,
    pub(crate) wg: Matrix<'w>,
    pub(crate) wu: Matrix<'w>,
    pub(crate) wd: Matrix<'w>,
}

/// The sizes a token's graph takes from the model.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TokenShape {
    pub(crate) hidden: usize,
    pub(crate) n_head: usize,
    pub(crate) n_kv: usize,
    pub(crate) head_dim: usize,
    pub(crate) max_context: usize,
    pub(crate) eps: f32,
    /// Plan the token unfused (a measurement of what fusion gains).
    pub(crate) unfused: bool,
}

/// A whole decode token, resident on one backend.
#[derive(Debug)]
pub struct TokenPlan<'b, B: Backend + 'b> {
    c: Compiled<'b, B>,
    /// The embedding then the position: one write a token.
    input: TensorDesc,
    logits: TensorDesc,
    /// The greedy token, an f32 index.
    next: TensorDesc,
    hidden: usize,
    max_context: usize,
    /// Each layer's key cache then value cache (`[kv_dim, max_context]`).
    caches: Vec<(TensorDesc, TensorDesc)>,
    kv_dim: usize,
    /// The embedding and position of the next run.
    staged: Vec<f32>,
    /// Bytes of cache rows on their way in or out.
    bytes: Vec<u8>,
}

impl<'b, B: Backend + 'b> TokenPlan<'b, B> {
    /// Builds, plans and compiles the token of a model with `layers`, the
    /// final norm `output_norm` and the head `head`; or the backend's
    /// refusal.
    pub(crate) fn new(
        backend: &'b B,
        mode: GemvMode,
        shape: TokenShape,
        layers: &[LayerWeights<'_>],
        output_norm: &[f32],
        head: &Matrix<'_>,
        rope: &Rope,
    ) -> Result<Supported<Self>, LlamaError> {
        let TokenShape {
            hidden,
            n_head,
            n_kv,
            head_dim: d,
            max_context: max,
            eps,
            unfused,
        } = shape;
        let (q_dim, kv_dim) = (n_head * d, n_kv * d);
        let mut b = Builder::new();
        b.set_unfused(unfused);
        let (input, input_t) = b.vector(hidden + 1)?;
        let nb = |n: usize| [4, 4 * n, 4 * n, 4 * n];
        let mut h = b.g.view(input, [hidden, 1, 1, 1], nb(hidden), 0)?;
        let pos = b.g.view(input, [1, 1, 1, 1], nb(1), 4 * hidden)?;
        let ht = b.tensor(h)?;
        let table_at = b.place(d * max)?;
        let table_t =
            TensorDesc::contiguous(DType::F32, [d, max, 1, 1], table_at.buffer, table_at.offset)?;
        let table = b.g.input(table_t)?;
        b.vectors.push((table_t, rope_table(rope, d, max)));
        let cache_bytes = 4 * kv_dim * max;
        let mut caches = Vec::with_capacity(layers.len());
        for l in layers {
            b.next_weight_buffer()?;
            let x = b.normed(
                h,
                &Norm {
                    weight: &l.attn_norm,
                    eps,
                },
            )?;
            let (q, k, v) = qkv_nodes(&mut b, x, &l.wq, &l.wk, &l.wv)?;
            let q = b.g.reshape(q, [d, n_head, 1, 1])?;
            let k = b.g.reshape(k, [d, n_kv, 1, 1])?;
            let at = b.place(q_dim)?;
            let q = b.g.rope(RopeMode::Adjacent, q, table, pos, at)?;
            let at = b.place(kv_dim)?;
            let k = b.g.rope(RopeMode::Adjacent, k, table, pos, at)?;
            let buf = b.buffer(2 * cache_bytes)?;
            let keys = cache(&mut b, buf, 0, [kv_dim, max])?;
            let values = cache(&mut b, buf, cache_bytes, [kv_dim, max])?;
            caches.push((b.tensor(keys)?, b.tensor(values)?));
            let keys = b.g.set_row(keys, k, pos, Place::at(buf, 0))?;
            let values = b.g.set_row(values, v, pos, Place::at(buf, cache_bytes))?;
            let keys = b.g.reshape(keys, [d, n_kv, max, 1])?;
            let values = b.g.reshape(values, [d, n_kv, max, 1])?;
            let at = b.place(q_dim)?;
            let scale = 1.0 / (d as f32).sqrt();
            let attn = b.g.attention(q, keys, values, pos, scale, at)?;
            let attn = b.g.reshape(attn, [q_dim, 1, 1, 1])?;
            let h1 = out_graph(&mut b, h, &ht, attn, &l.wo)?;
            let x = b.normed(
                h1,
                &Norm {
                    weight: &l.ffn_norm,
                    eps,
                },
            )?;
            h = ffn_graph(&mut b, h1, &ht, x, &l.wg, &l.wu, &l.wd)?;
        }
        // The head's weights go into buffer 0, which nothing else uses.
        let x = b.normed(
            h,
            &Norm {
                weight: output_norm,
                eps,
            },
        )?;
        let w = b.weight_in_first_buffer(head)?;
        let at = b.place(head.m)?;
        let logits = b.g.mul_mat(w, x, at)?;
        let at = b.place(1)?;
        let next = b.g.argmax(logits, at)?;
        b.g.mark_output(logits)?;
        b.g.mark_output(next)?;
        let (logits, next) = (b.tensor(logits)?, b.tensor(next)?);
        let compiled = match b.try_compile(backend, mode, "the whole token")? {
            Ok(mut c) => {
                // Every token runs the same launches: recorded once, a token
                // is one submission where the backend can replay.
                c.plan
                    .record_for_replay()
                    .map_err(|e| LlamaError::backend("recording the whole token".to_string(), e))?;
                Ok(c)
            }
            Err(why) => Err(why),
        };
        Ok(compiled.map(|c| TokenPlan {
            c,
            input: input_t,
            logits,
            next,
            hidden,
            max_context: max,
            caches,
            kv_dim,
            staged: vec![0.0; hidden + 1],
            bytes: Vec::new(),
        }))
    }

    /// Runs the token whose embedding is `embedding` at position `pos`.
    pub fn run(&mut self, embedding: &[f32], pos: usize) -> Result<(), LlamaError> {
        if embedding.len() != self.hidden || pos >= self.max_context {
            return Err(LlamaError::Usage(format!(
                "a token of {} values at position {pos}: the plan takes {} values below \
                 position {}",
                embedding.len(),
                self.hidden,
                self.max_context
            )));
        }
        self.staged[..self.hidden].copy_from_slice(embedding);
        // Exact: positions are far below 2^24.
        self.staged[self.hidden] = pos as f32;
        self.c
            .write(&self.input, &self.staged, "the embedding and position")?;
        self.c.run("the whole token")
    }

    /// The logits of the last run, into `out`.
    pub fn read_logits(&self, out: &mut Vec<f32>) -> Result<(), LlamaError> {
        self.c.read(&self.logits, out, "the logits")
    }

    /// The greedy token of the last run (the first largest logit).
    pub fn read_next(&self) -> Result<u32, LlamaError> {
        let mut v = [0.0f32];
        self.c
            .plan
            .read_f32_into(&self.next, &mut v)
            .map_err(|e| LlamaError::backend("reading the greedy token".to_string(), e))?;
        Ok(v[0] as u32)
    }

    /// What the planner made of the graph.
    pub fn summary(&self) -> &PlanSummary {
        &self.c.summary
    }

    /// Kernel launches (dispatches, calls) a token issues.
    pub fn launches(&self) -> u64 {
        self.c.plan.stats().launches
    }

    /// The backend's plan of the token, for measurements the contract does
    /// not cover (the lab).
    #[cfg(feature = "lab")]
    pub fn plan(&self) -> &B::Plan<'b> {
        &self.c.plan
    }

    /// The same, to run it (the lab).
    #[cfg(feature = "lab")]
    pub fn plan_mut(&mut self) -> &mut B::Plan<'b> {
        &mut self.c.plan
    }

    /// Appends cache rows `from..to` of every layer to `k` and `v` (one
    /// vector a layer, rows of `kv_dim` values back to back).
    pub(crate) fn read_rows(
        &mut self,
        from: usize,
        to: usize,
        k: &mut [Vec<f32>],
        v: &mut [Vec<f32>],
    ) -> Result<(), LlamaError> {
        let row = 4 * self.kv_dim;
        self.bytes.resize((to - from) * row, 0);
        for ((kt, vt), (k, v)) in self.caches.iter().zip(k.iter_mut().zip(v.iter_mut())) {
            for (t, out) in [(kt, k), (vt, v)] {
                self.c
                    .plan
                    .read(t.buffer(), t.offset() + from * row, &mut self.bytes)
                    .map_err(|e| {
                        LlamaError::backend("reading the key/value caches".to_string(), e)
                    })?;
                out.extend(
                    self.bytes
                        .chunks_exact(4)
                        .map(|w| f32::from_le_bytes([w[0], w[1], w[2], w[3]])),
                );
            }
        }
        Ok(())
    }

    /// Writes rows `0..len` of every layer's `k` and `v` into the caches.
    pub(crate) fn write_rows(
        &mut self,
        len: usize,
        k: &[Vec<f32>],
        v: &[Vec<f32>],
    ) -> Result<(), LlamaError> {
        let n = len * self.kv_dim;
        for ((kt, vt), (k, v)) in self.caches.iter().zip(k.iter().zip(v)) {
            for (t, rows) in [(kt, k), (vt, v)] {
                let Some(rows) = rows.get(..n) else {
                    return Err(LlamaError::Usage(format!(
                        "the cache holds {} of the {len} positions it claims",
                        rows.len() / self.kv_dim.max(1)
                    )));
                };
                self.bytes.clear();
                self.bytes.extend(rows.iter().flat_map(|x| x.to_le_bytes()));
                self.c
                    .plan
                    .write(t.buffer(), t.offset(), &self.bytes)
                    .map_err(|e| {
                        LlamaError::backend("writing the key/value caches".to_string(), e)
                    })?;
            }
        }
        Ok(())
    }
}

/// A cache `[n, rows]` at byte `offset` of buffer `buf`, as graph state.
fn cache(
    b: &mut Builder<'_>,
    buf: u32,
    offset: usize,
    ne: [usize; 2],
) -> Result<NodeId, LlamaError> {
    let t = TensorDesc::contiguous(DType::F32, [ne[0], ne[1], 1, 1], BufferId(buf), offset)?;
    Ok(b.g.state(t)?)
}

/// `cos θ, sin θ` of every pair at every position below `max`, row by row.
fn rope_table(rope: &Rope, head_dim: usize, max: usize) -> Vec<f32> {
    let mut t = Vec::with_capacity(head_dim * max);
    for pos in 0..max {
        t.extend(rope.table_row(pos));
    }
    t
}
