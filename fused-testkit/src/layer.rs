//! A decode layer as a graph, with its initial memory.
//!
//! `h` is the residual stream (F32, hidden size `hidden`), updated in place:
//! `q, k, v = W_q·h, W_k·h, W_v·h`; `attn = attention(q, k, v)` (an opaque
//! op the planner never fuses through; the reference copies `q`);
//! `h += W_o·attn`; `h += W_d·(silu(W_g·h) ⊙ (W_u·h))`. Weights sit in
//! buffer 0, every activation in buffer 1 (the residual stream first).

use fused_core::DType;
use fused_core::element::Activation;
use fused_core::graph::{Graph, NodeId, Place};
use fused_core::memory::Memory;
use fused_core::tensor::{BufferId, TensorDesc};

use crate::data::weights;
use crate::rng::Rng;

/// The graph, its memory and the tensors a test reads.
#[derive(Debug)]
pub struct DecodeLayer {
    /// The graph.
    pub graph: Graph,
    /// Weights and the residual stream written; everything else zero.
    pub mem: Memory,
    /// The residual stream after the layer (the graph's output).
    pub out: NodeId,
    /// The residual stream before the layer (the same bytes, overwritten
    /// in place by a run).
    pub input: NodeId,
    /// The weight tensors, in the order q, k, v, o, gate, up, down.
    pub weights: Vec<TensorDesc>,
}

impl DecodeLayer {
    /// A layer of hidden size `hidden` and feed-forward size `ffn` (both
    /// whole blocks of `dtype`), weights of `dtype` from `seed`.
    pub fn new(dtype: DType, hidden: usize, ffn: usize, seed: u64) -> DecodeLayer {
        let mut rng = Rng::new(seed);
        let mut g = Graph::new();
        let mut inits: Vec<(TensorDesc, Vec<u8>)> = Vec::new();
        let mut wnext = 0;
        let mut weight_tensors = Vec::new();
        let mut weight = |g: &mut Graph, rng: &mut Rng, k: usize, m: usize| {
            let rb = dtype.row_bytes(k).expect("whole blocks");
            let t = TensorDesc::contiguous(dtype, [k, m, 1, 1], BufferId(0), wnext)
                .expect("a weight tensor");
            wnext += (rb * m).next_multiple_of(256);
            inits.push((t, weights(rng, dtype, m, k)));
            weight_tensors.push(t);
            g.input(t).expect("an input")
        };
        let w_q = weight(&mut g, &mut rng, hidden, hidden);
        let w_k = weight(&mut g, &mut rng, hidden, hidden);
        let w_v = weight(&mut g, &mut rng, hidden, hidden);
        let w_o = weight(&mut g, &mut rng, hidden, hidden);
        let w_g = weight(&mut g, &mut rng, hidden, ffn);
        let w_u = weight(&mut g, &mut rng, hidden, ffn);
        let w_d = weight(&mut g, &mut rng, ffn, hidden);
        let res_bytes = 4 * hidden;
        let mut anext = res_bytes.next_multiple_of(256);
        let mut act = |n: usize| {
            let p = Place::at(1, anext);
            anext += (4 * n).next_multiple_of(256);
            p
        };
        let res = Place::at(1, 0);
        let h = TensorDesc::contiguous(DType::F32, [hidden, 1, 1, 1], BufferId(1), 0)
            .expect("the residual stream");
        inits.push((h, f32_bytes(&rng.vec(hidden))));
        let h = g.input(h).expect("an input");
        let vec = [hidden, 1, 1, 1];
        let mut build = |g: &mut Graph| -> Result<NodeId, fused_core::Error> {
            let q = g.mul_mat(w_q, h, act(hidden))?;
            let k = g.mul_mat(w_k, h, act(hidden))?;
            let v = g.mul_mat(w_v, h, act(hidden))?;
            let attn = g.other("attention", &[q, k, v], vec, act(hidden))?;
            let o = g.mul_mat(w_o, attn, act(hidden))?;
            let h1 = g.add(o, h, res)?;
            let gate = g.mul_mat(w_g, h1, act(ffn))?;
            let up = g.mul_mat(w_u, h1, act(ffn))?;
            let a = g.glu(Activation::Silu, gate, up, act(ffn))?;
            let down = g.mul_mat(w_d, a, act(hidden))?;
            let h2 = g.add(down, h1, res)?;
            g.mark_output(h2)?;
            Ok(h2)
        };
        let out = build(&mut g).expect("a well-formed layer");
        let mut mem = Memory::new(&[wnext, anext]);
        for (t, bytes) in &inits {
            mem.write_rows(t, bytes).expect("inside the buffers");
        }
        DecodeLayer {
            graph: g,
            mem,
            out,
            input: h,
            weights: weight_tensors,
        }
    }
}

/// Little-endian bytes of `v`.
fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Three GEMVs (q, k, v) reading one normed input `mul(rms_norm(x), g)`,
/// the shape of a layer's attention projections, with its memory.
#[derive(Debug)]
pub struct NormQkv {
    /// The graph.
    pub graph: Graph,
    /// The weights (buffer 0), `x` and `g` (buffer 1) written.
    pub mem: Memory,
    /// The three GEMV outputs (the graph's outputs).
    pub outs: [NodeId; 3],
}

impl NormQkv {
    /// Weights of `dtype` (`3·m` rows of `k`, `weights` in that format:
    /// q's rows, then k's, then v's), the input `x` and the norm weight
    /// `gamma` (`k` values each); epsilon 1e-5.
    pub fn new(
        dtype: DType,
        (k, m): (usize, usize),
        weights: &[u8],
        x: &[f32],
        gamma: &[f32],
    ) -> Result<NormQkv, fused_core::Error> {
        let rb = dtype.row_bytes(k)?;
        let mut g = Graph::new();
        let mut w = [NodeId(0); 3];
        for (i, wi) in w.iter_mut().enumerate() {
            *wi = g.input(TensorDesc::contiguous(
                dtype,
                [k, m, 1, 1],
                BufferId(0),
                i * m * rb,
            )?)?;
        }
        let vec = |at: usize| TensorDesc::contiguous(DType::F32, [k, 1, 1, 1], BufferId(1), at);
        let stride = (4 * k).next_multiple_of(256);
        let xt = g.input(vec(0)?)?;
        let gt = g.input(vec(stride)?)?;
        let nrm = g.rms_norm(xt, 1e-5, Place::at(1, 2 * stride))?;
        let xn = g.mul(nrm, gt, Place::at(1, 3 * stride))?;
        let out_at = |i: usize| Place::at(1, 4 * stride + i * (4 * m).next_multiple_of(256));
        let mut outs = [NodeId(0); 3];
        for (i, o) in outs.iter_mut().enumerate() {
            *o = g.mul_mat(w[i], xn, out_at(i))?;
            g.mark_output(*o)?;
        }
        let mut mem = Memory::new(&[3 * m * rb, out_at(3).offset]);
        fused_core::error::check_len("q/k/v weight bytes", 3 * m * rb, weights.len())?;
        mem.buffer_mut(BufferId(0))?.copy_from_slice(weights);
        mem.write(g.tensor(xt)?, x)?;
        mem.write(g.tensor(gt)?, gamma)?;
        Ok(NormQkv {
            graph: g,
            mem,
            outs,
        })
    }
}
