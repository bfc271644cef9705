//! The output head with greedy selection: `x → rms_norm → · gamma → W → logits
//! → argmax`, the graph whose argmax the planner makes the head GEMV's tail
//! (`fused_core::planner::FusedGemv::argmax`), shared by the backends'
//! tail tests. Buffer 0 holds the inputs, 1 the results.
//!
//! The weights can hold the same rows twice (the maximum then ties with a
//! row half the head away, which the first must win) and NaN rows (F32
//! weights: a NaN in a row makes its logit NaN, which is never chosen).

use core::fmt::Debug;

use fused_core::DType;
use fused_core::acts::GemvMode;
use fused_core::backend::{Backend, ResidentPlan};
use fused_core::decode::argmax;
use fused_core::graph::{Graph, NodeId, Place};
use fused_core::memory::Memory;
use fused_core::planner::{Plan, Step, plan};
use fused_core::tensor::{BufferId, TensorDesc};

use crate::compare::assert_bits_eq;
use crate::data::weights;
use crate::rng::Rng;
use crate::written_plan::written_plan;

/// The head's sizes and its weights' pattern.
#[derive(Clone, Copy, Debug)]
pub struct HeadShape {
    /// The weights' format.
    pub dtype: DType,
    /// The hidden size (a whole number of the format's blocks).
    pub k: usize,
    /// The vocabulary: the head's rows (even where `twin`).
    pub rows: usize,
    /// The second half of the rows repeats the first.
    pub twin: bool,
    /// Rows made NaN (F32 weights only), each by its first weight; every
    /// row where `usize::MAX` is among them.
    pub nan_rows: &'static [usize],
}

/// The graph and its nodes.
#[derive(Debug)]
pub struct GreedyHead {
    /// The shape it was built for.
    pub shape: HeadShape,
    /// The graph.
    pub graph: Graph,
    /// The weights (an input).
    pub w: NodeId,
    /// The hidden state (an input).
    pub x: NodeId,
    /// The final norm's weight (an input).
    pub gamma: NodeId,
    /// The logits (an output).
    pub logits: NodeId,
    /// The index of the largest logit (an output).
    pub next: NodeId,
    /// The two buffers' sizes.
    pub sizes: [usize; 2],
}

fn f32t(ne: [usize; 4], buf: u32, at: usize) -> TensorDesc {
    TensorDesc::contiguous(DType::F32, ne, BufferId(buf), at).expect("a test tensor")
}

impl GreedyHead {
    /// Builds the head of `s`.
    pub fn new(s: HeadShape) -> GreedyHead {
        let mut g = Graph::new();
        let wt = TensorDesc::contiguous(s.dtype, [s.k, s.rows, 1, 1], BufferId(0), 0)
            .expect("the weights");
        let w = g.input(wt).expect("the weights");
        let at = wt.byte_extent().end.next_multiple_of(16);
        let x = g.input(f32t([s.k, 1, 1, 1], 0, at)).expect("x");
        let at = at + (4 * s.k).next_multiple_of(16);
        let gamma = g.input(f32t([s.k, 1, 1, 1], 0, at)).expect("gamma");
        let size0 = at + (4 * s.k).next_multiple_of(16);
        let mut at1 = 0;
        let mut place = |n: usize| {
            let p = Place::at(1, at1);
            at1 += (4 * n).next_multiple_of(16);
            p
        };
        let normed = g.rms_norm(x, 1e-5, place(s.k)).expect("the norm");
        let normed = g.mul(normed, gamma, place(s.k)).expect("the weighted norm");
        let logits = g.mul_mat(w, normed, place(s.rows)).expect("the logits");
        let next = g.argmax(logits, place(1)).expect("the argmax");
        g.mark_output(logits).expect("an output");
        g.mark_output(next).expect("an output");
        GreedyHead {
            shape: s,
            graph: g,
            w,
            x,
            gamma,
            logits,
            next,
            sizes: [size0, at1],
        }
    }

    /// The tensor of node `id`.
    pub fn tensor(&self, id: NodeId) -> TensorDesc {
        *self.graph.tensor(id).expect("a node of the head")
    }

    /// The head's memory: weights of `shape`'s pattern and the hidden state
    /// and norm weight, all from `seed`.
    pub fn memory(&self, seed: u64) -> Memory {
        let s = self.shape;
        let mut rng = Rng::new(seed);
        let half = if s.twin { s.rows / 2 } else { s.rows };
        let mut rows = weights(&mut rng, s.dtype, half, s.k);
        if s.twin {
            rows.extend_from_within(..);
        }
        if !s.nan_rows.is_empty() {
            assert_eq!(s.dtype, DType::F32, "NaN rows are F32 weights");
            for (r, row) in rows.chunks_exact_mut(4 * s.k).enumerate() {
                if s.nan_rows.contains(&r) || s.nan_rows.contains(&usize::MAX) {
                    row[..4].copy_from_slice(&f32::NAN.to_le_bytes());
                }
            }
        }
        let mut mem = Memory::new(&self.sizes);
        mem.write_rows(&self.tensor(self.w), &rows)
            .expect("the weights");
        mem.write(&self.tensor(self.x), &rng.vec(s.k)).expect("x");
        mem.write(&self.tensor(self.gamma), &rng.vec(s.k))
            .expect("gamma");
        mem
    }

    /// The planner's plan (asserted to carry the argmax as the head's
    /// tail) and the same plan with the argmax as a step of its own after
    /// the head: `[tail, split]`.
    pub fn plans(&self, case: &str) -> [Plan; 2] {
        let tail = plan(&self.graph);
        let mut split = tail.clone();
        let i = split
            .steps
            .iter()
            .position(|s| matches!(s, Step::Gemv(f) if f.argmax.is_some()))
            .unwrap_or_else(|| panic!("{case}: no argmax tail in {:?}", tail.steps));
        if let Step::Gemv(f) = &mut split.steps[i] {
            f.argmax = None;
            f.nodes.retain(|&n| n != self.next);
        }
        split.steps.insert(i + 1, Step::Node(self.next));
        [tail, split]
    }

    /// [`GreedyHead::plans`] compiled on `be` for `mode` as device plans (no
    /// host step, asserted) and written with [`GreedyHead::memory`]`(seed)`.
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
        let mem = self.memory(seed);
        self.plans(case)
            .map(|p| written_plan(be, &self.graph, &p, mode, &self.sizes, &mem, case))
    }

    /// Runs both plans for several hidden states (the last from `seed`
    /// on) and asserts the same logits, bit for bit, and the same index,
    /// the core's argmax of those logits. Running several times checks
    /// that a tail's scratch is left ready for the next run.
    pub fn assert_same_results<P: ResidentPlan>(
        &self,
        tail: &mut P,
        split: &mut P,
        seed: u64,
        case: &str,
    ) where
        P::Error: Debug,
    {
        let x = self.tensor(self.x);
        for round in 0..3u64 {
            let v = Rng::new(seed + round).vec(self.shape.k);
            for rp in [&mut *tail, &mut *split] {
                rp.write_f32(&x, &v).expect("x");
                rp.run().expect("a run");
            }
            let read = |rp: &P, id| rp.read_f32(&self.tensor(id)).expect("a result");
            let logits = read(tail, self.logits);
            let what = format!("{case}, round {round}");
            assert_bits_eq(&logits, &read(split, self.logits), &what);
            let next = read(tail, self.next);
            assert_bits_eq(&next, &read(split, self.next), &what);
            assert_eq!(next, [argmax(&logits) as f32], "{what}");
        }
    }
}
