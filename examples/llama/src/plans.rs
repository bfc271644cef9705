//! The matrix products of a Llama layer as graphs, planned by the core's
//! planner and made resident on a backend once, with their weights written
//! into the plans' buffers at load:
//!
//! - [`QkvPlan`]: `q, k, v = W_q·x, W_k·x, W_v·x` on the normed input, one
//!   GEMV over the three matrices stacked where their formats agree;
//! - [`OutPlan`]: `h += W_o·attn`, one GEMV with the residual add as its
//!   epilogue, in place;
//! - [`FfnPlan`]: `h += W_d·(silu(W_g·x) ⊙ (W_u·x))`, the gated dual GEMV
//!   then one GEMV with the residual add in place;
//! - [`HeadPlan`]: `logits = W_out·x`.
//!
//! Every plan has two buffers: 0 holds the weights (each matrix at a
//! 256-byte boundary), 1 the f32 activations.

use std::fmt;

use fused_core::DType;
use fused_core::acts::GemvMode;
use fused_core::backend::{Backend, ResidentPlan};
use fused_core::element::Activation;
use fused_core::graph::{Graph, NodeId, Place};
use fused_core::planner::{Plan, plan};
use fused_core::tensor::{BufferId, TensorDesc};

use crate::error::LlamaError;
use crate::file::Matrix;

/// Alignment of every tensor in a plan's buffers.
const ALIGN: usize = 256;
/// The weights' buffer.
const WEIGHTS: u32 = 0;
/// The activations' buffer.
const ACTS: u32 = 1;

/// A graph under construction with the weights to write into its plan.
struct Builder<'w> {
    g: Graph,
    weights: Vec<(TensorDesc, Matrix<'w>)>,
    weight_bytes: usize,
    act_bytes: usize,
}

impl<'w> Builder<'w> {
    fn new() -> Self {
        Builder {
            g: Graph::new(),
            weights: Vec::new(),
            weight_bytes: 0,
            act_bytes: 0,
        }
    }

    /// The matrix `m` as a graph input in the weights' buffer.
    fn weight(&mut self, m: &Matrix<'w>) -> Result<NodeId, LlamaError> {
        let t = TensorDesc::contiguous(
            m.dtype,
            [m.k, m.m, 1, 1],
            BufferId(WEIGHTS),
            self.weight_bytes,
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
        self.weight_bytes = next_aligned(t.byte_extent().end)?;
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
        let start = self.weight_bytes;
        let t =
            TensorDesc::contiguous(first.dtype, [first.k, rows, 1, 1], BufferId(WEIGHTS), start)
                .map_err(|e| LlamaError::format(first.name, first.dtype, e.to_string()))?;
        let mut at = start;
        for m in ms {
            let part = TensorDesc::contiguous(m.dtype, [m.k, m.m, 1, 1], BufferId(WEIGHTS), at)
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
        self.weight_bytes = next_aligned(at)?;
        Ok(self.g.input(t)?)
    }

    /// A place for `n` f32 values in the activations' buffer.
    fn place(&mut self, n: usize) -> Result<Place, LlamaError> {
        let at = Place::at(ACTS, self.act_bytes);
        self.act_bytes = next_aligned(self.act_bytes + 4 * n)?;
        Ok(at)
    }

    /// An f32 input vector of `n` values in the activations' buffer.
    fn vector(&mut self, n: usize) -> Result<(NodeId, TensorDesc), LlamaError> {
        let at = self.place(n)?;
        let t = TensorDesc::contiguous(DType::F32, [n, 1, 1, 1], at.buffer, at.offset)?;
        Ok((self.g.input(t)?, t))
    }

    fn tensor(&self, id: NodeId) -> Result<TensorDesc, LlamaError> {
        Ok(*self.g.tensor(id)?)
    }

    /// Plans the graph, makes it resident on `backend` with activations fed
    /// per `mode`, and writes the weights.
    fn compile<'b, B: Backend>(
        self,
        backend: &'b B,
        mode: GemvMode,
        what: &str,
    ) -> Result<Compiled<'b, B>, LlamaError> {
        let p = plan(&self.g);
        let names = || {
            self.weights
                .iter()
                .map(|(_, m)| format!("{} ({})", m.name, m.dtype))
                .collect::<Vec<_>>()
                .join(", ")
        };
        backend.supports(&self.g, &p, mode).map_err(|e| {
            LlamaError::backend(
                format!("{} cannot run {what} [{}]", backend.name(), names()),
                e,
            )
        })?;
        let sizes = [self.weight_bytes.max(ALIGN), self.act_bytes.max(ALIGN)];
        let mut resident = backend
            .compile(&self.g, &p, mode, &sizes)
            .map_err(|e| LlamaError::backend(format!("compiling {what} [{}]", names()), e))?;
        for (t, m) in &self.weights {
            resident
                .write(t.buffer(), t.offset(), m.data)
                .map_err(|e| LlamaError::backend(format!("writing {}", m.name), e))?;
        }
        Ok(Compiled {
            plan: resident,
            summary: PlanSummary::of(&self.g, &p),
        })
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
    /// Of those, fused steps (GEMV with an epilogue, gated dual GEMV).
    pub fused_steps: usize,
    /// Candidates the planner refused, with the reason.
    pub refusals: Vec<String>,
}

impl PlanSummary {
    fn of(g: &Graph, p: &Plan) -> PlanSummary {
        PlanSummary {
            kernel_steps: p.kernel_steps(g),
            fused_steps: p.fused_steps(),
            refusals: p
                .refusals
                .iter()
                .map(|r| format!("{:?} at node {}: {}", r.pattern, r.anchor.index(), r.reason))
                .collect(),
        }
    }
}

/// A resident plan and what the planner made of its graph.
struct Compiled<'b, B: Backend + 'b> {
    plan: B::Plan<'b>,
    summary: PlanSummary,
}

impl<'b, B: Backend + 'b> Compiled<'b, B> {
    fn write(&mut self, t: &TensorDesc, v: &[f32], what: &str) -> Result<(), LlamaError> {
        self.plan
            .write_f32(t, v)
            .map_err(|e| LlamaError::backend(format!("writing {what}"), e))
    }

    fn read(&self, t: &TensorDesc, what: &str) -> Result<Vec<f32>, LlamaError> {
        self.plan
            .read_f32(t)
            .map_err(|e| LlamaError::backend(format!("reading {what}"), e))
    }

    fn run(&mut self, what: &str) -> Result<(), LlamaError> {
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

/// The query, key and value vectors of one position.
pub type Qkv = (Vec<f32>, Vec<f32>, Vec<f32>);

/// `q, k, v` of one layer over one normed input, one plan: a single GEMV
/// over `W_q`, `W_k`, `W_v` stacked row after row where they share a format
/// (the usual case), else three GEMVs.
#[derive(Debug)]
pub struct QkvPlan<'b, B: Backend + 'b> {
    c: Compiled<'b, B>,
    x: TensorDesc,
    q: TensorDesc,
    k: TensorDesc,
    v: TensorDesc,
}

impl<'b, B: Backend + 'b> QkvPlan<'b, B> {
    /// The plan of `W_q`, `W_k`, `W_v` (all of row length `hidden`).
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
        let same = wk.dtype == wq.dtype && wv.dtype == wq.dtype && wk.k == wq.k && wv.k == wq.k;
        let (q, k, v) = if same {
            // One GEMV over the three matrices stacked: one kernel step and
            // one activation quantization instead of three.
            let w = b.stacked(&[wq, wk, wv])?;
            let at = b.place(wq.m + wk.m + wv.m)?;
            let qkv = b.g.mul_mat(w, x, at)?;
            b.g.mark_output(qkv)?;
            let all = b.tensor(qkv)?;
            let part = |off: usize, n: usize| {
                TensorDesc::contiguous(
                    DType::F32,
                    [n, 1, 1, 1],
                    all.buffer(),
                    all.offset() + 4 * off,
                )
            };
            (part(0, wq.m)?, part(wq.m, wk.m)?, part(wq.m + wk.m, wv.m)?)
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
            (b.tensor(q)?, b.tensor(k)?, b.tensor(v)?)
        };
        Ok(QkvPlan {
            c: b.compile(backend, mode, what)?,
            x: xt,
            q,
            k,
            v,
        })
    }

    /// `(W_q·x, W_k·x, W_v·x)`.
    pub fn run(&mut self, x: &[f32]) -> Result<Qkv, LlamaError> {
        self.c.write(&self.x, x, "the normed input")?;
        self.c.run("the q/k/v plan")?;
        Ok((
            self.c.read(&self.q, "q")?,
            self.c.read(&self.k, "k")?,
            self.c.read(&self.v, "v")?,
        ))
    }

    /// What the planner made of the graph.
    pub fn summary(&self) -> &PlanSummary {
        &self.c.summary
    }
}

/// `h += W_o·attn`: the attention output projection with the residual add
/// fused as its epilogue, written in place over `h`.
#[derive(Debug)]
pub struct OutPlan<'b, B: Backend + 'b> {
    c: Compiled<'b, B>,
    h: TensorDesc,
    attn: TensorDesc,
}

impl<'b, B: Backend + 'b> OutPlan<'b, B> {
    /// The plan of `W_o` (`[n_head·head_dim, hidden]`).
    pub fn new(
        backend: &'b B,
        mode: GemvMode,
        wo: &Matrix<'_>,
        what: &str,
    ) -> Result<Self, LlamaError> {
        let mut b = Builder::new();
        let w = b.weight(wo)?;
        let (h, ht) = b.vector(wo.m)?;
        let (attn, attn_t) = b.vector(wo.k)?;
        let at = b.place(wo.m)?;
        let o = b.g.mul_mat(w, attn, at)?;
        let res = Place {
            buffer: ht.buffer(),
            offset: ht.offset(),
        };
        let out = b.g.add(o, h, res)?;
        b.g.mark_output(out)?;
        Ok(OutPlan {
            c: b.compile(backend, mode, what)?,
            h: ht,
            attn: attn_t,
        })
    }

    /// `h += W_o·attn`.
    pub fn run(&mut self, h: &mut Vec<f32>, attn: &[f32]) -> Result<(), LlamaError> {
        self.c.write(&self.h, h, "the residual stream")?;
        self.c.write(&self.attn, attn, "the attention output")?;
        self.c.run("the output projection")?;
        *h = self.c.read(&self.h, "the residual stream")?;
        Ok(())
    }

    /// What the planner made of the graph.
    pub fn summary(&self) -> &PlanSummary {
        &self.c.summary
    }
}

/// `h += W_d·(silu(W_g·x) ⊙ (W_u·x))`: the gated dual GEMV, then the down
/// projection with the residual add fused, in place over `h`.
#[derive(Debug)]
pub struct FfnPlan<'b, B: Backend + 'b> {
    c: Compiled<'b, B>,
    h: TensorDesc,
    x: TensorDesc,
}

impl<'b, B: Backend + 'b> FfnPlan<'b, B> {
    /// The plan of `W_g`, `W_u` (`[hidden, ffn]`) and `W_d` (`[ffn, hidden]`).
    pub fn new(
        backend: &'b B,
        mode: GemvMode,
        wg: &Matrix<'_>,
        wu: &Matrix<'_>,
        wd: &Matrix<'_>,
        what: &str,
    ) -> Result<Self, LlamaError> {
        let mut b = Builder::new();
        let (ng, nu, nd) = (b.weight(wg)?, b.weight(wu)?, b.weight(wd)?);
        let (h, ht) = b.vector(wd.m)?;
        let (x, xt) = b.vector(wg.k)?;
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
        let out = b.g.add(down, h, res)?;
        b.g.mark_output(out)?;
        Ok(FfnPlan {
            c: b.compile(backend, mode, what)?,
            h: ht,
            x: xt,
        })
    }

    /// `h += W_d·(silu(W_g·x) ⊙ (W_u·x))`.
    pub fn run(&mut self, h: &mut Vec<f32>, x: &[f32]) -> Result<(), LlamaError> {
        self.c.write(&self.h, h, "the residual stream")?;
        self.c.write(&self.x, x, "the normed input")?;
        self.c.run("the feed-forward plan")?;
        *h = self.c.read(&self.h, "the residual stream")?;
        Ok(())
    }

    /// What the planner made of the graph.
    pub fn summary(&self) -> &PlanSummary {
        &self.c.summary
    }
}

/// `logits = W_out·x`: the output head (the embedding table when tied).
#[derive(Debug)]
pub struct HeadPlan<'b, B: Backend + 'b> {
    c: Compiled<'b, B>,
    x: TensorDesc,
    logits: TensorDesc,
}

impl<'b, B: Backend + 'b> HeadPlan<'b, B> {
    /// The plan of `W_out` (`[hidden, vocab]`).
    pub fn new(
        backend: &'b B,
        mode: GemvMode,
        w: &Matrix<'_>,
        what: &str,
    ) -> Result<Self, LlamaError> {
        let mut b = Builder::new();
        let nw = b.weight(w)?;
        let (x, xt) = b.vector(w.k)?;
        let at = b.place(w.m)?;
        let logits = b.g.mul_mat(nw, x, at)?;
        b.g.mark_output(logits)?;
        let logits = b.tensor(logits)?;
        Ok(HeadPlan {
            c: b.compile(backend, mode, what)?,
            x: xt,
            logits,
        })
    }

    /// The logits of the normed final hidden state `x`.
    pub fn run(&mut self, x: &[f32]) -> Result<Vec<f32>, LlamaError> {
        self.c.write(&self.x, x, "the normed hidden state")?;
        self.c.run("the output head")?;
        self.c.read(&self.logits, "the logits")
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
            let (oq, ok, ov) = p.run(&x).unwrap();
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
            OutPlan::new(&be, GemvMode::F32, &as_matrix(&wo, hidden), "test out").unwrap();
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
        let mut f = FfnPlan::new(
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
        let (g, u) = (gemv(&wg.1, hidden, &x), gemv(&wu.1, hidden, &x));
        let a: Vec<f32> = g
            .iter()
            .zip(&u)
            .map(|(g, u)| g / (1.0 + (-g).exp()) * u)
            .collect();
        let want: Vec<f32> = gemv(&wd.1, ffn, &a)
            .iter()
            .zip(&h1)
            .map(|(d, r)| d + r)
            .collect();
        close(&h, &want);
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
