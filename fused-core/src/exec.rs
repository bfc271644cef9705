//! The plan executor every backend shares: runs a [`Plan`] (or a whole graph
//! unfused) step by step over host byte buffers, one kernel call per step,
//! through the host-slice kernels a backend offers ([`StepKernels`]).
//!
//! The executor does what does not depend on the backend: it finds each
//! step's inputs in memory, borrows them in place where it can (contiguous
//! F32 at a 4-byte-aligned address) or gathers them into a packed copy
//! (strided tensors, F16/BF16 widened to f32), repeats a broadcast operand
//! GGML-style, orders the epilogue operands by slot, and hands the backend
//! f32 slices and packed weight rows. Reads that share the destination's
//! buffer are borrowed from the parts of the buffer before and after the
//! destination (the planner guarantees they do not overlap it, except an
//! element-wise operand aliasing it exactly, which is copied first).
//!
//! Memory is anything that implements [`Buffers`]: the reference
//! evaluator's [`Memory`](crate::memory::Memory) does, and so do backends' own host buffers.
//! A backend that lacks a kernel for a valid input (a weight format, an
//! activation mode, a column count) says so in
//! [`StepKernels::supports_gemv`]; the executor then returns
//! [`Error::Unsupported`] before anything runs for that step, and
//! [`Executor::check`] asks the same question of a whole plan up front.

use alloc::borrow::Cow;
use alloc::vec;
use alloc::vec::Vec;

use crate::DType;
use crate::acts::{ActQuant, GemvMode};
use crate::decode::{self, AttentionShape, RopeMode};
use crate::element::Activation;
use crate::epilogue::{Epilogue, MAX_STAGES};
use crate::error::{Error, Unsupported, check_len};
use crate::fwht::FwhtDesc;
use crate::graph::Graph;
use crate::job::GemvJob;
use crate::lower::{
    BinaryOp, Broadcast, Command, CommandSink, GemvCommand, NormLoad, lower, lower_into,
};
use crate::memory::f32_le;
use crate::memory::{Buffers, gather_f32, packed};
use crate::norm::Eps;
use crate::planner::{Operands, Plan, Step};
use crate::tensor::{Overlap, TensorDesc};
use crate::weights::WeightMatrix;

/// Work and synchronisation a backend counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Synchronisation points: parallel regions joined (CPU), or waits for
    /// the device to finish a dispatch (GPU host-slice calls).
    pub barriers: u64,
    /// Kernel invocations (one per GEMV, FWHT or element-wise call).
    pub kernel_calls: u64,
}

/// What a run did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunStats {
    /// Steps that launched a kernel (reshapes and views excluded).
    pub kernel_steps: u64,
    /// The backend's counters over the run (zero where it counts nothing).
    pub counters: Counters,
}

/// The host-slice kernels a plan step needs. Every slice is packed f32
/// (GGML order; several activation columns are column-major, `x[c·K..]`,
/// `y[c·M..]`), weights are packed rows. A backend validates its own inputs
/// and returns its own error type, which every core [`Error`] converts into.
pub trait StepKernels {
    /// The backend's error.
    type Error: From<Error>;

    /// Whether the backend has a GEMV kernel for weights of `dtype` with
    /// activations fed per `mode`, for `n_cols` columns (default: all).
    fn supports_gemv(
        &self,
        dtype: DType,
        mode: ActQuant,
        n_cols: usize,
    ) -> Result<(), Unsupported> {
        let _ = (dtype, mode, n_cols);
        Ok(())
    }

    /// Whether the backend has the RMS-norm kernels ([`StepKernels::rms_norm`]):
    /// by default not, as [`Unsupported::Operation`]`("rms_norm")`.
    fn supports_rms_norm(&self) -> Result<(), Unsupported> {
        Err(Unsupported::Operation(crate::lower::RMS_NORM))
    }

    /// The backend's counters so far (default: none counted). The executor
    /// reports the difference over a run.
    fn counters(&self) -> Counters {
        Counters::default()
    }

    /// `y = epilogue(W · x)`, or the gated form, as `job` says
    /// ([`GemvJob`]: weights, activation columns and mode, epilogue and its
    /// operands).
    fn gemv(&self, job: &GemvJob<'_, WeightMatrix<'_>>, y: &mut [f32]) -> Result<(), Self::Error>;

    /// The (signed) FWHT of every row of `x`.
    fn fwht(
        &self,
        desc: &FwhtDesc,
        x: &[f32],
        signs: Option<&[f32]>,
        y: &mut [f32],
    ) -> Result<(), Self::Error>;

    /// `y = a + b` (equal lengths).
    fn add(&self, a: &[f32], b: &[f32], y: &mut [f32]) -> Result<(), Self::Error>;

    /// `y = a · b` (equal lengths).
    fn mul(&self, a: &[f32], b: &[f32], y: &mut [f32]) -> Result<(), Self::Error>;

    /// `y = act(gate) · up`.
    fn glu(
        &self,
        act: Activation,
        gate: &[f32],
        up: &[f32],
        y: &mut [f32],
    ) -> Result<(), Self::Error>;

    /// `y = act(a)`.
    fn unary(&self, act: Activation, a: &[f32], y: &mut [f32]) -> Result<(), Self::Error>;

    /// `y[i] = a[i] + bias[i mod bias.len()]` (column-major, `bias.len()` rows).
    fn add_row_bias(&self, a: &[f32], bias: &[f32], y: &mut [f32]) -> Result<(), Self::Error>;

    /// `y = a` (stands in for ops the core does not model).
    fn copy(&self, a: &[f32], y: &mut [f32]) -> Result<(), Self::Error>;

    /// `y = rms_norm(x, eps)` per column of `k` values, times `gamma`
    /// where given, exactly as [`crate::norm::rms_norm`] computes it.
    /// By default refused ([`StepKernels::supports_rms_norm`]).
    fn rms_norm(
        &self,
        k: usize,
        eps: f32,
        x: &[f32],
        gamma: Option<&[f32]>,
        y: &mut [f32],
    ) -> Result<(), Self::Error> {
        let _ = (k, eps, x, gamma, y);
        Err(Error::Unsupported(
            self.supports_rms_norm()
                .err()
                .unwrap_or(Unsupported::Operation(crate::lower::RMS_NORM)),
        )
        .into())
    }

    // The decode ops ([`crate::decode`]): by default the core's definitions
    // themselves on the calling thread; a backend may run heads in parallel,
    // each computed exactly as the definition does.

    /// RoPE of every head of `x` with the angles of one table `row`
    /// ([`crate::decode::rope`]).
    fn rope(
        &self,
        mode: RopeMode,
        head_dim: usize,
        x: &[f32],
        row: &[f32],
        y: &mut [f32],
    ) -> Result<(), Self::Error> {
        Ok(decode::rope(mode, head_dim, x, row, y)?)
    }

    /// Attention over the first `len` rows of `k` and `v`
    /// ([`crate::decode::attention`]).
    fn attention(
        &self,
        shape: &AttentionShape,
        q: &[f32],
        k: &[f32],
        v: &[f32],
        len: usize,
        out: &mut [f32],
    ) -> Result<(), Self::Error> {
        let mut scores = vec![0.0f32; len];
        Ok(decode::attention(shape, q, k, v, len, &mut scores, out)?)
    }

    /// `y[c] = argmax` of each column of `n` values of `x`
    /// ([`crate::decode::argmax`]).
    fn argmax(&self, n: usize, x: &[f32], y: &mut [f32]) -> Result<(), Self::Error> {
        check_len("argmax input", y.len() * n, x.len())?;
        for (o, col) in y.iter_mut().zip(x.chunks_exact(n.max(1))) {
            *o = decode::argmax(col) as f32;
        }
        Ok(())
    }
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

/// Runs plans and graphs through a backend's [`StepKernels`].
#[derive(Debug)]
pub struct Executor<'k, K: ?Sized> {
    kernels: &'k K,
    mode: GemvMode,
}

impl<'k, K: StepKernels + ?Sized> Executor<'k, K> {
    /// An executor on `kernels`, feeding GEMV activations per `mode`.
    pub fn new(kernels: &'k K, mode: GemvMode) -> Executor<'k, K> {
        Executor { kernels, mode }
    }

    /// Runs every node of `g` by itself.
    pub fn run_graph<M: Buffers>(&self, g: &Graph, mem: &mut M) -> Result<RunStats, K::Error> {
        self.run(g, &Plan::unfused(g), mem)
    }

    /// Runs `plan` (made for `g`) over `mem`.
    pub fn run<M: Buffers>(
        &self,
        g: &Graph,
        plan: &Plan,
        mem: &mut M,
    ) -> Result<RunStats, K::Error> {
        let before = self.kernels.counters();
        let mut kernel_steps = 0;
        for step in &plan.steps {
            if self.step(g, step, mem)? {
                kernel_steps += 1;
            }
        }
        let after = self.kernels.counters();
        Ok(RunStats {
            kernel_steps,
            counters: Counters {
                barriers: after.barriers.saturating_sub(before.barriers),
                kernel_calls: after.kernel_calls.saturating_sub(before.kernel_calls),
            },
        })
    }

    /// Whether the backend has a kernel for every GEMV of `plan` (made for
    /// `g`): the first one it lacks, as [`Error::Unsupported`], or a
    /// malformed graph's error. Nothing runs.
    pub fn check(&self, g: &Graph, plan: &Plan) -> Result<(), Error> {
        for step in &plan.steps {
            match lower(g, step)? {
                Command::Gemv(GemvCommand { w, x, prologue, .. }) => {
                    self.supports(&w, &x)?;
                    if prologue.is_some() {
                        self.kernels.supports_rms_norm()?;
                    }
                }
                Command::RmsNorm { .. } => self.kernels.supports_rms_norm()?,
                _ => {}
            }
        }
        Ok(())
    }

    fn supports(&self, w: &TensorDesc, x: &TensorDesc) -> Result<(), Error> {
        let mode = self.mode.act_quant(w.dtype());
        Ok(self.kernels.supports_gemv(w.dtype(), mode, x.n_rows())?)
    }

    /// Runs `f` with the destination borrowed mutably and every read
    /// borrowed (or gathered) from memory.
    fn with_io<M: Buffers>(
        &self,
        mem: &mut M,
        dst: &TensorDesc,
        reads: &[(TensorDesc, bool)],
        f: impl FnOnce(&[Read<'_>], &mut [f32]) -> Result<(), K::Error>,
    ) -> Result<(), K::Error> {
        if dst.dtype() != DType::F32 || !dst.is_contiguous() {
            return Err(Error::UnsupportedDType {
                what: "executor destination (must be contiguous F32)",
                dtype: dst.dtype(),
            }
            .into());
        }
        let ext = dst.byte_extent();
        mem.with_buffer_mut(dst.buffer(), |all, mem| {
            if ext.end > all.len() {
                return Err(Error::BufferTooShort {
                    what: "destination extent",
                    needed: ext.end,
                    actual: all.len(),
                }
                .into());
            }
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
                            }
                            .into());
                        }
                    }
                } else {
                    packed(mem.buffer(t.buffer())?, t)?
                };
                owned.push(if *as_bytes {
                    Read::Bytes(src)
                } else {
                    let packed_t = TensorDesc::contiguous(t.dtype(), t.ne(), t.buffer(), 0)?;
                    Read::F32(match src {
                        Cow::Borrowed(bb) => gather_f32(bb, &packed_t)?,
                        Cow::Owned(v) => Cow::Owned(gather_f32(&v, &packed_t)?.into_owned()),
                    })
                });
            }
            match bytemuck::try_cast_slice_mut::<u8, f32>(out) {
                Ok(y) => f(&owned, y),
                Err(_) => {
                    // A buffer that is not 4-byte aligned in memory: compute
                    // into an aligned copy and store its bytes.
                    let mut y = f32_le(out);
                    f(&owned, &mut y)?;
                    for (o, v) in out.chunks_exact_mut(4).zip(&y) {
                        o.copy_from_slice(&v.to_le_bytes());
                    }
                    Ok(())
                }
            }
        })?
    }

    fn operand_reads(g: &Graph, ops: &Operands) -> Result<Vec<(TensorDesc, bool)>, Error> {
        ops.iter()
            .flatten()
            .map(|id| Ok((*g.tensor(*id)?, false)))
            .collect()
    }

    /// Runs one step; `Ok(true)` when it launched a kernel.
    fn step<M: Buffers>(&self, g: &Graph, step: &Step, mem: &mut M) -> Result<bool, K::Error> {
        lower_into(g, step, &mut HostRun { exec: self, mem })
    }
}

/// One step run on the host: the executor and the memory it runs over.
struct HostRun<'e, 'k, 'm, K: ?Sized, M> {
    exec: &'e Executor<'k, K>,
    mem: &'m mut M,
}

impl<K: StepKernels + ?Sized, M: Buffers> HostRun<'_, '_, '_, K, M> {
    /// A GEMV step, its activations read from `x` or, with a prologue,
    /// normalised from the prologue's input into a scratch column block
    /// once (by the backend's [`StepKernels::rms_norm`]) and fed to the GEMV
    /// as the mul's output would be.
    #[allow(clippy::too_many_arguments)]
    fn gemv_step(
        &mut self,
        g: &Graph,
        prologue: Option<&NormLoad>,
        w: &TensorDesc,
        up: Option<(&TensorDesc, Activation)>,
        x: &TensorDesc,
        epilogue: &Epilogue,
        operands: &Operands,
        out: &TensorDesc,
    ) -> Result<(), K::Error> {
        let e = self.exec;
        e.supports(w, x)?;
        let mut reads = vec![(*w, true)];
        reads.extend(up.map(|(u, _)| (*u, true)));
        match prologue {
            None => reads.push((*x, false)),
            Some(p) => reads.extend([(p.x, false), (p.gamma, false)]),
        }
        let ops_at = reads.len();
        reads.extend(Executor::<K>::operand_reads(g, operands)?);
        let n = x.n_rows();
        let (m, kk) = (w.ne()[1], w.ne()[0]);
        let xi = if up.is_some() { 2 } else { 1 };
        e.with_io(self.mem, out, &reads, |r, y| {
            let normed;
            let acts: &[f32] = match prologue {
                None => r[xi].f32(),
                Some(p) => {
                    let mut v = vec![0.0f32; x.n_elements()];
                    e.kernels.rms_norm(
                        kk,
                        p.eps.get(),
                        r[xi].f32(),
                        Some(r[xi + 1].f32()),
                        &mut v,
                    )?;
                    normed = v;
                    &normed
                }
            };
            let ops: Vec<&[f32]> = r[ops_at..].iter().map(Read::f32).collect();
            let slots = slots(epilogue, &ops);
            let mode = e.mode.act_quant(w.dtype());
            let gate = WeightMatrix::new(w.dtype(), m, kk, r[0].bytes())?;
            match up {
                None => {
                    let job = GemvJob::new(&gate, acts, n)
                        .with_mode(mode)
                        .with_epilogue(*epilogue, &slots);
                    e.kernels.gemv(&job, y)
                }
                Some((wu, act)) => {
                    let up = WeightMatrix::new(wu.dtype(), m, kk, r[1].bytes())?;
                    let job = GemvJob::gated(&gate, &up, act, acts, n)
                        .with_mode(mode)
                        .with_epilogue(*epilogue, &slots);
                    e.kernels.gemv(&job, y)
                }
            }
        })
    }
}

impl<K: StepKernels + ?Sized, M: Buffers> CommandSink for HostRun<'_, '_, '_, K, M> {
    type Error = K::Error;

    fn rope(
        &mut self,
        mode: RopeMode,
        x: &TensorDesc,
        table: &TensorDesc,
        pos: &TensorDesc,
        out: &TensorDesc,
    ) -> Result<(), K::Error> {
        let k = self.exec.kernels;
        let [d, rows, _, _] = table.ne();
        let reads = [(*x, false), (*table, false), (*pos, false)];
        self.exec.with_io(self.mem, out, &reads, |r, y| {
            let p = position_of(&r[2], rows);
            k.rope(mode, d, r[0].f32(), &r[1].f32()[p * d..(p + 1) * d], y)
        })
    }

    fn set_row(
        &mut self,
        dst: &TensorDesc,
        row: &TensorDesc,
        pos: &TensorDesc,
        out: &TensorDesc,
    ) -> Result<(), K::Error> {
        let in_place = dst.overlap(out) == Overlap::Exact;
        let mut reads = vec![(*row, false), (*pos, false)];
        if !in_place {
            reads.push((*dst, false));
        }
        let rows = dst.ne()[1];
        self.exec.with_io(self.mem, out, &reads, |r, y| {
            if !in_place {
                y.copy_from_slice(r[2].f32());
            }
            Ok(decode::set_row(y, r[0].f32(), position_of(&r[1], rows))?)
        })
    }

    fn attention(
        &mut self,
        shape: &AttentionShape,
        q: &TensorDesc,
        kt: &TensorDesc,
        vt: &TensorDesc,
        pos: &TensorDesc,
        out: &TensorDesc,
    ) -> Result<(), K::Error> {
        let k = self.exec.kernels;
        let rows = kt.ne()[2];
        let reads = [(*q, false), (*kt, false), (*vt, false), (*pos, false)];
        self.exec.with_io(self.mem, out, &reads, |r, y| {
            let len = position_of(&r[3], rows) + 1;
            k.attention(shape, r[0].f32(), r[1].f32(), r[2].f32(), len, y)
        })
    }

    fn argmax(&mut self, x: &TensorDesc, out: &TensorDesc) -> Result<(), K::Error> {
        let k = self.exec.kernels;
        let n = x.ne()[0];
        self.exec.with_io(self.mem, out, &[(*x, false)], |r, y| {
            k.argmax(n, r[0].f32(), y)
        })
    }

    fn gemv(
        &mut self,
        g: &Graph,
        w: &TensorDesc,
        up: Option<(&TensorDesc, Activation)>,
        x: &TensorDesc,
        epilogue: &Epilogue,
        operands: &Operands,
        out: &TensorDesc,
    ) -> Result<(), K::Error> {
        self.gemv_step(g, None, w, up, x, epilogue, operands, out)
    }

    fn norm_gemv(
        &mut self,
        g: &Graph,
        prologue: &NormLoad,
        w: &TensorDesc,
        up: Option<(&TensorDesc, Activation)>,
        x: &TensorDesc,
        epilogue: &Epilogue,
        operands: &Operands,
        out: &TensorDesc,
    ) -> Result<(), K::Error> {
        self.exec
            .kernels
            .supports_rms_norm()
            .map_err(Error::Unsupported)?;
        self.gemv_step(g, Some(prologue), w, up, x, epilogue, operands, out)
    }

    fn fwht(
        &mut self,
        desc: &FwhtDesc,
        x: &TensorDesc,
        signs: Option<&TensorDesc>,
        out: &TensorDesc,
    ) -> Result<(), K::Error> {
        let mut reads = vec![(*x, false)];
        reads.extend(signs.map(|s| (*s, false)));
        let k = self.exec.kernels;
        self.exec.with_io(self.mem, out, &reads, |r, y| {
            k.fwht(desc, r[0].f32(), r.get(1).map(Read::f32), y)
        })
    }

    fn binary(
        &mut self,
        op: BinaryOp,
        _: Broadcast,
        a: &TensorDesc,
        b: &TensorDesc,
        out: &TensorDesc,
    ) -> Result<(), K::Error> {
        let k = self.exec.kernels;
        self.exec
            .with_io(self.mem, out, &[(*a, false), (*b, false)], |r, y| {
                let bv = broadcast(r[1].f32(), b.ne(), a.ne());
                match op {
                    BinaryOp::Add => k.add(r[0].f32(), &bv, y),
                    BinaryOp::Mul => k.mul(r[0].f32(), &bv, y),
                    BinaryOp::Glu(act) => k.glu(act, r[0].f32(), &bv, y),
                }
            })
    }

    fn add_row_bias(
        &mut self,
        a: &TensorDesc,
        bias: &TensorDesc,
        _: usize,
        out: &TensorDesc,
    ) -> Result<(), K::Error> {
        let k = self.exec.kernels;
        self.exec
            .with_io(self.mem, out, &[(*a, false), (*bias, false)], |r, y| {
                k.add_row_bias(r[0].f32(), r[1].f32(), y)
            })
    }

    fn unary(&mut self, act: Activation, a: &TensorDesc, out: &TensorDesc) -> Result<(), K::Error> {
        let k = self.exec.kernels;
        self.exec.with_io(self.mem, out, &[(*a, false)], |r, y| {
            k.unary(act, r[0].f32(), y)
        })
    }

    fn copy(&mut self, a: &TensorDesc, out: &TensorDesc) -> Result<(), K::Error> {
        let k = self.exec.kernels;
        self.exec
            .with_io(self.mem, out, &[(*a, false)], |r, y| k.copy(r[0].f32(), y))
    }

    fn rms_norm(&mut self, eps: Eps, x: &TensorDesc, out: &TensorDesc) -> Result<(), K::Error> {
        let k = self.exec.kernels;
        k.supports_rms_norm().map_err(Error::Unsupported)?;
        let n = x.ne()[0];
        self.exec.with_io(self.mem, out, &[(*x, false)], |r, y| {
            k.rms_norm(n, eps.get(), r[0].f32(), None, y)
        })
    }
}

/// The row a position read addresses among `rows` rows.
fn position_of(r: &Read<'_>, rows: usize) -> usize {
    decode::position(r.f32().first().copied().unwrap_or(0.0), rows)
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

#[cfg(test)]
mod tests {
    use core::cell::Cell;

    use super::*;
    use crate::element::glu;
    use crate::graph::{NodeId, Place};
    use crate::memory::Memory;
    use crate::planner::plan;
    use crate::reference::eval::{eval_graph, eval_plan};
    use crate::tensor::BufferId;

    /// The core's reference arithmetic as a kernel set, counting calls and
    /// refusing the weight formats in `refuse`.
    struct RefKernels {
        calls: Cell<u64>,
        refuse: Option<DType>,
        no_norm: bool,
    }

    impl RefKernels {
        fn new(refuse: Option<DType>) -> RefKernels {
            RefKernels {
                calls: Cell::new(0),
                refuse,
                no_norm: false,
            }
        }

        fn call(&self) {
            self.calls.set(self.calls.get() + 1);
        }

        fn each(&self, y: &mut [f32], f: impl Fn(usize) -> f32) -> Result<(), Error> {
            self.call();
            for (i, v) in y.iter_mut().enumerate() {
                *v = f(i);
            }
            Ok(())
        }
    }

    impl StepKernels for RefKernels {
        type Error = Error;

        fn supports_gemv(&self, d: DType, _: ActQuant, _: usize) -> Result<(), Unsupported> {
            match self.refuse {
                Some(r) if r == d => Err(Unsupported::WeightFormat(d)),
                _ => Ok(()),
            }
        }

        fn counters(&self) -> Counters {
            Counters {
                barriers: self.calls.get(),
                kernel_calls: self.calls.get(),
            }
        }

        fn gemv(&self, job: &GemvJob<'_, WeightMatrix<'_>>, y: &mut [f32]) -> Result<(), Error> {
            self.call();
            crate::reference::gemv::gemv_job(job, y)
        }

        fn fwht(
            &self,
            d: &FwhtDesc,
            x: &[f32],
            s: Option<&[f32]>,
            y: &mut [f32],
        ) -> Result<(), Error> {
            self.call();
            crate::fwht::fwht(d, x, s, y)
        }

        fn add(&self, a: &[f32], b: &[f32], y: &mut [f32]) -> Result<(), Error> {
            self.each(y, |i| a[i] + b[i])
        }

        fn mul(&self, a: &[f32], b: &[f32], y: &mut [f32]) -> Result<(), Error> {
            self.each(y, |i| a[i] * b[i])
        }

        fn glu(&self, act: Activation, g: &[f32], u: &[f32], y: &mut [f32]) -> Result<(), Error> {
            self.each(y, |i| glu(act, g[i], u[i]))
        }

        fn unary(&self, act: Activation, a: &[f32], y: &mut [f32]) -> Result<(), Error> {
            self.each(y, |i| act.apply(a[i]))
        }

        fn add_row_bias(&self, a: &[f32], b: &[f32], y: &mut [f32]) -> Result<(), Error> {
            self.each(y, |i| a[i] + b[i % b.len()])
        }

        fn copy(&self, a: &[f32], y: &mut [f32]) -> Result<(), Error> {
            self.each(y, |i| a[i])
        }

        fn supports_rms_norm(&self) -> Result<(), Unsupported> {
            if self.no_norm {
                return Err(Unsupported::Operation(crate::lower::RMS_NORM));
            }
            Ok(())
        }

        fn rms_norm(
            &self,
            k: usize,
            eps: f32,
            x: &[f32],
            gamma: Option<&[f32]>,
            y: &mut [f32],
        ) -> Result<(), Error> {
            self.call();
            crate::norm::rms_norm(k, eps, x, gamma, y)
        }
    }

    /// `out = silu(W·x) + r` written over `r`, then `glu(silu)(Wg·x, Wu·x)
    /// · m` and a signed FWHT of `x`, with Q8_0 weights in buffer 0 and
    /// everything else in buffer 1 (in-place and same-buffer reads).
    fn graph() -> Result<(Graph, Vec<NodeId>, Memory), Error> {
        let (k, m) = (64, 8);
        let rb = DType::Q8_0.row_bytes(k)?;
        let mut g = Graph::new();
        let t = |ne, b, off| TensorDesc::contiguous(DType::F32, ne, BufferId(b), off);
        let wdesc = |off| TensorDesc::contiguous(DType::Q8_0, [k, m, 1, 1], BufferId(0), off);
        let w = g.input(wdesc(0)?)?;
        let wg = g.input(wdesc(m * rb)?)?;
        let wu = g.input(wdesc(2 * m * rb)?)?;
        let x = g.input(t([k, 1, 1, 1], 1, 0)?)?;
        let r = g.input(t([m, 1, 1, 1], 1, 256)?)?;
        let mu = g.input(t([m, 1, 1, 1], 1, 288)?)?;
        let signs = g.input(t([k, 1, 1, 1], 1, 1536)?)?;
        let y = g.mul_mat(w, x, Place::at(1, 512))?;
        let a = g.unary(Activation::Silu, y, Place::at(1, 544))?;
        let out = g.add(a, r, Place::at(1, 256))?;
        let gate = g.mul_mat(wg, x, Place::at(1, 576))?;
        let up = g.mul_mat(wu, x, Place::at(1, 608))?;
        let h = g.glu(Activation::Silu, gate, up, Place::at(1, 640))?;
        let out2 = g.mul(h, mu, Place::at(1, 672))?;
        let sx = g.mul(x, signs, Place::at(1, 768))?;
        let hd = TensorDesc::contiguous(DType::F32, [k, k, 1, 1], BufferId(2), 0)?;
        let hm = g.input(hd)?;
        let out3 = g.mul_mat_hadamard(hm, sx, Place::at(1, 1024))?;
        for o in [out, out2, out3] {
            g.mark_output(o)?;
        }
        let mut mem = Memory::new(&[3 * m * rb, 2048, 4 * k * k]);
        let vals = |n: usize, s: usize| -> Vec<f32> {
            (0..n).map(|i| ((i * s) % 17) as f32 / 8.0 - 1.0).collect()
        };
        let wv = vals(3 * m * k, 11);
        crate::quant::quantize_row(DType::Q8_0, &wv, mem.buffer_mut(BufferId(0))?)?;
        mem.write(g.tensor(x)?, &vals(k, 3))?;
        mem.write(g.tensor(r)?, &vals(m, 5))?;
        mem.write(g.tensor(mu)?, &vals(m, 7))?;
        let sv: Vec<f32> = (0..k)
            .map(|i| if i % 3 == 0 { -1.0 } else { 1.0 })
            .collect();
        mem.write(g.tensor(signs)?, &sv)?;
        Ok((g, vec![out, out2, out3], mem))
    }

    #[test]
    #[cfg_attr(miri, ignore = "whole graphs: minutes under Miri, run natively")]
    fn executor_over_reference_memory_equals_the_evaluators() -> Result<(), Error> {
        let (g, outs, mem) = graph()?;
        let p = plan(&g);
        assert_eq!(p.fused_steps(), 3, "{p:?}");
        for mode in [GemvMode::F32, GemvMode::Ggml] {
            let k = RefKernels::new(None);
            let ex = Executor::new(&k, mode);
            let (mut want_u, mut want_f) = (mem.clone(), mem.clone());
            eval_graph(&g, &mut want_u, mode)?;
            eval_plan(&g, &p, &mut want_f, mode)?;
            let (mut got_u, mut got_f) = (mem.clone(), mem.clone());
            let su = ex.run_graph(&g, &mut got_u)?;
            let sf = ex.run(&g, &p, &mut got_f)?;
            for o in &outs {
                let t = g.tensor(*o)?;
                assert_eq!(got_u.read(t)?, want_u.read(t)?);
                assert_eq!(got_f.read(t)?, want_f.read(t)?);
                assert_eq!(got_f.read(t)?, got_u.read(t)?);
            }
            assert_eq!(sf.kernel_steps as usize, p.kernel_steps(&g));
            assert_eq!(sf.counters.kernel_calls, sf.kernel_steps);
            assert!(sf.counters.barriers < su.counters.barriers, "{sf:?} {su:?}");
        }
        Ok(())
    }

    #[test]
    fn unsupported_weights_are_refused_before_anything_runs() -> Result<(), Error> {
        let (g, _, mem) = graph()?;
        let p = plan(&g);
        let k = RefKernels::new(Some(DType::Q8_0));
        let ex = Executor::new(&k, GemvMode::Ggml);
        let want = Err(Error::Unsupported(Unsupported::WeightFormat(DType::Q8_0)));
        assert_eq!(ex.check(&g, &p), want);
        assert_eq!(ex.check(&g, &Plan::unfused(&g)), want);
        let mut m = mem.clone();
        assert_eq!(ex.run(&g, &p, &mut m).map(|_| ()), want);
        assert_eq!(m, mem, "the refused first step wrote nothing");
        assert_eq!(k.calls.get(), 0);
        let ok = RefKernels::new(Some(DType::Q4_0));
        assert_eq!(Executor::new(&ok, GemvMode::Ggml).check(&g, &p), Ok(()));
        Ok(())
    }

    /// `rms_norm` of a strided 3-column input (gathered), one in place on
    /// a dense input, through the executor and the evaluator; a kernel set
    /// without the norm refuses both before anything runs.
    #[test]
    fn rms_norm_runs_through_the_executor() -> Result<(), Error> {
        let k = 40;
        let mut g = Graph::new();
        let xs = TensorDesc::strided(
            DType::F32,
            [k, 3, 1, 1],
            [4, 4 * 48, 4 * 48 * 3, 4 * 48 * 3],
            BufferId(0),
            0,
        )?;
        let x = g.input(xs)?;
        let xd = g.input(TensorDesc::contiguous(
            DType::F32,
            [k, 2, 1, 1],
            BufferId(1),
            0,
        )?)?;
        let a = g.rms_norm(x, 1e-5, Place::at(1, 1024))?;
        let b = g.rms_norm(xd, 0.0, Place::at(1, 0))?;
        g.mark_output(a)?;
        g.mark_output(b)?;
        let mut mem = Memory::new(&[4 * 48 * 3, 2048]);
        let v: Vec<f32> = (0..48 * 3)
            .map(|i| ((i * 7) % 23) as f32 / 5.0 - 2.0)
            .collect();
        mem.write(
            &TensorDesc::contiguous(DType::F32, [48 * 3, 1, 1, 1], BufferId(0), 0)?,
            &v,
        )?;
        mem.write(g.tensor(xd)?, &v[..2 * k])?;
        let mut want = mem.clone();
        eval_graph(&g, &mut want, GemvMode::F32)?;
        let mut direct = vec![0.0f32; 2 * k];
        crate::norm::rms_norm(k, 0.0, &v[..2 * k], None, &mut direct)?;
        assert_eq!(want.read(g.tensor(b)?)?, direct);
        let rk = RefKernels::new(None);
        let mut got = mem.clone();
        Executor::new(&rk, GemvMode::F32).run_graph(&g, &mut got)?;
        for o in [a, b] {
            let t = g.tensor(o)?;
            assert_eq!(got.read(t)?, want.read(t)?);
        }
        let mut none = RefKernels::new(None);
        none.no_norm = true;
        let ex = Executor::new(&none, GemvMode::F32);
        let refused = Err(Error::Unsupported(Unsupported::Operation("rms_norm")));
        assert_eq!(ex.check(&g, &Plan::unfused(&g)), refused);
        let mut m = mem.clone();
        assert_eq!(ex.run_graph(&g, &mut m).map(|_| ()), refused);
        assert_eq!(m, mem);
        Ok(())
    }

    /// `mul(rms_norm(x), g)` read by a GEMV with an epilogue and by a GLU's
    /// gate and up: two steps with the prologue, equal to the evaluators in
    /// both modes; refused up front by a kernel set without the norm.
    #[test]
    #[cfg_attr(miri, ignore = "whole graphs: minutes under Miri, run natively")]
    fn norm_prologue_runs_through_the_executor() -> Result<(), Error> {
        let (k, m, n) = (64, 8, 2);
        let rb = DType::Q8_0.row_bytes(k)?;
        let mut g = Graph::new();
        let t = |ne, off| TensorDesc::contiguous(DType::F32, ne, BufferId(1), off);
        let wdesc =
            |i: usize| TensorDesc::contiguous(DType::Q8_0, [k, m, 1, 1], BufferId(0), i * m * rb);
        let (w, wg, wu) = (
            g.input(wdesc(0)?)?,
            g.input(wdesc(1)?)?,
            g.input(wdesc(2)?)?,
        );
        let x = g.input(t([k, n, 1, 1], 0)?)?;
        let gamma = g.input(t([k, 1, 1, 1], 512)?)?;
        let r = g.input(t([m, n, 1, 1], 768)?)?;
        let norm = g.rms_norm(x, 1e-6, Place::at(1, 1024))?;
        let xm = g.mul(norm, gamma, Place::at(1, 1536))?;
        let y = g.mul_mat(w, xm, Place::at(1, 2048))?;
        let out = g.add(y, r, Place::at(1, 768))?;
        let gate = g.mul_mat(wg, xm, Place::at(1, 2304))?;
        let up = g.mul_mat(wu, xm, Place::at(1, 2560))?;
        let out2 = g.glu(Activation::Silu, gate, up, Place::at(1, 2816))?;
        g.mark_output(out)?;
        g.mark_output(out2)?;
        let p = plan(&g);
        assert_eq!(p.prologue_nodes, vec![norm, xm], "{p:?}");
        assert_eq!(p.steps.len(), 2, "{p:?}");
        let mut mem = Memory::new(&[3 * m * rb, 4096]);
        let vals = |len: usize, s: usize| -> Vec<f32> {
            (0..len)
                .map(|i| ((i * s) % 19) as f32 / 6.0 - 1.5)
                .collect()
        };
        crate::quant::quantize_row(
            DType::Q8_0,
            &vals(3 * m * k, 13),
            mem.buffer_mut(BufferId(0))?,
        )?;
        mem.write(g.tensor(x)?, &vals(n * k, 5))?;
        mem.write(g.tensor(gamma)?, &vals(k, 7))?;
        mem.write(g.tensor(r)?, &vals(n * m, 3))?;
        for mode in [GemvMode::F32, GemvMode::Ggml] {
            let rk = RefKernels::new(None);
            let ex = Executor::new(&rk, mode);
            let mut want = mem.clone();
            eval_graph(&g, &mut want, mode)?;
            let (mut fused, mut got, mut got_u) = (mem.clone(), mem.clone(), mem.clone());
            eval_plan(&g, &p, &mut fused, mode)?;
            ex.run(&g, &p, &mut got)?;
            ex.run_graph(&g, &mut got_u)?;
            for o in [out, out2] {
                let tt = g.tensor(o)?;
                assert_eq!(fused.read(tt)?, want.read(tt)?);
                assert_eq!(got.read(tt)?, want.read(tt)?);
                assert_eq!(got_u.read(tt)?, want.read(tt)?);
            }
        }
        let mut none = RefKernels::new(None);
        none.no_norm = true;
        let refused = Err(Error::Unsupported(Unsupported::Operation("rms_norm")));
        assert_eq!(Executor::new(&none, GemvMode::Ggml).check(&g, &p), refused);
        Ok(())
    }

    #[test]
    fn a_short_buffer_is_an_error() -> Result<(), Error> {
        let (g, _, mem) = graph()?;
        let mut short = Memory::new(&[10, 2048, 4 * 64 * 64]);
        short
            .buffer_mut(BufferId(1))?
            .copy_from_slice(mem.buffer(BufferId(1))?);
        let k = RefKernels::new(None);
        let r = Executor::new(&k, GemvMode::F32).run(&g, &plan(&g), &mut short);
        assert!(matches!(r, Err(Error::BufferTooShort { .. })), "{r:?}");
        Ok(())
    }
}
