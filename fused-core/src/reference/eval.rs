//! Graph and plan evaluation over byte buffers.
//!
//! [`eval_graph`] runs every node by itself, in order, each reading its
//! inputs from memory and writing its whole result (a matmul computes all its
//! outputs before it stores any). [`eval_plan`] runs a plan: fused steps
//! compute each output element straight from the accumulator and store it at
//! once, walking rows from last to first while they still read their inputs
//! from memory, as a parallel kernel would. A plan that breaks the overlap
//! rules therefore shows up as a difference from [`eval_graph`].

use alloc::vec;
use alloc::vec::Vec;

use super::gemv::{dot_f32, dot_quantized};
use crate::acts::ActQuant;
use crate::acts::GemvMode;
use crate::decode;
use crate::dtype::DType;
use crate::epilogue::Stage;
use crate::error::Error;
use crate::fwht::{FwhtDesc, butterflies};
use crate::graph::{Graph, MatHint, NodeId, Op};
use crate::memory::Memory;
use crate::planner::{FusedFwht, FusedGemv, FusedGlu, NormPrologue, Operands, Plan, Step};
use crate::tensor::TensorDesc;
use crate::weights::WeightMatrix;

/// Evaluates every node of `g` in order, unfused.
pub fn eval_graph(g: &Graph, mem: &mut Memory, mode: GemvMode) -> Result<(), Error> {
    check_all(g, mem)?;
    for i in 0..g.len() {
        eval_node(g, NodeId(i as u32), mem, mode)?;
    }
    Ok(())
}

/// Evaluates `plan` (made for `g`) step by step.
pub fn eval_plan(g: &Graph, plan: &Plan, mem: &mut Memory, mode: GemvMode) -> Result<(), Error> {
    check_all(g, mem)?;
    for step in &plan.steps {
        match step {
            Step::Node(id) => eval_node(g, *id, mem, mode)?,
            Step::Gemv(s) => {
                eval_fused_gemv(g, s, mem, mode)?;
                // A tail reads the rows the GEMV stored (the planner
                // checked nothing else touches them in between).
                let tail = s.kv.iter().flat_map(|kv| &kv.nodes);
                for &id in tail.chain(s.argmax.iter().map(|a| &a.node)) {
                    eval_node(g, id, mem, mode)?;
                }
            }
            Step::GluGemv(s) => eval_fused_glu(g, s, mem, mode)?,
            Step::SignedFwht(s) => eval_fused_fwht(g, s, mem)?,
            // Its parts are exact and independent (the planner checked):
            // run in order, they give the fused step's results.
            Step::KvAppend(s) => {
                for &id in &s.nodes {
                    eval_node(g, id, mem, mode)?;
                }
            }
        }
    }
    Ok(())
}

fn check_all(g: &Graph, mem: &Memory) -> Result<(), Error> {
    g.nodes().iter().try_for_each(|n| mem.check(n.tensor()))
}

fn tensor(g: &Graph, id: NodeId) -> Result<TensorDesc, Error> {
    g.tensor(id).copied()
}

fn src(g: &Graph, id: NodeId, i: usize) -> Result<NodeId, Error> {
    g.node(id)?
        .src(i)
        .ok_or(Error::BadNode { index: id.index() })
}

/// The matmul's weights, copied out of memory.
fn weights(g: &Graph, mm: NodeId, mem: &Memory) -> Result<(DType, usize, usize, Vec<u8>), Error> {
    let w = tensor(g, src(g, mm, 0)?)?;
    let [k, m, _, _] = w.ne();
    Ok((w.dtype(), m, k, mem.read_rows(&w)?))
}

/// Column `col` of a matmul's input (the `col`-th row of `x`, GGML order).
fn column(x: &TensorDesc, col: usize, mem: &Memory) -> Result<Vec<f32>, Error> {
    let [k, n1, n2, _] = x.ne();
    let (i1, i2, i3) = (col % n1, col / n1 % n2, col / n1 / n2);
    (0..k).map(|i0| mem.get(x, [i0, i1, i2, i3])).collect()
}

/// Column `col` of a fused GEMV's activations: of `x`, or, with a norm
/// prologue, `(x · s) · g` computed from the prologue's input and weight
/// ([`crate::norm::rms_norm`]), read from memory now.
fn act_column(
    g: &Graph,
    x: &TensorDesc,
    prologue: &Option<NormPrologue>,
    col: usize,
    mem: &Memory,
) -> Result<Vec<f32>, Error> {
    let Some(p) = prologue else {
        return column(x, col, mem);
    };
    let xc = column(&tensor(g, p.x)?, col, mem)?;
    let gamma = mem.read(&tensor(g, p.gamma)?)?;
    let mut y = vec![0.0f32; xc.len()];
    crate::norm::rms_norm(xc.len(), p.eps.get(), &xc, Some(&gamma), &mut y)?;
    Ok(y)
}

/// One accumulator of `w_row · x_col` in `mode`.
struct Dotter {
    mode: ActQuant,
    xq: Vec<u8>,
    /// The column `xq` was quantized from (re-quantized only when it changes).
    loaded: Vec<f32>,
}

impl Dotter {
    fn new(mode: ActQuant) -> Dotter {
        Dotter {
            mode,
            xq: Vec::new(),
            loaded: Vec::new(),
        }
    }

    fn load(&mut self, x: &[f32]) -> Result<(), Error> {
        let same = self.loaded.len() == x.len()
            && self
                .loaded
                .iter()
                .zip(x)
                .all(|(a, b)| a.to_bits() == b.to_bits());
        if same && !self.loaded.is_empty() {
            return Ok(());
        }
        self.loaded.clear();
        self.loaded.extend_from_slice(x);
        if let Some(d) = self.mode.dtype() {
            self.xq.resize(d.row_bytes(x.len())?, 0);
            crate::quant::quantize_row(d, x, &mut self.xq)?;
        }
        Ok(())
    }

    fn dot(&self, w: &WeightMatrix<'_>, row: usize, x: &[f32]) -> Result<f32, Error> {
        match self.mode {
            ActQuant::F32 => dot_f32(w, row, x),
            m => dot_quantized(w, row, m, &self.xq),
        }
    }
}

fn eval_node(g: &Graph, id: NodeId, mem: &mut Memory, mode: GemvMode) -> Result<(), Error> {
    let node = *g.node(id)?;
    let out = *node.tensor();
    match node.op() {
        Op::Input | Op::Reshape | Op::View => Ok(()),
        Op::MulMat(hint) => {
            let x = tensor(g, src(g, id, 1)?)?;
            let wt = tensor(g, src(g, id, 0)?)?;
            let cols = x.n_rows();
            let m = out.ne()[0];
            let mut y = vec![0.0f32; m * cols];
            match hint {
                // The graph checked N (`Graph::mul_mat_hadamard`).
                MatHint::Hadamard => {
                    let d = FwhtDesc::new(wt.ne()[0])?;
                    for col in 0..cols {
                        let xc = column(&x, col, mem)?;
                        crate::fwht::fwht(&d, &xc, None, &mut y[col * m..(col + 1) * m])?;
                    }
                }
                MatHint::None => {
                    let (dtype, rows, k, bytes) = weights(g, id, mem)?;
                    let w = WeightMatrix::new(dtype, rows, k, &bytes)?;
                    let mut dotter = Dotter::new(mode.act_quant(dtype));
                    for col in 0..cols {
                        let xc = column(&x, col, mem)?;
                        dotter.load(&xc)?;
                        for row in 0..m {
                            y[col * m + row] = dotter.dot(&w, row, &xc)?;
                        }
                    }
                }
            }
            mem.write(&out, &y)
        }
        Op::Add | Op::Mul | Op::Glu(_) | Op::AddRowBias => {
            let a = tensor(g, src(g, id, 0)?)?;
            let b = tensor(g, src(g, id, 1)?)?;
            let bne = b.ne();
            for l in 0..out.n_elements() {
                let idx = out.unravel(l);
                let va = mem.get(&a, idx)?;
                let bidx = match node.op() {
                    Op::AddRowBias => [idx[0], 0, 0, 0],
                    _ => [
                        idx[0] % bne[0],
                        idx[1] % bne[1],
                        idx[2] % bne[2],
                        idx[3] % bne[3],
                    ],
                };
                let vb = mem.get(&b, bidx)?;
                let v = match node.op() {
                    Op::Add | Op::AddRowBias => va + vb,
                    Op::Mul => va * vb,
                    Op::Glu(act) => crate::element::glu(act, va, vb),
                    _ => unreachable_op()?,
                };
                mem.set(&out, idx, v)?;
            }
            Ok(())
        }
        Op::Unary(act) => {
            let a = tensor(g, src(g, id, 0)?)?;
            for l in 0..out.n_elements() {
                let idx = out.unravel(l);
                let v = act.apply(mem.get(&a, idx)?);
                mem.set(&out, idx, v)?;
            }
            Ok(())
        }
        Op::RmsNorm(eps) => {
            // Column by column: a whole column is read before any of it is
            // written (an in-place norm reads its own input).
            let x = tensor(g, src(g, id, 0)?)?;
            let k = x.ne()[0];
            let mut y = vec![0.0f32; k];
            for col in 0..x.n_rows() {
                let xc = column(&x, col, mem)?;
                crate::norm::rms_norm(k, eps.get(), &xc, None, &mut y)?;
                for (i, &v) in y.iter().enumerate() {
                    mem.set(&out, out.unravel(col * k + i), v)?;
                }
            }
            Ok(())
        }
        Op::Rope(_) | Op::SetRow | Op::Attention(_) | Op::ArgMax => eval_decode(g, id, mem),
        Op::Other(_) => match node.src(0) {
            None => Ok(()),
            Some(s) => {
                let a = tensor(g, s)?;
                for l in 0..out.n_elements() {
                    let v = mem.get(&a, a.unravel(l))?;
                    mem.set(&out, out.unravel(l), v)?;
                }
                Ok(())
            }
        },
    }
}

/// Every value of `t`, in GGML order.
fn values(t: &TensorDesc, mem: &Memory) -> Result<Vec<f32>, Error> {
    (0..t.n_elements())
        .map(|l| mem.get(t, t.unravel(l)))
        .collect()
}

/// Stores `v` (GGML order) into `t`.
fn store(t: &TensorDesc, v: &[f32], mem: &mut Memory) -> Result<(), Error> {
    v.iter()
        .enumerate()
        .try_for_each(|(l, &x)| mem.set(t, t.unravel(l), x))
}

/// The row a position source addresses among `rows` rows.
fn position(g: &Graph, id: NodeId, i: usize, rows: usize, mem: &Memory) -> Result<usize, Error> {
    let p = tensor(g, src(g, id, i)?)?;
    Ok(decode::position(mem.get(&p, [0; 4])?, rows))
}

/// The decode ops ([`crate::decode`]): every source read before the result
/// is stored, but for a row write placed on its destination, which stores
/// the one row.
fn eval_decode(g: &Graph, id: NodeId, mem: &mut Memory) -> Result<(), Error> {
    let node = g.node(id)?;
    let out = *node.tensor();
    let input = |i: usize| -> Result<TensorDesc, Error> { tensor(g, src(g, id, i)?) };
    match node.op() {
        Op::Rope(mode) => {
            let (x, table) = (input(0)?, input(1)?);
            let p = position(g, id, 2, table.ne()[1], mem)?;
            let d = x.ne()[0];
            let row = column(&table, p, mem)?;
            let mut y = vec![0.0f32; x.n_elements()];
            decode::rope(mode, d, &values(&x, mem)?, &row, &mut y)?;
            store(&out, &y, mem)
        }
        Op::SetRow => {
            let (dst, row) = (input(0)?, input(1)?);
            let p = position(g, id, 2, dst.ne()[1], mem)?;
            let n = dst.ne()[0];
            let r = values(&row, mem)?;
            if dst.overlap(&out) != crate::tensor::Overlap::Exact {
                let all = values(&dst, mem)?;
                store(&out, &all, mem)?;
            }
            for (i, &v) in r.iter().enumerate() {
                mem.set(&out, out.unravel(p * n + i), v)?;
            }
            Ok(())
        }
        Op::Attention(scale) => {
            let (q, k, v) = (input(0)?, input(1)?, input(2)?);
            let [d, n_kv, rows, _] = k.ne();
            let len = position(g, id, 3, rows, mem)? + 1;
            let shape = decode::AttentionShape {
                head_dim: d,
                n_head: q.ne()[1],
                n_kv,
                scale: scale.get(),
            };
            let rows_of = |t: &TensorDesc| -> Result<Vec<f32>, Error> {
                (0..len * d * n_kv)
                    .map(|l| mem.get(t, t.unravel(l)))
                    .collect()
            };
            let (kv_k, kv_v) = (rows_of(&k)?, rows_of(&v)?);
            let mut scores = vec![0.0f32; len];
            let mut y = vec![0.0f32; q.n_elements()];
            decode::attention(
                &shape,
                &values(&q, mem)?,
                &kv_k,
                &kv_v,
                len,
                &mut scores,
                &mut y,
            )?;
            store(&out, &y, mem)
        }
        Op::ArgMax => {
            let x = input(0)?;
            let cols = x.n_rows();
            let idx = (0..cols)
                .map(|c| Ok(decode::argmax(&column(&x, c, mem)?) as f32))
                .collect::<Result<Vec<f32>, Error>>()?;
            store(&out, &idx, mem)
        }
        _ => Err(Error::BadNode { index: id.index() }),
    }
}

fn unreachable_op() -> Result<f32, Error> {
    Err(Error::BadNode { index: usize::MAX })
}

/// The operand values a fused step reads for output `l` (linear, GGML
/// order of the destination) of matmul row `row`.
struct OperandReader {
    tensors: [Option<TensorDesc>; crate::epilogue::MAX_STAGES],
}

impl OperandReader {
    fn new(g: &Graph, ops: &Operands) -> Result<OperandReader, Error> {
        let mut tensors = [None; crate::epilogue::MAX_STAGES];
        for (t, o) in tensors.iter_mut().zip(ops) {
            if let Some(id) = o {
                *t = Some(tensor(g, *id)?);
            }
        }
        Ok(OperandReader { tensors })
    }

    fn read(&self, mem: &Memory, stage: &Stage, row: usize, l: usize) -> Result<f32, Error> {
        let slot = stage.slot().ok_or(Error::MissingOperand { slot: 0 })?;
        let t = self.tensors[slot]
            .as_ref()
            .ok_or(Error::MissingOperand { slot })?;
        match stage {
            Stage::AddRowBias { .. } => mem.get(t, [row, 0, 0, 0]),
            _ => mem.get(t, t.unravel(l)),
        }
    }
}

/// Applies a chain, reading operands from memory; the first failed read wins.
fn apply_chain(
    e: &crate::epilogue::Epilogue,
    v: f32,
    reader: &OperandReader,
    mem: &Memory,
    row: usize,
    l: usize,
) -> Result<f32, Error> {
    let mut err = None;
    let r = e.apply_with(v, |st| match reader.read(mem, st, row, l) {
        Ok(x) => x,
        Err(e) => {
            err.get_or_insert(e);
            0.0
        }
    });
    err.map_or(Ok(r), Err)
}

fn eval_fused_gemv(
    g: &Graph,
    s: &FusedGemv,
    mem: &mut Memory,
    mode: GemvMode,
) -> Result<(), Error> {
    let x = tensor(g, src(g, s.matmul, 1)?)?;
    let dst = tensor(g, s.out)?;
    let (dtype, m, k, bytes) = weights(g, s.matmul, mem)?;
    let w = WeightMatrix::new(dtype, m, k, &bytes)?;
    let reader = OperandReader::new(g, &s.operands)?;
    let mut dotter = Dotter::new(mode.act_quant(dtype));
    for row in (0..m).rev() {
        for col in 0..x.n_rows() {
            let xc = act_column(g, &x, &s.prologue, col, mem)?;
            dotter.load(&xc)?;
            let acc = dotter.dot(&w, row, &xc)?;
            let l = col * m + row;
            let v = apply_chain(&s.epilogue, acc, &reader, mem, row, l)?;
            mem.set(&dst, dst.unravel(l), v)?;
        }
    }
    Ok(())
}

fn eval_fused_glu(g: &Graph, s: &FusedGlu, mem: &mut Memory, mode: GemvMode) -> Result<(), Error> {
    let x = tensor(g, src(g, s.gate, 1)?)?;
    let dst = tensor(g, s.out)?;
    let (dtype, m, k, gbytes) = weights(g, s.gate, mem)?;
    let (_, _, _, ubytes) = weights(g, s.up, mem)?;
    let wg = WeightMatrix::new(dtype, m, k, &gbytes)?;
    let wu = WeightMatrix::new(dtype, m, k, &ubytes)?;
    let reader = OperandReader::new(g, &s.operands)?;
    let mut dotter = Dotter::new(mode.act_quant(dtype));
    for row in (0..m).rev() {
        for col in 0..x.n_rows() {
            let xc = act_column(g, &x, &s.prologue, col, mem)?;
            dotter.load(&xc)?;
            let gate = dotter.dot(&wg, row, &xc)?;
            let up = dotter.dot(&wu, row, &xc)?;
            let l = col * m + row;
            let v = crate::element::glu(s.act, gate, up);
            let v = apply_chain(&s.epilogue, v, &reader, mem, row, l)?;
            mem.set(&dst, dst.unravel(l), v)?;
        }
    }
    Ok(())
}

fn eval_fused_fwht(g: &Graph, s: &FusedFwht, mem: &mut Memory) -> Result<(), Error> {
    let x = tensor(g, s.x)?;
    let signs = mem.read(&tensor(g, s.signs)?)?;
    let dst = tensor(g, s.matmul)?;
    let n = s.desc.n();
    let rows = x.n_elements() / n;
    let mut v = vec![0.0f32; n];
    for row in (0..rows).rev() {
        for (i, vi) in v.iter_mut().enumerate() {
            let l = row * n + i;
            *vi = s
                .desc
                .load(mem.get(&x, x.unravel(l))?, Some(&signs), row, i);
        }
        butterflies(&mut v)?;
        for (i, &vi) in v.iter().enumerate() {
            mem.set(&dst, dst.unravel(row * n + i), vi)?;
        }
    }
    Ok(())
}
