//! A device-resident plan executor: [`DevicePlan`] keeps every buffer of a
//! graph on the device and runs a whole [`Plan`] as one sequence of launches
//! on the backend's stream, synchronised once per run; or replays the same
//! launches as a captured CUDA graph ([`Submission::Graph`]).
//!
//! Built once from a graph, a plan (fused, or [`Plan::unfused`]) and the
//! graph's buffer sizes:
//!
//! - one device buffer per graph [`BufferId`], filled by
//!   [`DevicePlan::upload`] from any core [`Buffers`] (the reference
//!   evaluator's `Memory` among them);
//! - the weights of every GEMV in a device buffer of their own, in the
//!   kernels' layout (`src/layout.rs`), prepared at upload from the graph
//!   buffer's bytes (so a weight tensor that a step writes is refused);
//! - every kernel step becomes one launch of the backend's own kernels (the
//!   same [`Launch`] values as the `DeviceVec` entry points build), each
//!   tensor passed as its buffer's device address plus its byte offset. The
//!   launches are built once and enqueued in order on one stream, which
//!   orders them: no further synchronisation is needed between steps;
//! - in a quantized activation mode (`GemvMode::Ggml` with quantized
//!   weights) each GEMV step first quantizes its activation input
//!   once (a gated GEMV once for both weights) into one scratch buffer that
//!   every step reuses, counted in [`DevicePlanStats::quantizations`]; a
//!   step whose input the latest quantization already holds (nothing wrote
//!   that input or the scratch since, in the same layout: the unfused gate
//!   and up GEMVs of one input) reads it without quantizing again
//!   ([`fused_core::reuse`], the Vulkan plan's rule too);
//! - a GEMV step with a norm prologue (`mul(rms_norm(x), g)` as its
//!   input) runs the norm as one launch into scratch first: in a quantized
//!   mode the quantizer's norm variant (the norm computed and quantized in
//!   one kernel), else the norm kernel writing f32; q, k and v reading one
//!   norm run it once (the same reuse rule);
//! - every launch's reads and writes are recorded, and a GEMV step that
//!   has no hazard with the GEMVs it would overlap (`src/schedule.rs`), of
//!   one column over at most 64 MiB of weights, starts without waiting for
//!   them where the tuning's overlap is on ([`Knob::Overlap`](crate::Knob::Overlap),
//!   the default);
//! - consecutive one-column GEMV steps of one kernel with no hazard between
//!   them (the q, k and v projections of one input) run as one group launch
//!   (`src/group.rs`) where the tuning's group is on when the plan is built
//!   ([`Knob::Group`](crate::Knob::Group), the default), counted in
//!   [`DevicePlanStats::grouped`];
//! - the decode ops (RoPE, the row write, the fused key/value append,
//!   attention, argmax; `src/decode.rs`) are launches like the others
//!   whose kernels read the position from its tensor on the device, so
//!   the launches, and a graph captured from them, hold for every
//!   position; attention is two launches, the splits writing into one
//!   scratch buffer that every attention step shares, sized when the plan
//!   is built from the cache's rows;
//! - a GEMV step's tail runs in the GEMV's own launch where the launch
//!   takes it: the key/value append (integer GEMVs of an even number of
//!   rows a block) and the argmax (one column, not gated: each block merges
//!   the key of its largest output into its group's and the launch's, the
//!   last to finish writes the index); elsewhere as a launch of its own
//!   after the GEMV.
//!
//! Device-to-device copies (on the same stream, counted in
//! [`DevicePlanStats::copies`]; the crate's copy kernel where source,
//! destination and size are multiples of 16 bytes, else
//! `cuMemcpyDtoDAsync`) stand in where a tensor cannot be passed in place:
//! - an f32 tensor whose byte offset is not a multiple of 4, or GEMV
//!   activations not 16-byte aligned (the GEMV loads them as 16-byte
//!   vectors), is copied into a scratch buffer (256-byte aligned) before
//!   the launch that reads it, or written there and copied to its place
//!   after the launch that writes it;
//! - an input of a GEMV or an FWHT that is the kernel's own output (an
//!   in-place transform) is read from a copy made first: other blocks would
//!   read what one has already written. The element-wise kernels and the
//!   GEMV's epilogue read each element in the thread that then writes it,
//!   so an element-wise input or an epilogue operand exactly aliasing the
//!   output is used in place (the core's rule); a partial overlap is an
//!   [`Error::AliasViolation`].
//!
//! What it refuses, as [`Error::Unsupported`] or a typed dtype error before
//! anything is enqueued: strided (non-contiguous) tensors, activations and
//! element-wise inputs that are not F32, a broadcast operand other than one
//! repeated over rows (an add or a multiply whose operand's rows the
//! input's rows repeat), GEMV weight formats, activation modes and column
//! counts the kernels lack (as `StepKernels::supports_gemv` says), and
//! weights that the plan itself writes.
//!
//! Graph inputs that the plan overwrites in place (a residual stream), but
//! not state (a KV cache, `Graph::state`), are copied to pristine device
//! buffers at upload; [`DevicePlan::restore_inputs`]
//! copies them back, so that every run of [`DevicePlan::time_once`] starts
//! from the same inputs (the restore is outside the timed part).

use std::time::{Duration, Instant};

use cust::memory::{CopyDestination, DeviceBuffer};
use fused_core::acts::ActQuant;
use fused_core::acts::GemvMode;
use fused_core::backend::{PlanStats, PlanTiming, ResidentPlan, buffer_range};
use fused_core::decode::{AttentionShape, RopeMode, attention_rows};
use fused_core::element::Activation;
use fused_core::epilogue::{Epilogue, MAX_STAGES};
use fused_core::error::{Unsupported, check_len};
use fused_core::exec::StepKernels;
use fused_core::fwht::FwhtDesc;
use fused_core::graph::{Graph, Op};
use fused_core::lower::{
    ArgmaxOperands, BinaryOp, Broadcast, CommandSink, GemvCommand, KvAppendOperands, NormLoad,
    issue_gemv, kv_append_by_parts, lower_into,
};
use fused_core::memory::packed;
use fused_core::norm::Eps;
use fused_core::placement;
use fused_core::planner::{Operands, Plan};
use fused_core::reuse::LatestQuantization;
use fused_core::tensor::{BufferId, Overlap, TensorDesc};
use fused_core::weights::WeightMatrix;
use fused_core::{DType, Error};

use crate::backend::CudaBackend;
use crate::context_lock::LockedDrop;
use crate::cuda_graph::CapturedGraph;
use crate::decode::{AttnSplits, KvAppend, KvPart, argmax_scratch_bytes};
use crate::device::driver;
use crate::error::u32_of;
use crate::group::group_launches;
use crate::launch::{
    EwKernel, F32_ALIGN, GEMV_X_ALIGN, GemvShape, Launch, chain_l2_ahead, check_quant_out,
};
use crate::memory::DeviceWeights;
use crate::params::{ArgmaxTail, EpiParams};
use crate::qacts::QactsLayout;
use crate::schedule::{Access, Deps, overlap_deps};
use crate::tuning::Tuning;
use crate::{CudaError, DevicePlanStats, Submission};

/// Which buffer a region lies in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Slot {
    /// A graph buffer (its [`BufferId`]).
    Graph(usize),
    /// A scratch buffer of the plan.
    Scratch(usize),
}

/// Bytes of one of the plan's buffers.
type Region = placement::Region<Slot>;

/// A plan built for the device with its buffers; see the module docs.
pub struct DevicePlan<'a> {
    // Field order is drop order: the captured graph goes before the
    // buffers its launches point into.
    graph: Option<CapturedGraph>,
    /// Whether `run` and `time_once` replay the graph
    /// ([`ResidentPlan::record_for_replay`]).
    replay: bool,
    backend: &'a CudaBackend,
    /// One run, in order.
    launches: Vec<Launch>,
    /// Graph inputs to their pristine copies (at upload).
    save: Vec<Launch>,
    /// Pristine copies back to the graph inputs.
    pub(crate) restore: Vec<Launch>,
    /// Graph buffers, indexed by [`BufferId`].
    buffers: Vec<LockedDrop<DeviceBuffer<u8>>>,
    /// The byte sizes of the graph buffers.
    sizes: Vec<usize>,
    /// Each GEMV weight tensor and its device copy in the kernels' layout.
    weights: Vec<(TensorDesc, DeviceWeights)>,
    scratch: Vec<LockedDrop<DeviceBuffer<u8>>>,
    stats: DevicePlanStats,
}

impl core::fmt::Debug for DevicePlan<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("DevicePlan")
            .field("sizes", &self.sizes)
            .field("stats", &self.stats)
            .field("weights", &self.weights.len())
            .field("scratch_buffers", &self.scratch.len())
            .field("restored_inputs", &self.restore.len())
            .field("graph_captured", &self.graph.is_some())
            .finish_non_exhaustive()
    }
}

fn unsupported(what: &'static str) -> Error {
    Error::Unsupported(Unsupported::Operation(what))
}

/// What a decode op's position tensor must be.
const POSITION: &str = "device plan position (one F32 value)";

/// The state while the plan's launches are built.
struct Builder<'a, 'd> {
    backend: &'a CudaBackend,
    /// The backend's tuning when the plan is built.
    tuning: Tuning,
    sizes: &'d [usize],
    /// Device addresses of the graph buffers.
    bases: Vec<u64>,
    mode: GemvMode,
    scratch: Vec<LockedDrop<DeviceBuffer<u8>>>,
    /// The two quantized-activation scratch buffers: slot and size of each.
    act_scratch: [Option<(usize, usize)>; 2],
    /// The attentions' partials buffer (every attention step reuses it; the
    /// stream orders them): slot and size.
    attn_scratch: Option<(usize, u64)>,
    weights: Vec<(TensorDesc, DeviceWeights)>,
    launches: Vec<Launch>,
    /// Graph-buffer regions the launches write.
    written: Vec<Region>,
    /// What each launch of `launches` reads and writes (same order).
    access: Vec<Access<Slot>>,
    /// What the next kernel launch reads and writes, gathered by `read`
    /// and `write` until `launch` records it.
    pending: (Vec<Region>, Vec<Region>),
    /// The latest activation quantization, while reusable.
    quantized: LatestQuantization<Slot, QactsLayout>,
    /// The latest norm prologue (its epsilon and output layout, `None`:
    /// f32), while reusable.
    normed: LatestQuantization<Slot, (Eps, Option<QactsLayout>)>,
    stats: DevicePlanStats,
}

impl Builder<'_, '_> {
    /// The device address of `r`.
    fn addr(&self, r: Region) -> u64 {
        let base = match r.slot {
            Slot::Graph(i) => self.bases[i],
            Slot::Scratch(i) => self.scratch[i].as_device_ptr().as_raw(),
        };
        base + r.offset
    }

    /// The bytes of `t` in its graph buffer (contiguous tensors only).
    fn region(&self, t: &TensorDesc) -> Result<Region, Error> {
        let strided = "a strided tensor on the CUDA device plan";
        let (b, e) = placement::graph_extent(t, self.sizes, strided)?;
        Ok(Region {
            slot: Slot::Graph(b),
            offset: e.start as u64,
            size: e.len() as u64,
        })
    }

    /// All of a new scratch buffer of `size` bytes (256-byte aligned: cuMemAlloc).
    fn scratch(&mut self, size: u64) -> Result<Region, CudaError> {
        let len = usize::try_from(size).map_err(|_| Error::Overflow {
            what: "scratch buffer size",
        })?;
        let _use = self.backend.dev().make_current()?;
        let buf = DeviceBuffer::zeroed(len.max(1)).map_err(driver("allocate a scratch buffer"))?;
        self.scratch.push(LockedDrop::new(buf));
        Ok(Region {
            slot: Slot::Scratch(self.scratch.len() - 1),
            offset: 0,
            size,
        })
    }

    /// A quantized-activation scratch region of `size` bytes that none of
    /// `avoid` lies in: of the plan's two buffers (each reused by every
    /// quantized GEMV step that picks it; the stream orders each step's
    /// quantizer and GEMV), the first not in `avoid`, replaced by a larger
    /// one when a step needs more (launches built earlier keep the old one,
    /// which the plan keeps too). Two, so that a GEMV reading its input
    /// from one can write its output quantized into the other
    /// ([`Builder::fold_quantization`]).
    fn act_scratch(&mut self, size: usize, avoid: &[Region]) -> Result<Region, CudaError> {
        let free = |have: &Option<(usize, usize)>| {
            have.is_none_or(|(slot, _)| avoid.iter().all(|r| r.slot != Slot::Scratch(slot)))
        };
        let i = (0..2)
            .find(|&i| free(&self.act_scratch[i]))
            .ok_or(unsupported(
                "a GEMV reading both quantized-activation buffers",
            ))?;
        match self.act_scratch[i] {
            Some((slot, have)) if have >= size => Ok(Region {
                slot: Slot::Scratch(slot),
                offset: 0,
                size: size as u64,
            }),
            _ => {
                let r = self.scratch(size as u64)?;
                let Slot::Scratch(slot) = r.slot else {
                    unreachable!("scratch() returns a scratch region")
                };
                self.act_scratch[i] = Some((slot, size));
                Ok(r)
            }
        }
    }

    /// The attentions' partials buffer, at least `size` bytes: the one
    /// every attention step shares, replaced by a larger one when a step
    /// needs more (launches built earlier keep the old one, which the plan
    /// keeps too).
    fn attn_scratch(&mut self, size: u64) -> Result<Region, CudaError> {
        if let Some((slot, have)) = self.attn_scratch
            && have >= size
        {
            return Ok(Region {
                slot: Slot::Scratch(slot),
                offset: 0,
                size,
            });
        }
        let r = self.scratch(size)?;
        let Slot::Scratch(slot) = r.slot else {
            unreachable!("scratch() returns a scratch region")
        };
        self.attn_scratch = Some((slot, size));
        Ok(r)
    }

    /// Where the launch just built, when it is a one-column integer GEMV
    /// whose one output is exactly `x`, also writes `x` quantized as
    /// `layout` (into a scratch buffer it does not read;
    /// `Launch::set_quant_out`), so that no quantizer launch is needed;
    /// `None` where it is not so, or the tuning's fold-quantizers switch
    /// (a lab knob) was off. Counted in the lab's
    /// `DevicePlanStats::folded_quantizations`.
    fn fold_quantization(
        &mut self,
        x: &Region,
        layout: &QactsLayout,
    ) -> Result<Option<Region>, CudaError> {
        if let Some(qr) = self.fold_attention_quantization(x, layout)? {
            return Ok(Some(qr));
        }
        if !self.tuning.fold_quantizers {
            return Ok(None);
        }
        let (Some(Launch::GemvQ { params, n_cols, .. }), Some(a)) =
            (self.launches.last(), self.access.last())
        else {
            return Ok(None);
        };
        if a.writes.as_slice() != [*x]
            || check_quant_out(params.rows as usize, *n_cols, true, layout).is_err()
        {
            return Ok(None);
        }
        let avoid = a.reads.clone();
        let qr = self.act_scratch(layout.bytes, &avoid)?;
        let q = self.addr(qr);
        let (Some(l), Some(a)) = (self.launches.last_mut(), self.access.last_mut()) else {
            unreachable!("checked above")
        };
        l.set_quant_out(layout, q)?;
        a.writes.push(qr);
        self.record_folded(x, layout, qr);
        #[cfg(feature = "lab")]
        {
            self.stats.folded_quantizations += 1;
        }
        Ok(Some(qr))
    }

    /// Where the launch just built is an attention whose output is exactly
    /// `x` and the launch can write it quantized as `layout` too
    /// (`Launch::set_attention_quant_out`), into a scratch buffer it
    /// neither reads nor writes: that buffer, with no quantizer launch.
    /// `None` elsewhere, or where the tuning's switch (a lab knob) is off.
    fn fold_attention_quantization(
        &mut self,
        x: &Region,
        layout: &QactsLayout,
    ) -> Result<Option<Region>, CudaError> {
        if !self.tuning.fold_attention_quantizer {
            return Ok(None);
        }
        let (Some(l), Some(a)) = (self.launches.last(), self.access.last()) else {
            return Ok(None);
        };
        if a.writes.last() != Some(x) || l.attention_quant_mode(layout).is_none() {
            return Ok(None);
        }
        let avoid: Vec<Region> = a.reads.iter().chain(&a.writes).copied().collect();
        let qr = self.act_scratch(layout.bytes, &avoid)?;
        let q = self.addr(qr);
        let (Some(l), Some(a)) = (self.launches.last_mut(), self.access.last_mut()) else {
            unreachable!("checked above")
        };
        if !l.set_attention_quant_out(layout, q)? {
            return Ok(None);
        }
        a.writes.push(qr);
        self.record_folded(x, layout, qr);
        Ok(Some(qr))
    }

    /// After the last launch took on writing `x` quantized as `layout`
    /// into `qr`: `qr` is new, and is `x`'s quantized copy.
    fn record_folded(&mut self, x: &Region, layout: &QactsLayout, qr: Region) {
        self.quantized.wrote(&qr);
        self.normed.wrote(&qr);
        self.quantized.record(*x, *layout, qr);
    }

    /// Appends `l` with what it reads and writes.
    fn push(&mut self, l: Launch, reads: Vec<Region>, writes: Vec<Region>) {
        let kind = l.kind();
        for w in &writes {
            self.quantized.wrote(w);
            self.normed.wrote(w);
        }
        self.launches.push(l);
        self.access.push(Access {
            kind,
            reads,
            writes,
        });
    }

    /// Appends the copy of `src` into `dst` (same size), counted
    /// ([`Launch::device_copy`]).
    fn copy(&mut self, src: Region, dst: Region) {
        if src.size == 0 {
            return;
        }
        self.stats.copies += 1;
        self.stats.copy_bytes += src.size;
        let l = Launch::device_copy(self.addr(src), self.addr(dst), src.size as usize);
        self.push(l, vec![src], vec![dst]);
    }

    /// The address a kernel that writes `dst` reads f32 tensor `t` from: in
    /// place, or a copy made first when `t` is not `align`-aligned, or when
    /// it is `dst` itself and the kernel does not read each element in the
    /// thread that writes it (`per_element`). A partial overlap with `dst`
    /// is an error.
    fn read(
        &mut self,
        t: &TensorDesc,
        dst: &TensorDesc,
        per_element: bool,
        align: u64,
        what: &'static str,
    ) -> Result<u64, CudaError> {
        placement::require_f32(t, what)?;
        let r = self.region(t)?;
        let in_place = placement::reads_in_place(t, dst, per_element)?;
        if in_place && r.offset.is_multiple_of(align) {
            self.pending.0.push(r);
            return Ok(self.addr(r));
        }
        let s = self.scratch(r.size)?;
        self.copy(r, s);
        self.pending.0.push(s);
        Ok(self.addr(s))
    }

    /// The address a kernel writes `t` at and, when it is a scratch buffer
    /// (`t` not 4-byte aligned), the region its bytes are copied to after
    /// the launch.
    fn write(&mut self, t: &TensorDesc) -> Result<(u64, Option<(Region, Region)>), CudaError> {
        placement::require_f32(t, "device plan destination (must be contiguous F32)")?;
        let r = self.region(t)?;
        self.written.push(r);
        if r.offset.is_multiple_of(F32_ALIGN) {
            self.pending.1.push(r);
            return Ok((self.addr(r), None));
        }
        let s = self.scratch(r.size)?;
        self.pending.1.push(s);
        Ok((self.addr(s), Some((s, r))))
    }

    /// Appends the step's launch (if any) with what `read` and `write`
    /// gathered for it, then the copy of a scratch output to its place.
    fn launch(&mut self, l: Option<Launch>, out: Option<(Region, Region)>) {
        let (reads, writes) = std::mem::take(&mut self.pending);
        if let Some(l) = l {
            self.stats.launches += 1;
            self.push(l, reads, writes);
            if let Some((s, place)) = out {
                self.copy(s, place);
            }
        }
    }

    /// The device copy of weight tensor `w` (one per distinct tensor),
    /// prepared at upload.
    fn weights(&mut self, w: &TensorDesc) -> Result<usize, CudaError> {
        if let Some(i) = self.weights.iter().position(|(t, _)| t == w) {
            return Ok(i);
        }
        self.region(w)?;
        // Only the layout the plan's GEMVs read: half the device memory
        // and none of the other layout's rearranging at upload.
        let modes = [self.mode.act_quant(w.dtype())];
        let d = self
            .backend
            .alloc_weights(w.dtype(), w.ne()[1], w.ne()[0], &modes)?;
        self.weights.push((*w, d));
        Ok(self.weights.len() - 1)
    }

    /// The element-wise kernel `make(a, b, out)` over `a` (and `b`) into
    /// `dst`; `b_per_element`: `b` is read at the index written (not
    /// repeated).
    fn eltwise(
        &mut self,
        a: &TensorDesc,
        b: Option<(&TensorDesc, bool)>,
        dst: &TensorDesc,
        make: impl FnOnce(u64, u64, u64) -> EwKernel,
    ) -> Result<(), CudaError> {
        let n = a.n_elements();
        check_len("element-wise output", n, dst.n_elements())?;
        let what = "device plan element-wise input (must be F32)";
        let aa = self.read(a, dst, true, F32_ALIGN, what)?;
        let ba = match b {
            Some((b, per_element)) => self.read(b, dst, per_element, F32_ALIGN, what)?,
            None => 0,
        };
        let (ya, out) = self.write(dst)?;
        let l = Launch::ew(make(aa, ba, ya), n)?;
        self.launch(l, out);
        Ok(())
    }

    /// `dst = a` by one device-to-device copy (nothing when `a` is `dst`).
    fn copy_node(&mut self, a: &TensorDesc, dst: &TensorDesc) -> Result<(), CudaError> {
        check_len("copy output", a.n_elements(), dst.n_elements())?;
        if a.dtype() != DType::F32 {
            return Err(Error::UnsupportedDType {
                what: "device plan copy input (must be F32)",
                dtype: a.dtype(),
            }
            .into());
        }
        let r = self.region(a)?;
        let (ya, out) = self.write(dst)?;
        match a.overlap(dst) {
            Overlap::Exact => return Ok(()),
            Overlap::Partial => {
                return Err(Error::AliasViolation {
                    what: "a copy's input partially overlaps its output",
                }
                .into());
            }
            Overlap::Disjoint => {}
        }
        let l = (r.size > 0).then(|| Launch::device_copy(self.addr(r), ya, r.size as usize));
        self.pending.0.push(r);
        self.launch(l, out);
        Ok(())
    }
}

impl Builder<'_, '_> {
    /// A GEMV (gated when `up` is given) of `w` times `x` into `dst`; with
    /// a norm prologue, of `w` times `(p.x·s)·p.gamma`, which `x` (the
    /// normed product, never stored) stands for.
    #[allow(clippy::too_many_arguments)]
    fn gemv_step(
        &mut self,
        g: &Graph,
        prologue: Option<&NormLoad>,
        w: &TensorDesc,
        up: Option<(&TensorDesc, Activation)>,
        x: &TensorDesc,
        epilogue: &Epilogue,
        ops: &Operands,
        dst: &TensorDesc,
    ) -> Result<(), CudaError> {
        let mode = self.mode.act_quant(w.dtype());
        StepKernels::supports_gemv(self.backend, w.dtype(), mode, x.n_rows())
            .map_err(Error::from)?;
        let (k, m, n) = (w.ne()[0], w.ne()[1], x.n_rows());
        if let Some((u, _)) = up {
            if u.dtype() != w.dtype() {
                return Err(Error::UnsupportedDType {
                    what: "gated GEMV up weights (the gate's format)",
                    dtype: u.dtype(),
                }
                .into());
            }
            if u.ne() != w.ne() {
                return Err(Error::ShapeMismatch {
                    what: "gated GEMV up weights (the gate's shape)",
                    expected: w.ne(),
                    actual: u.ne(),
                }
                .into());
            }
        }
        // Operands by slot (the epilogue indexes them so); slots after the
        // last operand are left out.
        let used = ops.iter().rposition(Option::is_some).map_or(0, |i| i + 1);
        let descs: Vec<Option<TensorDesc>> = ops[..used]
            .iter()
            .map(|id| id.map(|id| g.tensor(id).copied()).transpose())
            .collect::<Result<_, _>>()?;
        let op_lens: Vec<usize> = descs
            .iter()
            .map(|d| d.as_ref().map_or(0, TensorDesc::n_elements))
            .collect();
        self.backend.check_gemv_lengths(
            epilogue,
            (m, k, n),
            x.n_elements(),
            &op_lens,
            dst.n_elements(),
        )?;
        let wi = self.weights(w)?;
        let ui = match up {
            Some((u, _)) => Some(self.weights(u)?),
            None => None,
        };
        let what = "device plan GEMV activations (must be F32)";
        let normed = match prologue {
            Some(p) => {
                let layout = (mode != ActQuant::F32)
                    .then(|| QactsLayout::new(mode, k, n))
                    .transpose()?;
                Some(self.norm_prologue(p, (k, n), dst, layout)?)
            }
            None => None,
        };
        let (xa, x_reads) = match normed {
            Some(r) => (self.addr(r), vec![r]),
            None => {
                let xa = self.read(x, dst, false, GEMV_X_ALIGN, what)?;
                (xa, std::mem::take(&mut self.pending.0))
            }
        };
        let mut op_addrs = [0u64; MAX_STAGES];
        for (a, d) in op_addrs.iter_mut().zip(&descs) {
            if let Some(d) = d {
                // Read by the thread that then writes that element: in place.
                let what = "device plan epilogue operand (must be F32)";
                *a = self.read(d, dst, true, F32_ALIGN, what)?;
            }
        }
        let (ya, out) = self.write(dst)?;
        let act = up.map_or(Activation::Identity, |(_, a)| a);
        let epi = EpiParams::new(epilogue, |slot| op_addrs[slot]);
        if mode != ActQuant::F32 {
            // Quantized once into the plan's activation scratch (unless the
            // latest quantization left it there), then the integer GEMV
            // (gate and up both) reads it.
            let layout = QactsLayout::new(mode, k, n)?;
            // The prologue's output is already quantized; else the region
            // read() gathered for x: in place, or its copy.
            let qr = match normed {
                Some(r) => r,
                None => self.quantize_input(x_reads, &layout, xa)?,
            };
            self.pending.0.push(qr);
            let q = self.addr(qr);
            let int_addr = |d: &DeviceWeights| d.layout_addr(mode);
            let wa = int_addr(&self.weights[wi].1)?;
            let ua = ui.map(|i| int_addr(&self.weights[i].1)).transpose()?;
            let l = Launch::gemv_q(&self.tuning, w.dtype(), m, &layout, wa, ua, act, q, ya, epi)?;
            self.launch(l, out);
            return Ok(());
        }
        self.pending.0.extend(x_reads);
        let wd = &self.weights[wi].1;
        let shape = GemvShape {
            dtype: w.dtype(),
            rows: m,
            cols: k,
            row_bytes: wd.row_bytes(),
            n_cols: n,
        };
        let w_up = ui
            .map(|i| self.weights[i].1.layout_addr(ActQuant::F32))
            .transpose()?;
        let wa = wd.layout_addr(ActQuant::F32)?;
        let l = Launch::gemv(&self.tuning, shape, wa, w_up, act, xa, ya, epi)?;
        self.launch(l, out);
        Ok(())
    }

    /// The quantized copy, as `layout`, of a GEMV's activations at `xa`
    /// (read from the regions `x_reads`, the last one `x` itself): the
    /// latest quantization's where it holds them, or the previous GEMV's
    /// folded output, else a quantizer launch's.
    fn quantize_input(
        &mut self,
        x_reads: Vec<Region>,
        layout: &QactsLayout,
        xa: u64,
    ) -> Result<Region, CudaError> {
        let x_region = *x_reads.last().expect("read() gathers the region it reads");
        let reused = match self.quantized.lookup(&x_region, layout) {
            Some(qr) => Some(qr),
            None => self.fold_quantization(&x_region, layout)?,
        };
        if let Some(qr) = reused {
            return Ok(qr);
        }
        let qr = self.act_scratch(layout.bytes, &[])?;
        if let Some(l) = Launch::quantize(layout, xa, self.addr(qr))? {
            self.stats.launches += 1;
            self.stats.quantizations += 1;
            self.push(l, x_reads, vec![qr]);
            self.quantized.record(x_region, *layout, qr);
        }
        Ok(qr)
    }
    /// The activations of a GEMV step with a norm prologue: `(x·s)·g` of
    /// the `n` columns of `k` values of `p.x`, written by one launch into
    /// scratch, quantized as `layout` (the norm fused into the quantizer)
    /// or as f32 (`None`); their region. Where the latest prologue normed
    /// the same input with the same weight and epsilon into the same
    /// layout and nothing has written any of them since (q, k and v
    /// reading one norm), that output is read again: the same bits.
    fn norm_prologue(
        &mut self,
        p: &NormLoad,
        (k, n): (usize, usize),
        dst: &TensorDesc,
        layout: Option<QactsLayout>,
    ) -> Result<Region, CudaError> {
        check_len("norm prologue input", k * n, p.x.n_elements())?;
        check_len("norm prologue weight", k, p.gamma.n_elements())?;
        let (xg, gg) = (self.region(&p.x)?, self.region(&p.gamma)?);
        let key = (p.eps, layout);
        if let Some(r) = self.normed.lookup_weighted(&xg, Some(&gg), &key) {
            return Ok(r);
        }
        let xa = self.read(
            &p.x,
            dst,
            false,
            F32_ALIGN,
            "device plan norm input (must be F32)",
        )?;
        let ga = self.read(
            &p.gamma,
            dst,
            false,
            F32_ALIGN,
            "device plan norm weight (must be F32)",
        )?;
        let reads = std::mem::take(&mut self.pending.0);
        let eps = p.eps.get();
        let (l, out) = match &layout {
            None => {
                let out = self.scratch(4 * (k * n) as u64)?;
                (
                    Launch::rms_norm(k, n, eps, xa, Some(ga), self.addr(out))?,
                    out,
                )
            }
            Some(layout) => {
                let out = self.act_scratch(layout.bytes, &[])?;
                let l = Launch::norm_quantize(layout, eps, xa, ga, self.addr(out))?;
                self.stats.quantizations += u64::from(l.is_some());
                (l, out)
            }
        };
        if let Some(l) = l {
            self.stats.launches += 1;
            self.push(l, reads, vec![out]);
        }
        self.normed.record_weighted(xg, Some(gg), key, out);
        Ok(out)
    }

    /// Whether the key/value append's one kernel can take these tensors:
    /// both caches 4-byte aligned in their buffers, and no tensor it
    /// writes overlapping another it writes or one it reads, but q's RoPE
    /// destination being q itself (each thread reads its pair before it
    /// writes it).
    /// Makes the launch just built, the GEMV of `gemv`, also do the
    /// key/value append `kv` (`Launch::set_kv_tail`), the append's reads and
    /// writes added to the launch's: `false`, changing nothing, where that
    /// launch cannot take it (float activations, a kernel of an odd number
    /// of rows a block, an output not written in place) or the fused
    /// append's kernel could not run the operands either.
    fn attach_kv_tail(
        &mut self,
        gemv: &GemvCommand,
        kv: &KvAppendOperands,
    ) -> Result<bool, CudaError> {
        let last_writes_out = matches!(self.last_gemv_writing(gemv)?, Some(Launch::GemvQ { .. }));
        if !last_writes_out || !self.kv_append_fits(kv)? {
            return Ok(false);
        }
        let dims = kv.dims()?;
        let part = |b: &Self, src: &TensorDesc, len, dst: &TensorDesc| -> Result<_, CudaError> {
            Ok(KvPart {
                src: b.addr(b.region(src)?),
                len,
                dst: b.addr(b.region(dst)?),
            })
        };
        let l = Launch::kv_append(&KvAppend {
            mode: kv.mode,
            head_dim: dims.head_dim,
            table: self.addr(self.region(&kv.table)?),
            table_rows: dims.table_rows,
            pos: self.addr(self.region(&kv.pos)?),
            q: match &kv.q {
                Some((x, dst)) => Some(part(self, x, dims.q_len, dst)?),
                None => None,
            },
            k: part(self, &kv.k, dims.k_len, &kv.k_cache)?,
            k_rows: dims.k_rows,
            v: match &kv.v {
                Some((row, cache)) => Some(part(self, row, dims.v_len, cache)?),
                None => None,
            },
            v_rows: dims.v_rows,
        })?;
        let Some(Launch::KvAppend { params, .. }) = l else {
            return Ok(false);
        };
        let tuning = self.tuning;
        let Some(last) = self.launches.last_mut() else {
            return Ok(false);
        };
        if !last.set_kv_tail(&tuning, gemv.w.dtype(), &params) {
            return Ok(false);
        }
        let reads = [self.region(&kv.table)?, self.region(&kv.pos)?];
        let mut writes = vec![self.region(&kv.k_cache)?];
        for t in [kv.v.map(|(_, c)| c), kv.q.map(|(_, o)| o)]
            .into_iter()
            .flatten()
        {
            writes.push(self.region(&t)?);
        }
        for w in &writes {
            self.quantized.wrote(w);
            self.normed.wrote(w);
        }
        if let Some(a) = self.access.last_mut() {
            a.reads.extend(reads);
            a.writes.extend(writes);
        }
        Ok(true)
    }

    /// The launch just recorded, where it is a GEMV launch whose one write
    /// is `gemv`'s output (what a tail rides on).
    fn last_gemv_writing(&self, gemv: &GemvCommand) -> Result<Option<&Launch>, CudaError> {
        let out = self.region(&gemv.out)?;
        Ok(match (self.launches.last(), self.access.last()) {
            (Some(l @ (Launch::Gemv { .. } | Launch::GemvQ { .. })), Some(a))
                if a.writes.as_slice() == [out] =>
            {
                Some(l)
            }
            _ => None,
        })
    }

    /// Makes the launch just recorded for `gemv` also write the argmax of
    /// its output (`Launch::set_argmax_tail`, with scratch keys and
    /// counts of its own, zeroed at allocation and left zero by every
    /// launch), recording the index and the scratch as its writes; `false`
    /// where it cannot: not one column, an output or index not written in
    /// place, a gated or other launch.
    fn attach_argmax_tail(
        &mut self,
        gemv: &GemvCommand,
        a: &ArgmaxOperands,
    ) -> Result<bool, CudaError> {
        let last_writes_out = self.last_gemv_writing(gemv)?.is_some();
        let one_col = a.x.ne()[0] == a.x.n_elements() && a.out.n_elements() == 1;
        placement::require_f32(&a.out, "device plan argmax output (must be contiguous F32)")?;
        let dst = self.region(&a.out)?;
        if !last_writes_out || !one_col || !dst.offset.is_multiple_of(F32_ALIGN) {
            return Ok(false);
        }
        let rows = a.x.n_elements();
        let scratch = self.scratch(ArgmaxTail::scratch_bytes(rows) as u64)?;
        let tail = ArgmaxTail::new(rows, self.addr(scratch), self.addr(dst));
        if !self
            .launches
            .last_mut()
            .is_some_and(|l| l.set_argmax_tail(tail))
        {
            return Ok(false);
        }
        self.written.push(dst);
        for w in [&dst, &scratch] {
            self.quantized.wrote(w);
            self.normed.wrote(w);
        }
        if let Some(acc) = self.access.last_mut() {
            acc.reads.push(scratch);
            acc.writes.extend([dst, scratch]);
        }
        Ok(true)
    }

    fn kv_append_fits(&self, a: &KvAppendOperands) -> Result<bool, CudaError> {
        let (table, pos, k, k_cache) = (&a.table, &a.pos, &a.k, &a.k_cache);
        let q = a.q.as_ref().map(|(x, out)| (x, out));
        let v = a.v.as_ref().map(|(row, cache)| (row, cache));
        let caches = [Some(k_cache), v.map(|(_, c)| c)];
        for c in caches.into_iter().flatten() {
            if !self.region(c)?.offset.is_multiple_of(F32_ALIGN) {
                return Ok(false);
            }
        }
        // Each tensor tagged with whether it is q's (input or destination).
        let writes: Vec<(&TensorDesc, bool)> = caches
            .into_iter()
            .flatten()
            .map(|c| (c, false))
            .chain(q.map(|(_, out)| (out, true)))
            .collect();
        let reads: Vec<(&TensorDesc, bool)> = [table, pos, k]
            .into_iter()
            .chain(v.map(|(row, _)| row))
            .map(|t| (t, false))
            .chain(q.map(|(x, _)| (x, true)))
            .collect();
        for (i, (w, w_is_q)) in writes.iter().enumerate() {
            if writes[..i]
                .iter()
                .any(|(o, _)| o.overlap(w) != Overlap::Disjoint)
            {
                return Ok(false);
            }
            for (r, r_is_q) in &reads {
                let o = r.overlap(w);
                let q_in_place = *w_is_q && *r_is_q && o == Overlap::Exact;
                if o != Overlap::Disjoint && !q_in_place {
                    return Ok(false);
                }
            }
        }
        Ok(true)
    }
}

impl CommandSink for Builder<'_, '_> {
    type Error = CudaError;

    fn gemv(
        &mut self,
        g: &Graph,
        w: &TensorDesc,
        up: Option<(&TensorDesc, Activation)>,
        x: &TensorDesc,
        epilogue: &Epilogue,
        ops: &Operands,
        dst: &TensorDesc,
    ) -> Result<(), CudaError> {
        self.gemv_step(g, None, w, up, x, epilogue, ops, dst)
    }

    fn norm_gemv(
        &mut self,
        g: &Graph,
        prologue: &NormLoad,
        w: &TensorDesc,
        up: Option<(&TensorDesc, Activation)>,
        x: &TensorDesc,
        epilogue: &Epilogue,
        ops: &Operands,
        dst: &TensorDesc,
    ) -> Result<(), CudaError> {
        self.gemv_step(g, Some(prologue), w, up, x, epilogue, ops, dst)
    }

    /// `dst = rms_norm(x, eps)`, one warp a column; in place where `x` is
    /// `dst` (each lane writes what it read).
    fn rms_norm(&mut self, eps: Eps, x: &TensorDesc, dst: &TensorDesc) -> Result<(), CudaError> {
        let k = x.ne()[0];
        fused_core::norm::check(k, x.n_elements(), None, dst.n_elements())?;
        let xa = self.read(
            x,
            dst,
            true,
            F32_ALIGN,
            "device plan rms_norm input (must be F32)",
        )?;
        let (ya, out) = self.write(dst)?;
        let l = Launch::rms_norm(k, x.n_elements() / k, eps.get(), xa, None, ya)?;
        self.launch(l, out);
        Ok(())
    }

    /// A (signed) FWHT of every row of `x` into `dst`.
    fn fwht(
        &mut self,
        desc: &FwhtDesc,
        x: &TensorDesc,
        signs: Option<&TensorDesc>,
        dst: &TensorDesc,
    ) -> Result<(), CudaError> {
        let sign_values = signs.map(|s| vec![0.0f32; s.n_elements()]);
        desc.check(x.n_elements(), sign_values.as_deref(), dst.n_elements())?;
        let xa = self.read(
            x,
            dst,
            false,
            F32_ALIGN,
            "device plan FWHT input (must be F32)",
        )?;
        let sa = match signs {
            Some(s) => Some(self.read(
                s,
                dst,
                false,
                F32_ALIGN,
                "device plan FWHT signs (must be F32)",
            )?),
            None => None,
        };
        let (ya, out) = self.write(dst)?;
        let rows = x.n_elements() / desc.n();
        let l = Launch::fwht(desc, rows, xa, sa, ya)?;
        self.launch(l, out);
        Ok(())
    }
    /// `dst = a op b` for an add, multiply or GLU node; `b` may be repeated
    /// over the rows of `a` (GGML's broadcast) for an add or a multiply
    /// (the cyclic kernels index it so).
    fn binary(
        &mut self,
        op: BinaryOp,
        broadcast: Broadcast,
        a: &TensorDesc,
        b: &TensorDesc,
        dst: &TensorDesc,
    ) -> Result<(), CudaError> {
        match (broadcast, op) {
            (Broadcast::Elementwise, _) => {
                self.eltwise(a, Some((b, true)), dst, |a, b, out| match op {
                    BinaryOp::Add => EwKernel::Add { a, b, out },
                    BinaryOp::Mul => EwKernel::Mul { a, b, out },
                    BinaryOp::Glu(act) => EwKernel::glu(act, a, b, out),
                })
            }
            (Broadcast::Rows { .. }, BinaryOp::Add) => {
                let rows = u32_of("broadcast operand length", b.n_elements())?;
                self.eltwise(a, Some((b, false)), dst, |a, bias, out| {
                    EwKernel::AddRowBias { a, bias, out, rows }
                })
            }
            (Broadcast::Rows { .. }, BinaryOp::Mul) => {
                let b_len = u32_of("broadcast operand length", b.n_elements())?;
                self.eltwise(a, Some((b, false)), dst, |a, b, out| EwKernel::MulCyclic {
                    a,
                    b,
                    out,
                    b_len,
                })
            }
            _ => Err(unsupported(
                "a broadcast element-wise operand (other than over rows) on the CUDA device plan",
            )
            .into()),
        }
    }

    fn add_row_bias(
        &mut self,
        a: &TensorDesc,
        bias: &TensorDesc,
        rows: usize,
        out: &TensorDesc,
    ) -> Result<(), CudaError> {
        let rows = u32_of("bias rows", rows)?;
        self.eltwise(a, Some((bias, false)), out, |a, bias, out| {
            EwKernel::AddRowBias { a, bias, out, rows }
        })
    }

    fn unary(
        &mut self,
        act: Activation,
        a: &TensorDesc,
        out: &TensorDesc,
    ) -> Result<(), CudaError> {
        self.eltwise(a, None, out, |a, _, out| EwKernel::unary(act, a, out))
    }

    fn copy(&mut self, a: &TensorDesc, out: &TensorDesc) -> Result<(), CudaError> {
        self.copy_node(a, out)
    }

    /// RoPE of every head of `x` into `dst` at the position the kernel
    /// reads from `pos`, one thread a pair; in place where `x` is `dst`
    /// (a thread reads its pair before it writes it).
    fn rope(
        &mut self,
        mode: RopeMode,
        x: &TensorDesc,
        table: &TensorDesc,
        pos: &TensorDesc,
        dst: &TensorDesc,
    ) -> Result<(), CudaError> {
        let [d, rows, _, _] = table.ne();
        check_len("RoPE output", x.n_elements(), dst.n_elements())?;
        check_len("RoPE table", d * rows, table.n_elements())?;
        check_len("position (one F32 value)", 1, pos.n_elements())?;
        let xa = self.read(
            x,
            dst,
            true,
            F32_ALIGN,
            "device plan RoPE input (must be F32)",
        )?;
        let ta = self.read(
            table,
            dst,
            false,
            F32_ALIGN,
            "device plan RoPE table (must be F32)",
        )?;
        let pa = self.read(pos, dst, false, F32_ALIGN, POSITION)?;
        let (ya, out) = self.write(dst)?;
        let l = Launch::rope(mode, d, x.n_elements(), rows, xa, ta, pa, ya)?;
        self.launch(l, out);
        Ok(())
    }

    /// `dst` with row `pos` (read by the kernel) replaced by `row`, into
    /// `out`: where `out` is `dst` (the KV-cache append) only that row is
    /// written; else one pass writes all of `out`.
    fn set_row(
        &mut self,
        dst: &TensorDesc,
        row: &TensorDesc,
        pos: &TensorDesc,
        out: &TensorDesc,
    ) -> Result<(), CudaError> {
        let n = dst.ne()[0];
        let rows = dst.n_elements() / n.max(1);
        check_len("row-write output", dst.n_elements(), out.n_elements())?;
        check_len("written row", n, row.n_elements())?;
        check_len("position (one F32 value)", 1, pos.n_elements())?;
        let in_place = match dst.overlap(out) {
            Overlap::Exact => true,
            Overlap::Disjoint => false,
            Overlap::Partial => {
                return Err(Error::AliasViolation {
                    what: "a row write's rows partially overlap its output",
                }
                .into());
            }
        };
        let what = "device plan row write (must be F32)";
        let ra = self.read(row, out, false, F32_ALIGN, what)?;
        let pa = self.read(pos, out, false, F32_ALIGN, POSITION)?;
        let aligned = self.region(out)?.offset.is_multiple_of(F32_ALIGN);
        // In place the rows are not read; a misaligned destination is
        // written in scratch, which must start as a copy of the rows.
        let da = if in_place && aligned {
            None
        } else {
            Some(self.read(dst, out, false, F32_ALIGN, what)?)
        };
        let (ya, back) = self.write(out)?;
        let l = Launch::set_row(n, rows, da, ra, pa, ya)?;
        self.launch(l, back);
        Ok(())
    }

    /// The key/value append as one launch (`fused_kv_append`,
    /// `src/decode.rs`): the RoPE of `k` into row `pos` of `k_cache`, with
    /// the RoPE of q into its destination (which may be q itself) and `v`
    /// into row `pos` of its cache where they joined. `k_rope`'s tensor is
    /// not written. Each cache is recorded as written whole, as the row
    /// write's launch records it, since the row is only known at run time.
    /// Where a cache is not 4-byte aligned (the row write then goes through
    /// scratch) or the parts' tensors overlap otherwise than q's RoPE in
    /// place (the planner's step never does), the parts run one by one.
    /// The GEMV, then the key/value append as its launch's tail where the
    /// launch takes it (`Builder::attach_kv_tail`), else as its own launch.
    fn gemv_kv_append(
        &mut self,
        g: &Graph,
        gemv: &GemvCommand,
        kv: &KvAppendOperands,
    ) -> Result<(), CudaError> {
        issue_gemv(self, g, gemv)?;
        if !self.attach_kv_tail(gemv, kv)? {
            self.kv_append(kv)?;
        }
        Ok(())
    }

    /// The GEMV, then the argmax as its launch's tail where the launch
    /// takes it (`Builder::attach_argmax_tail`), else as its own launch.
    fn gemv_argmax(
        &mut self,
        g: &Graph,
        gemv: &GemvCommand,
        argmax: &ArgmaxOperands,
    ) -> Result<(), CudaError> {
        issue_gemv(self, g, gemv)?;
        if !self.attach_argmax_tail(gemv, argmax)? {
            self.argmax(&argmax.x, &argmax.out)?;
        }
        Ok(())
    }

    fn kv_append(&mut self, a: &KvAppendOperands) -> Result<(), CudaError> {
        let dims = a.dims()?;
        if !self.kv_append_fits(a)? {
            return kv_append_by_parts(self, a);
        }
        let (table, pos, k, k_cache) = (&a.table, &a.pos, &a.k, &a.k_cache);
        let (q, v) = (a.q.as_ref(), a.v.as_ref());
        let rope_in = "device plan RoPE input (must be F32)";
        let row_in = "device plan row write (must be F32)";
        let q_src = match q {
            Some((x, out)) => Some(self.read(x, out, true, F32_ALIGN, rope_in)?),
            None => None,
        };
        let ta = self.read(
            table,
            k_cache,
            false,
            F32_ALIGN,
            "device plan RoPE table (must be F32)",
        )?;
        let pa = self.read(pos, k_cache, false, F32_ALIGN, POSITION)?;
        let ka = self.read(k, k_cache, false, F32_ALIGN, rope_in)?;
        let v_src = match v {
            Some((row, cache)) => Some((self.read(row, cache, false, F32_ALIGN, row_in)?, cache)),
            None => None,
        };
        // Both caches are aligned (kv_append_fits): written in place.
        let (kc, _) = self.write(k_cache)?;
        let v_part = match v_src {
            Some((src, cache)) => {
                let (dst, _) = self.write(cache)?;
                Some(KvPart {
                    src,
                    len: dims.v_len,
                    dst,
                })
            }
            None => None,
        };
        // q's destination last: the one output that may go through scratch.
        let (q_part, back) = match (q_src, q) {
            (Some(src), Some((_, out))) => {
                let (dst, back) = self.write(out)?;
                let len = dims.q_len;
                (Some(KvPart { src, len, dst }), back)
            }
            _ => (None, None),
        };
        let l = Launch::kv_append(&KvAppend {
            mode: a.mode,
            head_dim: dims.head_dim,
            table: ta,
            table_rows: dims.table_rows,
            pos: pa,
            q: q_part,
            k: KvPart {
                src: ka,
                len: dims.k_len,
                dst: kc,
            },
            k_rows: dims.k_rows,
            v: v_part,
            v_rows: dims.v_rows,
        })?;
        self.launch(l, back);
        Ok(())
    }

    /// One query token's attention as two launches: the split kernel
    /// (blocks over key/value heads, head slices and splits of the
    /// context, `src/decode.rs`) writes partial results into the plan's
    /// attention scratch, sized for the cache's rows; the combine merges
    /// them into `dst`. Every input is read by the split kernel, which
    /// ends before the combine writes, so an input that is `dst` itself
    /// is read in place.
    fn attention(
        &mut self,
        shape: &AttentionShape,
        q: &TensorDesc,
        k: &TensorDesc,
        v: &TensorDesc,
        pos: &TensorDesc,
        dst: &TensorDesc,
    ) -> Result<(), CudaError> {
        let rows = attention_rows(shape, q, k, v, pos, dst)?;
        let dev = self.backend.dev();
        let splits = AttnSplits::new(shape, rows, |name, threads| {
            dev.decode_resident_blocks(name, threads)
        })?;
        let what = "device plan attention input (must be F32)";
        let qa = self.read(q, dst, true, F32_ALIGN, what)?;
        let ka = self.read(k, dst, true, F32_ALIGN, what)?;
        let va = self.read(v, dst, true, F32_ALIGN, what)?;
        let pa = self.read(pos, dst, true, F32_ALIGN, POSITION)?;
        let reads = std::mem::take(&mut self.pending.0);
        let part = self.attn_scratch(splits.scratch_bytes(shape) as u64)?;
        let (ya, back) = self.write(dst)?;
        let part_a = self.addr(part);
        let Some([split, combine]) =
            Launch::attention(&splits, shape, rows, qa, ka, va, pa, part_a, ya)?
        else {
            self.pending = (Vec::new(), Vec::new());
            return Ok(());
        };
        self.stats.launches += 1;
        self.push(split, reads, vec![part]);
        self.pending.0.push(part);
        self.launch(Some(combine), back);
        Ok(())
    }

    /// The index of each column's maximum, as an f32: blocks over each
    /// column, the last to finish merging them (its own scratch: a pair a
    /// block and a counter a column, zeroed at allocation and left zero by
    /// every launch).
    fn argmax(&mut self, x: &TensorDesc, dst: &TensorDesc) -> Result<(), CudaError> {
        let n = x.ne()[0];
        let cols = x.n_elements() / n.max(1);
        check_len("argmax output", cols, dst.n_elements())?;
        let xa = self.read(
            x,
            dst,
            false,
            F32_ALIGN,
            "device plan argmax input (must be F32)",
        )?;
        let scratch = self.scratch(argmax_scratch_bytes(n, cols) as u64)?;
        let sa = self.addr(scratch);
        self.pending.0.push(scratch);
        self.pending.1.push(scratch);
        let (ya, out) = self.write(dst)?;
        let l = Launch::argmax(n, cols, xa, ya, sa)?;
        self.launch(l, out);
        Ok(())
    }
}

impl<'a> DevicePlan<'a> {
    /// Builds `plan` (made for `g`) for `backend`, over zeroed device
    /// buffers of `sizes` bytes (one per [`BufferId`], in order), with GEMV
    /// activations fed per `mode`. Anything the device plan cannot run is
    /// refused here, before anything is enqueued (see the module docs).
    pub fn new(
        backend: &'a CudaBackend,
        g: &Graph,
        plan: &Plan,
        mode: GemvMode,
        sizes: &[usize],
    ) -> Result<DevicePlan<'a>, CudaError> {
        let _use = backend.dev().make_current()?;
        let buffers = sizes
            .iter()
            .map(|&s| DeviceBuffer::<u8>::zeroed(s.max(1)).map(LockedDrop::new))
            .collect::<Result<Vec<_>, _>>()
            .map_err(driver("allocate the plan's buffers"))?;
        let tuning = backend.tuning();
        let mut b = Builder {
            backend,
            tuning,
            sizes,
            bases: buffers.iter().map(|b| b.as_device_ptr().as_raw()).collect(),
            mode,
            scratch: Vec::new(),
            act_scratch: [None; 2],
            attn_scratch: None,
            weights: Vec::new(),
            launches: Vec::new(),
            written: Vec::new(),
            access: Vec::new(),
            pending: (Vec::new(), Vec::new()),
            quantized: LatestQuantization::new(),
            normed: LatestQuantization::new(),
            stats: DevicePlanStats::default(),
        };
        for step in &plan.steps {
            if lower_into(g, step, &mut b)? {
                b.stats.kernel_steps += 1;
            }
        }
        // Weights are prepared from the uploaded bytes: the plan may not
        // compute them.
        for (w, _) in &b.weights {
            let r = b.region(w)?;
            if b.written.iter().any(|x| x.overlaps(&r)) {
                return Err(unsupported("GEMV weights that the plan itself writes").into());
            }
        }
        // Graph inputs a launch overwrites: kept in pristine copies.
        let (mut save, mut restore) = (Vec::new(), Vec::new());
        for node in g.nodes() {
            // State (a KV cache) is overwritten on purpose and kept as the
            // runs leave it.
            if node.op() != Op::Input || node.is_state() {
                continue;
            }
            let Ok(r) = b.region(node.tensor()) else {
                continue; // never read in place: nothing to keep
            };
            if r.size > 0 && b.written.iter().any(|w| w.overlaps(&r)) {
                let s = b.scratch(r.size)?;
                let (ra, sa) = (b.addr(r), b.addr(s));
                let bytes = r.size as usize;
                save.push(Launch::Copy {
                    src: ra,
                    dst: sa,
                    bytes,
                });
                restore.push(Launch::Copy {
                    src: sa,
                    dst: ra,
                    bytes,
                });
            }
        }
        // The zero fills of the allocations above may still run on the
        // legacy stream, which the backend's stream does not wait for.
        backend.synchronize_context()?;
        let Builder {
            scratch,
            weights,
            mut launches,
            mut access,
            mut stats,
            ..
        } = b;
        // Independent one-column GEMVs of one kernel, one after the other:
        // one launch where the tuning's group is on.
        if tuning.group {
            let before = launches.len();
            (launches, access) = group_launches(launches, access)?;
            stats.grouped = (before - launches.len()) as u64;
            stats.launches -= stats.grouped;
        }
        // GEMVs that may overlap the GEMVs before them do so where
        // the tuning's overlap is in effect (the launch applies it).
        for (l, deps) in launches.iter_mut().zip(overlap_deps(&access)) {
            stats.overlapping += u64::from(deps == Deps::Independent);
            l.set_deps(deps);
        }
        // Integer GEMVs ask L2 for the next GEMV's first weights, the
        // kernels between them for the weights after those.
        chain_l2_ahead(
            &mut launches,
            tuning.l2_ahead,
            tuning.l2_between,
            tuning.l2_reach,
        )?;
        Ok(DevicePlan {
            graph: None,
            replay: false,
            backend,
            launches,
            save,
            restore,
            buffers,
            sizes: sizes.to_vec(),
            weights,
            scratch,
            stats,
        })
    }

    /// What one run enqueues, in this backend's own terms (groups,
    /// overlapping GEMVs); [`ResidentPlan::stats`] gives the common ones.
    #[cfg(feature = "lab")]
    pub fn device_stats(&self) -> DevicePlanStats {
        self.stats
    }

    /// Kernel launches that wait, in stream order, for the one before them
    /// when the plan is enqueued now: all but the first
    /// ([`DevicePlanStats::launches`] − 1; the copies a step adds are not
    /// counted), less the [`DevicePlanStats::overlapping`] GEMVs where
    /// the tuning's overlap is in effect.
    pub(crate) fn waits(&self) -> u64 {
        let overlapping = if self.backend.tuning_in_effect().overlap {
            self.stats.overlapping
        } else {
            0
        };
        self.stats
            .launches
            .saturating_sub(1)
            .saturating_sub(overlapping)
    }

    /// Whether a CUDA graph of the run has been captured.
    #[cfg_attr(not(feature = "lab"), allow(dead_code))]
    pub(crate) fn has_graph(&self) -> bool {
        self.graph.is_some()
    }

    /// One run's launches, in order.
    #[cfg(feature = "lab")]
    pub(crate) fn launches(&self) -> &[Launch] {
        &self.launches
    }

    /// The backend the plan runs on.
    #[cfg(feature = "lab")]
    pub(crate) fn backend(&self) -> &CudaBackend {
        self.backend
    }

    /// The backend's stream, which every launch of the plan goes to.
    #[cfg(feature = "lab")]
    pub(crate) fn stream(&self) -> &cust::stream::Stream {
        &self.backend.dev().stream
    }

    /// Enqueues `launches` in order (nothing waits for them).
    pub(crate) fn enqueue(&self, launches: &[Launch]) -> Result<(), CudaError> {
        for l in launches {
            // SAFETY: every address in the plan's launches points into a
            // buffer the plan owns (graph buffers, weights, scratch), within
            // the extents checked when it was built (tensor extents against
            // the buffer sizes, lengths by the core's checks; an L2
            // look-ahead within the next GEMV's weights: chain_l2_ahead); the plan
            // outlives the work, as every path that enqueues either waits
            // for it or leaves it to `Drop`, which waits before the buffers
            // are freed.
            unsafe { self.backend.enqueue(l)? };
        }
        Ok(())
    }

    /// Enqueues one run as `how` says (nothing waits for it).
    pub(crate) fn enqueue_run(&self, how: Submission) -> Result<(), CudaError> {
        match how {
            Submission::Stream => self.enqueue(&self.launches),
            Submission::Graph => match &self.graph {
                Some(graph) => graph.launch(self.backend),
                None => {
                    Err(unsupported("a CUDA graph replay before DevicePlan::capture_graph").into())
                }
            },
        }
    }

    /// Waits for the stream after `r`, keeping `r`'s error if both fail.
    pub(crate) fn finish(&self, r: Result<(), CudaError>) -> Result<(), CudaError> {
        let s = self.backend.synchronize();
        r.and(s)
    }

    /// How [`ResidentPlan::run`] submits: the graph once
    /// [`ResidentPlan::record_for_replay`] captured it, else the stream.
    fn submission(&self) -> Submission {
        if self.replay && self.graph.is_some() {
            Submission::Graph
        } else {
            Submission::Stream
        }
    }

    /// Runs the plan once, submitted as `how` says, and waits for it.
    pub fn run_as(&self, how: Submission) -> Result<(), CudaError> {
        let r = self.enqueue_run(how);
        self.finish(r)
    }

    /// Captures one run's launches into a CUDA graph (stream capture) and
    /// instantiates it, for [`Submission::Graph`]. Nothing runs. The graph
    /// keeps the backend's tuning of the capture
    /// ([`Tuning`](crate::Tuning)); capture again after
    /// changing them.
    pub fn capture_graph(&mut self) -> Result<(), CudaError> {
        self.backend.synchronize()?;
        self.graph = None;
        let graph = CapturedGraph::capture(self.backend, || self.enqueue(&self.launches))?;
        self.graph = Some(graph);
        Ok(())
    }

    /// Copies the graph inputs the plan overwrites back from their pristine
    /// copies, and waits (nothing to do when it overwrites none).
    pub(crate) fn restore(&self) -> Result<(), CudaError> {
        if self.restore.is_empty() {
            return Ok(());
        }
        let r = self.enqueue(&self.restore);
        self.finish(r)
    }

    /// Restores the inputs (not timed), then one run submitted as `how`
    /// says, timed on the device by CUDA events and on the host.
    pub fn time_once_as(&self, how: Submission) -> Result<PlanTiming, CudaError> {
        self.restore()?;
        let t0 = Instant::now();
        let ms = self.time_run(how)?;
        Ok(PlanTiming {
            device: Some(Duration::from_secs_f64(f64::from(ms) / 1e3)),
            wall: t0.elapsed(),
        })
    }

    /// One run between CUDA events on the stream, waited for (milliseconds).
    pub(crate) fn time_run(&self, how: Submission) -> Result<f32, CudaError> {
        self.time_enqueued(|| self.enqueue_run(how))
    }

    /// What `enqueue` enqueues, between CUDA events on the stream, waited
    /// for (milliseconds).
    pub(crate) fn time_enqueued(
        &self,
        enqueue: impl FnOnce() -> Result<(), CudaError>,
    ) -> Result<f32, CudaError> {
        let t = self.backend.event_time_ms(enqueue);
        // On an error inside, the events were not waited for.
        self.finish(t.as_ref().map(|_| ()).map_err(Clone::clone))?;
        t
    }
}

/// The core's resident-plan contract: writes and reads by byte range (a
/// write that touches GEMV weights prepares them again, and one that
/// touches an input the plan overwrites saves it again), runs on the
/// backend's stream, restores, times by CUDA events.
impl ResidentPlan for DevicePlan<'_> {
    type Error = CudaError;

    fn buffer_sizes(&self) -> &[usize] {
        &self.sizes
    }

    fn write(&mut self, id: BufferId, offset: usize, bytes: &[u8]) -> Result<(), CudaError> {
        let i = buffer_range(&self.sizes, id, offset, bytes.len())?;
        let end = offset + bytes.len();
        // The synchronous copies below wait for a capture elsewhere.
        let _use = self.backend.dev().make_current()?;
        // Nothing enqueued may still read the bytes written below.
        self.backend.synchronize()?;
        if !bytes.is_empty() {
            self.buffers[i]
                .index(offset..end)
                .copy_from(bytes)
                .map_err(driver("copy bytes into a plan buffer"))?;
        }
        let DevicePlan {
            backend,
            buffers,
            weights,
            ..
        } = self;
        for (t, d) in weights.iter_mut() {
            let t: &TensorDesc = t;
            let ext = t.byte_extent();
            if t.buffer() != id || ext.start >= end || offset >= ext.end {
                continue;
            }
            // The bytes just written where they hold the whole tensor (the
            // usual case); else the buffer's, read back.
            let mut read_back = Vec::new();
            let host: &[u8] = if offset <= ext.start && ext.end <= end {
                &bytes[ext.start - offset..ext.end - offset]
            } else {
                read_back.resize(ext.end - ext.start, 0u8);
                buffers[i]
                    .index(ext.start..ext.end)
                    .copy_to(&mut read_back[..])
                    .map_err(driver("read weights back to prepare them"))?;
                &read_back
            };
            let local = TensorDesc::strided(t.dtype(), t.ne(), t.nb(), t.buffer(), 0)?;
            let rows = packed(host, &local)?;
            let w = WeightMatrix::new(t.dtype(), t.ne()[1], t.ne()[0], &rows)?;
            backend.write_weights(d, &w)?;
        }
        // The copies above ran on the legacy stream; make them visible to
        // the backend's (non-blocking) stream before anything reads them.
        self.backend.synchronize_context()?;
        let r = self.enqueue(&self.save);
        self.finish(r)
    }

    fn read(&self, id: BufferId, offset: usize, out: &mut [u8]) -> Result<(), CudaError> {
        let i = buffer_range(&self.sizes, id, offset, out.len())?;
        let _use = self.backend.dev().make_current()?;
        self.backend.synchronize()?;
        if !out.is_empty() {
            self.buffers[i]
                .index(offset..offset + out.len())
                .copy_to(out)
                .map_err(driver("copy plan buffer bytes to the host"))?;
        }
        Ok(())
    }

    fn run(&mut self) -> Result<(), CudaError> {
        self.run_as(self.submission())
    }

    fn restore_inputs(&mut self) -> Result<(), CudaError> {
        self.restore()
    }

    fn time_once(&mut self) -> Result<PlanTiming, CudaError> {
        self.time_once_as(self.submission())
    }

    /// Captures the launches into a CUDA graph: every later run is one
    /// `cuGraphLaunch` (the position of a decode token is a value in the
    /// plan's memory, so one graph serves every token).
    fn record_for_replay(&mut self) -> Result<bool, CudaError> {
        self.capture_graph()?;
        self.replay = true;
        Ok(true)
    }

    /// A barrier is a launch that waits, in stream order, for the one before
    /// it (GEMVs that overlap the ones before them do not).
    fn stats(&self) -> PlanStats {
        let s = self.stats;
        let bytes = |b: &LockedDrop<DeviceBuffer<u8>>| b.len() as u64;
        PlanStats {
            kernel_steps: s.kernel_steps,
            launches: s.launches,
            barriers: self.waits(),
            quantizations: s.quantizations,
            copies: s.copies,
            copy_bytes: s.copy_bytes,
            resident_bytes: self.buffers.iter().map(bytes).sum::<u64>()
                + self.scratch.iter().map(bytes).sum::<u64>()
                + self
                    .weights
                    .iter()
                    .map(|(_, d)| d.held_bytes() as u64)
                    .sum::<u64>(),
            host_steps: false,
        }
    }
}

impl Drop for DevicePlan<'_> {
    fn drop(&mut self) {
        // Work of this plan may still be queued after an error: wait for it
        // before the graph and the buffers it points into are freed (in
        // this context, which the frees below need current too).
        let _use = self.backend.dev().make_current();
        let _ = self.backend.synchronize();
    }
}
