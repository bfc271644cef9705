//! The CUDA backend: device-resident buffers and validated kernel launches.
//!
//! Entry points that take [`DeviceVec`] / [`DeviceWeights`] only enqueue work
//! on the backend's stream (no host copies, no synchronisation), so timing
//! them measures the kernels; the `*_host` entry points upload, run,
//! synchronise and download, for tests and one-off calls. Every entry point
//! first runs the core's checks ([`check_gemm_args`], [`Epilogue::bind`],
//! [`FwhtDesc::check`], [`check_len`]) and returns a typed error before
//! anything reaches the device. The core's checks read only slice lengths;
//! for device buffers they are given zero-filled host slices of the same
//! lengths (the backend's *shape shadow*).

use crate::device::{CudaDevice, driver};
use crate::fixed_epi::FixedCopies;
use crate::group::group_launches;
use crate::job::{GemvJob, L2AheadHint};
use crate::launch::{
    EwKernel, GEMV_BLOCK, GemvShape, Launch, check_quant_out, ew_len, gemv_blocks_per_sm, u32_of,
};
use crate::layout;
use crate::params::{EpiParams, L2Ahead};
use crate::pdl;
use crate::qacts::{QactsLayout, QuantizedActs};
use crate::schedule::{Access, overlap_deps};
use crate::teams::TeamKernels;
use crate::{
    CudaError, FixedEpilogueCopy, GEMV_DTYPES, KernelForm, LaunchOptions, TeamKernel,
    check_gemv_mode,
};
use cust::event::{Event, EventFlags};
use cust::function::Function;
use cust::memory::{CopyDestination, DeviceBuffer};
use cust::module::Module;
use fused_core::element::Activation;
use fused_core::epilogue::Epilogue;
use fused_core::error::{Unsupported, check_divides, check_len};
use fused_core::fwht::FwhtDesc;
use fused_core::placement::Region;
use fused_core::reference::gemv::{GluWeights, check_gemm_args};
use fused_core::reference::{ActQuant, WeightMatrix};
use fused_core::{DType, Error};
use std::ffi::c_void;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// An f32 vector in device memory.
pub struct DeviceVec {
    buf: DeviceBuffer<f32>,
}

impl std::fmt::Debug for DeviceVec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceVec")
            .field("len", &self.len())
            .finish()
    }
}

impl DeviceVec {
    /// Number of f32 elements.
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// Whether it holds no element.
    pub fn is_empty(&self) -> bool {
        self.buf.len() == 0
    }

    pub(crate) fn addr(&self) -> u64 {
        self.buf.as_device_ptr().as_raw()
    }
}

/// A weight matrix in device memory, in one of [`GEMV_DTYPES`]; quantized
/// formats in the f32-activation kernels' lane-interleaved layout
/// (`src/layout.rs`: the same bytes, rearranged once at upload), and also
/// in the integer kernels' layout (`layout::to_device_int`), so that one
/// upload serves every activation mode (at twice the device memory for the
/// quantized formats).
pub struct DeviceWeights {
    dtype: DType,
    rows: usize,
    cols: usize,
    row_bytes: usize,
    buf: DeviceBuffer<u8>,
    int_buf: Option<DeviceBuffer<u8>>,
}

impl std::fmt::Debug for DeviceWeights {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceWeights")
            .field("dtype", &self.dtype)
            .field("rows", &self.rows)
            .field("cols", &self.cols)
            .finish()
    }
}

impl DeviceWeights {
    /// The format.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Output rows `M`.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Inner dimension `K`.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Bytes of the matrix (one layout; what one GEMV reads).
    pub fn bytes(&self) -> usize {
        self.buf.len()
    }

    /// The device address of the integer kernels' copy (the quantized
    /// formats).
    pub(crate) fn int_addr(&self) -> Option<u64> {
        self.int_buf.as_ref().map(|b| b.as_device_ptr().as_raw())
    }

    /// Bytes of one row (in the core's layout).
    pub(crate) fn row_bytes(&self) -> usize {
        self.row_bytes
    }

    pub(crate) fn addr(&self) -> u64 {
        self.buf.as_device_ptr().as_raw()
    }
}

/// Activation columns quantized on the device (the core's
/// [`ActQuant::Q8_0`], [`ActQuant::Q8_1`] or [`ActQuant::Q8_K`] mode), in the integer GEMV
/// kernels' layout (`src/qacts.rs`).
pub struct DeviceActs {
    pub(crate) layout: QactsLayout,
    buf: DeviceBuffer<u8>,
}

impl std::fmt::Debug for DeviceActs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceActs")
            .field("mode", &self.layout.mode)
            .field("k", &self.layout.k)
            .field("n_cols", &self.layout.n_cols)
            .finish()
    }
}

impl DeviceActs {
    /// The activation mode.
    pub fn mode(&self) -> ActQuant {
        self.layout.mode
    }

    /// Elements per column.
    pub fn k(&self) -> usize {
        self.layout.k
    }

    /// Columns.
    pub fn n_cols(&self) -> usize {
        self.layout.n_cols
    }

    pub(crate) fn addr(&self) -> u64 {
        self.buf.as_device_ptr().as_raw()
    }
}

/// The activations of a GEMV batch, as its launches read them.
#[derive(Clone, Copy)]
pub(crate) enum JobActs<'a> {
    /// `n_cols` f32 columns.
    F32 { x: &'a DeviceVec, n_cols: usize },
    /// Quantized as `layout`, at device address `q`.
    Quantized { layout: QactsLayout, q: u64 },
}

/// The CUDA backend: a device, its stream, a launch counter.
pub struct CudaBackend {
    dev: CudaDevice,
    launches: AtomicU64,
    shadow: Mutex<Vec<f32>>,
    /// The quantized activations of the latest [`CudaBackend::gemv`] call
    /// in a quantized mode (reused, grown when too small).
    act_scratch: Mutex<Option<DeviceBuffer<u8>>>,
    options: Mutex<LaunchOptions>,
    /// The fixed-chain kernel copies and whether this device runs them.
    fixed_copies: FixedCopies,
    /// The kernels of several teams a block and whether this device runs
    /// them.
    team_kernels: TeamKernels,
}

impl std::fmt::Debug for CudaBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaBackend")
            .field("device", &self.dev)
            .field("launches", &self.launches())
            .finish()
    }
}

/// The kernels' form of an L2 look-ahead hint: the address and length of
/// the layout the next GEMV reads, `bytes` rounded down to 16. A layout the
/// weights lack is [`Unsupported::ActQuant`]; more bytes than it holds, a
/// length error.
fn l2_ahead_params(hint: &L2AheadHint<'_>) -> Result<L2Ahead, CudaError> {
    let next = hint.next;
    check_gemv_mode(next.dtype, hint.next_mode).map_err(Error::from)?;
    let (addr, len) = if hint.next_mode == ActQuant::F32 {
        (next.addr(), next.buf.len())
    } else {
        let buf = next
            .int_buf
            .as_ref()
            .ok_or(Error::Unsupported(Unsupported::ActQuant(hint.next_mode)))?;
        (buf.as_device_ptr().as_raw(), buf.len())
    };
    if hint.bytes > len {
        return Err(Error::LengthMismatch {
            what: "L2 look-ahead bytes (at most the next weights' length)",
            expected: len,
            actual: hint.bytes,
        }
        .into());
    }
    L2Ahead::new(addr, hint.bytes, hint.at)
}

impl CudaBackend {
    /// Opens the first CUDA device (see [`CudaDevice::new`]).
    pub fn new() -> Result<CudaBackend, CudaError> {
        let dev = CudaDevice::new()?;
        let fixed_copies = FixedCopies::probe(|name| gemv_blocks_per_sm(&dev, name, GEMV_BLOCK))?;
        let team_kernels =
            TeamKernels::probe(|name, threads| gemv_blocks_per_sm(&dev, name, threads))?;
        Ok(CudaBackend {
            dev,
            launches: AtomicU64::new(0),
            shadow: Mutex::new(Vec::new()),
            act_scratch: Mutex::new(None),
            options: Mutex::new(LaunchOptions::from_env()),
            fixed_copies,
            team_kernels,
        })
    }

    /// The device.
    pub fn device(&self) -> &CudaDevice {
        &self.dev
    }

    /// Kernel launches (and device-to-device copies) since creation or the last reset.
    pub fn launches(&self) -> u64 {
        self.launches.load(Ordering::Relaxed)
    }

    /// Sets the launch counter to zero.
    pub fn reset_launches(&self) {
        self.launches.store(0, Ordering::Relaxed);
    }

    /// Waits for everything enqueued so far.
    pub fn synchronize(&self) -> Result<(), CudaError> {
        self.dev
            .stream
            .synchronize()
            .map_err(driver("run the enqueued kernels"))
    }

    // ------------------------------------------------------------ buffers

    /// Copies `data` into a new device vector.
    pub fn upload(&self, data: &[f32]) -> Result<DeviceVec, CudaError> {
        self.dev.make_current()?;
        let buf = DeviceBuffer::from_slice(data).map_err(driver("copy to the device"))?;
        Ok(DeviceVec { buf })
    }

    /// A new device vector of `len` zeros.
    pub fn alloc(&self, len: usize) -> Result<DeviceVec, CudaError> {
        self.dev.make_current()?;
        let buf = DeviceBuffer::zeroed(len).map_err(driver("allocate device memory"))?;
        Ok(DeviceVec { buf })
    }

    /// Waits for the stream, then copies `v` into `out` (same length).
    pub fn download(&self, v: &DeviceVec, out: &mut [f32]) -> Result<(), CudaError> {
        check_len("download destination", v.len(), out.len())?;
        self.synchronize()?;
        v.buf.copy_to(out).map_err(driver("copy to the host"))
    }

    /// Copies a weight matrix into device memory (formats: [`GEMV_DTYPES`]),
    /// quantized formats rearranged into the kernels' layout on the way.
    pub fn upload_weights(&self, w: &WeightMatrix<'_>) -> Result<DeviceWeights, CudaError> {
        let mut d = self.alloc_weights(w.dtype(), w.rows(), w.cols())?;
        self.write_weights(&mut d, w)?;
        Ok(d)
    }

    /// Zeroed device memory for a `rows × cols` weight matrix of `dtype`
    /// (one of [`GEMV_DTYPES`]), to be filled by [`CudaBackend::write_weights`].
    pub(crate) fn alloc_weights(
        &self,
        dtype: DType,
        rows: usize,
        cols: usize,
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
        self.dev.make_current()?;
        // An empty matrix allocates nothing (no zero-byte memset either).
        let alloc = || {
            if bytes == 0 {
                DeviceBuffer::from_slice(&[])
            } else {
                DeviceBuffer::zeroed(bytes)
            }
            .map_err(driver("allocate weights"))
        };
        let buf = alloc()?;
        let int_buf = if check_gemv_mode(dtype, ActQuant::ggml(dtype)).is_ok()
            && ActQuant::ggml(dtype) != ActQuant::F32
        {
            Some(alloc()?)
        } else {
            None
        };
        Ok(DeviceWeights {
            dtype,
            rows,
            cols,
            row_bytes,
            buf,
            int_buf,
        })
    }

    /// Writes `w` (same format and shape) into `d`, rearranged into the
    /// kernels' layout. Waits for the stream first (work already enqueued
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
        let bytes = layout::to_device(w.dtype(), w.rows(), w.cols(), w.bytes());
        check_len("device weight bytes", d.buf.len(), bytes.len())?;
        self.synchronize()?;
        d.buf
            .copy_from(&bytes[..])
            .map_err(driver("copy weights to the device"))?;
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
        self.dev.make_current()?;
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
        let f = self.kernel(module, name)?;
        if self.options().pdl {
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

    /// The launch options in effect: [`LaunchOptions::pdl`] only on devices
    /// of compute capability 9.0 and up running the cubin (whose kernels
    /// wait for their predecessor; the portable PTX, built for compute_80,
    /// has no wait), [`LaunchOptions::overlap`] only with `pdl`.
    pub fn options(&self) -> LaunchOptions {
        let set = *self.options.lock().unwrap_or_else(|e| e.into_inner());
        let pdl =
            set.pdl && self.dev.capability().0 >= 9 && self.dev.kernel_form() == KernelForm::Cubin;
        LaunchOptions {
            pdl,
            overlap: set.overlap && pdl,
            ..set
        }
    }

    /// The GEMV kernels' copies with an epilogue chain compiled in
    /// ([`LaunchOptions::fixed_epilogues`]), each with its and its kernel's
    /// blocks per SM on this device: a launch runs a copy only where the
    /// two are equal ([`FixedEpilogueCopy::used`]).
    pub fn fixed_epilogue_copies(&self) -> &[FixedEpilogueCopy] {
        self.fixed_copies.all()
    }

    /// The GEMV kernels that also come with several teams a block
    /// ([`LaunchOptions::teams`]), each with its and its team kernel's
    /// blocks per SM on this device: a launch runs the team kernel only
    /// where it holds as many teams an SM as the plain kernel blocks
    /// ([`TeamKernel::used`]).
    pub fn team_kernels(&self) -> &[TeamKernel] {
        self.team_kernels.all()
    }

    /// The kernels with teams (for the launch path).
    pub(crate) fn team_kernels_probed(&self) -> &TeamKernels {
        &self.team_kernels
    }

    /// The fixed-chain copies (for the launch path).
    pub(crate) fn fixed_copies(&self) -> &FixedCopies {
        &self.fixed_copies
    }

    /// Sets the launch options (for work enqueued from now on).
    pub fn set_options(&self, options: LaunchOptions) {
        *self.options.lock().unwrap_or_else(|e| e.into_inner()) = options;
    }

    /// The launch counter.
    pub(crate) fn launch_counter(&self) -> &AtomicU64 {
        &self.launches
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

    /// `y = epilogue(w · x)` for `n_cols` (1..=8) columns on device buffers:
    /// `x` holds `n_cols` columns of `K`, `y` `n_cols` columns of `M`
    /// (column-major, as the core); `operands[slot]` are the epilogue's
    /// operands. `mode` says how the activations are fed
    /// ([`check_gemv_mode`]): f32, or quantized on the device first (one
    /// more launch, into a scratch buffer of the backend) and dotted with
    /// integer arithmetic; a pair without a kernel is
    /// [`Unsupported::ActQuant`].
    #[allow(clippy::too_many_arguments)]
    pub fn gemv(
        &self,
        w: &DeviceWeights,
        x: &DeviceVec,
        n_cols: usize,
        mode: ActQuant,
        epilogue: &Epilogue,
        operands: &[&DeviceVec],
        y: &mut DeviceVec,
    ) -> Result<(), CudaError> {
        let job = GemvJob::new(w, y).with_epilogue(epilogue, operands);
        self.gemv_batch(x, n_cols, mode, &mut [job])
    }

    /// `y = epilogue(act(W_g·x) ⊙ (W_u·x))` on device buffers, one pass over
    /// both weights (shapes and `mode` as in [`CudaBackend::gemv`]; the
    /// activations are quantized once for both).
    #[allow(clippy::too_many_arguments)]
    pub fn gemv_glu(
        &self,
        gate: &DeviceWeights,
        up: &DeviceWeights,
        act: Activation,
        x: &DeviceVec,
        n_cols: usize,
        mode: ActQuant,
        epilogue: &Epilogue,
        operands: &[&DeviceVec],
        y: &mut DeviceVec,
    ) -> Result<(), CudaError> {
        let job = GemvJob::new(gate, y)
            .with_glu(up, act)
            .with_epilogue(epilogue, operands);
        self.gemv_batch(x, n_cols, mode, &mut [job])
    }

    /// Every job of `jobs` over the same activations `x` (`n_cols`
    /// columns, fed per `mode` as in [`CudaBackend::gemv`]; a quantized
    /// mode quantizes `x` once for the whole batch). Every job is checked
    /// before anything is enqueued.
    ///
    /// The jobs are independent of each other (each writes its own output,
    /// which no other job reads: [`GemvJob`]'s borrows), so where
    /// [`LaunchOptions::overlap`] is on each job after the first starts
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
            self.dev.make_current()?;
            *guard = None;
            *guard = Some(
                DeviceBuffer::zeroed(layout.bytes)
                    .map_err(driver("allocate quantized activations"))?,
            );
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
        let acts = self.alloc_acts(mode, x.len() / n_cols, n_cols)?;
        let layout = acts.layout;
        // SAFETY: x holds n_cols·k f32 and `acts` layout.bytes; both are
        // borrowed or owned past the enqueue and freed only by cuMemFree.
        unsafe { self.enqueue_opt(Launch::quantize(&layout, x.addr(), acts.addr())?)? };
        Ok(acts)
    }

    /// Zeroed quantized activations: `n_cols` columns of `k` in `mode`
    /// ([`ActQuant::Q8_0`], [`ActQuant::Q8_1`] or [`ActQuant::Q8_K`]; `k` a
    /// multiple of its block), for [`GemvJob::with_quantized_output`].
    pub fn alloc_acts(
        &self,
        mode: ActQuant,
        k: usize,
        n_cols: usize,
    ) -> Result<DeviceActs, CudaError> {
        let layout = QactsLayout::new(mode, k, n_cols)?;
        self.dev.make_current()?;
        let buf = DeviceBuffer::zeroed(layout.bytes.max(1))
            .map_err(driver("allocate quantized activations"))?;
        // The zero fill runs on the legacy stream, which the backend's
        // stream does not wait for.
        self.synchronize_context()?;
        Ok(DeviceActs { layout, buf })
    }

    /// Waits for the stream and copies quantized activations to the host.
    pub fn download_acts(&self, acts: &DeviceActs) -> Result<QuantizedActs, CudaError> {
        self.synchronize()?;
        let mut all = vec![0u8; acts.buf.len()];
        acts.buf
            .copy_to(&mut all[..])
            .map_err(driver("copy to the host"))?;
        let l = &acts.layout;
        let word = |b: &[u8]| [b[0], b[1], b[2], b[3]];
        Ok(QuantizedActs {
            codes: l.codes_in_element_order(&all),
            scales: all[l.scales..l.scales + 4 * l.n_scales()]
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes(word(b)))
                .collect(),
            sums: all[l.sums..l.sums + 4 * l.n_sums()]
                .chunks_exact(4)
                .map(|b| i32::from_le_bytes(word(b)))
                .collect(),
        })
    }

    /// [`CudaBackend::gemv`] on activations already quantized (the GEMV
    /// launch alone): `acts` in the mode that the weights' format takes.
    pub fn gemv_quantized(
        &self,
        w: &DeviceWeights,
        acts: &DeviceActs,
        epilogue: &Epilogue,
        operands: &[&DeviceVec],
        y: &mut DeviceVec,
    ) -> Result<(), CudaError> {
        let job = GemvJob::new(w, y).with_epilogue(epilogue, operands);
        self.gemv_quantized_batch(acts, &mut [job])
    }

    /// [`CudaBackend::gemv_glu`] on activations already quantized.
    #[allow(clippy::too_many_arguments)]
    pub fn gemv_glu_quantized(
        &self,
        gate: &DeviceWeights,
        up: &DeviceWeights,
        act: Activation,
        acts: &DeviceActs,
        epilogue: &Epilogue,
        operands: &[&DeviceVec],
        y: &mut DeviceVec,
    ) -> Result<(), CudaError> {
        let job = GemvJob::new(gate, y)
            .with_glu(up, act)
            .with_epilogue(epilogue, operands);
        self.gemv_quantized_batch(acts, &mut [job])
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
        if mode != ActQuant::F32 && w.int_addr().is_none() {
            return Err(Error::Unsupported(Unsupported::ActQuant(mode)).into());
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
                let up = up.map(|u| u.buf.as_device_ptr().as_raw());
                let w = w.buf.as_device_ptr().as_raw();
                Launch::gemv(shape, w, up, act, x.addr(), job.y.addr(), epi)
            }
            JobActs::Quantized { layout, q } => {
                let int_addr = |d: &DeviceWeights| {
                    d.int_addr()
                        .ok_or(Error::Unsupported(Unsupported::ActQuant(layout.mode)))
                };
                let (wa, ua) = (int_addr(w)?, up.map(int_addr).transpose()?);
                let mut l =
                    Launch::gemv_q(w.dtype, w.rows, &layout, wa, ua, act, q, job.y.addr(), epi)?;
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
        if self.options().group {
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

    /// [`CudaBackend::gemv`] on host slices: uploads, runs, downloads.
    #[allow(clippy::too_many_arguments)]
    pub fn gemv_host(
        &self,
        w: &WeightMatrix<'_>,
        x: &[f32],
        n_cols: usize,
        mode: ActQuant,
        epilogue: &Epilogue,
        operands: &[&[f32]],
        y: &mut [f32],
    ) -> Result<(), CudaError> {
        check_gemv_mode(w.dtype(), mode).map_err(Error::from)?;
        let bound = epilogue.bind(operands, w.rows(), n_cols)?;
        check_gemm_args(w.rows(), w.cols(), n_cols, x.len(), &bound, y.len())?;
        let wd = self.upload_weights(w)?;
        let (xd, ops, mut yd) = self.upload_call(x, operands, y.len())?;
        let ops: Vec<&DeviceVec> = ops.iter().collect();
        self.gemv(&wd, &xd, n_cols, mode, epilogue, &ops, &mut yd)?;
        self.download(&yd, y)
    }

    /// [`CudaBackend::gemv_glu`] on host slices: uploads, runs, downloads.
    #[allow(clippy::too_many_arguments)]
    pub fn gemv_glu_host(
        &self,
        w: &GluWeights<'_>,
        act: Activation,
        x: &[f32],
        n_cols: usize,
        mode: ActQuant,
        epilogue: &Epilogue,
        operands: &[&[f32]],
        y: &mut [f32],
    ) -> Result<(), CudaError> {
        let (m, k) = (w.gate().rows(), w.gate().cols());
        check_gemv_mode(w.gate().dtype(), mode).map_err(Error::from)?;
        let bound = epilogue.bind(operands, m, n_cols)?;
        check_gemm_args(m, k, n_cols, x.len(), &bound, y.len())?;
        let gate = self.upload_weights(w.gate())?;
        let up = self.upload_weights(w.up())?;
        let (xd, ops, mut yd) = self.upload_call(x, operands, y.len())?;
        let ops: Vec<&DeviceVec> = ops.iter().collect();
        self.gemv_glu(&gate, &up, act, &xd, n_cols, mode, epilogue, &ops, &mut yd)?;
        self.download(&yd, y)
    }

    /// Uploads the activations and operands of a host call and allocates its output.
    fn upload_call(
        &self,
        x: &[f32],
        operands: &[&[f32]],
        y_len: usize,
    ) -> Result<(DeviceVec, Vec<DeviceVec>, DeviceVec), CudaError> {
        let xd = self.upload(x)?;
        let ops = operands
            .iter()
            .map(|o| self.upload(o))
            .collect::<Result<Vec<_>, _>>()?;
        Ok((xd, ops, self.alloc(y_len)?))
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

    /// [`CudaBackend::fwht`] on host slices: uploads, runs, downloads.
    pub fn fwht_host(
        &self,
        desc: &FwhtDesc,
        x: &[f32],
        signs: Option<&[f32]>,
        out: &mut [f32],
    ) -> Result<(), CudaError> {
        desc.check(x.len(), signs, out.len())?;
        let xd = self.upload(x)?;
        let sd = signs.map(|s| self.upload(s)).transpose()?;
        let mut od = self.alloc(out.len())?;
        self.fwht(desc, &xd, sd.as_ref(), &mut od)?;
        self.download(&od, out)
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

    /// Unfused `out = a + b`.
    pub fn add(&self, a: &DeviceVec, b: &DeviceVec, out: &mut DeviceVec) -> Result<(), CudaError> {
        let n = Self::check_binary(["add operand", "add output"], a, b, out)?;
        let (a, b, out) = (a.addr(), b.addr(), out.addr());
        // SAFETY: all three vectors hold n f32.
        unsafe { self.ew(EwKernel::Add { a, b, out }, n) }
    }

    /// Unfused `out = a · b`.
    pub fn mul(&self, a: &DeviceVec, b: &DeviceVec, out: &mut DeviceVec) -> Result<(), CudaError> {
        let n = Self::check_binary(["mul operand", "mul output"], a, b, out)?;
        let (a, b, out) = (a.addr(), b.addr(), out.addr());
        // SAFETY: all three vectors hold n f32.
        unsafe { self.ew(EwKernel::Mul { a, b, out }, n) }
    }

    /// Unfused `out[i] = a[i] · b[i mod b.len()]` (`b` repeated along `a`:
    /// the sign multiply of an unfused signed FWHT).
    pub fn mul_cyclic(
        &self,
        a: &DeviceVec,
        b: &DeviceVec,
        out: &mut DeviceVec,
    ) -> Result<(), CudaError> {
        check_len("cyclic mul output", a.len(), out.len())?;
        check_divides(
            "cyclic mul operand (must divide the output)",
            b.len(),
            a.len(),
        )?;
        let b_len = u32_of("cyclic mul operand", b.len())?;
        let k = EwKernel::MulCyclic {
            a: a.addr(),
            b: b.addr(),
            out: out.addr(),
            b_len,
        };
        // SAFETY: a and out hold a.len() f32, b b_len > 0 (it divides a's
        // length; an empty a launches nothing).
        unsafe { self.ew(k, a.len()) }
    }

    /// Unfused `out = act(a)`.
    pub fn unary(
        &self,
        act: Activation,
        a: &DeviceVec,
        out: &mut DeviceVec,
    ) -> Result<(), CudaError> {
        check_len("activation output", a.len(), out.len())?;
        // SAFETY: both vectors hold a.len() f32.
        unsafe { self.ew(EwKernel::unary(act, a.addr(), out.addr()), a.len()) }
    }

    /// Unfused `out = act(gate) · up`.
    pub fn glu(
        &self,
        act: Activation,
        gate: &DeviceVec,
        up: &DeviceVec,
        out: &mut DeviceVec,
    ) -> Result<(), CudaError> {
        let n = Self::check_binary(["GLU up", "GLU output"], gate, up, out)?;
        let k = EwKernel::glu(act, gate.addr(), up.addr(), out.addr());
        // SAFETY: all three vectors hold n f32.
        unsafe { self.ew(k, n) }
    }

    /// Unfused `out = a + bias[row]` (column-major, `bias.len()` rows).
    pub fn add_row_bias(
        &self,
        a: &DeviceVec,
        bias: &DeviceVec,
        out: &mut DeviceVec,
    ) -> Result<(), CudaError> {
        check_len("row-bias output", a.len(), out.len())?;
        check_divides("row bias (must divide the output)", bias.len(), a.len())?;
        let k = EwKernel::AddRowBias {
            a: a.addr(),
            bias: bias.addr(),
            out: out.addr(),
            rows: u32_of("row bias", bias.len())?,
        };
        // SAFETY: a and out hold a.len() f32, bias rows > 0 (it divides a's
        // length; an empty a launches nothing).
        unsafe { self.ew(k, a.len()) }
    }

    /// `out = a` by the driver's device-to-device copy (`cuMemcpyDtoDAsync`).
    pub fn copy(&self, a: &DeviceVec, out: &mut DeviceVec) -> Result<(), CudaError> {
        check_len("copy output", a.len(), out.len())?;
        if a.is_empty() {
            return Ok(());
        }
        let l = Launch::Copy {
            src: a.addr(),
            dst: out.addr(),
            bytes: a.len() * 4,
        };
        // SAFETY: both vectors are device allocations of a.len() f32
        // (checked), borrowed for this call and freed only by cuMemFree,
        // which waits for the device.
        unsafe { self.enqueue(&l) }
    }

    /// `out = a` by the crate's own copy kernel (16-byte loads and stores;
    /// the length must be a multiple of 4).
    pub fn copy_kernel(&self, a: &DeviceVec, out: &mut DeviceVec) -> Result<(), CudaError> {
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

    /// Milliseconds the work that `f` enqueues takes on the device, measured
    /// with CUDA events recorded around it on the backend's stream.
    pub fn time_ms(&self, f: impl FnOnce() -> Result<(), CudaError>) -> Result<f32, CudaError> {
        self.dev.make_current()?;
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
}
