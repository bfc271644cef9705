//! The backend contract: what every backend implements and every caller
//! (a runtime, `fused-verify`, the benches) uses.
//!
//! A backend takes a [`Plan`] made for a [`Graph`] and makes it *resident*:
//! its buffers allocated where the kernels run, its kernels chosen, its
//! launches or dispatches recorded once. The caller then writes bytes into
//! the plan's buffers, runs it as often as it likes, and reads bytes back:
//!
//! ```text
//! Backend::supports(g, plan, mode)?            // why not, before anything
//! let mut p = backend.compile(g, plan, mode, &buffer_sizes)?;
//! p.write(BufferId(0), 0, &weights)?;          // once
//! loop { p.write_f32(&x, &token)?; p.run()?; p.read_f32(&y)?; }
//! ```
//!
//! Every backend crate implements [`Backend`] on its backend type
//! (`fused_cpu::CpuBackend`, `fused_cuda::CudaBackend`,
//! `fused_vulkan::VulkanBackend`), so code written against the trait switches
//! backend by changing the one constructor. Buffers are numbered by
//! [`BufferId`] as the graph places its tensors; `sizes[i]` is buffer `i`'s
//! byte size.
//!
//! What is shared by the resident plans lives here once: the whole-memory
//! and per-tensor forms of write and read ([`ResidentPlan::write_all`],
//! [`ResidentPlan::read_all`], [`ResidentPlan::write_f32`],
//! [`ResidentPlan::read_f32`]), the byte ranges a plan must keep pristine
//! ([`overwritten_inputs`]), and [`HostPlan`]: a plan run step by step over
//! host memory through a backend's [`StepKernels`] (the CPU backend's plan,
//! and a GPU backend's fallback for plans its device executor refuses).

use alloc::boxed::Box;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;
use core::time::Duration;

use crate::acts::GemvMode;
use crate::dtype::DType;
use crate::error::{Error, check_len};
use crate::exec::{Counters, Executor, StepKernels};
use crate::graph::{Graph, Op};
use crate::lower::{Command, lower};
use crate::memory::{Buffers, Memory, gather_f32};
use crate::planner::Plan;
use crate::tensor::{BufferId, ByteRange, TensorDesc};

/// What a backend offers, for a caller choosing how to use it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Capabilities {
    /// The most activation columns one GEMV takes.
    pub max_cols: usize,
    /// Whether its results equal the core reference bit for bit (the same
    /// operation order), rather than within the verifier's tolerances.
    /// Fused against unfused is bit for bit on every backend.
    pub bit_exact_reference: bool,
    /// Whether [`ResidentPlan::time_once`] reports device time.
    pub device_timer: bool,
}

/// One backend: a device (or the host's cores) and its kernels.
pub trait Backend {
    /// The backend's error; every core [`Error`] converts into it, and it
    /// says when it is one ([`CoreErrorSource`]: refused inputs, as opposed
    /// to a device failure).
    type Error: core::error::Error + From<Error> + CoreErrorSource + 'static;

    /// A plan made resident on this backend.
    type Plan<'a>: ResidentPlan<Error = Self::Error>
    where
        Self: 'a;

    /// A short name for reports: `cpu-avx2`, `cuda`, `vulkan`.
    fn name(&self) -> String;

    /// What it runs on, in words: the device's name, the CPU's instruction
    /// set and threads.
    fn device(&self) -> String;

    /// What it offers.
    fn capabilities(&self) -> Capabilities;

    /// Whether [`Backend::compile`] can run every step of `plan` (made for
    /// `g`) with activations fed per `mode`; the reason when not (typically
    /// [`Error::Unsupported`]: a weight format, an activation mode or a
    /// column count it has no kernel for).
    fn supports(&self, g: &Graph, plan: &Plan, mode: GemvMode) -> Result<(), Error>;

    /// Makes `plan` (made for `g`) resident over zeroed buffers of `sizes`
    /// bytes, one per [`BufferId`] in order, with GEMV activations fed per
    /// `mode`. What it cannot run is refused here, before anything runs.
    fn compile<'a>(
        &'a self,
        g: &Graph,
        plan: &Plan,
        mode: GemvMode,
        sizes: &[usize],
    ) -> Result<Self::Plan<'a>, Self::Error>;

    /// Every message the backend's own checker (a validation layer) has
    /// reported so far, or `None` when no checker runs.
    fn messages(&self) -> Option<Vec<String>> {
        None
    }

    /// The memory bandwidth in GB/s (10⁹ bytes a second: bytes read plus
    /// bytes written by a device-to-device copy, or bytes read by every
    /// thread of a CPU), measured now over a buffer well beyond the caches:
    /// the ceiling the benchmarks compare against. `None` where the backend
    /// has no probe or the probe failed.
    fn copy_bandwidth_gbs(&self) -> Option<f64> {
        None
    }
}

/// What one run of a resident plan issues.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PlanStats {
    /// Plan steps that run a kernel (reshapes and views excluded).
    pub kernel_steps: u64,
    /// Kernel launches, dispatches or calls, activation quantizers included.
    pub launches: u64,
    /// Waits between dependent kernels: joined parallel regions (CPU),
    /// pipeline barriers (Vulkan), launches that wait for the one before
    /// them (CUDA).
    pub barriers: u64,
    /// Activation quantizations (GGML's mode).
    pub quantizations: u64,
    /// Copies made where a tensor cannot be used in place.
    pub copies: u64,
    /// Bytes those copies move.
    pub copy_bytes: u64,
    /// Bytes the plan holds where it runs: its buffers, prepared weights and
    /// scratch.
    pub resident_bytes: u64,
    /// Whether the plan runs step by step over host memory ([`HostPlan`]:
    /// a GPU backend whose device executor refused the plan), moving every
    /// operand to the device and back per step.
    pub host_steps: bool,
}

/// The time of one run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PlanTiming {
    /// Device time from before the first kernel to after the last, where the
    /// backend has device timers ([`Capabilities::device_timer`]).
    pub device: Option<Duration>,
    /// Host time from submission to completion.
    pub wall: Duration,
}

impl PlanTiming {
    /// The device time where measured, else the host time.
    pub fn best(&self) -> Duration {
        self.device.unwrap_or(self.wall)
    }
}

/// A plan made resident on a backend ([`Backend::compile`]): written, run,
/// read.
pub trait ResidentPlan {
    /// The backend's error.
    type Error: From<Error>;

    /// The byte size of each buffer, in [`BufferId`] order.
    fn buffer_sizes(&self) -> &[usize];

    /// Writes `bytes` into buffer `id` at byte `offset`. Weights that the
    /// range touches are prepared again for the kernels, and graph inputs
    /// that the plan overwrites in place are kept as written for
    /// [`ResidentPlan::restore_inputs`].
    fn write(&mut self, id: BufferId, offset: usize, bytes: &[u8]) -> Result<(), Self::Error>;

    /// Reads `out.len()` bytes of buffer `id` from byte `offset`, after
    /// every run so far has finished.
    fn read(&self, id: BufferId, offset: usize, out: &mut [u8]) -> Result<(), Self::Error>;

    /// Runs the plan once over its buffers as they are, and waits for it.
    fn run(&mut self) -> Result<(), Self::Error>;

    /// Puts back, as last written, the graph inputs the plan overwrites in
    /// place (a residual stream), so that the next run starts from the same
    /// inputs.
    fn restore_inputs(&mut self) -> Result<(), Self::Error>;

    /// Restores the inputs (not timed), then one run, timed.
    fn time_once(&mut self) -> Result<PlanTiming, Self::Error>;

    /// What one run issues.
    fn stats(&self) -> PlanStats;

    /// Records one run for replay where the backend can (a CUDA graph), so
    /// that later runs ([`ResidentPlan::run`], [`ResidentPlan::time_once`])
    /// replay it in one submission instead of issuing every launch from the
    /// host: `Ok(true)` when it did. A plan the backend records anyway (a
    /// Vulkan command buffer) or runs on the host answers `Ok(false)`. A
    /// runtime running one plan for every token calls it once, after
    /// compiling.
    fn record_for_replay(&mut self) -> Result<bool, Self::Error> {
        Ok(false)
    }

    /// Writes every buffer whole from `mem` (buffer `i` must hold the size
    /// the plan was compiled with).
    fn write_all<M: Buffers>(&mut self, mem: &M) -> Result<(), Self::Error> {
        let n = self.buffer_sizes().len();
        for i in 0..n {
            let id = buffer_id(i)?;
            let bytes = mem.buffer(id)?;
            check_len(
                "host buffer for the resident plan",
                self.buffer_sizes()[i],
                bytes.len(),
            )?;
            self.write(id, 0, bytes)?;
        }
        Ok(())
    }

    /// Reads every buffer whole into `mem`.
    fn read_all<M: Buffers>(&self, mem: &mut M) -> Result<(), Self::Error> {
        for (i, &size) in self.buffer_sizes().iter().enumerate() {
            let id = buffer_id(i)?;
            let mut bytes = vec![0u8; size];
            self.read(id, 0, &mut bytes)?;
            mem.with_buffer_mut(id, |dst, _| {
                check_len("host buffer for the resident plan", size, dst.len())?;
                dst.copy_from_slice(&bytes);
                Ok::<(), Error>(())
            })??;
        }
        Ok(())
    }

    /// The values of tensor `t` (F32, F16 or BF16; any strides) as f32, in
    /// GGML order.
    fn read_f32(&self, t: &TensorDesc) -> Result<Vec<f32>, Self::Error> {
        let ext = t.byte_extent();
        let mut bytes = vec![0u8; ext.end - ext.start];
        self.read(t.buffer(), ext.start, &mut bytes)?;
        let local = at_offset(t, 0)?;
        Ok(gather_f32(&bytes, &local)?.into_owned())
    }

    /// [`ResidentPlan::read_f32`] into `out` (`t`'s element count): a
    /// contiguous F32 tensor is read straight into it, with no allocation
    /// (what a decode loop reads every token: logits, the residual stream).
    fn read_f32_into(&self, t: &TensorDesc, out: &mut [f32]) -> Result<(), Self::Error> {
        check_len("tensor values", t.n_elements(), out.len())?;
        if is_plain_f32(t) {
            return self.read(t.buffer(), t.offset(), bytemuck::cast_slice_mut(out));
        }
        out.copy_from_slice(&self.read_f32(t)?);
        Ok(())
    }

    /// Writes `values` (GGML order) into tensor `t`, a contiguous F32, F16
    /// or BF16 tensor, converting to its format (an F32 tensor's values
    /// are written as they are, with no copy).
    fn write_f32(&mut self, t: &TensorDesc, values: &[f32]) -> Result<(), Self::Error> {
        if is_plain_f32(t) {
            check_len("tensor values", t.n_elements(), values.len())?;
            return self.write(t.buffer(), t.offset(), bytemuck::cast_slice(values));
        }
        let bytes = encode_f32(t, values)?;
        self.write(t.buffer(), t.offset(), &bytes)
    }
}

/// Whether `t`'s bytes are its values as this machine's `f32`s: a
/// contiguous F32 tensor on a little-endian machine (GGML's byte order).
fn is_plain_f32(t: &TensorDesc) -> bool {
    t.dtype() == DType::F32 && t.is_contiguous() && cfg!(target_endian = "little")
}

/// `BufferId(i)`, or an overflow error.
fn buffer_id(i: usize) -> Result<BufferId, Error> {
    u32::try_from(i).map(BufferId).map_err(|_| Error::Overflow {
        what: "buffer index",
    })
}

/// `t` moved to byte `offset` of its buffer (strides kept).
fn at_offset(t: &TensorDesc, offset: usize) -> Result<TensorDesc, Error> {
    TensorDesc::strided(t.dtype(), t.ne(), t.nb(), t.buffer(), offset)
}

/// The bytes of `values` in the format of `t`, a contiguous float tensor.
fn encode_f32(t: &TensorDesc, values: &[f32]) -> Result<Vec<u8>, Error> {
    if !t.is_contiguous() {
        return Err(Error::Unsupported(crate::error::Unsupported::Operation(
            "writing values into a strided tensor",
        )));
    }
    check_len("tensor values", t.n_elements(), values.len())?;
    let mut out = Vec::with_capacity(values.len() * t.dtype().block_bytes());
    match t.dtype() {
        DType::F32 => values
            .iter()
            .for_each(|v| out.extend_from_slice(&v.to_le_bytes())),
        DType::F16 => values
            .iter()
            .for_each(|v| out.extend_from_slice(&half::f16::from_f32(*v).to_le_bytes())),
        DType::BF16 => values
            .iter()
            .for_each(|v| out.extend_from_slice(&half::bf16::from_f32(*v).to_le_bytes())),
        dtype => {
            return Err(Error::UnsupportedDType {
                what: "values written as f32",
                dtype,
            });
        }
    }
    Ok(out)
}

/// The byte ranges of graph inputs that a run of any plan of `g` may
/// overwrite in place (an input whose bytes some computed tensor
/// overlaps): what a resident plan keeps pristine for
/// [`ResidentPlan::restore_inputs`]. Ranges of one buffer may overlap.
pub fn overwritten_inputs(g: &Graph) -> Vec<(BufferId, ByteRange)> {
    let written: Vec<&TensorDesc> = g
        .nodes()
        .iter()
        .filter(|n| !matches!(n.op(), Op::Input | Op::Reshape | Op::View))
        .map(|n| n.tensor())
        .collect();
    g.nodes()
        .iter()
        .filter(|n| n.op() == Op::Input && !n.is_state())
        .map(|n| n.tensor())
        .filter(|t| {
            let r = t.byte_extent();
            r.end > r.start
                && written.iter().any(|w| {
                    let wr = w.byte_extent();
                    w.buffer() == t.buffer() && wr.start < r.end && r.start < wr.end
                })
        })
        .map(|t| (t.buffer(), t.byte_extent()))
        .collect()
}

/// A monotonic clock for [`HostPlan::time_once`](ResidentPlan::time_once):
/// the time since any fixed start (e.g. `std::time::Instant` elapsed since
/// a start taken once). `no_std` has no clock, so the caller supplies it.
pub type Clock = fn() -> Duration;

/// The time since the first call: the [`Clock`] of host plans where `std`
/// is at hand.
#[cfg(feature = "std")]
pub fn std_clock() -> Duration {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START.get_or_init(std::time::Instant::now).elapsed()
}

/// The index of buffer `id` among buffers of `sizes` bytes, after checking
/// that `len` bytes from `offset` lie inside it: the check of every
/// resident plan's [`ResidentPlan::write`] and [`ResidentPlan::read`].
pub fn buffer_range(
    sizes: &[usize],
    id: BufferId,
    offset: usize,
    len: usize,
) -> Result<usize, Error> {
    let i = id.0 as usize;
    let size = *sizes.get(i).ok_or(Error::BadBuffer { buffer: id.0 })?;
    let end = offset.checked_add(len).ok_or(Error::Overflow {
        what: "plan buffer range",
    })?;
    if end > size {
        return Err(Error::BufferTooShort {
            what: "plan buffer range",
            needed: end,
            actual: size,
        });
    }
    Ok(i)
}

/// A plan run step by step over host memory `M` through a backend's
/// host-slice kernels `K` (the core's [`Executor`]): the CPU backend's
/// resident plan, and a GPU backend's plan where its device executor
/// refuses one (each step then moves its operands to the device and back).
#[derive(Debug)]
pub struct HostPlan<'a, K: ?Sized, M> {
    kernels: &'a K,
    graph: Graph,
    plan: Plan,
    mode: GemvMode,
    mem: M,
    sizes: Vec<usize>,
    pristine: Vec<(BufferId, ByteRange, Vec<u8>)>,
    stats: PlanStats,
    clock: Option<Clock>,
}

impl<'a, K: StepKernels + ?Sized, M: Buffers> HostPlan<'a, K, M> {
    /// `plan` (made for `g`) over `mem`, whose buffers have the byte sizes
    /// `sizes`. Refuses, before anything runs, steps `K` has no kernel for.
    /// Runs are not timed until a clock is given ([`HostPlan::with_clock`]).
    pub fn new(
        kernels: &'a K,
        g: &Graph,
        plan: &Plan,
        mode: GemvMode,
        mem: M,
        sizes: &[usize],
    ) -> Result<Self, Error> {
        for (i, &size) in sizes.iter().enumerate() {
            check_len(
                "buffer of the host plan",
                size,
                mem.buffer(buffer_id(i)?)?.len(),
            )?;
        }
        Executor::new(kernels, mode).check(g, plan)?;
        let pristine = overwritten_inputs(g)
            .into_iter()
            .map(|(b, r)| (b, r, vec![0u8; r.end - r.start]))
            .collect();
        let resident: usize = sizes.iter().sum();
        let mut kernel_steps = 0u64;
        for step in &plan.steps {
            kernel_steps += u64::from(!matches!(lower(g, step)?, Command::Nothing));
        }
        Ok(HostPlan {
            kernels,
            graph: g.clone(),
            plan: plan.clone(),
            mode,
            mem,
            sizes: sizes.to_vec(),
            pristine,
            stats: PlanStats {
                kernel_steps,
                resident_bytes: resident as u64,

                ..PlanStats::default()
            },
            clock: None,
        })
    }

    /// Times runs by `clock` ([`ResidentPlan::time_once`]).
    pub fn with_clock(mut self, clock: Clock) -> Self {
        self.clock = Some(clock);
        self
    }

    /// Marks the plan as a device backend's fallback: `K` moves each step's
    /// operands to the device and back ([`PlanStats::host_steps`]).
    pub fn on_device(mut self) -> Self {
        self.stats.host_steps = true;
        self
    }

    /// The host memory the plan runs over.
    pub fn memory(&self) -> &M {
        &self.mem
    }

    /// Runs once, counting what ran.
    fn run_counted(&mut self) -> Result<(), K::Error> {
        let s =
            Executor::new(self.kernels, self.mode).run(&self.graph, &self.plan, &mut self.mem)?;
        self.stats.kernel_steps = s.kernel_steps;
        let Counters {
            barriers,
            kernel_calls,
        } = s.counters;
        self.stats.barriers = barriers;
        self.stats.launches = kernel_calls;
        Ok(())
    }

    /// The `len` bytes of buffer `id` from `offset`, writable.
    fn with_range<R>(
        &mut self,
        id: BufferId,
        offset: usize,
        len: usize,
        f: impl FnOnce(&mut [u8]) -> R,
    ) -> Result<R, Error> {
        buffer_range(&self.sizes, id, offset, len)?;
        self.mem
            .with_buffer_mut(id, |buf, _| f(&mut buf[offset..offset + len]))
    }
}

impl<K: StepKernels + ?Sized, M: Buffers> ResidentPlan for HostPlan<'_, K, M> {
    type Error = K::Error;

    fn buffer_sizes(&self) -> &[usize] {
        &self.sizes
    }

    fn write(&mut self, id: BufferId, offset: usize, bytes: &[u8]) -> Result<(), K::Error> {
        self.with_range(id, offset, bytes.len(), |dst| dst.copy_from_slice(bytes))?;
        let end = offset + bytes.len();
        for (b, r, keep) in &mut self.pristine {
            let (lo, hi) = (r.start.max(offset), r.end.min(end));
            if *b == id && lo < hi {
                keep[lo - r.start..hi - r.start].copy_from_slice(&bytes[lo - offset..hi - offset]);
            }
        }
        Ok(())
    }

    fn read(&self, id: BufferId, offset: usize, out: &mut [u8]) -> Result<(), K::Error> {
        buffer_range(&self.sizes, id, offset, out.len())?;
        out.copy_from_slice(&self.mem.buffer(id)?[offset..offset + out.len()]);
        Ok(())
    }

    fn run(&mut self) -> Result<(), K::Error> {
        self.run_counted()
    }

    fn restore_inputs(&mut self) -> Result<(), K::Error> {
        let pristine = core::mem::take(&mut self.pristine);
        let r = pristine.iter().try_for_each(|(b, r, keep)| {
            self.with_range(*b, r.start, keep.len(), |dst| dst.copy_from_slice(keep))
        });
        self.pristine = pristine;
        Ok(r?)
    }

    fn time_once(&mut self) -> Result<PlanTiming, K::Error> {
        let clock = self
            .clock
            .ok_or(Error::Unsupported(crate::error::Unsupported::Operation(
                "timing a host plan without a clock",
            )))?;
        self.restore_inputs()?;
        let t0 = clock();
        self.run_counted()?;
        Ok(PlanTiming {
            device: None,
            wall: clock().saturating_sub(t0),
        })
    }

    fn stats(&self) -> PlanStats {
        self.stats
    }
}

/// A backend error that may be one of the core's errors (inputs refused
/// before anything ran), as opposed to the device's own.
pub trait CoreErrorSource {
    /// The core's error, when this is one.
    fn core_error(&self) -> Option<&Error>;
}

impl CoreErrorSource for Error {
    fn core_error(&self) -> Option<&Error> {
        Some(self)
    }
}

/// A device backend's resident plan: its device plan `P`, or, for a plan
/// its device executor refuses as unsupported (a strided tensor, a
/// broadcast it has no kernel for), the plan run step by step over host
/// memory through its host-slice kernels `K` ([`PlanStats::host_steps`]),
/// with the reason kept ([`Resident::fallback_reason`]).
#[derive(Debug)]
pub enum Resident<'a, P, K: ?Sized> {
    /// The device executor's plan.
    Device(P),
    /// The step-by-step plan, and why the device executor refused.
    Host(Box<HostPlan<'a, K, Memory>>, Error),
}

impl<'a, P, K> Resident<'a, P, K>
where
    P: ResidentPlan<Error = K::Error>,
    K: StepKernels + ?Sized,
{
    /// The device plan `device` (built for `g`, `plan`, `mode` and
    /// `sizes`), or, where building it failed with one of the core's
    /// [`Error::Unsupported`] / [`Error::UnsupportedDType`] errors, the
    /// host plan of the same over `kernels` (timed by [`std_clock`],
    /// [`HostPlan::on_device`]); any other error is returned.
    #[cfg(feature = "std")]
    pub fn device_or_host(
        device: Result<P, K::Error>,
        kernels: &'a K,
        g: &Graph,
        plan: &Plan,
        mode: GemvMode,
        sizes: &[usize],
    ) -> Result<Self, K::Error>
    where
        K::Error: CoreErrorSource,
    {
        match device {
            Ok(p) => Ok(Resident::Device(p)),
            Err(e) => match e.core_error() {
                Some(why @ (Error::Unsupported(_) | Error::UnsupportedDType { .. })) => {
                    let why = *why;
                    let host = HostPlan::new(kernels, g, plan, mode, Memory::new(sizes), sizes)?
                        .with_clock(std_clock)
                        .on_device();
                    Ok(Resident::Host(Box::new(host), why))
                }
                _ => Err(e),
            },
        }
    }

    /// Why the plan runs step by step over host memory, if it does.
    pub fn fallback_reason(&self) -> Option<&Error> {
        match self {
            Resident::Device(_) => None,
            Resident::Host(_, why) => Some(why),
        }
    }
}

impl<P, K> ResidentPlan for Resident<'_, P, K>
where
    P: ResidentPlan<Error = K::Error>,
    K: StepKernels + ?Sized,
{
    type Error = K::Error;

    fn buffer_sizes(&self) -> &[usize] {
        match self {
            Resident::Device(p) => p.buffer_sizes(),
            Resident::Host(p, _) => p.buffer_sizes(),
        }
    }

    fn write(&mut self, id: BufferId, offset: usize, bytes: &[u8]) -> Result<(), K::Error> {
        match self {
            Resident::Device(p) => p.write(id, offset, bytes),
            Resident::Host(p, _) => p.write(id, offset, bytes),
        }
    }

    fn read(&self, id: BufferId, offset: usize, out: &mut [u8]) -> Result<(), K::Error> {
        match self {
            Resident::Device(p) => p.read(id, offset, out),
            Resident::Host(p, _) => p.read(id, offset, out),
        }
    }

    fn run(&mut self) -> Result<(), K::Error> {
        match self {
            Resident::Device(p) => p.run(),
            Resident::Host(p, _) => p.run(),
        }
    }

    fn restore_inputs(&mut self) -> Result<(), K::Error> {
        match self {
            Resident::Device(p) => p.restore_inputs(),
            Resident::Host(p, _) => p.restore_inputs(),
        }
    }

    fn time_once(&mut self) -> Result<PlanTiming, K::Error> {
        match self {
            Resident::Device(p) => p.time_once(),
            Resident::Host(p, _) => p.time_once(),
        }
    }

    fn stats(&self) -> PlanStats {
        match self {
            Resident::Device(p) => p.stats(),
            Resident::Host(p, _) => p.stats(),
        }
    }

    fn record_for_replay(&mut self) -> Result<bool, K::Error> {
        match self {
            Resident::Device(p) => p.record_for_replay(),
            Resident::Host(p, _) => p.record_for_replay(),
        }
    }
}
