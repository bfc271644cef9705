//! The plan executor on the CPU: [`Executor`] runs a core plan (or a graph
//! unfused) over [`CpuMemory`], calling [`CpuBackend`]'s entry points, one
//! per step.
//!
//! Every step is one parallel region, so barriers per plan = kernel steps
//! (reshapes and views cost nothing); [`RunStats`] reports both. The step
//! dispatch, the borrowing of reads (in place, or gathered when strided)
//! and the aliasing rules are the core's ([`fused_core::exec`]); this module
//! supplies the memory (4-byte-aligned words, so F32 tensors are used in
//! place) and the kernels.

use std::vec;
use std::vec::Vec;

use fused_core::DType;
use fused_core::Error;
use fused_core::acts::GemvMode;
use fused_core::decode::AttentionShape;
use fused_core::element::Activation;
use fused_core::error::Unsupported;
use fused_core::exec::StepKernels;
use fused_core::fwht::FwhtDesc;
use fused_core::graph::Graph;
use fused_core::job::GemvJob;
use fused_core::memory::Memory;
use fused_core::memory::{Buffers, gather_f32};
use fused_core::planner::Plan;
use fused_core::tensor::{BufferId, TensorDesc};
use fused_core::weights::WeightMatrix;

use crate::backend::{Counters, CpuBackend};

pub use fused_core::exec::RunStats;

/// Runs plans and graphs on a [`CpuBackend`]: the core's executor
/// ([`fused_core::exec::Executor`]) with this crate's kernels, as in
/// `Executor::new(&backend, GemvMode::Ggml).run(&graph, &plan, &mut memory)`
/// (a whole run is in the [crate docs](crate)).
#[derive(Debug)]
pub struct Executor<'a>(fused_core::exec::Executor<'a, CpuBackend>);

impl<'a> Executor<'a> {
    /// An executor on `backend`, feeding each GEMV's activations as `mode`
    /// says for its weight format (f32, or GGML's Q8 format for it).
    pub fn new(backend: &'a CpuBackend, mode: GemvMode) -> Executor<'a> {
        Executor(fused_core::exec::Executor::new(backend, mode))
    }

    /// Runs `plan` (made for `g` by [`fused_core::planner::plan`]) over
    /// `mem`: each step one call of the backend, fused steps included.
    /// Returns the kernel steps run and the backend's counters over the run.
    pub fn run<M: Buffers>(&self, g: &Graph, plan: &Plan, mem: &mut M) -> Result<RunStats, Error> {
        self.0.run(g, plan, mem)
    }

    /// Runs every node of `g` by itself, unfused: the baseline a plan's
    /// result is compared with (bit for bit).
    pub fn run_graph<M: Buffers>(&self, g: &Graph, mem: &mut M) -> Result<RunStats, Error> {
        self.0.run_graph(g, mem)
    }

    /// Whether the backend has a kernel for every GEMV of `plan` (made for
    /// `g`): the first one it lacks as [`Error::Unsupported`], or a
    /// malformed graph's error. Nothing runs.
    pub fn check(&self, g: &Graph, plan: &Plan) -> Result<(), Error> {
        self.0.check(g, plan)
    }
}

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
            words: sizes
                .iter()
                .map(|&n| crate::pages::zeroed_vec(n.div_ceil(4)))
                .collect(),
            lens: sizes.to_vec(),
        }
    }

    /// A copy of the reference evaluator's memory.
    pub fn from_reference(mem: &Memory, n_buffers: u32) -> Result<CpuMemory, Error> {
        let mut out = CpuMemory::default();
        for b in 0..n_buffers {
            let bytes = mem.buffer(BufferId(b))?;
            let mut w = vec![0u32; bytes.len().div_ceil(4)];
            bytemuck::cast_slice_mut::<u32, u8>(&mut w)[..bytes.len()].copy_from_slice(bytes);
            out.words.push(w);
            out.lens.push(bytes.len());
        }
        Ok(out)
    }

    /// The bytes of buffer `b`.
    pub fn bytes(&self, b: u32) -> Result<&[u8], Error> {
        let (w, len) = self
            .words
            .get(b as usize)
            .zip(self.lens.get(b as usize))
            .ok_or(Error::BadBuffer { buffer: b })?;
        // Empty while the executor writes buffer `b` (see `with_buffer_mut`).
        bytemuck::cast_slice::<u32, u8>(w)
            .get(..*len)
            .ok_or(Error::BadBuffer { buffer: b })
    }

    /// The bytes of buffer `b`, writable.
    pub fn bytes_mut(&mut self, b: u32) -> Result<&mut [u8], Error> {
        let len = *self
            .lens
            .get(b as usize)
            .ok_or(Error::BadBuffer { buffer: b })?;
        Ok(&mut bytemuck::cast_slice_mut::<u32, u8>(&mut self.words[b as usize])[..len])
    }

    /// The elements of a float tensor (F32, F16 or BF16), packed in GGML
    /// order, as f32.
    pub fn read_f32(&self, t: &TensorDesc) -> Result<Vec<f32>, Error> {
        let bytes = self.bytes(t.buffer().0)?;
        gather_f32(bytes, t).map(|v| v.into_owned())
    }

    /// Stores `values` (every element of `t`, in GGML order, as
    /// [`CpuMemory::read_f32`] returns them) into the float tensor `t`
    /// (F32, F16 or BF16, any strides), converting to its format (f16 and
    /// bf16 rounded to nearest even). A tensor outside its buffer, another
    /// format, or a value count other than `t`'s element count is an error,
    /// and nothing is written.
    pub fn write_f32(&mut self, t: &TensorDesc, values: &[f32]) -> Result<(), Error> {
        let width = match t.dtype() {
            DType::F32 => 4,
            DType::F16 | DType::BF16 => 2,
            dtype => {
                return Err(Error::UnsupportedDType {
                    what: "tensor written from f32 values (F32, F16 or BF16)",
                    dtype,
                });
            }
        };
        fused_core::error::check_len("tensor values", t.n_elements(), values.len())?;
        let buf = self.bytes_mut(t.buffer().0)?;
        let end = t.byte_extent().end;
        if end > buf.len() {
            return Err(Error::BufferTooShort {
                what: "tensor extent",
                needed: end,
                actual: buf.len(),
            });
        }
        for (l, &v) in values.iter().enumerate() {
            let at = t.element_offset(t.unravel(l));
            let dst = &mut buf[at..at + width];
            match t.dtype() {
                DType::F16 => dst.copy_from_slice(&half::f16::from_f32(v).to_le_bytes()),
                DType::BF16 => dst.copy_from_slice(&half::bf16::from_f32(v).to_le_bytes()),
                _ => dst.copy_from_slice(&v.to_le_bytes()),
            }
        }
        Ok(())
    }
}

impl Buffers for CpuMemory {
    fn buffer(&self, id: BufferId) -> Result<&[u8], Error> {
        self.bytes(id.0)
    }

    fn with_buffer_mut<R>(
        &mut self,
        id: BufferId,
        f: impl FnOnce(&mut [u8], &Self) -> R,
    ) -> Result<R, Error> {
        let b = id.0 as usize;
        let len = *self.lens.get(b).ok_or(Error::BadBuffer { buffer: id.0 })?;
        let mut words = std::mem::take(&mut self.words[b]);
        let r = f(
            &mut bytemuck::cast_slice_mut::<u32, u8>(&mut words)[..len],
            self,
        );
        self.words[b] = words;
        Ok(r)
    }
}

/// The CPU's kernels for the core executor: every call one parallel region.
impl StepKernels for CpuBackend {
    type Error = Error;

    fn counters(&self) -> Counters {
        CpuBackend::counters(self)
    }

    fn gemv(&self, job: &GemvJob<'_, WeightMatrix<'_>>, y: &mut [f32]) -> Result<(), Error> {
        CpuBackend::gemv(self, job, y)
    }

    fn fwht(
        &self,
        desc: &FwhtDesc,
        x: &[f32],
        signs: Option<&[f32]>,
        y: &mut [f32],
    ) -> Result<(), Error> {
        CpuBackend::fwht(self, desc, x, signs, y)
    }

    fn add(&self, a: &[f32], b: &[f32], y: &mut [f32]) -> Result<(), Error> {
        CpuBackend::add(self, a, b, y)
    }

    fn mul(&self, a: &[f32], b: &[f32], y: &mut [f32]) -> Result<(), Error> {
        CpuBackend::mul(self, a, b, y)
    }

    fn glu(&self, act: Activation, gate: &[f32], up: &[f32], y: &mut [f32]) -> Result<(), Error> {
        CpuBackend::glu(self, act, gate, up, y)
    }

    fn unary(&self, act: Activation, a: &[f32], y: &mut [f32]) -> Result<(), Error> {
        CpuBackend::unary(self, act, a, y)
    }

    fn add_row_bias(&self, a: &[f32], bias: &[f32], y: &mut [f32]) -> Result<(), Error> {
        CpuBackend::add_row_bias(self, a, bias, y)
    }

    fn copy(&self, a: &[f32], y: &mut [f32]) -> Result<(), Error> {
        CpuBackend::copy(self, a, y)
    }

    fn supports_rms_norm(&self) -> Result<(), Unsupported> {
        Ok(())
    }

    fn attention(
        &self,
        shape: &AttentionShape,
        q: &[f32],
        k: &[f32],
        v: &[f32],
        len: usize,
        out: &mut [f32],
    ) -> Result<(), Error> {
        CpuBackend::attention(self, shape, q, k, v, len, out)
    }

    /// On the calling thread: a column's norm is a few microseconds, less
    /// than a parallel region's wake-up. The unfused op (`gamma` `None`)
    /// counts as a kernel call without a barrier; the GEMV prologue is part
    /// of its GEMV's call.
    fn rms_norm(
        &self,
        k: usize,
        eps: f32,
        x: &[f32],
        gamma: Option<&[f32]>,
        y: &mut [f32],
    ) -> Result<(), Error> {
        crate::norm::rms_norm(self.isa(), k, eps, x, gamma, y)?;
        if gamma.is_none() {
            self.count_call();
        }
        Ok(())
    }
}
