//! A small compute graph: the input of the planner and of the reference
//! evaluator.
//!
//! Nodes are appended in topological order (every source is an earlier node).
//! Every node owns a [`TensorDesc`]: inputs are placed by the caller; compute
//! nodes are placed densely (F32, contiguous) at a caller-chosen buffer and
//! offset, which is how overlap and aliasing enter the graph; reshapes and
//! views share their source's memory. [`Graph`] needs the `alloc` feature.

#[cfg(feature = "alloc")]
use alloc::vec::Vec;

use crate::decode::{RopeMode, Scale};
#[cfg(feature = "alloc")]
use crate::dtype::DType;
use crate::element::Activation;
#[cfg(feature = "alloc")]
use crate::error::Error;
use crate::norm::Eps;
#[cfg(feature = "alloc")]
use crate::tensor::Overlap;
use crate::tensor::{BufferId, TensorDesc};

pub use crate::ids::NodeId;

/// What a matrix multiplication knows about its weight matrix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MatHint {
    /// An ordinary weight matrix.
    None,
    /// The weight is the normalised `N × N` Sylvester Hadamard matrix: the
    /// product may be computed by an FWHT of each length-N row of the input,
    /// without reading the weight (GGML's `GGML_HINT_SRC0_IS_HADAMARD`).
    Hadamard,
}

/// A node's operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Data supplied by the caller (weights, activations, operands).
    Input,
    /// `dst[.., j, i] = Σ_k w[i, k] · x[.., j, k]`: `w` is 2-D `[K, M]`, `x`
    /// is F32 `[K, N, B2, B3]`, the result F32 `[M, N, B2, B3]`.
    MulMat(MatHint),
    /// `a + b`, `b` broadcast GGML-style (each `b.ne[i]` divides `a.ne[i]`).
    Add,
    /// `a · b`, broadcast as for `Add`.
    Mul,
    /// `a + bias[i0]`: an explicit per-row bias of shape `[a.ne0, 1, 1, 1]`.
    AddRowBias,
    /// An activation of `a`.
    Unary(Activation),
    /// `act(gate) · up`, both of the same shape.
    Glu(Activation),
    /// The same contiguous memory as its source, with a new shape.
    Reshape,
    /// A strided window into its source's memory.
    View,
    /// `x · s` per column of `x` (its `ne[0]` values), with
    /// `s = 1 / sqrt(mean(x²) + eps)` in the reduction order of
    /// [`crate::norm`].
    RmsNorm(Eps),
    /// RoPE of each head of `x` at the position in `pos`, with the angles
    /// `cos, sin` read from row `pos` of a table (see [`crate::decode`]).
    /// Sources: `x`, the table, the position.
    Rope(RopeMode),
    /// `dst` with row `pos` replaced by `row` (the KV-cache append; placed
    /// exactly on `dst` it writes that row alone). Sources: `dst`, `row`,
    /// the position.
    SetRow,
    /// One query token's attention over cache rows `0..=pos`, grouped-query
    /// heads as the shapes say (see [`crate::decode::attention`]). Sources:
    /// the query, the keys, the values, the position.
    Attention(Scale),
    /// The index of the largest value of each column, as an f32 (see
    /// [`crate::decode::argmax`]).
    ArgMax,
    /// An operation the core does not model (a norm, attention, ...). The
    /// planner never fuses through it. The reference evaluates it as an
    /// element-wise copy of its first source, so that graphs containing it
    /// remain executable.
    Other(&'static str),
}

impl Op {
    /// A short name for reports.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Input => "input",
            Op::MulMat(MatHint::None) => "mul_mat",
            Op::MulMat(MatHint::Hadamard) => "mul_mat(hadamard)",
            Op::Add => "add",
            Op::Mul => "mul",
            Op::AddRowBias => "add_row_bias",
            Op::Unary(a) => a.name(),
            Op::Glu(_) => "glu",
            Op::Reshape => "reshape",
            Op::View => "view",
            Op::RmsNorm(_) => "rms_norm",
            Op::Rope(_) => "rope",
            Op::SetRow => "set_row",
            Op::Attention(_) => "attention",
            Op::ArgMax => "argmax",
            Op::Other(name) => name,
        }
    }

    /// Whether the node only reinterprets its source's memory.
    pub const fn is_view(&self) -> bool {
        matches!(self, Op::Reshape | Op::View)
    }
}

/// The most sources a node has.
pub const MAX_SRCS: usize = 4;

/// One node of a [`Graph`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Node {
    op: Op,
    srcs: [Option<NodeId>; MAX_SRCS],
    tensor: TensorDesc,
    output: bool,
    state: bool,
    name: &'static str,
}

impl Node {
    /// The operation.
    pub const fn op(&self) -> Op {
        self.op
    }

    /// The sources, in order.
    pub fn srcs(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.srcs.iter().map_while(|s| *s)
    }

    /// Source `i`.
    pub fn src(&self, i: usize) -> Option<NodeId> {
        self.srcs.get(i).copied().flatten()
    }

    /// The tensor the node produces.
    pub const fn tensor(&self) -> &TensorDesc {
        &self.tensor
    }

    /// Whether the node is a graph output (read after the graph runs).
    pub const fn is_output(&self) -> bool {
        self.output
    }

    /// Whether the node is state the graph updates on purpose (a KV cache,
    /// [`Graph::state`]): an input that runs overwrite and that
    /// [`crate::backend::ResidentPlan::restore_inputs`] leaves as it is.
    pub const fn is_state(&self) -> bool {
        self.state
    }

    /// A caller-given label (empty if none).
    pub const fn name(&self) -> &'static str {
        self.name
    }
}

/// Where a compute node's dense F32 result goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Place {
    /// The buffer.
    pub buffer: BufferId,
    /// Byte offset inside it (a multiple of 4).
    pub offset: usize,
}

impl Place {
    /// `offset` bytes into `buffer`.
    pub const fn at(buffer: u32, offset: usize) -> Place {
        Place {
            buffer: BufferId(buffer),
            offset,
        }
    }
}

/// A compute graph in topological order, with use counts.
#[cfg(feature = "alloc")]
#[derive(Clone, Debug, Default)]
pub struct Graph {
    nodes: Vec<Node>,
    uses: Vec<u32>,
}

#[cfg(feature = "alloc")]
impl Graph {
    /// An empty graph.
    pub fn new() -> Graph {
        Graph::default()
    }

    /// The nodes, in order.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether the graph has no node.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The node `id`.
    pub fn node(&self, id: NodeId) -> Result<&Node, Error> {
        self.nodes
            .get(id.index())
            .ok_or(Error::BadNode { index: id.index() })
    }

    /// How many times `id` is a source of another node (a view counts as a use).
    pub fn use_count(&self, id: NodeId) -> usize {
        self.uses.get(id.index()).copied().unwrap_or(0) as usize
    }

    /// The nodes that read `id`, in order.
    pub fn consumers(&self, id: NodeId) -> impl Iterator<Item = NodeId> + '_ {
        self.nodes
            .iter()
            .enumerate()
            .filter(move |(_, n)| n.srcs().any(|s| s == id))
            .map(|(i, _)| NodeId(i as u32))
    }

    /// The tensor of node `id`.
    pub fn tensor(&self, id: NodeId) -> Result<&TensorDesc, Error> {
        Ok(self.node(id)?.tensor())
    }

    /// Marks `id` as a graph output.
    pub fn mark_output(&mut self, id: NodeId) -> Result<(), Error> {
        let n = self
            .nodes
            .get_mut(id.index())
            .ok_or(Error::BadNode { index: id.index() })?;
        n.output = true;
        Ok(())
    }

    /// Gives node `id` a label for reports.
    pub fn set_name(&mut self, id: NodeId, name: &'static str) -> Result<(), Error> {
        let n = self
            .nodes
            .get_mut(id.index())
            .ok_or(Error::BadNode { index: id.index() })?;
        n.name = name;
        Ok(())
    }

    fn push(&mut self, op: Op, srcs: &[NodeId], tensor: TensorDesc) -> Result<NodeId, Error> {
        let mut s = [None; MAX_SRCS];
        if srcs.len() > MAX_SRCS {
            return Err(Error::LengthMismatch {
                what: "node sources",
                expected: MAX_SRCS,
                actual: srcs.len(),
            });
        }
        for (slot, &id) in s.iter_mut().zip(srcs) {
            if id.index() >= self.nodes.len() {
                return Err(Error::BadNode { index: id.index() });
            }
            *slot = Some(id);
        }
        // A computed result may replace a source exactly (in place) or
        // leave it alone; one that overwrites part of a source while
        // reading it has no order every backend would agree on.
        if !op.is_view() && op != Op::Input {
            for &id in srcs {
                let src = self.nodes[id.index()].tensor;
                if src.overlap(&tensor) == Overlap::Partial {
                    return Err(Error::AliasViolation {
                        what: "a result partially overlaps one of its sources",
                    });
                }
            }
        }
        for &id in srcs {
            self.uses[id.index()] += 1;
        }
        let id = NodeId(self.nodes.len() as u32);
        self.nodes.push(Node {
            op,
            srcs: s,
            tensor,
            output: false,
            state: false,
            name: "",
        });
        self.uses.push(0);
        Ok(id)
    }

    fn dense(ne: [usize; 4], at: Place) -> Result<TensorDesc, Error> {
        if !at.offset.is_multiple_of(4) {
            return Err(Error::Misaligned {
                what: "F32 result offset",
                align: 4,
                value: at.offset,
            });
        }
        TensorDesc::contiguous(DType::F32, ne, at.buffer, at.offset)
    }

    fn elementwise_input(&self, id: NodeId, what: &'static str) -> Result<TensorDesc, Error> {
        let t = *self.tensor(id)?;
        match t.dtype() {
            DType::F32 | DType::F16 | DType::BF16 => Ok(t),
            dtype => Err(Error::UnsupportedDType { what, dtype }),
        }
    }

    /// A caller-supplied tensor.
    pub fn input(&mut self, tensor: TensorDesc) -> Result<NodeId, Error> {
        self.push(Op::Input, &[], tensor)
    }

    /// `w · x` (see [`Op::MulMat`]).
    pub fn mul_mat(&mut self, w: NodeId, x: NodeId, at: Place) -> Result<NodeId, Error> {
        self.mul_mat_hinted(w, x, MatHint::None, at)
    }

    /// `H · x` with the Hadamard hint: `w` must be `[N, N]`.
    pub fn mul_mat_hadamard(&mut self, w: NodeId, x: NodeId, at: Place) -> Result<NodeId, Error> {
        self.mul_mat_hinted(w, x, MatHint::Hadamard, at)
    }

    fn mul_mat_hinted(
        &mut self,
        w: NodeId,
        x: NodeId,
        hint: MatHint,
        at: Place,
    ) -> Result<NodeId, Error> {
        let wt = *self.tensor(w)?;
        let xt = *self.tensor(x)?;
        let [k, m, w2, w3] = wt.ne();
        if w2 != 1 || w3 != 1 {
            return Err(Error::ShapeMismatch {
                what: "mul_mat weight must be 2-D",
                expected: [k, m, 1, 1],
                actual: wt.ne(),
            });
        }
        if !wt.rows_contiguous() {
            return Err(Error::UnsupportedDType {
                what: "mul_mat weight with strided blocks",
                dtype: wt.dtype(),
            });
        }
        if xt.dtype() != DType::F32 {
            return Err(Error::UnsupportedDType {
                what: "mul_mat activations (must be F32)",
                dtype: xt.dtype(),
            });
        }
        let xne = xt.ne();
        if xne[0] != k {
            return Err(Error::ShapeMismatch {
                what: "mul_mat inner dimension",
                expected: [k, xne[1], xne[2], xne[3]],
                actual: xne,
            });
        }
        if hint == MatHint::Hadamard && k != m {
            return Err(Error::ShapeMismatch {
                what: "Hadamard matrix must be square",
                expected: [k, k, 1, 1],
                actual: wt.ne(),
            });
        }
        // The hint promises a transform every backend runs as an FWHT:
        // a size the FWHT cannot take is refused here rather than run as a
        // plain GEMV on some paths and refused on others.
        if hint == MatHint::Hadamard {
            crate::fwht::check_fwht_size(k)?;
        }
        let out = Graph::dense([m, xne[1], xne[2], xne[3]], at)?;
        self.push(Op::MulMat(hint), &[w, x], out)
    }

    fn binary(&mut self, op: Op, a: NodeId, b: NodeId, at: Place) -> Result<NodeId, Error> {
        let ta = self.elementwise_input(a, "element-wise operand")?;
        let tb = self.elementwise_input(b, "element-wise operand")?;
        let (na, nbb) = (ta.ne(), tb.ne());
        if (0..4).any(|i| nbb[i] == 0 || na[i] % nbb[i] != 0) {
            return Err(Error::ShapeMismatch {
                what: "second operand must broadcast into the first",
                expected: na,
                actual: nbb,
            });
        }
        let out = Graph::dense(na, at)?;
        self.push(op, &[a, b], out)
    }

    /// `a + b` (`b` may broadcast; the planner refuses to fuse broadcasts).
    pub fn add(&mut self, a: NodeId, b: NodeId, at: Place) -> Result<NodeId, Error> {
        self.binary(Op::Add, a, b, at)
    }

    /// `a · b` (`b` may broadcast; the planner refuses to fuse broadcasts).
    pub fn mul(&mut self, a: NodeId, b: NodeId, at: Place) -> Result<NodeId, Error> {
        self.binary(Op::Mul, a, b, at)
    }

    /// `a + bias[i0]` with `bias` of shape `[a.ne0, 1, 1, 1]`.
    pub fn add_row_bias(&mut self, a: NodeId, bias: NodeId, at: Place) -> Result<NodeId, Error> {
        let ta = self.elementwise_input(a, "element-wise operand")?;
        let tb = self.elementwise_input(bias, "row bias")?;
        let want = [ta.ne()[0], 1, 1, 1];
        if tb.ne() != want {
            return Err(Error::ShapeMismatch {
                what: "row bias",
                expected: want,
                actual: tb.ne(),
            });
        }
        let out = Graph::dense(ta.ne(), at)?;
        self.push(Op::AddRowBias, &[a, bias], out)
    }

    /// `act(a)`.
    pub fn unary(&mut self, act: Activation, a: NodeId, at: Place) -> Result<NodeId, Error> {
        let ta = self.elementwise_input(a, "activation input")?;
        let out = Graph::dense(ta.ne(), at)?;
        self.push(Op::Unary(act), &[a], out)
    }

    /// `act(gate) · up`.
    pub fn glu(
        &mut self,
        act: Activation,
        gate: NodeId,
        up: NodeId,
        at: Place,
    ) -> Result<NodeId, Error> {
        let tg = self.elementwise_input(gate, "GLU gate")?;
        let tu = self.elementwise_input(up, "GLU up")?;
        if tg.ne() != tu.ne() {
            return Err(Error::ShapeMismatch {
                what: "GLU gate and up",
                expected: tg.ne(),
                actual: tu.ne(),
            });
        }
        let out = Graph::dense(tg.ne(), at)?;
        self.push(Op::Glu(act), &[gate, up], out)
    }

    /// `rms_norm(a, eps)`: each column of `a` (its `ne[0]` values, at least 1
    /// and at most [`crate::norm::MAX_LEN`]) times `1 / sqrt(mean(a²) + eps)`
    /// (see [`crate::norm`]). Any `eps` is taken; the planner fuses only a
    /// finite `eps >= 0`.
    pub fn rms_norm(&mut self, a: NodeId, eps: f32, at: Place) -> Result<NodeId, Error> {
        let ta = self.elementwise_input(a, "rms_norm input")?;
        let k = ta.ne()[0];
        if k == 0 || k > crate::norm::MAX_LEN {
            return Err(Error::LengthMismatch {
                what: "rms_norm row length (1..=2^24)",
                expected: k.clamp(1, crate::norm::MAX_LEN),
                actual: k,
            });
        }
        let out = Graph::dense(ta.ne(), at)?;
        self.push(Op::RmsNorm(Eps::new(eps)), &[a], out)
    }

    /// Caller-supplied state the graph updates in place (a KV cache): an
    /// input whose overwriting is the point, so resident plans keep no
    /// pristine copy of it ([`Node::is_state`]).
    pub fn state(&mut self, tensor: TensorDesc) -> Result<NodeId, Error> {
        let id = self.push(Op::Input, &[], tensor)?;
        self.nodes[id.index()].state = true;
        Ok(id)
    }

    /// A contiguous F32 source of a decode op whose shape must equal
    /// `want(shape)`: the nearest shape the op takes.
    fn decode_input(
        &self,
        id: NodeId,
        what: &'static str,
        want: impl Fn([usize; 4]) -> [usize; 4],
    ) -> Result<TensorDesc, Error> {
        let t = *self.tensor(id)?;
        if t.dtype() != DType::F32 || !t.is_contiguous() {
            return Err(Error::UnsupportedDType {
                what,
                dtype: t.dtype(),
            });
        }
        let expected = want(t.ne());
        if t.ne() != expected {
            return Err(Error::ShapeMismatch {
                what,
                expected,
                actual: t.ne(),
            });
        }
        Ok(t)
    }

    /// A position source: one F32 value.
    fn position_input(&self, id: NodeId) -> Result<TensorDesc, Error> {
        self.decode_input(id, "position (one contiguous F32 value)", |_| [1, 1, 1, 1])
    }

    /// RoPE of `x` (`[head_dim, heads]`, F32, `head_dim` even) at the
    /// position held in `pos` (one F32 value), with angles from `table`
    /// (`[head_dim, rows]`: row `p` holds `cos θ_i, sin θ_i` of pair `i`
    /// at position `p`). See [`crate::decode::rope`].
    pub fn rope(
        &mut self,
        mode: RopeMode,
        x: NodeId,
        table: NodeId,
        pos: NodeId,
        at: Place,
    ) -> Result<NodeId, Error> {
        let tx = self.decode_input(x, "RoPE input ([head_dim, heads], contiguous F32)", |ne| {
            [(ne[0].max(2) + 1) & !1, ne[1].max(1), 1, 1]
        })?;
        let d = tx.ne()[0];
        self.decode_input(
            table,
            "RoPE table ([head_dim, rows], contiguous F32)",
            |ne| [d, ne[1].max(1), 1, 1],
        )?;
        self.position_input(pos)?;
        let out = Graph::dense(tx.ne(), at)?;
        self.push(Op::Rope(mode), &[x, table, pos], out)
    }

    /// `dst` (`[n, rows]`, contiguous F32) with row `pos` replaced by `row`
    /// (`n` values): placed at `dst` itself, the in-place KV-cache append.
    pub fn set_row(
        &mut self,
        dst: NodeId,
        row: NodeId,
        pos: NodeId,
        at: Place,
    ) -> Result<NodeId, Error> {
        let td = self.decode_input(
            dst,
            "row-write destination ([n, rows], contiguous F32)",
            |ne| [ne[0].max(1), ne[1].max(1), 1, 1],
        )?;
        let n = td.ne()[0];
        self.decode_input(row, "written row (n contiguous F32 values)", |ne| {
            if ne.iter().product::<usize>() == n {
                ne
            } else {
                [n, 1, 1, 1]
            }
        })?;
        self.position_input(pos)?;
        let out = Graph::dense(td.ne(), at)?;
        self.push(Op::SetRow, &[dst, row, pos], out)
    }

    /// One query token's attention: `q` is `[head_dim, n_head]`, `k` and `v`
    /// are caches `[head_dim, n_kv, rows]` (contiguous F32, `n_kv` dividing
    /// `n_head`), read at rows `0..=pos`; the result is `q`'s shape. See
    /// [`crate::decode::attention`].
    pub fn attention(
        &mut self,
        q: NodeId,
        k: NodeId,
        v: NodeId,
        pos: NodeId,
        scale: f32,
        at: Place,
    ) -> Result<NodeId, Error> {
        let tq = self.decode_input(
            q,
            "attention query ([head_dim, n_head], contiguous F32)",
            |ne| [ne[0].max(1), ne[1].max(1), 1, 1],
        )?;
        let [d, n_head, _, _] = tq.ne();
        let tk = self.decode_input(
            k,
            "attention keys ([head_dim, n_kv, rows], contiguous F32)",
            |ne| {
                let n_kv = if ne[1] >= 1 && n_head.is_multiple_of(ne[1]) {
                    ne[1]
                } else {
                    1
                };
                [d, n_kv, ne[2].max(1), 1]
            },
        )?;
        self.decode_input(
            v,
            "attention values (the keys' shape, contiguous F32)",
            |_| tk.ne(),
        )?;
        self.position_input(pos)?;
        let out = Graph::dense(tq.ne(), at)?;
        self.push(Op::Attention(Scale::new(scale)), &[q, k, v, pos], out)
    }

    /// The index of the largest value of each column of `x` (`[n, cols]`,
    /// contiguous F32, `n` at most [`crate::decode::MAX_ARGMAX_LEN`]), as
    /// an F32 `[1, cols]`. See [`crate::decode::argmax`].
    pub fn argmax(&mut self, x: NodeId, at: Place) -> Result<NodeId, Error> {
        let tx = self.decode_input(x, "argmax input ([n, cols], contiguous F32)", |ne| {
            [
                ne[0].clamp(1, crate::decode::MAX_ARGMAX_LEN),
                ne[1].max(1),
                1,
                1,
            ]
        })?;
        let out = Graph::dense([1, tx.ne()[1], 1, 1], at)?;
        self.push(Op::ArgMax, &[x], out)
    }

    /// `a` seen with shape `ne` (`a` must be contiguous).
    pub fn reshape(&mut self, a: NodeId, ne: [usize; 4]) -> Result<NodeId, Error> {
        let t = self.tensor(a)?.reshaped(ne)?;
        self.push(Op::Reshape, &[a], t)
    }

    /// A window of `a`: shape `ne`, byte strides `nb`, starting `offset` bytes
    /// after `a`'s first byte; it must lie inside `a`'s extent.
    pub fn view(
        &mut self,
        a: NodeId,
        ne: [usize; 4],
        nb: [usize; 4],
        offset: usize,
    ) -> Result<NodeId, Error> {
        let ta = *self.tensor(a)?;
        let start = ta.offset().checked_add(offset).ok_or(Error::Overflow {
            what: "view offset",
        })?;
        let t = TensorDesc::strided(ta.dtype(), ne, nb, ta.buffer(), start)?;
        let (e, f) = (t.byte_extent(), ta.byte_extent());
        if t.n_elements() > 0 && (e.start < f.start || e.end > f.end) {
            return Err(Error::BufferTooShort {
                what: "view must lie inside its source",
                needed: e.end,
                actual: f.end,
            });
        }
        self.push(Op::View, &[a], t)
    }

    /// An opaque operation reading `srcs` and producing a dense F32 `ne`
    /// tensor at `at` (see [`Op::Other`]).
    pub fn other(
        &mut self,
        name: &'static str,
        srcs: &[NodeId],
        ne: [usize; 4],
        at: Place,
    ) -> Result<NodeId, Error> {
        let out = Graph::dense(ne, at)?;
        if let Some(&s) = srcs.first() {
            let ts = self.elementwise_input(s, "opaque op first source")?;
            if ts.n_elements() != out.n_elements() {
                return Err(Error::ShapeMismatch {
                    what: "opaque op output must have its first source's element count",
                    expected: ts.ne(),
                    actual: ne,
                });
            }
        }
        self.push(Op::Other(name), srcs, out)
    }
}
