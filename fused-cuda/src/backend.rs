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
use crate::layout;
use crate::params::{EpiParams, FwhtParams, GemvParams, act_code};
use crate::{CudaError, GEMV_DTYPES, MAX_COLS};
use cust::event::{Event, EventFlags};
use cust::memory::{AsyncCopyDestination, CopyDestination, DeviceBuffer};
use cust::module::Module;
use fused_core::element::Activation;
use fused_core::epilogue::Epilogue;
use fused_core::error::{check_divides, check_len};
use fused_core::fwht::FwhtDesc;
use fused_core::reference::WeightMatrix;
use fused_core::reference::gemv::{GluWeights, check_gemm_args};
use fused_core::{DType, Error};
use std::ffi::c_void;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// Threads per block of the GEMV kernels (`WARPS` = 4 warps in `kernels/gemv.cu`).
const GEMV_BLOCK: u32 = 128;

/// Output rows one block of the GEMV kernels computes: `RowsPerBlock` in
/// `kernels/gemv.cu` (the quantized formats share each activation load
/// between 2 rows; Q4_K, and any format from 3 columns up, between 4).
fn gemv_rows_per_block(dtype: DType, n_cols: usize) -> usize {
    match dtype {
        DType::Q4_K => 4,
        DType::Q8_0 | DType::Q4_0 if n_cols >= 3 => 4,
        DType::Q8_0 | DType::Q4_0 => 2,
        _ => 1,
    }
}
/// Threads per block of the element-wise kernels.
const EW_BLOCK: u32 = 256;
/// Threads per block of the warp FWHT kernels.
const FWHT_WARP_BLOCK: u32 = 256;
/// Threads per block (one row each) of the shared-memory FWHT kernels.
const FWHT_BLOCK_THREADS: u32 = 1024;
/// Largest N of the warp FWHT kernels.
const FWHT_WARP_MAX_N: usize = 1024;

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

    fn addr(&self) -> u64 {
        self.buf.as_device_ptr().as_raw()
    }
}

/// A weight matrix in device memory, in one of [`GEMV_DTYPES`]; quantized
/// formats in the kernels' lane-interleaved layout (`src/layout.rs`: the same
/// bytes, rearranged once at upload).
pub struct DeviceWeights {
    dtype: DType,
    rows: usize,
    cols: usize,
    row_bytes: usize,
    buf: DeviceBuffer<u8>,
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

    /// Bytes in device memory.
    pub fn bytes(&self) -> usize {
        self.buf.len()
    }
}

/// The CUDA backend: a device, its stream, a launch counter.
pub struct CudaBackend {
    dev: CudaDevice,
    launches: AtomicU64,
    shadow: Mutex<Vec<f32>>,
}

impl std::fmt::Debug for CudaBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaBackend")
            .field("device", &self.dev)
            .field("launches", &self.launches())
            .finish()
    }
}

fn u32_of(what: &'static str, v: usize) -> Result<u32, CudaError> {
    u32::try_from(v).map_err(|_| Error::Overflow { what }.into())
}

/// Element counts of the element-wise kernels: below 2^31 (their grid-stride
/// index is a u32).
fn ew_len(n: usize) -> Result<u32, CudaError> {
    if n > i32::MAX as usize {
        return Err(Error::Overflow {
            what: "element-wise length as the kernel's index",
        }
        .into());
    }
    Ok(n as u32)
}

/// A kernel argument as the driver takes it.
fn arg<T>(v: &T) -> *mut c_void {
    v as *const T as *mut c_void
}

impl CudaBackend {
    /// Opens the first CUDA device (see [`CudaDevice::new`]).
    pub fn new() -> Result<CudaBackend, CudaError> {
        Ok(CudaBackend {
            dev: CudaDevice::new()?,
            launches: AtomicU64::new(0),
            shadow: Mutex::new(Vec::new()),
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
        if !GEMV_DTYPES.contains(&w.dtype()) {
            return Err(Error::UnsupportedDType {
                what: "CUDA GEMV weights",
                dtype: w.dtype(),
            }
            .into());
        }
        let row_bytes = w.dtype().row_bytes(w.cols())?;
        u32_of("weight rows", w.rows())?;
        u32_of("weight columns", w.cols())?;
        u32_of("weight row bytes", row_bytes)?;
        let bytes = layout::to_device(w.dtype(), w.rows(), w.cols(), w.bytes());
        self.dev.make_current()?;
        let buf = DeviceBuffer::from_slice(&bytes).map_err(driver("copy weights to the device"))?;
        Ok(DeviceWeights {
            dtype: w.dtype(),
            rows: w.rows(),
            cols: w.cols(),
            row_bytes,
            buf,
        })
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

    // ------------------------------------------------------------ launches

    /// Launches `name` from `module`.
    ///
    /// # Safety
    /// `args` must match the kernel's parameters in number, order and type,
    /// and every device address they carry must be valid for the accesses
    /// the kernel makes with this grid.
    unsafe fn launch(
        &self,
        module: &Module,
        name: &str,
        grid: u32,
        block: u32,
        shared: u32,
        args: &[*mut c_void],
    ) -> Result<(), CudaError> {
        self.dev.make_current()?;
        let f = module.get_function(name).map_err(|e| CudaError::Driver {
            what: "find a kernel",
            message: format!("{name}: {e}"),
        })?;
        // SAFETY: the caller guarantees that `args` match the kernel and that
        // the addresses are valid; device memory is freed only by
        // `cuMemFree` (dropping a DeviceBuffer), which waits for the work
        // already enqueued on the device.
        unsafe { self.dev.stream.launch(&f, grid, block, shared, args) }.map_err(|e| {
            CudaError::Driver {
                what: "launch a kernel",
                message: format!("{name}: {e}"),
            }
        })?;
        self.launches.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    // ------------------------------------------------------------ GEMV

    /// `y = epilogue(w · x)` for `n_cols` (1..=8) columns on device buffers:
    /// `x` holds `n_cols` columns of `K`, `y` `n_cols` columns of `M`
    /// (column-major, as the core); `operands[slot]` are the epilogue's
    /// operands. Activations stay f32 (the core's `ActQuant::F32` mode).
    pub fn gemv(
        &self,
        w: &DeviceWeights,
        x: &DeviceVec,
        n_cols: usize,
        epilogue: &Epilogue,
        operands: &[&DeviceVec],
        y: &mut DeviceVec,
    ) -> Result<(), CudaError> {
        self.gemv_launch(
            w,
            None,
            Activation::Identity,
            x,
            n_cols,
            epilogue,
            operands,
            y,
        )
    }

    /// `y = epilogue(act(W_g·x) ⊙ (W_u·x))` on device buffers, one pass over
    /// both weights (shapes as in [`CudaBackend::gemv`]).
    #[allow(clippy::too_many_arguments)]
    pub fn gemv_glu(
        &self,
        gate: &DeviceWeights,
        up: &DeviceWeights,
        act: Activation,
        x: &DeviceVec,
        n_cols: usize,
        epilogue: &Epilogue,
        operands: &[&DeviceVec],
        y: &mut DeviceVec,
    ) -> Result<(), CudaError> {
        if gate.dtype != up.dtype || gate.rows != up.rows || gate.cols != up.cols {
            return Err(Error::ShapeMismatch {
                what: "GLU gate and up weights",
                expected: [gate.cols, gate.rows, 1, 1],
                actual: [up.cols, up.rows, 1, 1],
            }
            .into());
        }
        self.gemv_launch(gate, Some(up), act, x, n_cols, epilogue, operands, y)
    }

    #[allow(clippy::too_many_arguments)]
    fn gemv_launch(
        &self,
        w: &DeviceWeights,
        up: Option<&DeviceWeights>,
        act: Activation,
        x: &DeviceVec,
        n_cols: usize,
        epilogue: &Epilogue,
        operands: &[&DeviceVec],
        y: &mut DeviceVec,
    ) -> Result<(), CudaError> {
        let (m, k) = (w.rows, w.cols);
        let lens: Vec<usize> = operands.iter().map(|o| o.len()).collect();
        self.with_shadow(&lens, |ops| -> Result<(), Error> {
            let bound = epilogue.bind(ops, m, n_cols)?;
            check_gemm_args(m, k, n_cols, x.len(), &bound, y.len())
        })?;
        if n_cols > MAX_COLS {
            return Err(Error::LengthMismatch {
                what: "GEMV columns (the CUDA kernels take 1..=8)",
                expected: MAX_COLS,
                actual: n_cols,
            }
            .into());
        }
        if n_cols == 0 || m == 0 {
            return Ok(());
        }
        let epi = EpiParams::new(epilogue, |slot| operands[slot].addr());
        let params = GemvParams {
            w: w.buf.as_device_ptr().as_raw(),
            w_up: up.map_or(0, |u| u.buf.as_device_ptr().as_raw()),
            x: x.addr(),
            y: y.addr(),
            rows: m as u32,
            k: k as u32,
            row_bytes: w.row_bytes as u32,
            glu_act: act_code(act),
            epi,
        };
        let name = format!(
            "fused_gemv_{}{}_c{n_cols}",
            if up.is_some() { "glu_" } else { "" },
            w.dtype.name()
        );
        let grid = u32_of(
            "GEMV grid",
            m.div_ceil(gemv_rows_per_block(w.dtype, n_cols)),
        )?;
        // SAFETY: one GemvParams argument, as the kernel takes; the weights
        // hold `m` rows of `row_bytes` (both of them for GLU, checked equal
        // above), `x` n_cols·k and `y` n_cols·m f32, and each epilogue
        // operand the length `bind` checked (n_cols·m, or m for a row bias);
        // the kernel touches rows < m, columns < n_cols only.
        unsafe { self.launch(&self.dev.gemv, &name, grid, GEMV_BLOCK, 0, &[arg(&params)]) }
    }

    /// [`CudaBackend::gemv`] on host slices: uploads, runs, downloads.
    pub fn gemv_host(
        &self,
        w: &WeightMatrix<'_>,
        x: &[f32],
        n_cols: usize,
        epilogue: &Epilogue,
        operands: &[&[f32]],
        y: &mut [f32],
    ) -> Result<(), CudaError> {
        let bound = epilogue.bind(operands, w.rows(), n_cols)?;
        check_gemm_args(w.rows(), w.cols(), n_cols, x.len(), &bound, y.len())?;
        let wd = self.upload_weights(w)?;
        let (xd, ops, mut yd) = self.upload_call(x, operands, y.len())?;
        let ops: Vec<&DeviceVec> = ops.iter().collect();
        self.gemv(&wd, &xd, n_cols, epilogue, &ops, &mut yd)?;
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
        epilogue: &Epilogue,
        operands: &[&[f32]],
        y: &mut [f32],
    ) -> Result<(), CudaError> {
        let (m, k) = (w.gate().rows(), w.gate().cols());
        let bound = epilogue.bind(operands, m, n_cols)?;
        check_gemm_args(m, k, n_cols, x.len(), &bound, y.len())?;
        let gate = self.upload_weights(w.gate())?;
        let up = self.upload_weights(w.up())?;
        let (xd, ops, mut yd) = self.upload_call(x, operands, y.len())?;
        let ops: Vec<&DeviceVec> = ops.iter().collect();
        self.gemv_glu(&gate, &up, act, &xd, n_cols, epilogue, &ops, &mut yd)?;
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
        let n = desc.n();
        let rows = x.len() / n;
        if rows == 0 {
            return Ok(());
        }
        let params = FwhtParams {
            x: x.addr(),
            signs: signs.map_or(0, DeviceVec::addr),
            out: out.addr(),
            rows: u32_of("FWHT rows", rows)?,
            n: n as u32,
            sign_blocks: desc.sign_blocks().unwrap_or(1) as u32,
            scale: desc.scale(),
        };
        let (name, grid, block, shared) = if n <= FWHT_WARP_MAX_N {
            let e = (n / 32).max(1);
            let rows_per_warp = 32 / (n / e);
            let warps = rows.div_ceil(rows_per_warp);
            let grid = warps.div_ceil((FWHT_WARP_BLOCK / 32) as usize);
            (format!("fused_fwht_warp_e{e}"), grid, FWHT_WARP_BLOCK, 0)
        } else {
            let e = n / FWHT_BLOCK_THREADS as usize;
            (
                format!("fused_fwht_block_e{e}"),
                rows,
                FWHT_BLOCK_THREADS,
                n * 4,
            )
        };
        let grid = u32_of("FWHT grid", grid)?;
        // SAFETY: one FwhtParams argument, as the kernel takes; `check` made
        // `x` and `out` `rows` whole rows of `n` and the signs (if any)
        // `sign_blocks` rows of `n`; the kernel touches rows < rows only and
        // uses `shared` = n·4 bytes of dynamic shared memory, within the
        // limit raised at load (MAX_DYNAMIC_SHARED).
        unsafe {
            self.launch(
                &self.dev.fwht,
                &name,
                grid,
                block,
                shared as u32,
                &[arg(&params)],
            )
        }
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

    /// Launches an element-wise kernel over `n` elements.
    ///
    /// # Safety
    /// As [`CudaBackend::launch`]; the kernel's element count is `n`.
    unsafe fn ew(&self, name: &str, n: u32, args: &[*mut c_void]) -> Result<(), CudaError> {
        if n == 0 {
            return Ok(());
        }
        let grid = n.div_ceil(EW_BLOCK);
        // SAFETY: forwarded from the caller.
        unsafe { self.launch(&self.dev.elementwise, name, grid, EW_BLOCK, 0, args) }
    }

    /// Checks a binary element-wise call: `b` and `out` as long as `a`.
    fn check_binary(
        what: [&'static str; 2],
        a: &DeviceVec,
        b: &DeviceVec,
        out: &DeviceVec,
    ) -> Result<u32, CudaError> {
        check_len(what[0], a.len(), b.len())?;
        check_len(what[1], a.len(), out.len())?;
        ew_len(a.len())
    }

    /// Unfused `out = a + b`.
    pub fn add(&self, a: &DeviceVec, b: &DeviceVec, out: &mut DeviceVec) -> Result<(), CudaError> {
        let n = Self::check_binary(["add operand", "add output"], a, b, out)?;
        let (pa, pb, po) = (a.addr(), b.addr(), out.addr());
        // SAFETY: (const float*, const float*, float*, u32) as fused_ew_add
        // takes; all three buffers hold n f32.
        unsafe { self.ew("fused_ew_add", n, &[arg(&pa), arg(&pb), arg(&po), arg(&n)]) }
    }

    /// Unfused `out = a · b`.
    pub fn mul(&self, a: &DeviceVec, b: &DeviceVec, out: &mut DeviceVec) -> Result<(), CudaError> {
        let n = Self::check_binary(["mul operand", "mul output"], a, b, out)?;
        let (pa, pb, po) = (a.addr(), b.addr(), out.addr());
        // SAFETY: (const float*, const float*, float*, u32) as fused_ew_mul
        // takes; all three buffers hold n f32.
        unsafe { self.ew("fused_ew_mul", n, &[arg(&pa), arg(&pb), arg(&po), arg(&n)]) }
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
        let n = ew_len(a.len())?;
        let b_len = b.len() as u32;
        let (pa, pb, po) = (a.addr(), b.addr(), out.addr());
        // SAFETY: (const float*, const float*, float*, u32, u32) as
        // fused_ew_mul_cyclic takes; a and out hold n f32, b b_len > 0.
        unsafe {
            self.ew(
                "fused_ew_mul_cyclic",
                n,
                &[arg(&pa), arg(&pb), arg(&po), arg(&n), arg(&b_len)],
            )
        }
    }

    /// Unfused `out = act(a)`.
    pub fn unary(
        &self,
        act: Activation,
        a: &DeviceVec,
        out: &mut DeviceVec,
    ) -> Result<(), CudaError> {
        check_len("activation output", a.len(), out.len())?;
        let n = ew_len(a.len())?;
        let code = act_code(act);
        let (pa, po) = (a.addr(), out.addr());
        // SAFETY: (u32, const float*, float*, u32) as fused_ew_unary takes;
        // both buffers hold n f32.
        unsafe {
            self.ew(
                "fused_ew_unary",
                n,
                &[arg(&code), arg(&pa), arg(&po), arg(&n)],
            )
        }
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
        let code = act_code(act);
        let (pg, pu, po) = (gate.addr(), up.addr(), out.addr());
        // SAFETY: (u32, const float*, const float*, float*, u32) as
        // fused_ew_glu takes; all three buffers hold n f32.
        unsafe {
            self.ew(
                "fused_ew_glu",
                n,
                &[arg(&code), arg(&pg), arg(&pu), arg(&po), arg(&n)],
            )
        }
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
        let n = ew_len(a.len())?;
        let rows = bias.len() as u32;
        let (pa, pb, po) = (a.addr(), bias.addr(), out.addr());
        // SAFETY: (const float*, const float*, float*, u32, u32) as
        // fused_ew_add_row_bias takes; a and out hold n f32, bias rows > 0.
        unsafe {
            self.ew(
                "fused_ew_add_row_bias",
                n,
                &[arg(&pa), arg(&pb), arg(&po), arg(&n), arg(&rows)],
            )
        }
    }

    /// `out = a` by the driver's device-to-device copy (`cuMemcpyDtoDAsync`).
    pub fn copy(&self, a: &DeviceVec, out: &mut DeviceVec) -> Result<(), CudaError> {
        check_len("copy output", a.len(), out.len())?;
        self.dev.make_current()?;
        // SAFETY: both buffers are device allocations of the same length
        // (checked); the copy is ordered on the backend's stream, and device
        // memory is only freed by cuMemFree, which waits for it.
        unsafe { out.buf.async_copy_from(&a.buf, &self.dev.stream) }
            .map_err(driver("device-to-device copy"))?;
        self.launches.fetch_add(1, Ordering::Relaxed);
        Ok(())
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
        let n4 = ew_len(a.len() / 4)?;
        let (pa, po) = (a.addr(), out.addr());
        // SAFETY: (const float4*, float4*, u32) as fused_ew_copy4 takes; both
        // buffers hold 4·n4 f32 and are 256-byte aligned (cuMemAlloc).
        unsafe { self.ew("fused_ew_copy4", n4, &[arg(&pa), arg(&po), arg(&n4)]) }
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
