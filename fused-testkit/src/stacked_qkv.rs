//! The attention half of a decode layer with q, k and v stacked in one
//! GEMV, with its initial memory: the graph whose key/value append the
//! planner makes the GEMV's tail (`fused_core::planner::FusedGemv::kv`),
//! shared by the core's planner test and the backends' tail tests.
//!
//! `qkv = W·x` (q's rows after `pad` rows, then k's and v's), RoPE of q
//! and k, k and v written into row `pos` of caches kept as state, attention
//! over them. Buffer 0 holds the inputs, 1 the results, 2 the caches.

use core::fmt::Debug;

use fused_core::DType;
use fused_core::acts::GemvMode;
use fused_core::backend::{Backend, ResidentPlan};
use fused_core::decode::RopeMode;
use fused_core::element::Activation;
use fused_core::graph::{Graph, NodeId, Place};
use fused_core::memory::Memory;
use fused_core::planner::{Plan, Step, plan};
use fused_core::tensor::{BufferId, TensorDesc};

use crate::compare::assert_bits_eq;
use crate::data::weights;
use crate::decode::llama_rope_table;
use crate::rng::Rng;
use crate::written_plan::written_plan;

/// The layer's sizes and how it differs from the plain stacked layer.
#[derive(Clone, Copy, Debug)]
pub struct StackedShape {
    /// The weights' format.
    pub dtype: DType,
    /// The activations' length (a whole number of the format's blocks).
    pub k: usize,
    /// Values a head (even).
    pub head_dim: usize,
    /// Query heads.
    pub n_head: usize,
    /// Key/value heads (dividing `n_head`).
    pub n_kv: usize,
    /// Cache and table rows.
    pub rows: usize,
    /// Which elements RoPE pairs.
    pub mode: RopeMode,
    /// Rows of the product before q's (an odd count puts the heads at odd
    /// rows).
    pub pad: usize,
    /// A node between the product and the append reads q's rows.
    pub reader_between: bool,
    /// The attention's output projection follows (`k` rows of weights of
    /// the format, in buffer 0 after the inputs), as in a decode layer.
    pub o_proj: bool,
}

/// The graph and the nodes a test looks at.
#[derive(Debug)]
pub struct StackedQkv {
    /// The shape it was built for.
    pub shape: StackedShape,
    /// The graph.
    pub graph: Graph,
    /// The weights (an input).
    pub w: NodeId,
    /// The activations (an input).
    pub x: NodeId,
    /// The RoPE table (an input).
    pub table: NodeId,
    /// The position (an input).
    pub pos: NodeId,
    /// The stacked product.
    pub qkv: NodeId,
    /// The reader between the product and the append, if any.
    pub reader: Option<NodeId>,
    /// q's RoPE.
    pub q_rope: NodeId,
    /// k's RoPE.
    pub k_rope: NodeId,
    /// The key cache's row write.
    pub k_write: NodeId,
    /// The value cache's row write.
    pub v_write: NodeId,
    /// The attention.
    pub attention: NodeId,
    /// The output projection's weights and product, where there is one.
    pub o_proj: Option<(NodeId, NodeId)>,
    /// The three buffers' sizes.
    pub sizes: [usize; 3],
}

fn f32t(ne: [usize; 4], buf: u32, at: usize) -> TensorDesc {
    TensorDesc::contiguous(DType::F32, ne, BufferId(buf), at).expect("a test tensor")
}

impl StackedQkv {
    /// Builds the layer of `s`.
    pub fn new(s: StackedShape) -> StackedQkv {
        let (q_dim, kv_dim) = (s.n_head * s.head_dim, s.n_kv * s.head_dim);
        let m = s.pad + q_dim + 2 * kv_dim;
        let mut g = Graph::new();
        let wt =
            TensorDesc::contiguous(s.dtype, [s.k, m, 1, 1], BufferId(0), 0).expect("the weights");
        let w = g.input(wt).expect("the weights");
        // Inputs after the weights, each 16-byte aligned.
        let mut at0 = wt.byte_extent().end.next_multiple_of(16);
        let mut input = |g: &mut Graph, ne: [usize; 4]| {
            let id = g.input(f32t(ne, 0, at0)).expect("an input");
            at0 += (4 * ne.iter().product::<usize>()).next_multiple_of(16);
            id
        };
        let x = input(&mut g, [s.k, 1, 1, 1]);
        let table = input(&mut g, [s.head_dim, s.rows, 1, 1]);
        let pos = input(&mut g, [1, 1, 1, 1]);
        let wo = s.o_proj.then(|| {
            let t = TensorDesc::contiguous(s.dtype, [q_dim, s.k, 1, 1], BufferId(0), at0)
                .expect("the output projection's weights");
            at0 = t.byte_extent().end.next_multiple_of(16);
            g.input(t).expect("the output projection's weights")
        });
        let qkv = g.mul_mat(w, x, Place::at(1, 0)).expect("the product");
        let view = |g: &mut Graph, row: usize, n: usize| {
            g.view(qkv, [n, 1, 1, 1], [4, 4 * n, 4 * n, 4 * n], 4 * row)
                .expect("a view of the product")
        };
        let q = view(&mut g, s.pad, q_dim);
        let k = view(&mut g, s.pad + q_dim, kv_dim);
        let v = view(&mut g, s.pad + q_dim + kv_dim, kv_dim);
        let mut at1 = (4 * m).next_multiple_of(16);
        let mut place = |n: usize| {
            let p = Place::at(1, at1);
            at1 += (4 * n).next_multiple_of(16);
            p
        };
        let reader = s.reader_between.then(|| {
            let r = g
                .unary(Activation::Silu, q, place(q_dim))
                .expect("the reader");
            g.mark_output(r).expect("an output");
            r
        });
        let q = g.reshape(q, [s.head_dim, s.n_head, 1, 1]).expect("q");
        let k = g.reshape(k, [s.head_dim, s.n_kv, 1, 1]).expect("k");
        let q_rope = g
            .rope(s.mode, q, table, pos, place(q_dim))
            .expect("q's RoPE");
        let k_rope = g
            .rope(s.mode, k, table, pos, place(kv_dim))
            .expect("k's RoPE");
        let cache_bytes = 4 * kv_dim * s.rows;
        let keys = g.state(f32t([kv_dim, s.rows, 1, 1], 2, 0)).expect("keys");
        let values = g
            .state(f32t([kv_dim, s.rows, 1, 1], 2, cache_bytes))
            .expect("values");
        let k_write = g
            .set_row(keys, k_rope, pos, Place::at(2, 0))
            .expect("the key row");
        let v_write = g
            .set_row(values, v, pos, Place::at(2, cache_bytes))
            .expect("the value row");
        let kc = g
            .reshape(k_write, [s.head_dim, s.n_kv, s.rows, 1])
            .expect("keys as heads");
        let vc = g
            .reshape(v_write, [s.head_dim, s.n_kv, s.rows, 1])
            .expect("values as heads");
        let scale = 1.0 / (s.head_dim as f32).sqrt();
        let attention = g
            .attention(q_rope, kc, vc, pos, scale, place(q_dim))
            .expect("the attention");
        let o_proj = wo.map(|wo| {
            let heads = g
                .reshape(attention, [q_dim, 1, 1, 1])
                .expect("the attention as one vector");
            let out = g
                .mul_mat(wo, heads, place(s.k))
                .expect("the output projection");
            g.mark_output(out).expect("an output");
            (wo, out)
        });
        g.mark_output(qkv).expect("an output");
        g.mark_output(q_rope).expect("an output");
        g.mark_output(attention).expect("an output");
        StackedQkv {
            shape: s,
            graph: g,
            w,
            x,
            table,
            pos,
            qkv,
            reader,
            q_rope,
            k_rope,
            k_write,
            v_write,
            attention,
            o_proj,
            sizes: [at0, at1, 2 * cache_bytes],
        }
    }

    /// The tensor of node `id`.
    pub fn tensor(&self, id: NodeId) -> TensorDesc {
        *self.graph.tensor(id).expect("a node of the layer")
    }

    /// The layer's memory with random weights and activations (from
    /// `seed`), Llama's RoPE table and position 0, the caches zero.
    pub fn memory(&self, seed: u64) -> Memory {
        let s = self.shape;
        let mut rng = Rng::new(seed);
        let mut mem = Memory::new(&self.sizes);
        let w = self.tensor(self.w);
        let m = w.ne()[1];
        mem.write_rows(&w, &weights(&mut rng, s.dtype, m, s.k))
            .expect("the weights");
        mem.write(&self.tensor(self.x), &rng.vec(s.k))
            .expect("the activations");
        mem.write(
            &self.tensor(self.table),
            &llama_rope_table(s.head_dim, s.rows),
        )
        .expect("the table");
        if let Some((wo, _)) = self.o_proj {
            let rows = weights(&mut rng, s.dtype, s.k, s.n_head * s.head_dim);
            mem.write_rows(&self.tensor(wo), &rows)
                .expect("the output projection's weights");
        }
        mem
    }

    /// The results a fused plan must reproduce: the product, q's RoPE,
    /// both caches and the attention (and the reader's, where there is
    /// one), named.
    pub fn results(&self) -> Vec<(&'static str, NodeId)> {
        let mut r = vec![
            ("qkv", self.qkv),
            ("q's RoPE", self.q_rope),
            ("key cache", self.k_write),
            ("value cache", self.v_write),
            ("attention", self.attention),
        ];
        r.extend(self.reader.map(|id| ("reader", id)));
        r.extend(self.o_proj.map(|(_, id)| ("output projection", id)));
        r
    }

    /// Runs two resident plans of the layer (written with the same
    /// memory), `fused` and `unfused`, at positions in range, past the
    /// cache and NaN, and checks that every result of `fused` equals the
    /// other's bit for bit.
    pub fn assert_same_results<P: ResidentPlan>(&self, fused: &mut P, unfused: &mut P, case: &str)
    where
        P::Error: Debug,
    {
        let pos = self.tensor(self.pos);
        let last = (self.shape.rows - 1) as f32;
        for position in [0.0f32, 1.0, last / 2.0, last, last + 25.0, f32::NAN] {
            for rp in [&mut *fused, &mut *unfused] {
                rp.write_f32(&pos, &[position]).expect("the position");
                rp.run().expect("a run");
            }
            for (what, id) in self.results() {
                let t = self.tensor(id);
                assert_bits_eq(
                    &fused.read_f32(&t).expect("a result"),
                    &unfused.read_f32(&t).expect("a result"),
                    &format!("{case}: {what} at {position}"),
                );
            }
        }
    }

    /// The layer planned (the planner's plan, asserted to carry the
    /// append as the GEMV's tail) and unfused, compiled on `be` for
    /// `mode` as device plans (no host step, asserted) and written with
    /// [`StackedQkv::memory`]`(seed)`: `[planned, unfused]`.
    pub fn compile_both<'b, B: Backend>(
        &self,
        be: &'b B,
        mode: GemvMode,
        seed: u64,
        case: &str,
    ) -> [B::Plan<'b>; 2]
    where
        B::Error: Debug,
    {
        let planned = plan(&self.graph);
        assert!(
            planned
                .steps
                .iter()
                .any(|s| matches!(s, Step::Gemv(f) if f.kv.is_some())),
            "{case}: {:?}",
            planned.steps
        );
        let mem = self.memory(seed);
        let unfused = Plan::unfused(&self.graph);
        [&planned, &unfused]
            .map(|p| written_plan(be, &self.graph, p, mode, &self.sizes, &mem, case))
    }
}
