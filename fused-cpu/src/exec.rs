//! The plan executor: runs a core [`Plan`] (or a whole graph unfused) on the
//! CPU backend over [`CpuMemory`], one kernel call per step.
//!
//! Every step is one parallel region, so barriers per plan = kernel steps
//! (reshapes and views cost nothing); [`RunStats`] reports both. Reads that
//! share the destination's buffer are borrowed from the parts of the buffer
//! before and after the destination (the planner guarantees they do not
//! overlap it, except an element-wise operand aliasing it exactly, which is
//! copied first); strided reads are gathered into a packed copy.

use std::borrow::Cow;
use std::vec;
use std::vec::Vec;

use fused_core::epilogue::{Epilogue, MAX_STAGES};
use fused_core::fwht::{FwhtDesc, check_fwht_size};
use fused_core::graph::{Graph, MatHint, Node, NodeId, Op};
use fused_core::planner::{Operands, Plan, Step};
use fused_core::reference::WeightMatrix;
use fused_core::reference::eval::{GemvMode, Memory};
use fused_core::reference::gemv::GluWeights;
use fused_core::tensor::{Overlap, TensorDesc};
use fused_core::{DType, Error};

use crate::backend::{Counters, CpuBackend};

/// Buffers for the executor: 4-byte aligned, so F32 tensors at offsets that
/// are multiples of 4 can be used in place.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CpuMemory {
    words: Vec<Vec<u32>>,
    lens: Vec<usize>,
}

impl CpuMemory {
    /// Zeroed buffers of the given byte sizes.
    pub fn new(sizes: &[usize]) -> CpuMemory {
        CpuMemory {
            words: sizes.iter().map(|&n| vec![0u32; n.div_ceil(4)]).collect(),
            lens: sizes.to_vec(),
        }
    }

    /// A copy of the reference evaluator's memory.
    pub fn from_reference(mem: &Memory, n_buffers: u32) -> Result<CpuMemory, Error> {
        let mut out = CpuMemory::default();
        for b in 0..n_buffers {
            let bytes = mem.buffer(fused_core::tensor::BufferId(b))?;
            let mut w = vec![0u32; bytes.len().div_ceil(4)];
            bytemuck::cast_slice_mut::<u32, u8>(&mut w)[..bytes.len()].copy_from_slice(bytes);
            out.words.push(w);
            out.lens.push(bytes.len());
        }
        Ok(out)
    }

    /// The bytes of buffer `b`.
    pub fn bytes(&self, b: u32) -> Result<&[u8], Error> {
        let w = self
            .words
            .get(b as usize)
            .ok_or(Error::BadBuffer { buffer: b })?;
        Ok(&bytemuck::cast_slice::<u32, u8>(w)[..self.lens[b as usize]])
    }

    /// The bytes of buffer `b`, writable.
    pub fn bytes_mut(&mut self, b: u32) -> Result<&mut [u8], Error> {
        let len = *self
            .lens
            .get(b as usize)
            .ok_or(Error::BadBuffer { buffer: b })?;
        Ok(&mut bytemuck::cast_slice_mut::<u32, u8>(&mut self.words[b as usize])[..len])
    }

    /// The elements of a float tensor, packed in GGML order, as f32.
    pub fn read_f32(&self, t: &TensorDesc) -> Result<Vec<f32>, Error> {
        let bytes = self.bytes(t.buffer().0)?;
        gather_f32(bytes, t).map(Cow::into_owned)
    }
}

/// What a run did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunStats {
    /// Steps that launched a kernel (reshapes and views excluded).
    pub kernel_steps: u64,
    /// Barriers and kernel calls counted by the backend during the run.
    pub counters: Counters,
}

/// A tensor's packed bytes, borrowed when contiguous.
fn packed<'a>(bytes: &'a [u8], t: &TensorDesc) -> Result<Cow<'a, [u8]>, Error> {
    let ext = t.byte_extent();
    if ext.end > bytes.len() {
        return Err(Error::BufferTooShort {
            what: "tensor extent",
            needed: ext.end,
            actual: bytes.len(),
        });
    }
    if t.is_contiguous() {
        return Ok(Cow::Borrowed(&bytes[ext.start..ext.end]));
    }
    let rb = t.row_bytes();
    let ne = t.ne();
    let mut out = Vec::with_capacity(rb * t.n_rows());
    for r in 0..t.n_rows() {
        let at = t.element_offset([0, r % ne[1], r / ne[1] % ne[2], r / ne[1] / ne[2]]);
        if t.nb()[0] == t.dtype().block_bytes() {
            out.extend_from_slice(&bytes[at..at + rb]);
        } else {
            return Err(Error::UnsupportedDType {
                what: "executor input with strided blocks",
                dtype: t.dtype(),
            });
        }
    }
    Ok(Cow::Owned(out))
}

/// A float tensor as packed f32 values (borrowed when F32, contiguous, aligned).
fn gather_f32<'a>(bytes: &'a [u8], t: &TensorDesc) -> Result<Cow<'a, [f32]>, Error> {
    let p = packed(bytes, t)?;
    match t.dtype() {
        DType::F32 => match p {
            Cow::Borrowed(b) => match bytemuck::try_cast_slice::<u8, f32>(b) {
                Ok(f) => Ok(Cow::Borrowed(f)),
                Err(_) => Ok(Cow::Owned(
                    b.chunks_exact(4)
                        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                        .collect(),
                )),
            },
            Cow::Owned(b) => Ok(Cow::Owned(
                b.chunks_exact(4)
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect(),
            )),
        },
        DType::F16 | DType::BF16 => {
            let mut out = vec![0.0f32; t.n_elements()];
            fused_core::quant::dequantize_row(t.dtype(), &p, &mut out)?;
            Ok(Cow::Owned(out))
        }
        dtype => Err(Error::UnsupportedDType {
            what: "element-wise input",
            dtype,
        }),
    }
}

/// Runs plans and graphs on a [`CpuBackend`].
#[derive(Debug)]
pub struct Executor<'a> {
    be: &'a CpuBackend,
    mode: GemvMode,
}

/// One read of a step: raw bytes (weights) or f32 values.
enum Read<'a> {
    Bytes(Cow<'a, [u8]>),
    F32(Cow<'a, [f32]>),
}

impl Read<'_> {
    fn f32(&self) -> &[f32] {
        match self {
            Read::F32(v) => v,
            Read::Bytes(_) => &[],
        }
    }

    fn bytes(&self) -> &[u8] {
        match self {
            Read::Bytes(v) => v,
            Read::F32(_) => &[],
        }
    }
}

impl<'a> Executor<'a> {
    /// An executor on `be`, quantizing activations per `mode`.
    pub fn new(be: &'a CpuBackend, mode: GemvMode) -> Executor<'a> {
        Executor { be, mode }
    }

    /// Runs every node of `g` by itself.
    pub fn run_graph(&self, g: &Graph, mem: &mut CpuMemory) -> Result<RunStats, Error> {
        self.run(g, &Plan::unfused(g), mem)
    }

    /// Runs `plan` (made for `g`).
    pub fn run(&self, g: &Graph, plan: &Plan, mem: &mut CpuMemory) -> Result<RunStats, Error> {
        let before = self.be.counters();
        let mut kernel_steps = 0;
        for step in &plan.steps {
            if self.step(g, step, mem)? {
                kernel_steps += 1;
            }
        }
        let after = self.be.counters();
        Ok(RunStats {
            kernel_steps,
            counters: Counters {
                barriers: after.barriers - before.barriers,
                kernel_calls: after.kernel_calls - before.kernel_calls,
            },
        })
    }

    /// Runs `f` with the destination borrowed mutably and every read
    /// borrowed (or gathered) from memory.
    fn with_io(
        &self,
        mem: &mut CpuMemory,
        dst: &TensorDesc,
        reads: &[(TensorDesc, bool)],
        f: impl FnOnce(&[Read<'_>], &mut [f32]) -> Result<(), Error>,
    ) -> Result<(), Error> {
        if dst.dtype() != DType::F32 || !dst.is_contiguous() {
            return Err(Error::UnsupportedDType {
                what: "executor destination (must be contiguous F32)",
                dtype: dst.dtype(),
            });
        }
        let b = dst.buffer().0 as usize;
        let len = *mem
            .lens
            .get(b)
            .ok_or(Error::BadBuffer { buffer: b as u32 })?;
        let ext = dst.byte_extent();
        if ext.end > len {
            return Err(Error::BufferTooShort {
                what: "destination extent",
                needed: ext.end,
                actual: len,
            });
        }
        let mut words = std::mem::take(&mut mem.words[b]);
        let result = (|| {
            let all = &mut bytemuck::cast_slice_mut::<u32, u8>(&mut words)[..len];
            let (lo, rest) = all.split_at_mut(ext.start);
            let (out, hi) = rest.split_at_mut(ext.len());
            let mut owned: Vec<Read<'_>> = Vec::with_capacity(reads.len());
            for (t, as_bytes) in reads {
                let src: Cow<'_, [u8]> = if t.buffer() == dst.buffer() {
                    let e = t.byte_extent();
                    match t.overlap(dst) {
                        Overlap::Disjoint if e.end <= ext.start => packed(lo, t)?,
                        Overlap::Disjoint => {
                            // Shift the tensor to `hi`'s coordinates.
                            let shifted = TensorDesc::strided(
                                t.dtype(),
                                t.ne(),
                                t.nb(),
                                t.buffer(),
                                e.start - ext.end,
                            )?;
                            packed(hi, &shifted)?
                        }
                        Overlap::Exact => Cow::Owned(out.to_vec()),
                        Overlap::Partial => {
                            return Err(Error::AliasViolation {
                                what: "a read partially overlaps the destination",
                            });
                        }
                    }
                } else {
                    let bytes = mem.bytes(t.buffer().0)?;
                    packed(bytes, t)?
                };
                owned.push(if *as_bytes {
                    Read::Bytes(src)
                } else {
                    let f = match src {
                        Cow::Borrowed(bb) => {
                            let packed_t =
                                TensorDesc::contiguous(t.dtype(), t.ne(), t.buffer(), 0)?;
                            gather_f32(bb, &packed_t)?
                        }
                        Cow::Owned(v) => {
                            let packed_t =
                                TensorDesc::contiguous(t.dtype(), t.ne(), t.buffer(), 0)?;
                            Cow::Owned(gather_f32(&v, &packed_t)?.into_owned())
                        }
                    };
                    Read::F32(f)
                });
            }
            let out =
                bytemuck::try_cast_slice_mut::<u8, f32>(out).map_err(|_| Error::Misaligned {
                    what: "F32 destination offset",
                    align: 4,
                    value: ext.start,
                })?;
            f(&owned, out)
        })();
        mem.words[b] = words;
        result
    }

    fn operand_reads(g: &Graph, ops: &Operands) -> Result<Vec<(TensorDesc, bool)>, Error> {
        ops.iter()
            .flatten()
            .map(|id| Ok((*g.tensor(*id)?, false)))
            .collect()
    }

    /// Runs one step; `Ok(true)` when it launched a kernel.
    fn step(&self, g: &Graph, step: &Step, mem: &mut CpuMemory) -> Result<bool, Error> {
        match step {
            Step::Node(id) => self.node(g, *id, mem),
            Step::Gemv(s) => {
                let mm = g.node(s.matmul)?;
                let (w, x) = (src(g, mm, 0)?, src(g, mm, 1)?);
                let mut reads = vec![(w, true), (x, false)];
                reads.extend(Self::operand_reads(g, &s.operands)?);
                let dst = *g.tensor(s.out)?;
                self.with_io(mem, &dst, &reads, |r, y| {
                    self.gemv(&w, &r[0], &r[1], x.n_rows(), &s.epilogue, &r[2..], y)
                })?;
                Ok(true)
            }
            Step::GluGemv(s) => {
                let (gn, un) = (g.node(s.gate)?, g.node(s.up)?);
                let (wg, wu, x) = (src(g, gn, 0)?, src(g, un, 0)?, src(g, gn, 1)?);
                let mut reads = vec![(wg, true), (wu, true), (x, false)];
                reads.extend(Self::operand_reads(g, &s.operands)?);
                let dst = *g.tensor(s.out)?;
                let (m, k, n) = (wg.ne()[1], wg.ne()[0], x.n_rows());
                self.with_io(mem, &dst, &reads, |r, y| {
                    let pair = GluWeights::new(
                        WeightMatrix::new(wg.dtype(), m, k, r[0].bytes())?,
                        WeightMatrix::new(wu.dtype(), m, k, r[1].bytes())?,
                    )?;
                    let ops: Vec<&[f32]> = r[3..].iter().map(Read::f32).collect();
                    let bound = s.epilogue.bind(&slots(&s.epilogue, &ops), m, n)?;
                    let mode = self.mode.act_quant(wg.dtype());
                    self.be
                        .gemv_glu(&pair, s.act, r[2].f32(), n, mode, &bound, y)
                })?;
                Ok(true)
            }
            Step::SignedFwht(s) => {
                let (x, signs) = (*g.tensor(s.x)?, *g.tensor(s.signs)?);
                let dst = *g.tensor(s.matmul)?;
                self.with_io(mem, &dst, &[(x, false), (signs, false)], |r, y| {
                    self.be.fwht(&s.desc, r[0].f32(), Some(r[1].f32()), y)
                })?;
                Ok(true)
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn gemv(
        &self,
        w: &TensorDesc,
        wr: &Read<'_>,
        xr: &Read<'_>,
        n_cols: usize,
        epilogue: &Epilogue,
        operands: &[Read<'_>],
        y: &mut [f32],
    ) -> Result<(), Error> {
        let (k, m) = (w.ne()[0], w.ne()[1]);
        let wm = WeightMatrix::new(w.dtype(), m, k, wr.bytes())?;
        let ops: Vec<&[f32]> = operands.iter().map(Read::f32).collect();
        let bound = epilogue.bind(&slots(epilogue, &ops), m, n_cols)?;
        self.be.gemv(
            &wm,
            xr.f32(),
            n_cols,
            self.mode.act_quant(w.dtype()),
            &bound,
            y,
        )
    }

    fn node(&self, g: &Graph, id: NodeId, mem: &mut CpuMemory) -> Result<bool, Error> {
        let node = g.node(id)?;
        let dst = *node.tensor();
        match node.op() {
            Op::Input | Op::Reshape | Op::View => return Ok(false),
            Op::MulMat(hint) => {
                let (w, x) = (src(g, node, 0)?, src(g, node, 1)?);
                let n = w.ne()[0];
                if hint == MatHint::Hadamard && check_fwht_size(n).is_ok() {
                    let d = FwhtDesc::new(n)?;
                    self.with_io(mem, &dst, &[(x, false)], |r, y| {
                        self.be.fwht(&d, r[0].f32(), None, y)
                    })?;
                } else {
                    self.with_io(mem, &dst, &[(w, true), (x, false)], |r, y| {
                        self.gemv(&w, &r[0], &r[1], x.n_rows(), &Epilogue::NONE, &[], y)
                    })?;
                }
            }
            Op::Add | Op::Mul | Op::Glu(_) => {
                let (a, b) = (src(g, node, 0)?, src(g, node, 1)?);
                self.with_io(mem, &dst, &[(a, false), (b, false)], |r, y| {
                    let bv = broadcast(r[1].f32(), b.ne(), a.ne());
                    match node.op() {
                        Op::Add => self.be.add(r[0].f32(), &bv, y),
                        Op::Mul => self.be.mul(r[0].f32(), &bv, y),
                        Op::Glu(act) => self.be.glu(act, r[0].f32(), &bv, y),
                        _ => Ok(()),
                    }
                })?;
            }
            Op::AddRowBias => {
                let (a, b) = (src(g, node, 0)?, src(g, node, 1)?);
                self.with_io(mem, &dst, &[(a, false), (b, false)], |r, y| {
                    self.be.add_row_bias(r[0].f32(), r[1].f32(), y)
                })?;
            }
            Op::Unary(act) => {
                let a = src(g, node, 0)?;
                self.with_io(mem, &dst, &[(a, false)], |r, y| {
                    self.be.unary(act, r[0].f32(), y)
                })?;
            }
            Op::Other(_) => match node.src(0) {
                None => return Ok(false),
                Some(s) => {
                    let a = *g.tensor(s)?;
                    self.with_io(mem, &dst, &[(a, false)], |r, y| self.be.copy(r[0].f32(), y))?;
                }
            },
        }
        Ok(true)
    }
}

fn src(g: &Graph, node: &Node, i: usize) -> Result<TensorDesc, Error> {
    let id = node.src(i).ok_or(Error::BadNode { index: usize::MAX })?;
    Ok(*g.tensor(id)?)
}

/// The operand slices in slot order (the planner numbers slots in order).
fn slots<'s>(e: &Epilogue, ops: &[&'s [f32]]) -> [&'s [f32]; MAX_STAGES] {
    let mut out: [&[f32]; MAX_STAGES] = [&[]; MAX_STAGES];
    for (o, v) in out.iter_mut().zip(ops).take(e.n_operands()) {
        *o = v;
    }
    out
}

/// `b` (shape `bne`) repeated GGML-style to shape `ane`.
fn broadcast<'a>(b: &'a [f32], bne: [usize; 4], ane: [usize; 4]) -> Cow<'a, [f32]> {
    if bne == ane {
        return Cow::Borrowed(b);
    }
    let n: usize = ane.iter().product();
    let mut out = Vec::with_capacity(n);
    for l in 0..n {
        let i0 = l % ane[0];
        let r = l / ane[0];
        let (i1, r) = (r % ane[1], r / ane[1]);
        let (i2, i3) = (r % ane[2], r / ane[2]);
        let at = (i0 % bne[0])
            + bne[0] * ((i1 % bne[1]) + bne[1] * ((i2 % bne[2]) + bne[2] * (i3 % bne[3])));
        out.push(b[at]);
    }
    Cow::Owned(out)
}
