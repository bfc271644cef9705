//! The key/value append of a decode step as one fused step
//! ([`FusedKvAppend`]): `set_row(k_cache, rope(k), pos)` with the RoPE's
//! result written straight into the cache row instead of stored first,
//! joined by the same position's `rope(q)` and `set_row(v_cache, v, pos)`
//! where they qualify, so that everything attention reads is ready after
//! one launch instead of four.
//!
//! Anchored at the k row write; the predicates, each with its refusal:
//! - the row is a RoPE read by nothing else and not a graph output
//!   ([`Refusal::MultipleUses`], [`Refusal::GraphOutput`]), whose memory
//!   nothing outside the step shares ([`Refusal::IntermediateAliasesOutside`]);
//! - every row write is in place (the destination is the cache itself:
//!   [`Refusal::RowWriteNotInPlace`]) and reads the RoPE's position
//!   ([`Refusal::OtherPosition`]);
//! - a partner RoPE of q uses the same table, position and pair mode, and
//!   a partner v write the same position (else it is left out, not refused);
//! - the step runs at its last node, so nothing scheduled between its
//!   first and last node overwrites what it reads ([`Refusal::ClobberedBetween`])
//!   or reads what it writes earlier in the unfused order
//!   ([`Refusal::ReadsMovedResult`]), and its results do not overlap what
//!   its other parts read ([`Refusal::IntermediatesOverlap`]).
//!
//! A step whose rows are all views of one GEMV's result (q, k and v
//! stacked in one product) runs as that GEMV's tail
//! ([`crate::planner::FusedGemv::kv`], [`check_gemv_tail`]): the GEMV
//! rotates and writes the rows as it stores its result, where its tiles
//! hold both rows of every pair. The planner proves what it can of that:
//! the pairs are rows `2i, 2i + 1` of the GEMV ([`RopeMode::Adjacent`],
//! heads from an even row), so that any tile of an even number of rows
//! from an even row holds both ([`Refusal::PairsAcrossTiles`] otherwise);
//! a backend whose tiles are not such runs the GEMV and then the step.

use alloc::vec::Vec;

use crate::decode::RopeMode;
use crate::error::{Error, check_len};
use crate::graph::{Graph, NodeId, Op};
use crate::legality::{Refusal, check_intermediate, check_intermediate_memory};
use crate::step_order::{check_between, through_views};
use crate::tensor::{Overlap, TensorDesc};

/// The operands of one key/value append as a backend receives them
/// ([`crate::lower::Command::KvAppend`]): RoPE of `k` into row `pos` of
/// `k_cache`, with the RoPE of q and the v row write where they joined.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct KvAppendOperands {
    /// Which elements pair up.
    pub mode: RopeMode,
    /// The angles, `[head_dim, rows]`.
    pub table: TensorDesc,
    /// The position (one F32 value).
    pub pos: TensorDesc,
    /// The k heads, `[head_dim, n_kv]`.
    pub k: TensorDesc,
    /// The RoPE of k's own tensor: written only where the parts run one by
    /// one, never by a fused kernel.
    pub k_rope: TensorDesc,
    /// The key cache, `[kv_dim, rows]`, written in place.
    pub k_cache: TensorDesc,
    /// The q heads and their RoPE's destination (which may be q itself).
    pub q: Option<(TensorDesc, TensorDesc)>,
    /// The v row and the value cache, written in place.
    pub v: Option<(TensorDesc, TensorDesc)>,
}

/// The sizes of a key/value append, from [`KvAppendOperands::dims`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvAppendDims {
    /// Values a head (the table's row length, even).
    pub head_dim: usize,
    /// The table's rows.
    pub table_rows: usize,
    /// Values of q (0 where q did not join).
    pub q_len: usize,
    /// Values of k: the key cache's row length.
    pub k_len: usize,
    /// The key cache's rows.
    pub k_rows: usize,
    /// Values of the v row (0 where v did not join): the value cache's
    /// row length.
    pub v_len: usize,
    /// The value cache's rows (0 where v did not join).
    pub v_rows: usize,
}

impl KvAppendOperands {
    /// The sizes, after checking that the operands fit together: a table of
    /// whole rows of an even head size, q and k of heads of that size, a
    /// one-value position, k's RoPE and q's destination of their sources'
    /// lengths, caches whose rows are as long as the rows written.
    pub fn dims(&self) -> Result<KvAppendDims, Error> {
        let [head_dim, table_rows, _, _] = self.table.ne();
        if head_dim < 2 || !head_dim.is_multiple_of(2) {
            return Err(Error::LengthMismatch {
                what: "RoPE table row (the head size: even, at least 2)",
                expected: (head_dim.max(1) + 1) & !1,
                actual: head_dim,
            });
        }
        check_len("RoPE table", head_dim * table_rows, self.table.n_elements())?;
        check_len("position (one F32 value)", 1, self.pos.n_elements())?;
        let heads = |what, x: &TensorDesc| {
            if x.ne()[0] == head_dim && x.n_elements().is_multiple_of(head_dim) {
                Ok(x.n_elements())
            } else {
                Err(Error::ShapeMismatch {
                    what,
                    expected: [head_dim, x.n_elements().div_ceil(head_dim).max(1), 1, 1],
                    actual: x.ne(),
                })
            }
        };
        let k_len = heads("RoPE input k ([head_dim, heads])", &self.k)?;
        check_len("RoPE output of k", k_len, self.k_rope.n_elements())?;
        let k_rows = cache_rows("key cache", &self.k_cache, k_len)?;
        let q_len = match &self.q {
            Some((x, out)) => {
                let n = heads("RoPE input q ([head_dim, heads])", x)?;
                check_len("RoPE output of q", n, out.n_elements())?;
                n
            }
            None => 0,
        };
        let (v_len, v_rows) = match &self.v {
            Some((row, cache)) => {
                let n = row.n_elements();
                (n, cache_rows("value cache", cache, n)?)
            }
            None => (0, 0),
        };
        Ok(KvAppendDims {
            head_dim,
            table_rows,
            q_len,
            k_len,
            k_rows,
            v_len,
            v_rows,
        })
    }
}

/// The rows of `cache`, whose rows must hold `row_len` values and which
/// must have at least one.
fn cache_rows(what: &'static str, cache: &TensorDesc, row_len: usize) -> Result<usize, Error> {
    let n = cache.ne()[0];
    if n != row_len || row_len == 0 || !cache.n_elements().is_multiple_of(n) {
        return Err(Error::ShapeMismatch {
            what,
            expected: [
                row_len,
                cache.n_elements().checked_div(row_len).unwrap_or(0).max(1),
                1,
                1,
            ],
            actual: cache.ne(),
        });
    }
    Ok(cache.n_elements() / n)
}

/// RoPE of k into row `pos` of its cache, with the q RoPE and the v row
/// write of the same position where they joined.
#[derive(Clone, Debug, PartialEq)]
pub struct FusedKvAppend {
    /// Which elements pair up.
    pub mode: RopeMode,
    /// The angles' table.
    pub table: NodeId,
    /// The position.
    pub pos: NodeId,
    /// The RoPE of k, whose result is not stored.
    pub k_rope: NodeId,
    /// The row write it feeds (in place on the key cache).
    pub k_write: NodeId,
    /// The RoPE of q that joined (its result is stored).
    pub q_rope: Option<NodeId>,
    /// The v row write that joined (in place on the value cache).
    pub v_write: Option<NodeId>,
    /// Every node the step replaces, in graph order.
    pub nodes: Vec<NodeId>,
}

/// Source `i` of `id`, its tensor.
fn src(g: &Graph, id: NodeId, i: usize) -> Option<(NodeId, TensorDesc)> {
    let s = g.node(id).ok()?.src(i)?;
    Some((s, *g.tensor(s).ok()?))
}

/// Whether `id` is a row write in place on its destination.
fn in_place(g: &Graph, id: NodeId) -> bool {
    let (Ok(n), Some((_, dst))) = (g.node(id), src(g, id, 0)) else {
        return false;
    };
    n.op() == Op::SetRow && dst.overlap(n.tensor()) == Overlap::Exact
}

/// The step anchored at the k row write `write`, over nodes `free` says
/// no other step has taken; the reason when there is none.
pub(crate) fn match_kv_append(
    g: &Graph,
    write: NodeId,
    free: impl Fn(NodeId) -> bool,
) -> Result<FusedKvAppend, Refusal> {
    let bad = || Refusal::AlreadyFused { node: write };
    let (rope, _) = src(g, write, 1).ok_or_else(bad)?;
    let (pos, _) = src(g, write, 2).ok_or_else(bad)?;
    let rn = g.node(rope).map_err(|_| bad())?;
    let Op::Rope(mode) = rn.op() else {
        return Err(Refusal::NotARope { node: rope });
    };
    if !free(rope) {
        return Err(Refusal::AlreadyFused { node: rope });
    }
    check_intermediate(rope, g.use_count(rope), rn.is_output())?;
    if !in_place(g, write) {
        return Err(Refusal::RowWriteNotInPlace { node: write });
    }
    let (table, _) = src(g, rope, 1).ok_or_else(bad)?;
    if src(g, rope, 2).map(|s| s.0) != Some(pos) {
        return Err(Refusal::OtherPosition { node: write });
    }
    // Partners: the nearest q RoPE before the k RoPE with the same table,
    // position and mode; the nearest in-place v write after the k write at
    // the same position. Each joins only if the step stays legal with it.
    let q_rope = (0..rope.index())
        .rev()
        .map(|i| NodeId(i as u32))
        .find(|&id| {
            free(id)
                && g.node(id).is_ok_and(|n| n.op() == Op::Rope(mode))
                && src(g, id, 1).map(|s| s.0) == Some(table)
                && src(g, id, 2).map(|s| s.0) == Some(pos)
        });
    let v_write = (write.index() + 1..g.len())
        .map(|i| NodeId(i as u32))
        .find(|&id| free(id) && in_place(g, id) && src(g, id, 2).map(|s| s.0) == Some(pos));
    let step = |q: Option<NodeId>, v: Option<NodeId>| {
        let mut nodes: Vec<NodeId> = q.into_iter().chain([rope, write]).chain(v).collect();
        nodes.sort();
        FusedKvAppend {
            mode,
            table,
            pos,
            k_rope: rope,
            k_write: write,
            q_rope: q,
            v_write: v,
            nodes,
        }
    };
    // The k part alone must be legal; then the widest legal step.
    let core = step(None, None);
    check_step(g, &core)?;
    Ok([(q_rope, v_write), (q_rope, None), (None, v_write)]
        .into_iter()
        .filter(|&(q, v)| q.is_some() || v.is_some())
        .map(|(q, v)| step(q, v))
        .find(|s| check_step(g, s).is_ok())
        .unwrap_or(core))
}

/// Tensors with the nodes they belong to.
type Tensors = Vec<(NodeId, TensorDesc)>;

/// The first row of the one-column GEMV result `out` that `t` starts at,
/// where `t` is a contiguous F32 run of rows inside it.
fn first_row(out: &TensorDesc, t: &TensorDesc) -> Option<usize> {
    let (o, e) = (out.byte_extent(), t.byte_extent());
    let inside = t.buffer() == out.buffer() && e.start >= o.start && e.end <= o.end;
    let f32_run = |d: &TensorDesc| d.dtype() == crate::dtype::DType::F32 && d.is_contiguous();
    let offset = e.start.checked_sub(o.start)?;
    (inside && f32_run(out) && f32_run(t) && out.n_rows() == 1 && offset % 4 == 0)
        .then_some(offset / 4)
}

/// Whether the key/value append `kv` may run as the tail of the GEMV step
/// whose nodes are `gemv_nodes`, whose result is node `out` and which
/// reads `gemv_reads`: `Ok(false)` where its rows are not all views of
/// that result (not this pattern), the reason where they are but the tail
/// is not legal.
pub(crate) fn check_gemv_tail(
    g: &Graph,
    gemv_nodes: &[NodeId],
    out: NodeId,
    gemv_reads: &[(NodeId, TensorDesc)],
    kv: &FusedKvAppend,
) -> Result<bool, Refusal> {
    let bad = || Refusal::AlreadyFused { node: kv.k_write };
    let out_t = *g.tensor(out).map_err(|_| bad())?;
    // The rows the step reads, each with the RoPE that rotates it.
    let mut rows: Vec<(NodeId, Option<NodeId>)> = alloc::vec![(kv.k_rope, Some(kv.k_rope))];
    rows.extend(kv.q_rope.map(|q| (q, Some(q))));
    rows.extend(kv.v_write.map(|v| (v, None)));
    let mut row_inputs = Vec::new();
    for &(node, rope) in &rows {
        let slot = if rope.is_some() { 0 } else { 1 };
        let (input, t) = src(g, node, slot).ok_or_else(bad)?;
        if through_views(g, input) != out {
            return Ok(false);
        }
        let Some(first) = first_row(&out_t, &t) else {
            return Ok(false);
        };
        if let Some(r) = rope
            && (kv.mode != RopeMode::Adjacent || first % 2 != 0)
        {
            return Err(Refusal::PairsAcrossTiles { node: r });
        }
        row_inputs.push(t);
    }
    let (kv_reads, kv_writes) = reads_writes(g, kv);
    // The step's own rows are the GEMV's values, not reads from memory.
    let mut reads: Tensors = gemv_reads.to_vec();
    // The rows are read where the unfused order has them: nothing in
    // between may overwrite the GEMV's result either.
    reads.push((out, out_t));
    reads.extend(
        kv_reads
            .into_iter()
            .filter(|(_, t)| !row_inputs.contains(t)),
    );
    let mut writes: Tensors = alloc::vec![(out, out_t)];
    writes.extend(kv_writes.iter().copied());
    // The tail's writes land while other tiles still read the GEMV's
    // inputs and store its result.
    for (w, wt) in &kv_writes {
        for (r, rt) in gemv_reads.iter().chain([&(out, out_t)]) {
            if wt.overlap(rt) != Overlap::Disjoint {
                return Err(Refusal::IntermediatesOverlap { a: *w, b: *r });
            }
        }
    }
    let mut nodes: Vec<NodeId> = gemv_nodes.iter().chain(&kv.nodes).copied().collect();
    nodes.sort();
    check_between(g, &nodes, &reads, &writes).map(|()| true)
}

/// What the step reads and what it writes.
fn reads_writes(g: &Graph, s: &FusedKvAppend) -> (Tensors, Tensors) {
    let mut reads = Vec::new();
    let mut writes = Vec::new();
    for &id in &s.nodes {
        if id == s.k_rope {
            continue;
        }
        let srcs: &[usize] = if id == s.k_write { &[0, 2] } else { &[0, 1, 2] };
        reads.extend(srcs.iter().filter_map(|&i| src(g, id, i)));
        if let Ok(t) = g.tensor(id) {
            writes.push((id, *t));
        }
    }
    reads.extend([0, 1, 2].iter().filter_map(|&i| src(g, s.k_rope, i)));
    (reads, writes)
}

/// Whether the step may run at its last node with its k RoPE unstored.
fn check_step(g: &Graph, s: &FusedKvAppend) -> Result<(), Refusal> {
    let (reads, writes) = reads_writes(g, s);
    if s.nodes.is_empty() {
        return Err(Refusal::AlreadyFused { node: s.k_write });
    }
    let rope_t = *g
        .tensor(s.k_rope)
        .map_err(|_| Refusal::AlreadyFused { node: s.k_rope })?;
    // The unstored RoPE result shares memory with nothing else.
    for (i, n) in g.nodes().iter().enumerate() {
        let id = NodeId(i as u32);
        if id != s.k_rope && !n.op().is_view() {
            check_intermediate_memory(&(s.k_rope, rope_t), &(id, *n.tensor()), false)?;
        }
    }
    // No write of the step overlaps a read of another part.
    for (w, wt) in &writes {
        for (r, rt) in &reads {
            let own = g.node(*w).is_ok_and(|n| n.src(0) == Some(*r));
            if !own && wt.overlap(rt) != Overlap::Disjoint {
                return Err(Refusal::IntermediatesOverlap { a: *w, b: *r });
            }
        }
    }
    check_between(g, &s.nodes, &reads, &writes)
}
