//! The CUDA backend: validated kernel launches on device memory.
//!
//! Entry points that take [`DeviceVec`] / [`DeviceWeights`] only enqueue work
//! on the backend's stream (no host copies, no synchronisation). Every entry
//! point first runs the core's checks ([`check_gemm_args`], [`Epilogue::bind`],
//! [`FwhtDesc::check`], [`check_len`]) and returns a typed error before
//! anything reaches the device. The core's checks read only slice lengths;
//! for device buffers they are given zero-filled host slices of the same
//! lengths (the backend's *shape shadow*). [`CudaBackend::enqueue`] is the
//! one place that turns a [`Launch`] into a driver call.

use crate::context_lock::{self, LockedDrop};
use crate::device::{CudaDevice, KernelForm, check_result, driver};
use crate::error::{CudaError, u32_of};
use crate::fixed_epi::{self, FixedCopies};
use crate::group::group_launches;
use crate::job::{Elementwise, GemvJob, L2AheadHint};
use crate::launch::{EwKernel, GemvShape, Launch, check_quant_out, ew_len};
use crate::layout;
use crate::memory::{DeviceActs, DeviceVec, DeviceWeights};
use crate::params::{
    DECODE_BLOCK, EW_BLOCK, EpiParams, GEMV_BLOCK, GemvQParams, GroupJobs, L2Ahead, QUANT_BLOCK,
    arg,
};
use crate::pdl;
use crate::qacts::QactsLayout;
use crate::schedule::{Access, Deps, overlap_deps};
#[cfg(feature = "lab")]
use crate::teams::{self, TeamKernels};
use crate::tuning::Tuning;
use crate::{GEMV_DTYPES, check_gemv_mode};
use cust::event::{Event, EventFlags};
use cust::function::Function;
use cust::memory::{CopyDestination, DeviceBuffer};
use cust::module::Module;
use fused_core::acts::ActQuant;
use fused_core::element::Activation;
use fused_core::epilogue::Epilogue;
use fused_core::error::{check_divides, check_len};
use fused_core::fwht::FwhtDesc;
use fused_core::placement::Region;
use fused_core::reference::gemv::check_gemm_args;
use fused_core::weights::WeightMatrix;
use fused_core::{DType, Error};
use std::borrow::Cow;
use std::ffi::c_void;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// Copies timed together in each sample of
/// [`CudaBackend::copy_bandwidth_gbs`].
const COPIES_PER_SAMPLE: usize = 4;

/// The activations of a GEMV batch, as its launches read them.
#[derive(Clone, Copy)]
pub(crate) enum JobActs<'a> {
    /// `n_cols` f32 columns.
    F32 { x: &'a DeviceVec, n_cols: usize },
    /// Quantized as `layout`, at device address `q`.
    Quantized { layout: QactsLayout, q: u64 },
}

/// The CUDA backend: the first GPU, its stream and the crate's kernels,
/// with the [`Tuning`] its launches follow.
pub struct CudaBackend {
    dev: CudaDevice,
    launches: AtomicU64,
    shadow: Mutex<Vec<f32>>,
    /// The quantized activations of the latest [`CudaBackend::gemv_batch`] call
    /// in a quantized mode (reused, grown when too small).
    act_scratch: Mutex<Option<LockedDrop<DeviceBuffer<u8>>>>,
    tuning: Mutex<Tuning>,
    /// The fixed-chain kernel copies and whether this device runs them.
    pub(crate) fixed_copies: FixedCopies,
    /// The kernels of several teams a block and whether this device runs
    /// them.
    #[cfg(feature = "lab")]
    pub(crate) team_kernels: TeamKernels,
}

impl std::fmt::Debug for CudaBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaBackend")
            .field("device", &self.dev)
            .field("launches", &self.launch_count())
            .field("tuning", &self.tuning())
            .finish()
    }
}

/// The kernels' form of an L2 look-ahead hint: the address and length of
/// the layout the next GEMV reads, `bytes` rounded down to 16. A layout the
/// weights lack is [`Unsupported::ActQuant`](fused_core::error::Unsupported::ActQuant); more bytes than it holds, a
/// length error.
fn l2_ahead_params(hint: &L2AheadHint<'_>) -> Result<L2Ahead, CudaError> {
    let next = hint.next;
    check_gemv_mode(next.dtype, hint.next_mode).map_err(Error::from)?;
    let (addr, len) = next.layout_extent(hint.next_mode)?;
    if hint.bytes > len {
        return Err(Error::LengthMismatch {
            what: "L2 look-ahead bytes (at most the next weights' length)",
            expected: len,
            actual: hint.bytes,
        }
        .into());
    }
    let at = match hint.at {
        crate::job::AheadAt::Start => L2Ahead::START,
        crate::job::AheadAt::End => L2Ahead::END,
    };
    L2Ahead::new(addr, hint.bytes, at)
}

impl CudaBackend {
    /// Opens the first CUDA device and loads the crate's kernels (the
    /// cubin where the device runs it, else the portable PTX), with the
    /// tuned table's [`Tuning`]. No driver or no device is
    /// [`CudaError::Driver`].
    pub fn new() -> Result<CudaBackend, CudaError> {
        let dev = CudaDevice::new()?;
        let fixed_copies = FixedCopies::probe(|name| dev.gemv_blocks_per_sm(name, GEMV_BLOCK))?;
        #[cfg(feature = "lab")]
        let team_kernels =
            TeamKernels::probe(|name, threads| dev.gemv_blocks_per_sm(name, threads))?;
        Ok(CudaBackend {
            dev,
            launches: AtomicU64::new(0),
            shadow: Mutex::new(Vec::new()),
            act_scratch: Mutex::new(None),
            tuning: Mutex::new(Tuning::default()),
            fixed_copies,
            #[cfg(feature = "lab")]
            team_kernels,
        })
    }

    /// The device's name, as the driver gives it.
    pub(crate) fn device_name(&self) -> String {
        self.dev().name().to_string()
    }

    /// The device.
    pub(crate) fn dev(&self) -> &CudaDevice {
        &self.dev
    }

    /// Kernel launches (and device-to-device copies) since creation or the
    /// last reset.
    pub(crate) fn launch_count(&self) -> u64 {
        self.launches.load(Ordering::Relaxed)
    }

    /// Sets the launch counter to zero.
    #[cfg_attr(not(feature = "lab"), allow(dead_code))]
    pub(crate) fn reset_launch_count(&self) {
        self.launches.store(0, Ordering::Relaxed);
    }

    /// Counts one launch or copy.
    pub(crate) fn count_launch(&self) {
        self.launches.fetch_add(1, Ordering::Relaxed);
    }

    /// Waits for everything enqueued so far.
    pub fn synchronize(&self) -> Result<(), CudaError> {
        let _use = context_lock::shared();
        self.dev
            .stream
            .synchronize()
            .map_err(driver("run the enqueued kernels"))
    }

    // ------------------------------------------------------------ buffers

    /// Copies `data` into a new device vector.
    pub fn upload(&self, data: &[f32]) -> Result<DeviceVec, CudaError> {
        let _use = self.dev.make_current()?;
        let buf = DeviceBuffer::from_slice(data).map_err(driver("copy to the device"))?;
        Ok(DeviceVec {
            buf: LockedDrop::new(buf),
        })
    }

    /// A new device vector of `len` zeros.
    pub fn alloc(&self, len: usize) -> Result<DeviceVec, CudaError> {
        let _use = self.dev.make_current()?;
        let buf = DeviceBuffer::zeroed(len).map_err(driver("allocate device memory"))?;
        Ok(DeviceVec {
            buf: LockedDrop::new(buf),
        })
    }

    /// Waits for the stream, then copies `v` into `out` (same length).
    pub fn download(&self, v: &DeviceVec, out: &mut [f32]) -> Result<(), CudaError> {
        check_len("download destination", v.len(), out.len())?;
        let _use = self.dev.make_current()?;
        self.synchronize()?;
        v.buf.copy_to(out).map_err(driver("copy to the host"))
    }

    /// Copies a weight matrix into device memory (formats: [`GEMV_DTYPES`]),
    /// quantized formats rearranged into the kernels' layout on the way.
    /// Both layouts are prepared (where the format has an integer one), so
    /// that the weights serve every activation mode.
    pub fn upload_weights(&self, w: &WeightMatrix<'_>) -> Result<DeviceWeights, CudaError> {
        let modes = [ActQuant::F32, ActQuant::ggml(w.dtype())];
        let mut d = self.alloc_weights(w.dtype(), w.rows(), w.cols(), &modes)?;
        self.write_weights(&mut d, w)?;
        Ok(d)
    }

    /// Zeroed device memory for a `rows × cols` weight matrix of `dtype`
    /// (one of [`GEMV_DTYPES`]) in the layouts that GEMVs fed per `modes`
    /// read (the float layout for [`ActQuant::F32`], the integer one for
    /// the quantized modes where the format has it), to be filled by
    /// [`CudaBackend::write_weights`].
    pub(crate) fn alloc_weights(
        &self,
        dtype: DType,
        rows: usize,
        cols: usize,
        modes: &[ActQuant],
    ) -> Result<DeviceWeights, CudaError> {
        if !GEMV_DTYPES.contains(&dtype) {
            return Err(Error::UnsupportedDType {
                what: "CUDA GEMV weights",
                dtype,
            }
            .into());
        }
        let row_bytes = dtype.row_bytes(cols)?;
        u32_of("weight rows", rows)?;
        u32_of("weight columns", cols)?;
        u32_of("weight row bytes", row_bytes)?;
        let bytes = rows.checked_mul(row_bytes).ok_or(Error::Overflow {
            what: "weight bytes",
        })?;
        let _use = self.dev.make_current()?;
        // An empty matrix allocates nothing (no zero-byte memset either).
        let alloc = || {
            if bytes == 0 {
                DeviceBuffer::from_slice(&[])
            } else {
                DeviceBuffer::zeroed(bytes)
            }
            .map(LockedDrop::new)
            .map_err(driver("allocate weights"))
        };
        let has_int = check_gemv_mode(dtype, ActQuant::ggml(dtype)).is_ok()
            && ActQuant::ggml(dtype) != ActQuant::F32;
        let float_buf = match modes.contains(&ActQuant::F32) {
            true => Some(alloc()?),
            false => None,
        };
        let int_buf = match has_int && modes.iter().any(|&m| m != ActQuant::F32) {
            true => Some(alloc()?),
            false => None,
        };
        Ok(DeviceWeights {
            dtype,
            rows,
            cols,
            row_bytes,
            float_buf,
            int_buf,
        })
    }

    /// Writes `w` (same format and shape) into `d`, rearranged into each
    /// layout `d` holds. Waits for the stream first (work already enqueued
    /// may read `d`) and for the copy after.
    pub(crate) fn write_weights(
        &self,
        d: &mut DeviceWeights,
        w: &WeightMatrix<'_>,
    ) -> Result<(), CudaError> {
        if (w.dtype(), w.rows(), w.cols()) != (d.dtype, d.rows, d.cols) {
            return Err(Error::ShapeMismatch {
                what: "weights written into a device weight buffer",
                expected: [d.cols, d.rows, 1, 1],
                actual: [w.cols(), w.rows(), 1, 1],
            }
            .into());
        }
        // The synchronous copies below wait for a capture elsewhere.
        let _use = self.dev.make_current()?;
        self.synchronize()?;
        if let Some(fb) = d.float_buf.as_mut() {
            let bytes = layout::to_device(w.dtype(), w.rows(), w.cols(), w.bytes());
            check_len("device weight bytes", fb.len(), bytes.len())?;
            fb.copy_from(&bytes[..])
                .map_err(driver("copy weights to the device"))?;
        }
        if let Some(ib) = d.int_buf.as_mut() {
            let bytes = layout::to_device_int(w.dtype(), w.rows(), w.cols(), w.bytes()).ok_or(
                Error::UnsupportedDType {
                    what: "integer GEMV weights",
                    dtype: w.dtype(),
                },
            )?;
            check_len("device weight bytes", ib.len(), bytes.len())?;
            ib.copy_from(&bytes[..])
                .map_err(driver("copy weights to the device"))?;
        }
        // A copy from pageable memory may return before its DMA is done,
        // and the backend's (non-blocking) stream does not wait for it.
        self.synchronize_context()
    }

    /// Runs `f` with host slices of the given lengths (zeros: the core's
    /// checks read only lengths).
    fn with_shadow<R>(&self, lens: &[usize], f: impl FnOnce(&[&[f32]]) -> R) -> R {
        let max = lens.iter().copied().max().unwrap_or(0);
        let mut guard = self.shadow.lock().unwrap_or_else(|p| p.into_inner());
        if guard.len() < max {
            guard.resize(max, 0.0);
        }
        let slices: Vec<&[f32]> = lens.iter().map(|&l| &guard[..l]).collect();
        f(&slices)
    }

    /// The core's checks of a GEMV call on device data: the epilogue bound
    /// to operands of `op_lens` elements, and `x` / `y` lengths against
    /// `(m, k, n_cols)`.
    pub(crate) fn check_gemv_lengths(
        &self,
        epilogue: &Epilogue,
        (m, k, n_cols): (usize, usize, usize),
        x_len: usize,
        op_lens: &[usize],
        y_len: usize,
    ) -> Result<(), CudaError> {
        self.with_shadow(op_lens, |ops| -> Result<(), Error> {
            let bound = epilogue.bind(ops, m, n_cols)?;
            check_gemm_args(m, k, n_cols, x_len, &bound, y_len)
        })?;
        Ok(())
    }

    /// Waits for everything on the device in this context, the legacy
    /// default stream included (which the synchronous copies of `cust` use).
    pub(crate) fn synchronize_context(&self) -> Result<(), CudaError> {
        let _use = self.dev.make_current()?;
        cust::context::CurrentContext::synchronize().map_err(driver("wait for the device"))
    }

    // ------------------------------------------------------------ launches

    /// Kernel `name` of `module`, with this backend's context current.
    fn kernel<'m>(&self, module: &'m Module, name: &str) -> Result<Function<'m>, CudaError> {
        self.dev.kernel(module, name)
    }

    /// Launches `name` from `module`.
    ///
    /// # Safety
    /// `args` must match the kernel's parameters in number, order and type,
    /// and every device address they carry must be valid for the accesses
    /// the kernel makes with this grid.
    pub(crate) unsafe fn launch(
        &self,
        module: &Module,
        name: &str,
        grid: u32,
        block: u32,
        shared: u32,
        args: &[*mut c_void],
    ) -> Result<(), CudaError> {
        // A grid of no blocks has nothing to do (an empty reduction's
        // quantizer); the driver would refuse it as an invalid launch.
        if grid == 0 {
            return Ok(());
        }
        let _use = self.dev.make_current()?;
        let f = self.kernel(module, name)?;
        if self.tuning_in_effect().pdl {
            // SAFETY: as below; every kernel of the crate waits for the
            // kernel before it (griddep_wait in kernels/common.cuh) before
            // it touches anything but constant weights.
            let r = unsafe {
                pdl::launch(
                    f.to_raw(),
                    grid,
                    block,
                    shared,
                    self.dev.stream.as_inner(),
                    args,
                )
            };
            if r != cust::sys::cudaError_enum::CUDA_SUCCESS {
                return Err(CudaError::Driver {
                    what: "launch a kernel (programmatic dependent launch)",
                    message: format!("{name}: {r:?}"),
                });
            }
        } else {
            // SAFETY: the caller guarantees that `args` match the kernel and
            // that the addresses are valid; device memory is freed only by
            // `cuMemFree` (dropping a DeviceBuffer), which waits for the
            // work already enqueued on the device.
            unsafe { self.dev.stream.launch(&f, grid, block, shared, args) }.map_err(|e| {
                CudaError::Driver {
                    what: "launch a kernel",
                    message: format!("{name}: {e}"),
                }
            })?;
        }
        self.count_launch();
        Ok(())
    }

    /// The tuning launches follow: the table's, unless
    /// [`CudaBackend::set_tuning`] changed it.
    pub fn tuning(&self) -> Tuning {
        *self.tuning.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sets the tuning for work enqueued from now on (a
    /// [`DevicePlan`](crate::DevicePlan) groups its GEMVs and asks L2 ahead
    /// as the tuning says when it is built).
    pub fn set_tuning(&self, tuning: Tuning) {
        *self.tuning.lock().unwrap_or_else(|e| e.into_inner()) = tuning;
    }

    /// The tuning in effect: programmatic dependent launch only on devices
    /// of compute capability 9.0 and up running the cubin (whose kernels
    /// wait for their predecessor; the portable PTX, built for compute_80,
    /// has no wait), overlap only with it.
    pub(crate) fn tuning_in_effect(&self) -> Tuning {
        let set = self.tuning();
        let pdl =
            set.pdl && self.dev.capability().0 >= 9 && self.dev.kernel_form() == KernelForm::Cubin;
        Tuning {
            pdl,
            overlap: set.overlap && pdl,
            ..set
        }
    }

    /// Enqueues `l`, built from device vectors that the caller borrows for
    /// the whole call (nothing to do for `None`).
    ///
    /// # Safety
    /// As [`CudaBackend::enqueue`].
    unsafe fn enqueue_opt(&self, l: Option<Launch>) -> Result<(), CudaError> {
        match l {
            // SAFETY: forwarded from the caller.
            Some(l) => unsafe { self.enqueue(&l) },
            None => Ok(()),
        }
    }

    // ------------------------------------------------------------ GEMV

    /// `y = epilogue(w · x)` (or the gated form) for every job of `jobs`
    /// ([`GemvJob`]: weights, output, epilogue and its operands, all on the
    /// device) over the same activations `x`: `n_cols` (1..=8) columns of
    /// `K`, column-major as the core, fed per `mode` ([`check_gemv_mode`]):
    /// f32, or quantized on the device first (one more launch, into a
    /// scratch buffer of the backend, once for the whole batch) and dotted
    /// with integer arithmetic; a pair without a kernel is
    /// [`Unsupported::ActQuant`](fused_core::error::Unsupported::ActQuant). Every job is checked before anything is
    /// enqueued. (Over host slices, `StepKernels::gemv` takes the core's
    /// job and runs it through this.)
    ///
    /// The jobs are independent of each other (each writes its own output,
    /// which no other job reads: [`GemvJob`]'s borrows), so where
    /// the tuning's overlap is in effect each job after the first starts
    /// without waiting for the job before it and overlaps its tail: only the
    /// first job waits for the kernel before the batch, and the batch's
    /// last kernel completes only after all of them. Otherwise the jobs run
    /// one after the other, as separate calls would (less the quantizer
    /// launches after the first).
    pub fn gemv_batch(
        &self,
        x: &DeviceVec,
        n_cols: usize,
        mode: ActQuant,
        jobs: &mut [GemvJob<'_>],
    ) -> Result<(), CudaError> {
        for job in jobs.iter() {
            self.check_gemv_job(job, mode, n_cols, x.len())?;
        }
        if mode == ActQuant::F32 {
            let acts = JobActs::F32 { x, n_cols };
            return self.enqueue_gemv_batch(jobs, acts);
        }
        if n_cols == 0 || jobs.iter().all(|j| j.w.rows == 0) {
            return Ok(());
        }
        let mut guard = self.act_scratch.lock().unwrap_or_else(|p| p.into_inner());
        let layout = QactsLayout::new(mode, x.len() / n_cols, n_cols)?;
        if guard.as_ref().is_none_or(|b| b.len() < layout.bytes) {
            let _use = self.dev.make_current()?;
            *guard = None;
            *guard = Some(LockedDrop::new(
                DeviceBuffer::zeroed(layout.bytes)
                    .map_err(driver("allocate quantized activations"))?,
            ));
            // The zero fill runs on the legacy stream, which the
            // backend's stream does not wait for.
            self.synchronize_context()?;
        }
        let q = guard.as_ref().map_or(0, |b| b.as_device_ptr().as_raw());
        // SAFETY: x holds n_cols·k f32 (checked above) and the scratch at
        // least layout.bytes; both outlive the enqueued work (device memory
        // is freed only by cuMemFree, which waits for the device), and the
        // guard keeps other calls from replacing the scratch meanwhile.
        unsafe { self.enqueue_opt(Launch::quantize(&layout, x.addr(), q)?)? };
        self.enqueue_gemv_batch(jobs, JobActs::Quantized { layout, q })
    }

    /// Quantizes `n_cols` columns of `x` (each of `x.len() / n_cols`
    /// elements) on the device in `mode` ([`ActQuant::Q8_0`],
    /// [`ActQuant::Q8_1`] or [`ActQuant::Q8_K`]), exactly as
    /// `fused_core::quant::quantize_row`.
    pub fn quantize_acts(
        &self,
        mode: ActQuant,
        x: &DeviceVec,
        n_cols: usize,
    ) -> Result<DeviceActs, CudaError> {
        if n_cols == 0 || !x.len().is_multiple_of(n_cols) {
            return Err(Error::LengthMismatch {
                what: "activations (whole columns)",
                expected: x.len() / n_cols.max(1) * n_cols.max(1),
                actual: x.len(),
            }
            .into());
        }
        let acts = self.zeroed_acts(mode, x.len() / n_cols, n_cols)?;
        let layout = acts.layout;
        // SAFETY: x holds n_cols·k f32 and `acts` layout.bytes; both are
        // borrowed or owned past the enqueue and freed only by cuMemFree.
        unsafe { self.enqueue_opt(Launch::quantize(&layout, x.addr(), acts.addr())?)? };
        Ok(acts)
    }

    /// Zeroed quantized activations: `n_cols` columns of `k` in `mode`
    /// ([`ActQuant::Q8_0`], [`ActQuant::Q8_1`] or [`ActQuant::Q8_K`]; `k` a
    /// multiple of its block).
    pub(crate) fn zeroed_acts(
        &self,
        mode: ActQuant,
        k: usize,
        n_cols: usize,
    ) -> Result<DeviceActs, CudaError> {
        let layout = QactsLayout::new(mode, k, n_cols)?;
        let _use = self.dev.make_current()?;
        let buf = DeviceBuffer::zeroed(layout.bytes.max(1))
            .map_err(driver("allocate quantized activations"))?;
        // The zero fill runs on the legacy stream, which the backend's
        // stream does not wait for.
        self.synchronize_context()?;
        Ok(DeviceActs {
            layout,
            buf: LockedDrop::new(buf),
        })
    }

    /// [`CudaBackend::gemv_batch`] on activations already quantized: every
    /// job's weights take `acts`' mode; the jobs after the first overlap as
    /// there.
    pub fn gemv_quantized_batch(
        &self,
        acts: &DeviceActs,
        jobs: &mut [GemvJob<'_>],
    ) -> Result<(), CudaError> {
        let l = acts.layout;
        for job in jobs.iter() {
            self.check_quantized_job(job, &l)?;
        }
        let q = acts.addr();
        self.enqueue_gemv_batch(jobs, JobActs::Quantized { layout: l, q })
    }

    /// [`CudaBackend::check_gemv_job`] for a job on activations quantized as
    /// `layout`, and its weights' columns against theirs.
    pub(crate) fn check_quantized_job(
        &self,
        job: &GemvJob<'_>,
        layout: &QactsLayout,
    ) -> Result<(), CudaError> {
        let l = layout;
        self.check_gemv_job(job, l.mode, l.n_cols, l.k * l.n_cols)?;
        check_len("quantized activation column", job.w.cols, l.k)?;
        Ok(())
    }

    /// The checks of one GEMV job on activations of `x_len` elements in
    /// `n_cols` columns fed per `mode`: the GLU pair, the mode against the
    /// format, every length.
    fn check_gemv_job(
        &self,
        job: &GemvJob<'_>,
        mode: ActQuant,
        n_cols: usize,
        x_len: usize,
    ) -> Result<(), CudaError> {
        let w = job.w;
        if let Some((up, _)) = job.glu {
            Self::check_glu_pair(w, up)?;
        }
        check_gemv_mode(w.dtype, mode).map_err(Error::from)?;
        w.layout_addr(mode)?;
        if let Some((up, _)) = job.glu {
            up.layout_addr(mode)?;
        }
        if let Some(q) = &job.quantized_output {
            check_quant_out(w.rows, n_cols, mode != ActQuant::F32, &q.layout)?;
        }
        if let Some(hint) = &job.l2_ahead {
            l2_ahead_params(hint)?;
        }
        let lens: Vec<usize> = job.operands.iter().map(|o| o.len()).collect();
        self.check_gemv_lengths(
            job.epilogue,
            (w.rows, w.cols, n_cols),
            x_len,
            &lens,
            job.y.len(),
        )
    }

    fn check_glu_pair(gate: &DeviceWeights, up: &DeviceWeights) -> Result<(), CudaError> {
        if gate.dtype != up.dtype || gate.rows != up.rows || gate.cols != up.cols {
            return Err(Error::ShapeMismatch {
                what: "GLU gate and up weights",
                expected: [gate.cols, gate.rows, 1, 1],
                actual: [up.cols, up.rows, 1, 1],
            }
            .into());
        }
        Ok(())
    }

    /// The launch of one checked job ([`CudaBackend::check_gemv_job`]) on
    /// `acts`; `None` for nothing to do.
    pub(crate) fn gemv_job_launch(
        &self,
        job: &GemvJob<'_>,
        acts: JobActs<'_>,
    ) -> Result<Option<Launch>, CudaError> {
        let w = job.w;
        let tuning = self.tuning();
        let epi = EpiParams::new(job.epilogue, |slot| job.operands[slot].addr());
        let (up, act) = job
            .glu
            .map_or((None, Activation::Identity), |(u, a)| (Some(u), a));
        let launch = match acts {
            JobActs::F32 { x, n_cols } => {
                let shape = GemvShape {
                    dtype: w.dtype,
                    rows: w.rows,
                    cols: w.cols,
                    row_bytes: w.row_bytes,
                    n_cols,
                };
                let up = up.map(|u| u.layout_addr(ActQuant::F32)).transpose()?;
                let w = w.layout_addr(ActQuant::F32)?;
                Launch::gemv(&tuning, shape, w, up, act, x.addr(), job.y.addr(), epi)
            }
            JobActs::Quantized { layout, q } => {
                let int_addr = |d: &DeviceWeights| d.layout_addr(layout.mode);
                let (wa, ua) = (int_addr(w)?, up.map(int_addr).transpose()?);
                let mut l = Launch::gemv_q(
                    &tuning,
                    w.dtype,
                    w.rows,
                    &layout,
                    wa,
                    ua,
                    act,
                    q,
                    job.y.addr(),
                    epi,
                )?;
                if let (Some(l), Some(out)) = (&mut l, &job.quantized_output) {
                    l.set_quant_out(&out.layout, out.addr())?;
                }
                Ok(l)
            }
        };
        let mut launch = launch?;
        if let (Some(l), Some(hint)) = (&mut launch, &job.l2_ahead) {
            l.set_l2_ahead(l2_ahead_params(hint)?);
        }
        Ok(launch)
    }

    /// Enqueues the launches of the checked `jobs` on `acts`: one alone
    /// waits as every kernel does; in a batch the first waits and only then
    /// lets the next start, and the others run independent of the job before
    /// them (`schedule::Deps`, `schedule::overlap_deps`).
    fn enqueue_gemv_batch(
        &self,
        jobs: &mut [GemvJob<'_>],
        acts: JobActs<'_>,
    ) -> Result<(), CudaError> {
        let (x, x_bytes) = match acts {
            JobActs::F32 { x, .. } => (x.addr(), 4 * x.len() as u64),
            JobActs::Quantized { layout, q } => (q, layout.bytes as u64),
        };
        let region = |offset: u64, size: u64| Region {
            slot: (),
            offset,
            size,
        };
        let vec_region = |v: &DeviceVec| region(v.addr(), 4 * v.len() as u64);
        let mut launches = Vec::with_capacity(jobs.len());
        let mut access = Vec::with_capacity(jobs.len());
        for job in jobs.iter() {
            if let Some(l) = self.gemv_job_launch(job, acts)? {
                let mut reads = vec![region(x, x_bytes)];
                reads.extend(job.operands.iter().map(|o| vec_region(o)));
                let mut writes = vec![vec_region(job.y)];
                if let Some(q) = &job.quantized_output {
                    writes.push(region(q.addr(), q.layout.bytes as u64));
                }
                access.push(Access {
                    kind: l.kind(),
                    reads,
                    writes,
                });
                launches.push(l);
            }
        }
        if self.tuning().group {
            (launches, access) = group_launches(launches, access)?;
        }
        // The jobs' borrows already rule out every hazard between them, so
        // all but the first come out independent; the same rule as the
        // device plan's keeps that checked.
        for (l, deps) in launches.iter_mut().zip(overlap_deps(&access)) {
            l.set_deps(deps);
        }
        for l in &launches {
            // SAFETY: every job was checked (check_gemv_job): its weights
            // hold `rows` rows of K in the layout its launch reads (both of
            // them for GLU, checked equal), the activations n_cols·K f32 or
            // `layout.bytes` quantized bytes, `y` n_cols·rows f32 and each
            // epilogue operand the length `bind` checked; an L2 look-ahead
            // asks for bytes within its weights' layout (l2_ahead_params;
            // a prefetch reads nothing into the kernel); device vectors
            // are 256-byte aligned (cuMemAlloc); the kernels touch rows <
            // rows and columns < n_cols only. The jobs' outputs are
            // borrowed mutably and everything else shared, for the whole
            // call, so no job writes what another reads or writes, which is
            // what Deps::Independent requires; device memory is freed only
            // by cuMemFree, which waits for the device.
            unsafe { self.enqueue(l)? };
        }
        Ok(())
    }

    // ------------------------------------------------------------ FWHT

    /// The (signed) FWHT of every row of `x` into `out` on device buffers
    /// (the core's definition: bit-identical to `fused_core::fwht::fwht`).
    pub fn fwht(
        &self,
        desc: &FwhtDesc,
        x: &DeviceVec,
        signs: Option<&DeviceVec>,
        out: &mut DeviceVec,
    ) -> Result<(), CudaError> {
        let sign_len = signs.map(DeviceVec::len);
        self.with_shadow(&[sign_len.unwrap_or(0)], |s| {
            desc.check(x.len(), sign_len.map(|_| s[0]), out.len())
        })?;
        let rows = x.len() / desc.n();
        let l = Launch::fwht(desc, rows, x.addr(), signs.map(DeviceVec::addr), out.addr())?;
        // SAFETY: `check` made `x` and `out` `rows` whole rows of `n` and
        // the signs (if any) `sign_blocks` rows of `n`; the kernel touches
        // rows < rows only; the vectors are borrowed for this call and
        // freed only by cuMemFree, which waits for the device.
        unsafe { self.enqueue_opt(l) }
    }

    // ------------------------------------------------------------ RMS norm

    /// `out = rms_norm(x, eps)` per column of `k` values of `x`, times
    /// `gamma` (`k` values) where given, on device buffers: bit-identical
    /// to `fused_core::norm::rms_norm`.
    pub fn rms_norm(
        &self,
        k: usize,
        eps: f32,
        x: &DeviceVec,
        gamma: Option<&DeviceVec>,
        out: &mut DeviceVec,
    ) -> Result<(), CudaError> {
        fused_core::norm::check(k, x.len(), gamma.map(DeviceVec::len), out.len())?;
        let l = Launch::rms_norm(
            k,
            x.len() / k,
            eps,
            x.addr(),
            gamma.map(DeviceVec::addr),
            out.addr(),
        )?;
        // SAFETY: `check` made `x` and `out` whole columns of `k` (the same
        // length) and `gamma` (if any) `k` long; the kernel touches columns
        // < n only; the vectors are borrowed for this call and freed only
        // by cuMemFree, which waits for the device.
        unsafe { self.enqueue_opt(l) }
    }

    // ------------------------------------------------------------ element-wise

    /// Enqueues the element-wise `kernel` over `n` elements.
    ///
    /// # Safety
    /// Every address in `kernel` is one of the caller's borrowed device
    /// vectors, long enough for `n` elements (the operand of a cyclic or
    /// row-bias kernel: its own, nonzero, length).
    unsafe fn ew(&self, kernel: EwKernel, n: usize) -> Result<(), CudaError> {
        let l = Launch::ew(kernel, n)?;
        // SAFETY: forwarded from the caller.
        unsafe { self.enqueue_opt(l) }
    }

    /// Checks a binary element-wise call: `b` and `out` as long as `a`.
    fn check_binary(
        what: [&'static str; 2],
        a: &DeviceVec,
        b: &DeviceVec,
        out: &DeviceVec,
    ) -> Result<usize, CudaError> {
        check_len(what[0], a.len(), b.len())?;
        check_len(what[1], a.len(), out.len())?;
        ew_len(a.len())?;
        Ok(a.len())
    }

    /// One unfused element-wise kernel (or copy) into `out`: `op`'s inputs
    /// as long as `out` (a cyclic multiply's or row bias's operand a
    /// nonzero divisor of it), else a length error before anything runs.
    /// Built from the same device functions as the GEMV epilogue.
    pub fn elementwise(&self, op: Elementwise<'_>, out: &mut DeviceVec) -> Result<(), CudaError> {
        let n = out.len();
        let o = out.addr();
        let kernel = match op {
            Elementwise::Add(a, b) => {
                Self::check_binary(["add operand", "add output"], a, b, out)?;
                EwKernel::Add {
                    a: a.addr(),
                    b: b.addr(),
                    out: o,
                }
            }
            Elementwise::Mul(a, b) => {
                Self::check_binary(["mul operand", "mul output"], a, b, out)?;
                EwKernel::Mul {
                    a: a.addr(),
                    b: b.addr(),
                    out: o,
                }
            }
            Elementwise::MulCyclic(a, b) => {
                check_len("cyclic mul output", a.len(), n)?;
                let what = "cyclic mul operand (must divide the output)";
                check_divides(what, b.len(), n)?;
                EwKernel::MulCyclic {
                    a: a.addr(),
                    b: b.addr(),
                    out: o,
                    b_len: u32_of("cyclic mul operand", b.len())?,
                }
            }
            Elementwise::Unary(act, a) => {
                check_len("activation output", a.len(), n)?;
                EwKernel::unary(act, a.addr(), o)
            }
            Elementwise::Glu(act, gate, up) => {
                Self::check_binary(["GLU up", "GLU output"], gate, up, out)?;
                EwKernel::glu(act, gate.addr(), up.addr(), o)
            }
            Elementwise::AddRowBias(a, bias) => {
                check_len("row-bias output", a.len(), n)?;
                check_divides("row bias (must divide the output)", bias.len(), n)?;
                EwKernel::AddRowBias {
                    a: a.addr(),
                    bias: bias.addr(),
                    out: o,
                    rows: u32_of("row bias", bias.len())?,
                }
            }
            Elementwise::Copy(a) => {
                check_len("copy output", a.len(), n)?;
                if n == 0 {
                    return Ok(());
                }
                let l = Launch::Copy {
                    src: a.addr(),
                    dst: o,
                    bytes: n * 4,
                };
                // SAFETY: both vectors are device allocations of n f32
                // (checked), borrowed for this call and freed only by
                // cuMemFree, which waits for the device.
                return unsafe { self.enqueue(&l) };
            }
        };
        ew_len(n)?;
        // SAFETY: every input was checked above to hold `n` f32 as `out`
        // does (a cyclic or row-bias operand: a nonzero divisor of `n`; an
        // empty output launches nothing); all are borrowed for this call.
        unsafe { self.ew(kernel, n) }
    }

    /// `out = a` by the crate's 16-byte copy kernel (the length a multiple
    /// of 4).
    pub(crate) fn copy4(&self, a: &DeviceVec, out: &mut DeviceVec) -> Result<(), CudaError> {
        check_len("copy output", a.len(), out.len())?;
        if !a.len().is_multiple_of(4) {
            return Err(Error::LengthMismatch {
                what: "copy kernel length (a multiple of 4)",
                expected: a.len() / 4 * 4,
                actual: a.len(),
            }
            .into());
        }
        let k = EwKernel::Copy4 {
            a: a.addr(),
            out: out.addr(),
        };
        // SAFETY: both vectors hold 4·(len/4) f32 and are 256-byte aligned
        // (cuMemAlloc).
        unsafe { self.ew(k, a.len() / 4) }
    }

    // ------------------------------------------------------------ timing

    /// The device's copy bandwidth, the ceiling a GEMV's bytes are measured
    /// against: bytes read plus bytes written per second (GB/s) by the
    /// faster of two device-to-device copies of `bytes` bytes, the
    /// driver's (`cuMemcpyDtoDAsync`) and the crate's 16-byte copy kernel, each
    /// the median of `reps` event-timed runs of four copies back to back
    /// (so that the launch and the events' own cost are spread over
    /// several copies) after one warm-up. `bytes` must be a nonzero
    /// multiple of 16 and `reps` at least 1.
    pub fn copy_bandwidth_gbs(&self, bytes: usize, reps: usize) -> Result<f64, CudaError> {
        if bytes == 0 || !bytes.is_multiple_of(16) || reps == 0 {
            return Err(Error::LengthMismatch {
                what: "copy bandwidth: bytes (a nonzero multiple of 16) and reps (1 or more)",
                expected: bytes.max(16) / 16 * 16,
                actual: bytes,
            }
            .into());
        }
        let src = self.alloc(bytes / 4)?;
        let mut dst = self.alloc(bytes / 4)?;
        let mut best = 0.0f64;
        for kernel in [false, true] {
            let mut copy = || {
                if kernel {
                    self.copy4(&src, &mut dst)
                } else {
                    self.elementwise(Elementwise::Copy(&src), &mut dst)
                }
            };
            copy()?;
            let mut ms = (0..reps)
                .map(|_| self.event_time_ms(|| (0..COPIES_PER_SAMPLE).try_for_each(|_| copy())))
                .collect::<Result<Vec<f32>, _>>()?;
            ms.sort_by(f32::total_cmp);
            let median = f64::from(ms[ms.len() / 2]) / COPIES_PER_SAMPLE as f64;
            if median > 0.0 {
                best = best.max(2.0 * bytes as f64 / (median * 1e-3) / 1e9);
            }
        }
        Ok(best)
    }

    /// Milliseconds the work that `f` enqueues takes on the device, measured
    /// with CUDA events recorded around it on the backend's stream.
    pub(crate) fn event_time_ms(
        &self,
        f: impl FnOnce() -> Result<(), CudaError>,
    ) -> Result<f32, CudaError> {
        let _use = self.dev.make_current()?;
        let start = Event::new(EventFlags::DEFAULT).map_err(driver("create an event"))?;
        let stop = Event::new(EventFlags::DEFAULT).map_err(driver("create an event"))?;
        start
            .record(&self.dev.stream)
            .map_err(driver("record an event"))?;
        f()?;
        stop.record(&self.dev.stream)
            .map_err(driver("record an event"))?;
        stop.synchronize().map_err(driver("wait for an event"))?;
        stop.elapsed_time_f32(&start)
            .map_err(driver("read an event time"))
    }

    // ------------------------------------------------------------ enqueue

    /// The kernel, grid, block size and parameters that run an integer
    /// GEMV launch of kernel `name` over `grid` blocks with `params` under
    /// the tuning in effect: early operands, the dependency mode in effect,
    /// the fixed chain's copy ([`fixed_epi::kernel_name`]) and, in the lab,
    /// the kernel of several teams a block (`teams::launch_shape`).
    pub(crate) fn gemvq_shape<'a>(
        &self,
        name: &'a str,
        grid: u32,
        params: &GemvQParams,
    ) -> (Cow<'a, str>, u32, u32, GemvQParams) {
        let t = self.tuning_in_effect();
        let mut params = *params;
        params.epi.set_early(t.early_operands);
        params.deps = self.deps_in_effect(params.deps);
        let name = fixed_epi::kernel_name(name, &params.epi, t.fixed_epilogues, &self.fixed_copies);
        #[cfg(feature = "lab")]
        let (name, grid, block) = teams::launch_shape(
            name,
            grid,
            GEMV_BLOCK,
            // A block-wide tail (the output quantizer, the key/value
            // append, the argmax) keeps the plain kernel.
            params.qout.mode != 0 || params.kv.k != 0 || params.argmax.out != 0,
            t.teams,
            &self.team_kernels,
        );
        #[cfg(not(feature = "lab"))]
        let block = GEMV_BLOCK;
        (name, grid, block, params)
    }

    /// Enqueues `l` on the backend's stream (nothing waits for it) and
    /// counts it in [`CudaBackend::launches`].
    ///
    /// # Safety
    /// Every device address in `l` must be valid for the accesses the
    /// kernel (or copy) makes, until the stream has run it: the buffers
    /// they point into must outlive the work enqueued here (device memory
    /// is only freed by `cuMemFree`, which waits for the device), and the
    /// lengths the kernel derives from its parameters must lie within them.
    pub(crate) unsafe fn enqueue(&self, l: &Launch) -> Result<(), CudaError> {
        let dev = &self.dev;
        let t = self.tuning_in_effect();
        match l {
            Launch::Gemv {
                name, grid, params, ..
            } => {
                let mut params = *params;
                params.epi.set_early(t.early_operands);
                params.deps = self.deps_in_effect(params.deps);
                let name = fixed_epi::kernel_name(
                    name,
                    &params.epi,
                    t.fixed_epilogues,
                    &self.fixed_copies,
                );
                // SAFETY: one GemvParams argument, as every GEMV kernel
                // takes (a fixed chain's copy too); the addresses are valid
                // per the caller.
                unsafe { self.launch(&dev.gemv, &name, *grid, GEMV_BLOCK, 0, &[arg(&params)]) }
            }
            Launch::Quantize {
                name,
                grid,
                params,
                ahead,
            } => {
                let args = [arg(params), arg(ahead)];
                // SAFETY: a QuantParams and an L2Ahead argument, as every
                // quantizer takes; the addresses are valid per the caller
                // (the look-ahead's within the next GEMV's weights).
                unsafe { self.launch(&dev.gemv, name, *grid, QUANT_BLOCK, 0, &args) }
            }
            Launch::RmsNorm { grid, params } => {
                // SAFETY: one NormParams argument, as fused_rms_norm takes;
                // the addresses are valid per the caller.
                unsafe { self.launch(&dev.gemv, l.kernel(), *grid, QUANT_BLOCK, 0, &[arg(params)]) }
            }
            Launch::NormQuantize {
                name,
                grid,
                params,
                ahead,
            } => {
                let args = [arg(params), arg(ahead)];
                // SAFETY: a NormQuantParams and an L2Ahead argument, as the
                // three norm quantizers take (a block of QUANT_BLOCK threads
                // per column); the addresses are valid per the caller.
                unsafe { self.launch(&dev.gemv, name, *grid, QUANT_BLOCK, 0, &args) }
            }
            Launch::GemvQ {
                name, grid, params, ..
            } => {
                let (name, grid, block, params) = self.gemvq_shape(name, *grid, params);
                // SAFETY: one GemvQParams argument, as every integer GEMV
                // kernel takes (a fixed chain's copy and a kernel of several
                // teams a block too, whose grid gives every block of rows of
                // the plain launch a team: teams past the last row leave);
                // the addresses are valid per the caller.
                unsafe { self.launch(&dev.gemv, &name, grid, block, 0, &[arg(&params)]) }
            }
            Launch::Group {
                name, grid, jobs, ..
            } => {
                let mut jobs = jobs.clone();
                jobs.set_early(t.early_operands);
                jobs.set_deps(self.deps_in_effect(jobs.deps()));
                let a = match &jobs {
                    GroupJobs::Float(g) => arg(&**g),
                    GroupJobs::Int(g) => arg(&**g),
                };
                // SAFETY: one Group<GemvParams> or Group<GemvQParams>
                // argument, as the group kernels of each family take (the
                // family follows from the name, group_kernel in
                // src/group.rs); `jobs` outlives the call (the driver copies
                // the parameters at launch); every job's addresses are valid
                // per the caller, and the grid gives each job the blocks its
                // own launch would have (group_params).
                unsafe { self.launch(&dev.gemv, name, *grid, GEMV_BLOCK, 0, &[a]) }
            }
            Launch::Fwht {
                name,
                grid,
                block,
                shared,
                params,
            } => {
                // SAFETY: one FwhtParams argument, as every FWHT kernel
                // takes; `shared` is within the limit raised at load
                // (MAX_DYNAMIC_SHARED); the addresses are valid per the caller.
                unsafe { self.launch(&dev.fwht, name, *grid, *block, *shared, &[arg(params)]) }
            }
            Launch::Ew { kernel, n } => {
                let grid = l.grid();
                let args: Vec<*mut c_void> = match kernel {
                    EwKernel::Add { a, b, out } | EwKernel::Mul { a, b, out } => {
                        vec![arg(a), arg(b), arg(out), arg(n)]
                    }
                    EwKernel::MulCyclic { a, b, out, b_len } => {
                        vec![arg(a), arg(b), arg(out), arg(n), arg(b_len)]
                    }
                    EwKernel::Unary { act, a, out } => vec![arg(act), arg(a), arg(out), arg(n)],
                    EwKernel::Glu { act, gate, up, out } => {
                        vec![arg(act), arg(gate), arg(up), arg(out), arg(n)]
                    }
                    EwKernel::AddRowBias { a, bias, out, rows } => {
                        vec![arg(a), arg(bias), arg(out), arg(n), arg(rows)]
                    }
                    EwKernel::Copy4 { a, out } => vec![arg(a), arg(out), arg(n)],
                };
                // SAFETY: the argument lists above follow the kernels'
                // signatures in kernels/elementwise.cu in number, order and
                // type (u64 device addresses for pointers, u32 counts and
                // codes); each points into `l`, which outlives the call (the
                // driver copies the values at launch); the addresses are
                // valid per the caller.
                unsafe { self.launch(&dev.elementwise, kernel.name(), grid, EW_BLOCK, 0, &args) }
            }
            Launch::Rope { grid, params } => {
                // SAFETY: one RopeParams argument, as fused_rope takes; the
                // position it reads is clamped into the table's rows; the
                // addresses are valid per the caller.
                unsafe {
                    self.launch(
                        &dev.decode,
                        l.kernel(),
                        *grid,
                        DECODE_BLOCK,
                        0,
                        &[arg(params)],
                    )
                }
            }
            Launch::SetRow { grid, params } => {
                // SAFETY: one SetRowParams argument, as fused_set_row takes;
                // the position it reads is clamped into the rows; the
                // addresses are valid per the caller.
                unsafe {
                    self.launch(
                        &dev.decode,
                        l.kernel(),
                        *grid,
                        DECODE_BLOCK,
                        0,
                        &[arg(params)],
                    )
                }
            }
            Launch::KvAppend { grid, params } => {
                // SAFETY: one KvAppendParams argument, as fused_kv_append
                // takes; the position it reads is clamped into the table's
                // rows and each cache's; the addresses are valid per the
                // caller.
                unsafe {
                    self.launch(
                        &dev.decode,
                        l.kernel(),
                        *grid,
                        DECODE_BLOCK,
                        0,
                        &[arg(params)],
                    )
                }
            }
            Launch::Attention {
                name,
                grid,
                block,
                params,
                ahead,
            } => {
                let args = [arg(params), arg(ahead)];
                // SAFETY: an AttnParams and an L2Ahead argument, as the
                // split kernels and the combine take, with the block size
                // each is built for (src/decode.rs); the rows they read are
                // clamped into the cache; the addresses are valid per the
                // caller.
                unsafe { self.launch(&dev.decode, name, *grid, *block, 0, &args) }
            }
            Launch::ArgMax { grid, params } => {
                // SAFETY: one ArgmaxParams argument, as fused_argmax takes;
                // the addresses are valid per the caller.
                unsafe {
                    self.launch(
                        &dev.decode,
                        l.kernel(),
                        *grid,
                        DECODE_BLOCK,
                        0,
                        &[arg(params)],
                    )
                }
            }
            Launch::Copy { src, dst, bytes } => {
                let _use = dev.make_current()?;
                // SAFETY: both ranges are device memory valid for `bytes`
                // bytes per the caller; the copy is ordered on the
                // backend's stream, which outlives this call.
                let r = unsafe {
                    cust::sys::cuMemcpyDtoDAsync_v2(*dst, *src, *bytes, dev.stream.as_inner())
                };
                check_result(r, "device-to-device copy")?;
                self.count_launch();
                Ok(())
            }
        }
    }

    /// A GEMV launch's `deps` as launched: as built where the tuning's
    /// overlap is in effect, else waiting like every other kernel.
    fn deps_in_effect(&self, deps: Deps) -> Deps {
        if self.tuning_in_effect().overlap {
            deps
        } else {
            Deps::Wait
        }
    }
}
