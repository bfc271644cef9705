//! The matrix products of a Llama layer as graphs, planned by the core's
//! planner and made resident on a backend once, with their weights written
//! into the plans' buffers at load:
//!
//! - [`QkvPlan`]: `q, k, v = W_q·x, W_k·x, W_v·x`, one GEMV over the three
//!   matrices stacked where their formats agree; built [`QkvPlan::with_norm`]
//!   it reads the residual stream and computes `x = rms_norm(h) · g` as the
//!   GEMV's prologue, built [`QkvPlan::new`] it reads a host-normed `x`;
//! - [`ResidualPlan`]: what adds into the residual stream:
//!   [`ResidualPlan::post_attn`], the rest of a layer after attention in
//!   one plan (`h += W_o·attn` in place, then `h += W_d·(silu(W_g·x) ⊙
//!   (W_u·x))` with `x = rms_norm(h) · g` computed as the gated dual GEMV's
//!   prologue), or its two halves with the norm on the host
//!   ([`ResidualPlan::out_proj`], [`ResidualPlan::ffn`]) for a backend that
//!   refuses the prologue;
//! - [`HeadPlan`]: `logits = W_out·x`, with the final norm as its prologue
//!   ([`HeadPlan::with_norm`]) or on the host ([`HeadPlan::new`]).
//!
//! Every plan has two buffers: 0 holds the weights (each matrix at a
//! 256-byte boundary), 1 the f32 activations and the norms' weights.
//!
//! A `with_norm` constructor returns [`Supported`]: the plan, or the
//! backend's refusal of it (`Backend::supports`), which the caller answers
//! by building the host-norm plans instead.

use std::fmt;

use fused_core::DType;
use fused_core::acts::GemvMode;
use fused_core::backend::{Backend, ResidentPlan};
use fused_core::element::Activation;
use fused_core::epilogue::Stage;
use fused_core::graph::{Graph, NodeId, Place};
use fused_core::planner::{FusedKvAppend, Plan, Step, plan};
use fused_core::tensor::{BufferId, TensorDesc};

use crate::error::LlamaError;
use crate::file::Matrix;

/// Alignment of every tensor in a plan's buffers.
const ALIGN: usize = 256;
/// The weights' buffer.
const WEIGHTS: u32 = 0;
/// The activations' buffer.
const ACTS: u32 = 1;

/// A plan, or the backend's reason for not running its graph
/// (`Backend::supports`): the caller may fall back to another graph.
pub type Supported<T> = Result<T, LlamaError>;

/// An RMSNorm for a plan to compute as the prologue of the GEMVs that read
/// it: `rms_norm(x, eps) · weight`, in `fused_core::norm`'s order.
#[derive(Clone, Copy, Debug)]
pub struct Norm<'a> {
    /// The weight `g` (one value per element of `x`).
    pub weight: &'a [f32],
    /// The epsilon.
    pub eps: f32,
}

/// A graph under construction with the weights to write into its plan.
pub(crate) struct Builder<'w> {
    pub(crate) g: Graph,
    weights: Vec<(TensorDesc, Matrix<'w>)>,
    /// f32 vectors (norm weights, tables) written at compile.
    pub(crate) vectors: Vec<(TensorDesc, Vec<f32>)>,
    /// The bytes used so far in each buffer: the weights' (0), the
    /// activations' (1), then any the graph adds ([`Builder::buffer`]).
    sizes: Vec<usize>,
    /// The buffer the next weights go into.
    weight_buf: u32,
    /// Run the graph unfused (`Plan::unfused`): for measuring fusion.
    unfused: bool,
}

impl<'w> Builder<'w> {
    pub(crate) fn new() -> Self {
        Builder {
            g: Graph::new(),
            weights: Vec::new(),
            vectors: Vec::new(),
            sizes: vec![0, 0],
            weight_buf: WEIGHTS,
            unfused: false,
        }
    }

    /// The matrix `m` as a graph input in the weights' buffer.
    pub(crate) fn weight(&mut self, m: &Matrix<'w>) -> Result<NodeId, LlamaError> {
        let t = TensorDesc::contiguous(
            m.dtype,
            [m.k, m.m, 1, 1],
            BufferId(self.weight_buf),
            self.sizes[self.weight_buf as usize],
        )
        .map_err(|e| LlamaError::format(m.name, m.dtype, e.to_string()))?;
        let len = t.byte_extent().len();
        if len != m.data.len() {
            return Err(LlamaError::format(
                m.name,
                m.dtype,
                format!("{} bytes, its shape needs {len}", m.data.len()),
            ));
        }
        self.sizes[self.weight_buf as usize] = next_aligned(t.byte_extent().end)?;
        self.weights.push((t, *m));
        Ok(self.g.input(t)?)
    }

    /// The matrices `ms` (one format, one row length) stacked row after row
    /// into one weight tensor: one GEMV computes all their products, its
    /// output their outputs back to back.
    fn stacked(&mut self, ms: &[&Matrix<'w>]) -> Result<NodeId, LlamaError> {
        let (Some(first), rows) = (ms.first(), ms.iter().map(|m| m.m).sum::<usize>()) else {
            return Err(LlamaError::Config {
                what: "stacked weights".into(),
                why: "no matrix".into(),
            });
        };
        let (buf, start) = (self.weight_buf, self.sizes[self.weight_buf as usize]);
        let t = TensorDesc::contiguous(first.dtype, [first.k, rows, 1, 1], BufferId(buf), start)
            .map_err(|e| LlamaError::format(first.name, first.dtype, e.to_string()))?;
        let mut at = start;
        for m in ms {
            let part = TensorDesc::contiguous(m.dtype, [m.k, m.m, 1, 1], BufferId(buf), at)
                .map_err(|e| LlamaError::format(m.name, m.dtype, e.to_string()))?;
            if part.byte_extent().len() != m.data.len() {
                return Err(LlamaError::format(
                    m.name,
                    m.dtype,
                    format!(
                        "{} bytes, its shape needs {}",
                        m.data.len(),
                        part.byte_extent().len()
                    ),
                ));
            }
            self.weights.push((part, **m));
            at = part.byte_extent().end;
        }
        if at != t.byte_extent().end {
            return Err(LlamaError::format(
                first.name,
                first.dtype,
                "stacked matrices do not fill the stacked tensor",
            ));
        }
        self.sizes[buf as usize] = next_aligned(at)?;
        Ok(self.g.input(t)?)
    }

    /// The matrix `m` as a graph input in the first weights' buffer,
    /// whichever buffer the other weights go into now.
    pub(crate) fn weight_in_first_buffer(&mut self, m: &Matrix<'w>) -> Result<NodeId, LlamaError> {
        let now = std::mem::replace(&mut self.weight_buf, WEIGHTS);
        let r = self.weight(m);
        self.weight_buf = now;
        r
    }

    /// Plans the graph unfused at compile: every node its own step.
    pub(crate) fn set_unfused(&mut self, unfused: bool) {
        self.unfused = unfused;
    }

    /// A new buffer of `bytes` bytes, its id.
    pub(crate) fn buffer(&mut self, bytes: usize) -> Result<u32, LlamaError> {
        let id = u32::try_from(self.sizes.len()).map_err(|_| LlamaError::Config {
            what: "plan buffers".into(),
            why: "more than 2^32".into(),
        })?;
        self.sizes.push(bytes);
        Ok(id)
    }

    /// Puts the weights that follow into a new buffer: one buffer a layer
    /// keeps every allocation far below the limits devices put on one
    /// (Vulkan promises 1 GiB), whatever the model's size.
    pub(crate) fn next_weight_buffer(&mut self) -> Result<(), LlamaError> {
        self.weight_buf = self.buffer(0)?;
        Ok(())
    }

    /// A place for `n` f32 values in the activations' buffer.
    pub(crate) fn place(&mut self, n: usize) -> Result<Place, LlamaError> {
        let used = self.sizes[ACTS as usize];
        let at = Place::at(ACTS, used);
        self.sizes[ACTS as usize] = next_aligned(used + 4 * n)?;
        Ok(at)
    }

    /// An f32 input vector of `n` values in the activations' buffer.
    pub(crate) fn vector(&mut self, n: usize) -> Result<(NodeId, TensorDesc), LlamaError> {
        let at = self.place(n)?;
        let t = TensorDesc::contiguous(DType::F32, [n, 1, 1, 1], at.buffer, at.offset)?;
        Ok((self.g.input(t)?, t))
    }

    /// `rms_norm(x, eps) · g`: the norm and the mul by its weight (written
    /// at compile), which the planner folds into every GEMV reading the
    /// product as its prologue.
    pub(crate) fn normed(&mut self, x: NodeId, norm: &Norm<'_>) -> Result<NodeId, LlamaError> {
        let k = norm.weight.len();
        let (gamma, gt) = self.vector(k)?;
        self.vectors.push((gt, norm.weight.to_vec()));
        let at = self.place(k)?;
        let n = self.g.rms_norm(x, norm.eps, at)?;
        let at = self.place(k)?;
        Ok(self.g.mul(n, gamma, at)?)
    }

    pub(crate) fn tensor(&self, id: NodeId) -> Result<TensorDesc, LlamaError> {
        Ok(*self.g.tensor(id)?)
    }

    /// The weights' names and formats, for messages.
    fn names(&self) -> String {
        self.weights
            .iter()
            .map(|(_, m)| format!("{} ({})", m.name, m.dtype))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Plans the graph, makes it resident on `backend` with activations fed
    /// per `mode`, and writes the weights; the inner error is the backend's
    /// refusal of the plan (`Backend::supports`).
    pub(crate) fn try_compile<'b, B: Backend>(
        self,
        backend: &'b B,
        mode: GemvMode,
        what: &str,
    ) -> Result<Supported<Compiled<'b, B>>, LlamaError> {
        let p = if self.unfused {
            Plan::unfused(&self.g)
        } else {
            plan(&self.g)
        };
        if let Err(e) = backend.supports(&self.g, &p, mode) {
            return Ok(Err(LlamaError::backend(
                format!("{} cannot run {what} [{}]", backend.name(), self.names()),
                e,
            )));
        }
        let sizes: Vec<usize> = self.sizes.iter().map(|&n| n.max(ALIGN)).collect();
        let mut resident = backend
            .compile(&self.g, &p, mode, &sizes)
            .map_err(|e| LlamaError::backend(format!("compiling {what} [{}]", self.names()), e))?;
        for (t, m) in &self.weights {
            resident
                .write(t.buffer(), t.offset(), m.data)
                .map_err(|e| LlamaError::backend(format!("writing {}", m.name), e))?;
        }
        for (t, v) in &self.vectors {
            resident.write_f32(t, v).map_err(|e| {
                LlamaError::backend(format!("writing the norm weight of {what}"), e)
            })?;
        }
        let summary = PlanSummary {
            host_steps: resident.stats().host_steps,
            ..PlanSummary::of(&self.g, &p)
        };
        Ok(Ok(Compiled {
            plan: resident,
            summary,
        }))
    }

    /// [`Builder::try_compile`], the backend's refusal an error like any.
    pub(crate) fn compile<'b, B: Backend>(
        self,
        backend: &'b B,
        mode: GemvMode,
        what: &str,
    ) -> Result<Compiled<'b, B>, LlamaError> {
        self.try_compile(backend, mode, what)?
    }
}

/// `n` rounded up to [`ALIGN`], or an overflow error.
fn next_aligned(n: usize) -> Result<usize, LlamaError> {
    n.checked_next_multiple_of(ALIGN)
        .ok_or_else(|| LlamaError::Config {
            what: "plan buffer size".into(),
            why: "overflows the address space".into(),
        })
}

/// What the planner made of one graph.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PlanSummary {
    /// Steps that run a kernel.
    pub kernel_steps: usize,
    /// Of those, fused steps (GEMV with an epilogue or a norm prologue,
    /// gated dual GEMV).
    pub fused_steps: usize,
    /// Of those, steps that compute an RMSNorm as their prologue.
    pub prologue_steps: usize,
    /// Each kernel step in words, in execution order (`gemv[norm] + add`:
    /// a GEMV with a norm prologue and a residual-add epilogue).
    pub steps: Vec<String>,
    /// Candidates the planner refused, with the reason.
    pub refusals: Vec<String>,
    /// Whether the backend runs the plan step by step over host memory,
    /// moving each step's operands to the device and back, because its
    /// device executor refused the plan (`PlanStats::host_steps`): far
    /// slower than a device plan.
    pub host_steps: bool,
}

impl PlanSummary {
    fn of(g: &Graph, p: &Plan) -> PlanSummary {
        let chain = |stages: &[Stage]| -> String {
            stages
                .iter()
                .map(|s| match s {
                    Stage::Act(a) => format!(" + {a:?}").to_lowercase(),
                    Stage::Add { .. } => " + add".into(),
                    Stage::Mul { .. } => " + mul".into(),
                    Stage::AddRowBias { .. } => " + row bias".into(),
                })
                .collect()
        };
        let norm = |has: bool| if has { "[norm]" } else { "" };
        let steps = p
            .steps
            .iter()
            .filter_map(|s| match s {
                Step::Node(id) => g
                    .node(*id)
                    .ok()
                    .filter(|n| !n.op().is_view())
                    .map(|n| n.op().name().to_string()),
                Step::Gemv(f) => Some(format!(
                    "gemv{}{}{}{}",
                    norm(f.prologue.is_some()),
                    chain(f.epilogue.stages()),
                    f.kv.as_ref()
                        .map_or_else(String::new, |kv| format!(" + {}", kv_summary(kv))),
                    if f.argmax.is_some() { " + argmax" } else { "" }
                )),
                Step::GluGemv(f) => Some(format!(
                    "glu({:?}){}{}",
                    f.act,
                    norm(f.prologue.is_some()),
                    chain(f.epilogue.stages())
                )),
                Step::SignedFwht(_) => Some("signed fwht".into()),
                Step::KvAppend(f) => Some(kv_summary(f)),
            })
            .collect();
        PlanSummary {
            kernel_steps: p.kernel_steps(g),
            fused_steps: p.fused_steps(),
            prologue_steps: p
                .steps
                .iter()
                .filter(|s| match s {
                    Step::Gemv(f) => f.prologue.is_some(),
                    Step::GluGemv(f) => f.prologue.is_some(),
                    _ => false,
                })
                .count(),
            steps,
            refusals: p
                .refusals
                .iter()
                .map(|r| format!("{:?} at node {}: {}", r.pattern, r.anchor.index(), r.reason))
                .collect(),
            host_steps: false,
        }
    }
}

/// A key/value append step in a plan summary: `rope(q, k) → k, v rows`.
fn kv_summary(f: &FusedKvAppend) -> String {
    format!(
        "rope({}) → {} rows",
        if f.q_rope.is_some() { "q, k" } else { "k" },
        if f.v_write.is_some() { "k, v" } else { "k" }
    )
}

/// A resident plan and what the planner made of its graph.
pub(crate) struct Compiled<'b, B: Backend + 'b> {
    pub(crate) plan: B::Plan<'b>,
    pub(crate) summary: PlanSummary,
}

impl<'b, B: Backend + 'b> Compiled<'b, B> {
    pub(crate) fn write(
        &mut self,
        t: &TensorDesc,
        v: &[f32],
        what: &str,
    ) -> Result<(), LlamaError> {
        self.plan
            .write_f32(t, v)
            .map_err(|e| LlamaError::backend(format!("writing {what}"), e))
    }

    /// Reads `t` into `out` (resized to it; no allocation once it has
    /// the size).
    pub(crate) fn read(
        &self,
        t: &TensorDesc,
        out: &mut Vec<f32>,
        what: &str,
    ) -> Result<(), LlamaError> {
        out.resize(t.n_elements(), 0.0);
        self.plan
            .read_f32_into(t, out)
            .map_err(|e| LlamaError::backend(format!("reading {what}"), e))
    }

    pub(crate) fn run(&mut self, what: &str) -> Result<(), LlamaError> {
        self.plan
            .run()
            .map_err(|e| LlamaError::backend(format!("running {what}"), e))
    }
}

impl<'b, B: Backend + 'b> fmt::Debug for Compiled<'b, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Compiled")
            .field("summary", &self.summary)
            .field("stats", &self.plan.stats())
            .finish()
    }
}

/// The query, key and value vectors of one position (read into, so that
/// a decode loop reuses them).
#[derive(Clone, Debug, Default)]
pub struct Qkv {
    /// The query heads.
    pub q: Vec<f32>,
    /// The key heads.
    pub k: Vec<f32>,
    /// The value heads.
    pub v: Vec<f32>,
}

/// `q, k, v` of one layer, one plan: a single GEMV over `W_q`, `W_k`, `W_v`
/// stacked row after row where they share a format (the usual case), else
/// three GEMVs; over a host-normed input ([`QkvPlan::new`]) or over the
/// residual stream with the norm as the GEMVs' prologue
/// ([`QkvPlan::with_norm`]).
#[derive(Debug)]
pub struct QkvPlan<'b, B: Backend + 'b> {
    c: Compiled<'b, B>,
    x: TensorDesc,
    q: TensorDesc,
    k: TensorDesc,
    v: TensorDesc,
}

/// The q/k/v GEMVs of `x` into `b`: the output tensors.
fn qkv_graph<'w>(
    b: &mut Builder<'w>,
    x: NodeId,
    wq: &Matrix<'w>,
    wk: &Matrix<'w>,
    wv: &Matrix<'w>,
) -> Result<(TensorDesc, TensorDesc, TensorDesc), LlamaError> {
    let (q, k, v) = qkv_nodes(b, x, wq, wk, wv)?;
    Ok((b.tensor(q)?, b.tensor(k)?, b.tensor(v)?))
}

/// The q/k/v GEMVs of `x` into `b`: the nodes of `q`, `k` and `v` (views of
/// one stacked product, or three products), each a vector.
pub(crate) fn qkv_nodes<'w>(
    b: &mut Builder<'w>,
    x: NodeId,
    wq: &Matrix<'w>,
    wk: &Matrix<'w>,
    wv: &Matrix<'w>,
) -> Result<(NodeId, NodeId, NodeId), LlamaError> {
    let same = wk.dtype == wq.dtype && wv.dtype == wq.dtype && wk.k == wq.k && wv.k == wq.k;
    if same {
        // One GEMV over the three matrices stacked: one kernel step and
        // one activation quantization instead of three.
        let w = b.stacked(&[wq, wk, wv])?;
        let at = b.place(wq.m + wk.m + wv.m)?;
        let qkv = b.g.mul_mat(w, x, at)?;
        b.g.mark_output(qkv)?;
        let mut part = |off: usize, n: usize| -> Result<NodeId, LlamaError> {
            Ok(b.g.view(qkv, [n, 1, 1, 1], [4, 4 * n, 4 * n, 4 * n], 4 * off)?)
        };
        Ok((part(0, wq.m)?, part(wq.m, wk.m)?, part(wq.m + wk.m, wv.m)?))
    } else {
        let (nq, nk, nv) = (b.weight(wq)?, b.weight(wk)?, b.weight(wv)?);
        let at = b.place(wq.m)?;
        let q = b.g.mul_mat(nq, x, at)?;
        let at = b.place(wk.m)?;
        let k = b.g.mul_mat(nk, x, at)?;
        let at = b.place(wv.m)?;
        let v = b.g.mul_mat(nv, x, at)?;
        for id in [q, k, v] {
            b.g.mark_output(id)?;
        }
        Ok((q, k, v))
    }
}

impl<'b, B: Backend + 'b> QkvPlan<'b, B> {
    /// The plan of `W_q`, `W_k`, `W_v` (all of row length `hidden`) over a
    /// host-normed input.
    pub fn new(
        backend: &'b B,
        mode: GemvMode,
        wq: &Matrix<'_>,
        wk: &Matrix<'_>,
        wv: &Matrix<'_>,
        what: &str,
    ) -> Result<Self, LlamaError> {
        let mut b = Builder::new();
        let (x, xt) = b.vector(wq.k)?;
        let (q, k, v) = qkv_graph(&mut b, x, wq, wk, wv)?;
        Ok(QkvPlan {
            c: b.compile(backend, mode, what)?,
            x: xt,
            q,
            k,
            v,
        })
    }

    /// The plan of `W_q`, `W_k`, `W_v` over the residual stream `h`, the
    /// GEMVs computing `x = rms_norm(h) · g` as their prologue; or the
    /// backend's refusal.
    pub fn with_norm(
        backend: &'b B,
        mode: GemvMode,
        norm: &Norm<'_>,
        wq: &Matrix<'_>,
        wk: &Matrix<'_>,
        wv: &Matrix<'_>,
        what: &str,
    ) -> Result<Supported<Self>, LlamaError> {
        let mut b = Builder::new();
        let (h, ht) = b.vector(wq.k)?;
        let x = b.normed(h, norm)?;
        let (q, k, v) = qkv_graph(&mut b, x, wq, wk, wv)?;
        Ok(b.try_compile(backend, mode, what)?
            .map(|c| QkvPlan { c, x: ht, q, k, v }))
    }

    /// `W_q·x, W_k·x, W_v·x` into `out`, `x` the normed input or, built
    /// [`QkvPlan::with_norm`], the residual stream.
    pub fn run(&mut self, x: &[f32], out: &mut Qkv) -> Result<(), LlamaError> {
        self.c.write(&self.x, x, "the q/k/v input")?;
        self.c.run("the q/k/v plan")?;
        self.c.read(&self.q, &mut out.q, "q")?;
        self.c.read(&self.k, &mut out.k, "k")?;
        self.c.read(&self.v, &mut out.v, "v")
    }

    /// What the planner made of the graph.
    pub fn summary(&self) -> &PlanSummary {
        &self.c.summary
    }
}

/// `h += W_o·attn` in place into `b`'s residual `h`: the updated residual.
pub(crate) fn out_graph<'w>(
    b: &mut Builder<'w>,
    h: NodeId,
    ht: &TensorDesc,
    attn: NodeId,
    wo: &Matrix<'w>,
) -> Result<NodeId, LlamaError> {
    let w = b.weight(wo)?;
    let at = b.place(wo.m)?;
    let o = b.g.mul_mat(w, attn, at)?;
    let res = Place {
        buffer: ht.buffer(),
        offset: ht.offset(),
    };
    Ok(b.g.add(o, h, res)?)
}

/// `h += W_d·(silu(W_g·x) ⊙ (W_u·x))` in place into `b`'s residual (node
/// `h`, tensor `ht`): the updated residual.
pub(crate) fn ffn_graph<'w>(
    b: &mut Builder<'w>,
    h: NodeId,
    ht: &TensorDesc,
    x: NodeId,
    wg: &Matrix<'w>,
    wu: &Matrix<'w>,
    wd: &Matrix<'w>,
) -> Result<NodeId, LlamaError> {
    let (ng, nu, nd) = (b.weight(wg)?, b.weight(wu)?, b.weight(wd)?);
    let at = b.place(wg.m)?;
    let gate = b.g.mul_mat(ng, x, at)?;
    let at = b.place(wu.m)?;
    let up = b.g.mul_mat(nu, x, at)?;
    let at = b.place(wg.m)?;
    let act = b.g.glu(Activation::Silu, gate, up, at)?;
    let at = b.place(wd.m)?;
    let down = b.g.mul_mat(nd, act, at)?;
    let res = Place {
        buffer: ht.buffer(),
        offset: ht.offset(),
    };
    Ok(b.g.add(down, h, res)?)
}

/// A plan that adds into the residual stream `h` in place from one other
/// input, in three forms:
///
/// - [`ResidualPlan::post_attn`]: the rest of a layer after attention:
///   `h += W_o·attn` (the output projection with the residual add fused,
///   in place), then `x = rms_norm(h) · g` as the gated dual GEMV's
///   prologue, `h += W_d·(silu(W_g·x) ⊙ (W_u·x))` (the down GEMV with the
///   residual add, in place);
/// - [`ResidualPlan::out_proj`]: `h += W_o·attn` alone;
/// - [`ResidualPlan::ffn`]: `h += W_d·(silu(W_g·x) ⊙ (W_u·x))` over a
///   host-normed `x`.
#[derive(Debug)]
pub struct ResidualPlan<'b, B: Backend + 'b> {
    c: Compiled<'b, B>,
    h: TensorDesc,
    input: TensorDesc,
    /// What the other input is and what the plan does, for errors.
    input_what: &'static str,
    run_what: &'static str,
}

impl<'b, B: Backend + 'b> ResidualPlan<'b, B> {
    /// The plan of `W_o` (`[n_head·head_dim, hidden]`), the FFN norm, `W_g`,
    /// `W_u` (`[hidden, ffn]`) and `W_d` (`[ffn, hidden]`); or the backend's
    /// refusal.
    #[allow(clippy::too_many_arguments)]
    pub fn post_attn(
        backend: &'b B,
        mode: GemvMode,
        wo: &Matrix<'_>,
        norm: &Norm<'_>,
        wg: &Matrix<'_>,
        wu: &Matrix<'_>,
        wd: &Matrix<'_>,
        what: &str,
    ) -> Result<Supported<Self>, LlamaError> {
        let mut b = Builder::new();
        let (h, ht) = b.vector(wo.m)?;
        let (attn, attn_t) = b.vector(wo.k)?;
        let h1 = out_graph(&mut b, h, &ht, attn, wo)?;
        let x = b.normed(h1, norm)?;
        let out = ffn_graph(&mut b, h1, &ht, x, wg, wu, wd)?;
        b.g.mark_output(out)?;
        Ok(b.try_compile(backend, mode, what)?.map(|c| ResidualPlan {
            c,
            h: ht,
            input: attn_t,
            input_what: "the attention output",
            run_what: "the post-attention plan",
        }))
    }

    /// The plan of `W_o` (`[n_head·head_dim, hidden]`) alone.
    pub fn out_proj(
        backend: &'b B,
        mode: GemvMode,
        wo: &Matrix<'_>,
        what: &str,
    ) -> Result<Self, LlamaError> {
        let mut b = Builder::new();
        let (h, ht) = b.vector(wo.m)?;
        let (attn, attn_t) = b.vector(wo.k)?;
        let out = out_graph(&mut b, h, &ht, attn, wo)?;
        b.g.mark_output(out)?;
        Ok(ResidualPlan {
            c: b.compile(backend, mode, what)?,
            h: ht,
            input: attn_t,
            input_what: "the attention output",
            run_what: "the output projection",
        })
    }

    /// The plan of `W_g`, `W_u` (`[hidden, ffn]`) and `W_d` (`[ffn, hidden]`)
    /// over a host-normed input.
    pub fn ffn(
        backend: &'b B,
        mode: GemvMode,
        wg: &Matrix<'_>,
        wu: &Matrix<'_>,
        wd: &Matrix<'_>,
        what: &str,
    ) -> Result<Self, LlamaError> {
        let mut b = Builder::new();
        let (h, ht) = b.vector(wd.m)?;
        let (x, xt) = b.vector(wg.k)?;
        let out = ffn_graph(&mut b, h, &ht, x, wg, wu, wd)?;
        b.g.mark_output(out)?;
        Ok(ResidualPlan {
            c: b.compile(backend, mode, what)?,
            h: ht,
            input: xt,
            input_what: "the normed input",
            run_what: "the feed-forward plan",
        })
    }

    /// Runs the plan over `h` (updated in place) and the other input.
    pub fn run(&mut self, h: &mut Vec<f32>, input: &[f32]) -> Result<(), LlamaError> {
        self.c.write(&self.h, h, "the residual stream")?;
        self.c.write(&self.input, input, self.input_what)?;
        self.c.run(self.run_what)?;
        self.c.read(&self.h, h, "the residual stream")
    }

    /// What the planner made of the graph.
    pub fn summary(&self) -> &PlanSummary {
        &self.c.summary
    }
}

/// `logits = W_out·x`: the output head (the embedding table when tied),
/// over a host-normed `x` or with the final norm as its prologue.
#[derive(Debug)]
pub struct HeadPlan<'b, B: Backend + 'b> {
    c: Compiled<'b, B>,
    x: TensorDesc,
    logits: TensorDesc,
}

impl<'b, B: Backend + 'b> HeadPlan<'b, B> {
    fn build<'w>(
        w: &Matrix<'w>,
        norm: Option<&Norm<'_>>,
    ) -> Result<(Builder<'w>, TensorDesc, TensorDesc), LlamaError> {
        let mut b = Builder::new();
        let nw = b.weight(w)?;
        let (x, xt) = b.vector(w.k)?;
        let x = match norm {
            Some(n) => b.normed(x, n)?,
            None => x,
        };
        let at = b.place(w.m)?;
        let logits = b.g.mul_mat(nw, x, at)?;
        b.g.mark_output(logits)?;
        let logits = b.tensor(logits)?;
        Ok((b, xt, logits))
    }

    /// The plan of `W_out` (`[hidden, vocab]`) over a host-normed input.
    pub fn new(
        backend: &'b B,
        mode: GemvMode,
        w: &Matrix<'_>,
        what: &str,
    ) -> Result<Self, LlamaError> {
        let (b, x, logits) = Self::build(w, None)?;
        Ok(HeadPlan {
            c: b.compile(backend, mode, what)?,
            x,
            logits,
        })
    }

    /// The plan of `W_out` over the final hidden state, the GEMV computing
    /// the final norm as its prologue; or the backend's refusal.
    pub fn with_norm(
        backend: &'b B,
        mode: GemvMode,
        norm: &Norm<'_>,
        w: &Matrix<'_>,
        what: &str,
    ) -> Result<Supported<Self>, LlamaError> {
        let (b, x, logits) = Self::build(w, Some(norm))?;
        Ok(b.try_compile(backend, mode, what)?
            .map(|c| HeadPlan { c, x, logits }))
    }

    /// The logits of `x` into `logits`: `x` the normed final hidden state
    /// or, built [`HeadPlan::with_norm`], the final hidden state.
    pub fn run(&mut self, x: &[f32], logits: &mut Vec<f32>) -> Result<(), LlamaError> {
        self.c.write(&self.x, x, "the final hidden state")?;
        self.c.run("the output head")?;
        self.c.read(&self.logits, logits, "the logits")
    }

    /// What the planner made of the graph.
    pub fn summary(&self) -> &PlanSummary {
        &self.c.summary
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fused_cpu::CpuBackend;

    /// Deterministic values in [-0.5, 0.5).
    fn values(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                ((s >> 40) as f32 / (1u64 << 24) as f32) - 0.5
            })
            .collect()
    }

    /// A matrix of `m` rows of `k` in `dtype` (F32 or F16) with its f32 values.
    fn mat(
        name: &'static str,
        dtype: DType,
        k: usize,
        m: usize,
        seed: u64,
    ) -> (Vec<u8>, Vec<f32>, &'static str, DType) {
        let v = values(k * m, seed);
        let bytes = match dtype {
            DType::F16 => v.iter().flat_map(|x| half_bits(*x).to_le_bytes()).collect(),
            _ => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        };
        let exact = match dtype {
            DType::F16 => v.iter().map(|x| f16_round(*x)).collect(),
            _ => v,
        };
        (bytes, exact, name, dtype)
    }

    fn half_bits(x: f32) -> u16 {
        let mut out = [0u8; 2];
        fused_core::quant::quantize_row(DType::F16, &[x], &mut out).unwrap();
        u16::from_le_bytes(out)
    }

    fn f16_round(x: f32) -> f32 {
        let mut out = [0.0f32];
        fused_core::quant::dequantize_row(DType::F16, &half_bits(x).to_le_bytes(), &mut out)
            .unwrap();
        out[0]
    }

    fn gemv(w: &[f32], k: usize, x: &[f32]) -> Vec<f32> {
        w.chunks_exact(k)
            .map(|row| {
                row.iter()
                    .zip(x)
                    .map(|(a, b)| f64::from(*a) * f64::from(*b))
                    .sum::<f64>() as f32
            })
            .collect()
    }

    fn close(a: &[f32], b: &[f32]) {
        assert_eq!(a.len(), b.len());
        for (i, (x, y)) in a.iter().zip(b).enumerate() {
            assert!((x - y).abs() < 1e-3, "element {i}: {x} vs {y}");
        }
    }

    fn as_matrix<'a>(m: &'a (Vec<u8>, Vec<f32>, &'static str, DType), k: usize) -> Matrix<'a> {
        Matrix {
            name: m.2,
            dtype: m.3,
            k,
            m: m.1.len() / k,
            data: &m.0,
        }
    }

    #[test]
    fn qkv_stacked_and_separate_compute_the_products() {
        let be = CpuBackend::new(1).unwrap();
        let (k, mq, mkv) = (64, 64, 32);
        let x = values(k, 9);
        for formats in [[DType::F32; 3], [DType::F16, DType::F16, DType::F32]] {
            let q = mat("q", formats[0], k, mq, 1);
            let kk = mat("k", formats[1], k, mkv, 2);
            let v = mat("v", formats[2], k, mkv, 3);
            let mut p = QkvPlan::new(
                &be,
                GemvMode::F32,
                &as_matrix(&q, k),
                &as_matrix(&kk, k),
                &as_matrix(&v, k),
                "test q/k/v",
            )
            .unwrap();
            let steps = if formats[0] == formats[2] { 1 } else { 3 };
            assert_eq!(p.summary().kernel_steps, steps, "{formats:?}");
            let mut o = Qkv::default();
            p.run(&x, &mut o).unwrap();
            let (oq, ok, ov) = (o.q, o.k, o.v);
            close(&oq, &gemv(&q.1, k, &x));
            close(&ok, &gemv(&kk.1, k, &x));
            close(&ov, &gemv(&v.1, k, &x));
        }
    }

    #[test]
    fn out_and_ffn_add_into_the_residual_stream() {
        let be = CpuBackend::new(2).unwrap();
        let (hidden, ffn) = (64, 96);
        let wo = mat("o", DType::F32, hidden, hidden, 4);
        let mut out =
            ResidualPlan::out_proj(&be, GemvMode::F32, &as_matrix(&wo, hidden), "test out")
                .unwrap();
        assert_eq!(
            (out.summary().kernel_steps, out.summary().fused_steps),
            (1, 1)
        );
        let h0 = values(hidden, 5);
        let attn = values(hidden, 6);
        let mut h = h0.clone();
        out.run(&mut h, &attn).unwrap();
        let want: Vec<f32> = gemv(&wo.1, hidden, &attn)
            .iter()
            .zip(&h0)
            .map(|(a, b)| a + b)
            .collect();
        close(&h, &want);

        let wg = mat("gate", DType::F32, hidden, ffn, 7);
        let wu = mat("up", DType::F32, hidden, ffn, 8);
        let wd = mat("down", DType::F32, ffn, hidden, 9);
        let mut f = ResidualPlan::ffn(
            &be,
            GemvMode::F32,
            &as_matrix(&wg, hidden),
            &as_matrix(&wu, hidden),
            &as_matrix(&wd, ffn),
            "test ffn",
        )
        .unwrap();
        assert_eq!((f.summary().kernel_steps, f.summary().fused_steps), (2, 2));
        let x = values(hidden, 10);
        let h1 = h.clone();
        f.run(&mut h, &x).unwrap();
        let want = host_ffn([&wg.1, &wu.1, &wd.1], hidden, ffn, &x, &h1);
        close(&h, &want);
    }

    /// `h + W_d·(silu(W_g·x) ⊙ (W_u·x))` on the host, from the row-major
    /// f32 matrices `[W_g, W_u, W_d]`.
    fn host_ffn(w: [&[f32]; 3], hidden: usize, ffn: usize, x: &[f32], h: &[f32]) -> Vec<f32> {
        let (g, u) = (gemv(w[0], hidden, x), gemv(w[1], hidden, x));
        let a: Vec<f32> = g
            .iter()
            .zip(&u)
            .map(|(g, u)| g / (1.0 + (-g).exp()) * u)
            .collect();
        gemv(w[2], ffn, &a)
            .iter()
            .zip(h)
            .map(|(d, r)| d + r)
            .collect()
    }

    fn host_norm(x: &[f32], g: &[f32]) -> Vec<f32> {
        let mut out = vec![0.0; x.len()];
        crate::ops::rms_norm(x, g, 1e-5, &mut out);
        out
    }

    #[test]
    fn the_norm_prologue_plans_compute_the_products_of_the_normed_input() {
        let be = CpuBackend::new(2).unwrap();
        let (hidden, ffn, kv) = (64, 96, 32);
        let gamma: Vec<f32> = values(hidden, 20).iter().map(|v| v + 1.0).collect();
        let norm = Norm {
            weight: &gamma,
            eps: 1e-5,
        };
        let h0: Vec<f32> = values(hidden, 21).iter().map(|v| 4.0 * v).collect();

        let q = mat("q", DType::F32, hidden, hidden, 22);
        let k = mat("k", DType::F32, hidden, kv, 23);
        let v = mat("v", DType::F32, hidden, kv, 24);
        let mut p = QkvPlan::with_norm(
            &be,
            GemvMode::F32,
            &norm,
            &as_matrix(&q, hidden),
            &as_matrix(&k, hidden),
            &as_matrix(&v, hidden),
            "test q/k/v",
        )
        .unwrap()
        .unwrap();
        assert_eq!(p.summary().steps, ["gemv[norm]"]);
        let x = host_norm(&h0, &gamma);
        let mut o = Qkv::default();
        p.run(&h0, &mut o).unwrap();
        let (oq, ok, ov) = (o.q, o.k, o.v);
        close(&oq, &gemv(&q.1, hidden, &x));
        close(&ok, &gemv(&k.1, hidden, &x));
        close(&ov, &gemv(&v.1, hidden, &x));

        let wo = mat("o", DType::F32, hidden, hidden, 25);
        let wg = mat("gate", DType::F32, hidden, ffn, 26);
        let wu = mat("up", DType::F32, hidden, ffn, 27);
        let wd = mat("down", DType::F32, ffn, hidden, 28);
        let mut post = ResidualPlan::post_attn(
            &be,
            GemvMode::F32,
            &as_matrix(&wo, hidden),
            &norm,
            &as_matrix(&wg, hidden),
            &as_matrix(&wu, hidden),
            &as_matrix(&wd, ffn),
            "test post-attention",
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            post.summary().steps,
            ["gemv + add", "glu(Silu)[norm]", "gemv + add"]
        );
        let attn = values(hidden, 29);
        let mut h = h0.clone();
        post.run(&mut h, &attn).unwrap();
        let h1: Vec<f32> = gemv(&wo.1, hidden, &attn)
            .iter()
            .zip(&h0)
            .map(|(a, b)| a + b)
            .collect();
        let x = host_norm(&h1, &gamma);
        let want = host_ffn([&wg.1, &wu.1, &wd.1], hidden, ffn, &x, &h1);
        close(&h, &want);

        let w = mat("head", DType::F16, hidden, 80, 30);
        let mut head = HeadPlan::with_norm(
            &be,
            GemvMode::F32,
            &norm,
            &as_matrix(&w, hidden),
            "test head",
        )
        .unwrap()
        .unwrap();
        assert_eq!(head.summary().prologue_steps, 1);
        let mut logits = Vec::new();
        head.run(&h0, &mut logits).unwrap();
        close(&logits, &gemv(&w.1, hidden, &host_norm(&h0, &gamma)));
    }

    #[test]
    fn a_weight_of_the_wrong_size_is_refused_by_name() {
        let be = CpuBackend::new(1).unwrap();
        let w = mat("blk.0.attn_output.weight", DType::F32, 64, 64, 1);
        let short = Matrix {
            data: &w.0[..100],
            ..as_matrix(&w, 64)
        };
        let e = HeadPlan::new(&be, GemvMode::F32, &short, "test head").unwrap_err();
        assert!(e.to_string().contains("blk.0.attn_output.weight"), "{e}");
    }
}
