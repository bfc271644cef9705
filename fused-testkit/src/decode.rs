//! The decode ops as a small graph, with its initial memory, and one run
//! of a resident plan of it against the core's reference evaluator: what
//! the backends' decode tests share.
//!
//! [`DecodeOps`]: RoPE of q and of k from a table, k's row (and v's)
//! written into caches kept as state, attention over the caches and,
//! where asked, an argmax over two columns of logits, with the position a
//! value written before each run. Where each tensor lies is the caller's
//! ([`DecodeOpsLayout`]), so that a backend's test can put tensors where
//! its kernels must cope with them (4 bytes past a 16-byte boundary, a
//! row write into a copy, a RoPE over its own input);
//! [`DecodeOpsLayout::packed`] is the plain layout.

use core::fmt::{Debug, Display};

use fused_core::DType;
use fused_core::acts::GemvMode;
use fused_core::backend::ResidentPlan;
use fused_core::decode::RopeMode;
use fused_core::graph::{Graph, NodeId, Place};
use fused_core::memory::Memory;
use fused_core::planner::{Plan, Step};
use fused_core::reference::eval::eval_graph;
use fused_core::tensor::{BufferId, TensorDesc};

use crate::compare::nmse;

/// The NMSE budget of a backend's attention against the reference (its
/// `expf` and its order of summation differ from the core's).
pub const ATTENTION_NMSE_BUDGET: f64 = 1e-6;

/// Bytes of `n` f32 values.
const fn f32_bytes(n: usize) -> usize {
    4 * n
}

/// A contiguous F32 tensor of shape `ne` at byte `offset` of buffer
/// `buffer`.
pub fn f32_tensor(ne: [usize; 4], buffer: u32, offset: usize) -> TensorDesc {
    TensorDesc::contiguous(DType::F32, ne, BufferId(buffer), offset).expect("a contiguous tensor")
}

/// Llama's RoPE table for heads of `head_dim` values, positions
/// `0..rows`: row `p` holds, for each pair `i`, the cosine and the sine of
/// `p · 10000^(−2i/head_dim)`.
pub fn llama_rope_table(head_dim: usize, rows: usize) -> Vec<f32> {
    (0..rows)
        .flat_map(|p| {
            (0..head_dim / 2).flat_map(move |i| {
                let theta = p as f32 * 10000f32.powf(-2.0 * i as f32 / head_dim as f32);
                [theta.cos(), theta.sin()]
            })
        })
        .collect()
}

/// Byte offsets, in buffer 0, of the inputs of a [`DecodeOps`] graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InputOffsets {
    /// The query, `n_head` heads.
    pub q: usize,
    /// The key, `n_kv` heads.
    pub k: usize,
    /// The value, `n_kv` heads.
    pub v: usize,
    /// The RoPE table, `table_rows` rows of `head_dim` values.
    pub table: usize,
    /// The position, one value.
    pub pos: usize,
}

impl InputOffsets {
    /// q, k, v, the table of `table_rows` rows and the position, one right
    /// after the other from byte 0.
    pub fn packed(head_dim: usize, n_head: usize, n_kv: usize, table_rows: usize) -> InputOffsets {
        let (q_len, kv_len) = (head_dim * n_head, head_dim * n_kv);
        let table = f32_bytes(q_len + 2 * kv_len);
        InputOffsets {
            q: 0,
            k: f32_bytes(q_len),
            v: f32_bytes(q_len + kv_len),
            table,
            pos: table + f32_bytes(head_dim * table_rows),
        }
    }

    /// The first byte past the position.
    pub fn end(&self) -> usize {
        self.pos + 4
    }
}

/// Two columns of logits (an input in buffer 0) and the argmax over them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArgmaxLayout {
    /// Values in a column.
    pub vocab: usize,
    /// The logits' byte offset in buffer 0.
    pub logits_at: usize,
    /// Where the argmax writes its two indices.
    pub argmax_at: Place,
}

/// Whether and where v's row is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValueRow {
    /// Not at all: the attention reads the value cache as it is.
    Absent,
    /// In place, into the value cache.
    InPlace,
    /// Into a copy of the value cache at this place (a row write that is
    /// not in place).
    Copied(Place),
}

/// What a [`DecodeOps`] graph holds and where each of its tensors lies.
///
/// Buffer 0 holds the inputs, buffer 1 the key cache and right after it
/// the value cache (both state); results go where the places say.
#[derive(Clone, Debug, PartialEq)]
pub struct DecodeOpsLayout {
    /// Values of a head.
    pub head_dim: usize,
    /// Query heads.
    pub n_head: usize,
    /// Key/value heads.
    pub n_kv: usize,
    /// Rows of each cache.
    pub rows: usize,
    /// Rows of the RoPE table: at least `rows` (a position past the caches
    /// then rotates by a row the caches lack, each clamped into its own
    /// rows).
    pub table_rows: usize,
    /// Where the inputs lie in buffer 0.
    pub inputs: InputOffsets,
    /// The logits and their argmax, or `None` for neither.
    pub argmax: Option<ArgmaxLayout>,
    /// The key cache's byte offset in buffer 1.
    pub caches_at: usize,
    /// Whether the caches are declared as heads (`[head_dim, n_kv, rows]`)
    /// and reshaped into rows for the row writes, rather than declared as
    /// rows (`[head_dim · n_kv, rows]`).
    pub caches_as_heads: bool,
    /// q's RoPE pair mode.
    pub q_mode: RopeMode,
    /// Where q's RoPE writes (q's own place: in place).
    pub q_rope_at: Place,
    /// k's RoPE pair mode.
    pub k_mode: RopeMode,
    /// Where k's RoPE writes.
    pub k_rope_at: Place,
    /// Whether and where v's row is written.
    pub v_row: ValueRow,
    /// Where a second row write, of k's RoPE into the value cache as v's
    /// row write left it, writes (a row write that is not in place, after
    /// another); `None` for none. Needs a v row.
    pub k_row_over_values_at: Option<Place>,
    /// Where the attention writes.
    pub attention_at: Place,
    /// Whether both RoPEs are graph outputs (else only the attention, the
    /// argmax and the second row write are).
    pub ropes_are_outputs: bool,
    /// The byte size of each buffer, in [`BufferId`] order.
    pub buffer_sizes: Vec<usize>,
}

impl DecodeOpsLayout {
    /// Everything one right after the other: the inputs
    /// ([`InputOffsets::packed`]); the caches from byte 0 of buffer 1,
    /// declared as rows; in buffer 2, k's RoPE (Halves), q's RoPE
    /// (Adjacent) and the attention; v's row written in place; no argmax,
    /// and only the attention an output.
    pub fn packed(
        head_dim: usize,
        n_head: usize,
        n_kv: usize,
        rows: usize,
        table_rows: usize,
    ) -> DecodeOpsLayout {
        let (q_len, kv_len) = (head_dim * n_head, head_dim * n_kv);
        let inputs = InputOffsets::packed(head_dim, n_head, n_kv, table_rows);
        let attention = f32_bytes(kv_len + q_len);
        DecodeOpsLayout {
            head_dim,
            n_head,
            n_kv,
            rows,
            table_rows,
            inputs,
            argmax: None,
            caches_at: 0,
            caches_as_heads: false,
            q_mode: RopeMode::Adjacent,
            q_rope_at: Place::at(2, f32_bytes(kv_len)),
            k_mode: RopeMode::Halves,
            k_rope_at: Place::at(2, 0),
            v_row: ValueRow::InPlace,
            k_row_over_values_at: None,
            attention_at: Place::at(2, attention),
            ropes_are_outputs: false,
            buffer_sizes: vec![
                inputs.end(),
                2 * f32_bytes(kv_len * rows),
                attention + f32_bytes(q_len),
            ],
        }
    }

    /// Bytes of one cache.
    fn cache_bytes(&self) -> usize {
        f32_bytes(self.head_dim * self.n_kv * self.rows)
    }
}

/// The decode ops of one token as a graph, with its memory: the table and
/// the caches written, everything else zero.
#[derive(Debug)]
pub struct DecodeOps {
    /// What the graph holds and where.
    pub layout: DecodeOpsLayout,
    /// The graph.
    pub graph: Graph,
    /// The host memory (what the reference runs over).
    pub mem: Memory,
    /// The query input.
    pub q: NodeId,
    /// The key input.
    pub k: NodeId,
    /// The value input.
    pub v: NodeId,
    /// The position input.
    pub pos: NodeId,
    /// The logits input, where there is an argmax.
    pub logits: Option<NodeId>,
    /// The key cache (state), as declared.
    pub key_cache: NodeId,
    /// The value cache (state), as declared.
    pub value_cache: NodeId,
    /// q's RoPE.
    pub q_rope: NodeId,
    /// k's RoPE.
    pub k_rope: NodeId,
    /// k's RoPE written as a row of the key cache (in place).
    pub k_row: NodeId,
    /// v written as a row of the value cache, where the layout has it.
    pub v_row: Option<NodeId>,
    /// The second row write ([`DecodeOpsLayout::k_row_over_values_at`]).
    pub k_row_over_values: Option<NodeId>,
    /// The attention.
    pub attention: NodeId,
    /// The argmax, where the layout has one.
    pub argmax: Option<NodeId>,
    /// Both caches as one tensor.
    pub caches: TensorDesc,
}

impl DecodeOps {
    /// The graph of `layout`, its table filled with
    /// [`llama_rope_table`] and its caches with `cache_values(n)` (`n`
    /// values: the key cache's, then the value cache's), so that a late
    /// position attends over values rather than zeros. The attention's
    /// scale is `1/√head_dim`.
    pub fn new(layout: DecodeOpsLayout, cache_values: impl FnOnce(usize) -> Vec<f32>) -> DecodeOps {
        let DecodeOpsLayout {
            head_dim: d,
            n_head,
            n_kv,
            rows,
            table_rows,
            inputs: at,
            ..
        } = layout;
        let kv = d * n_kv;
        let (as_heads, as_rows) = ([d, n_kv, rows, 1], [kv, rows, 1, 1]);
        let value_cache_at = layout.caches_at + layout.cache_bytes();
        let mut g = Graph::new();
        let mut input = |ne, offset, what: &str| {
            g.input(f32_tensor(ne, 0, offset))
                .unwrap_or_else(|e| panic!("{what}: {e}"))
        };
        let q = input([d, n_head, 1, 1], at.q, "q");
        let k = input([d, n_kv, 1, 1], at.k, "k");
        let v = input([kv, 1, 1, 1], at.v, "v");
        let table = input([d, table_rows, 1, 1], at.table, "the table");
        let pos = input([1, 1, 1, 1], at.pos, "the position");
        let logits = layout
            .argmax
            .map(|a| input([a.vocab, 2, 1, 1], a.logits_at, "the logits"));
        let declared = if layout.caches_as_heads {
            as_heads
        } else {
            as_rows
        };
        let key_cache = g
            .state(f32_tensor(declared, 1, layout.caches_at))
            .expect("the key cache");
        let value_cache = g
            .state(f32_tensor(declared, 1, value_cache_at))
            .expect("the value cache");
        let (key_rows, value_rows) = if layout.caches_as_heads {
            (
                g.reshape(key_cache, as_rows).expect("the key cache's rows"),
                g.reshape(value_cache, as_rows)
                    .expect("the value cache's rows"),
            )
        } else {
            (key_cache, value_cache)
        };
        let q_rope = g
            .rope(layout.q_mode, q, table, pos, layout.q_rope_at)
            .expect("q's RoPE");
        let k_rope = g
            .rope(layout.k_mode, k, table, pos, layout.k_rope_at)
            .expect("k's RoPE");
        let k_row = g
            .set_row(key_rows, k_rope, pos, Place::at(1, layout.caches_at))
            .expect("k's row");
        let v_row = match layout.v_row {
            ValueRow::Absent => None,
            ValueRow::InPlace => Some(Place::at(1, value_cache_at)),
            ValueRow::Copied(at) => Some(at),
        }
        .map(|at| g.set_row(value_rows, v, pos, at).expect("v's row"));
        let k_row_over_values = layout.k_row_over_values_at.map(|at| {
            let values = v_row.expect("a v row to write over");
            g.set_row(values, k_rope, pos, at)
                .expect("k's row over the values")
        });
        let keys = g.reshape(k_row, as_heads).expect("the keys as heads");
        let values = g
            .reshape(v_row.unwrap_or(value_rows), as_heads)
            .expect("the values as heads");
        let scale = 1.0 / (d as f32).sqrt();
        let attention = g
            .attention(q_rope, keys, values, pos, scale, layout.attention_at)
            .expect("the attention");
        let argmax = logits
            .zip(layout.argmax)
            .map(|(l, a)| g.argmax(l, a.argmax_at).expect("the argmax"));
        let ropes = if layout.ropes_are_outputs {
            vec![q_rope, k_rope]
        } else {
            Vec::new()
        };
        let outputs = ropes
            .into_iter()
            .chain([attention])
            .chain(argmax)
            .chain(k_row_over_values);
        for id in outputs {
            g.mark_output(id).expect("an output");
        }
        let mut mem = Memory::new(&layout.buffer_sizes);
        let table = g.tensor(table).expect("a node");
        mem.write(table, &llama_rope_table(d, table_rows))
            .expect("the table fits");
        let caches = f32_tensor([2 * kv * rows, 1, 1, 1], 1, layout.caches_at);
        mem.write(&caches, &cache_values(2 * kv * rows))
            .expect("the caches fit");
        DecodeOps {
            layout,
            graph: g,
            mem,
            q,
            k,
            v,
            pos,
            logits,
            key_cache,
            value_cache,
            q_rope,
            k_rope,
            k_row,
            v_row,
            k_row_over_values,
            attention,
            argmax,
            caches,
        }
    }

    /// The tensor of node `id`.
    pub fn tensor(&self, id: NodeId) -> TensorDesc {
        *self.graph.tensor(id).expect("a node of the graph")
    }

    /// Whether the planner's key/value append takes in q's RoPE: its pair
    /// mode is k's.
    pub fn kv_append_takes_q(&self) -> bool {
        self.layout.q_mode == self.layout.k_mode
    }

    /// The launches (or dispatches) the planner's key/value append saves
    /// against the unfused plan: one for each part past the first (k's
    /// RoPE and row write; q's RoPE where it joins; v's row where the
    /// graph writes one).
    pub fn kv_append_saves(&self) -> u64 {
        1 + u64::from(self.kv_append_takes_q()) + u64::from(self.v_row.is_some())
    }

    /// Asserts that `plan` holds one key/value append and that it fuses
    /// k's RoPE and row write, q's RoPE where
    /// [`DecodeOps::kv_append_takes_q`] and v's row where there is one.
    /// `case` names the graph in the message.
    #[track_caller]
    pub fn assert_planned_kv_append(&self, plan: &Plan, case: &str) {
        let appends: Vec<_> = plan
            .steps
            .iter()
            .filter_map(|s| match s {
                Step::KvAppend(a) => Some(a),
                _ => None,
            })
            .collect();
        let [append] = appends[..] else {
            panic!("{case}: not one key/value append in {:?}", plan.steps);
        };
        assert_eq!(
            (append.q_rope, append.k_rope, append.k_write, append.v_write),
            (
                self.kv_append_takes_q().then_some(self.q_rope),
                self.k_rope,
                self.k_row,
                self.v_row
            ),
            "{case}: the key/value append's parts"
        );
    }

    /// Writes each input of `inputs` (a node and its values), then
    /// `position` into the position, into the host memory and into `rp`
    /// alike.
    pub fn write_inputs<P>(&mut self, rp: &mut P, inputs: &[(NodeId, Vec<f32>)], position: f32)
    where
        P: ResidentPlan,
        P::Error: Debug,
    {
        let position = (self.pos, vec![position]);
        for (id, values) in inputs.iter().chain([&position]) {
            let t = self.tensor(*id);
            self.mem.write(&t, values).expect("inside the host memory");
            rp.write_f32(&t, values).expect("written to the plan");
        }
    }

    /// Runs the reference over the host memory and `rp` by `submit`, then
    /// compares `rp`'s results with the reference's: each tensor of
    /// `exact` (with its name) by `assert_exact` (a bit-for-bit check), and
    /// the attention within [`ATTENTION_NMSE_BUDGET`], its reference
    /// finite. `case` names the run in every message.
    #[track_caller]
    pub fn run_and_compare<P>(
        &mut self,
        rp: &mut P,
        submit: impl FnOnce(&mut P) -> Result<(), P::Error>,
        exact: &[(String, TensorDesc)],
        assert_exact: fn(&[f32], &[f32], &str),
        case: &str,
    ) where
        P: ResidentPlan,
        P::Error: Debug + Display,
    {
        eval_graph(&self.graph, &mut self.mem, GemvMode::F32).expect("the reference");
        submit(rp).unwrap_or_else(|e| panic!("{case}: {e}"));
        let read = |rp: &P, t: &TensorDesc| {
            let got = rp.read_f32(t).expect("read from the plan");
            (got, self.mem.read(t).expect("read from the host memory"))
        };
        for (what, t) in exact {
            let (got, want) = read(rp, t);
            assert_exact(&got, &want, &format!("{case}: {what}"));
        }
        let (got, want) = read(rp, &self.tensor(self.attention));
        assert!(
            want.iter().all(|w| w.is_finite()),
            "{case}: the reference's attention"
        );
        let e = nmse(&got, &want);
        assert!(
            e <= ATTENTION_NMSE_BUDGET,
            "{case}: attention NMSE {e:e} (budget {ATTENTION_NMSE_BUDGET:e})"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_packed_layout_builds_and_its_appends_fuse() {
        let ops = DecodeOps::new(DecodeOpsLayout::packed(8, 4, 2, 5, 6), |n| vec![0.5; n]);
        assert_eq!(ops.layout.buffer_sizes, ops.mem.sizes());
        assert_eq!(ops.tensor(ops.attention).offset(), 4 * (16 + 32));
        assert!(!ops.kv_append_takes_q());
        assert_eq!(ops.kv_append_saves(), 2);
        ops.assert_planned_kv_append(&fused_core::planner::plan(&ops.graph), "packed");
    }

    #[test]
    fn the_table_rotates_position_zero_by_nothing() {
        let t = llama_rope_table(4, 2);
        assert_eq!(&t[..4], &[1.0, 0.0, 1.0, 0.0]);
        assert_eq!(t.len(), 8);
        assert_eq!(t[4], 1f32.cos());
    }
}
