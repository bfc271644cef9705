//! Device-timed kernels (timestamp queries around one submission) for the
//! bench binary (feature `lab`). Each function builds its buffers once,
//! runs `reps` timed submissions and returns the median device time. The
//! kernels are chosen with the backend's tuning
//! ([`VulkanBackend::set_tuning`]); [`GemvBench`] takes a shape too.

use fused_core::DType;
use fused_core::acts::ActQuant;
use fused_core::element::Activation;
use fused_core::fwht::FwhtDesc;
use fused_core::quant::quantize_row;

use crate::backend::{ChainWords, EltOp, VulkanBackend};
use crate::context::{Buffer, Command};
use crate::error::VulkanError;
use crate::measure::{self, MAX_ROUNDS};
use crate::pipeline::{GemvType, check_mode, gemv_type, quantized_bytes};
use crate::tuning::GemvShape;

/// One measurement: the median device time and the bytes it moved.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Timing {
    /// Median device time of one run, in nanoseconds.
    pub median_ns: f64,
    /// Bytes read plus bytes written by one run (the minimum traffic).
    pub bytes: u64,
}

impl Timing {
    /// Bandwidth in GB/s (10^9 bytes per second).
    pub fn gb_per_s(&self) -> f64 {
        self.bytes as f64 / self.median_ns
    }
}

/// A deterministic fill (values in [-1, 1)).
fn fill(n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| ((i.wrapping_mul(2_654_435_761) >> 7) % 2001) as f32 / 1000.0 - 1.0)
        .collect()
}

/// A device-to-device copy of `bytes` bytes by `vkCmdCopyBuffer`.
pub fn copy(b: &VulkanBackend, bytes: u64, reps: usize) -> Result<Timing, VulkanError> {
    let ctx = b.context();
    let src = ctx.buffer(bytes)?;
    let dst = ctx.buffer(bytes)?;
    let t = measure::median_time(ctx, &[Command::Copy(&src, &dst)], reps)?;
    Ok(Timing {
        median_ns: t,
        bytes: 2 * bytes,
    })
}

/// A device-to-device copy of `bytes` bytes (a multiple of 16) by a compute
/// shader with 16-byte loads and stores.
pub fn copy_shader(b: &VulkanBackend, bytes: u64, reps: usize) -> Result<Timing, VulkanError> {
    let ctx = b.context();
    let src = ctx.buffer(bytes)?;
    let dst = ctx.buffer(bytes)?;
    let d = b.copy_dispatch(bytes, &src, &dst)?;
    let t = measure::median_time(ctx, &[Command::Dispatch(d)], reps)?;
    Ok(Timing {
        median_ns: t,
        bytes: 2 * bytes,
    })
}

/// Signed FWHT of block size `n` over `floats` values (one sign block),
/// with the backend's tuning: fused (signs multiplied at load, one
/// dispatch) or unfused (sign-multiply dispatch, barrier, unsigned FWHT
/// dispatch).
pub fn fwht(
    b: &VulkanBackend,
    n: usize,
    floats: usize,
    fused: bool,
    reps: usize,
) -> Result<Timing, VulkanError> {
    let ctx = b.context();
    let tuning = b.tuning();
    let rows = floats / n;
    let len = rows * n;
    let signed = FwhtDesc::new(n)?.with_signs(n)?;
    let signs: Vec<f32> = fill(n).iter().map(|v| v.signum()).collect();
    let x = ctx.upload_f32(&fill(len))?;
    let s = ctx.upload_f32(&signs)?;
    let out = ctx.buffer(4 * len as u64)?;
    let t = if fused {
        let d = b.fwht_dispatch(&tuning, &signed, rows, &x, &s, &out)?;
        measure::median_time(ctx, &[Command::Dispatch(d)], reps)?
    } else {
        let tmp = ctx.buffer(4 * len as u64)?;
        let params = [n as u32, 1];
        let mul = b.eltwise_dispatch(
            EltOp::Signs,
            Activation::Identity,
            params,
            len,
            [&x, &s, &tmp],
        )?;
        let unsigned = FwhtDesc::new(n)?;
        let f = b.fwht_dispatch(&tuning, &unsigned, rows, &tmp, &s, &out)?;
        let commands = [Command::Dispatch(mul), Command::Dispatch(f)];
        measure::median_time(ctx, &commands, reps)?
    };
    let traffic = if fused { 2 } else { 4 };
    Ok(Timing {
        median_ns: t,
        bytes: traffic * 4 * len as u64,
    })
}

/// The activation quantizer of the Q8 mode, in the backend's tuning:
/// `n_cols` columns of `k` values quantized per `mode` (Q8_0, Q8_1 or
/// Q8_K), one dispatch timed alone (bytes: the f32 values read and the
/// quantized bytes written).
pub fn quantize(
    b: &VulkanBackend,
    mode: ActQuant,
    k: usize,
    n_cols: usize,
    reps: usize,
) -> Result<Timing, VulkanError> {
    let Some(q_bytes) = quantized_bytes(mode, k, n_cols)? else {
        return Err(
            fused_core::Error::Unsupported(fused_core::error::Unsupported::ActQuant(mode)).into(),
        );
    };
    let ctx = b.context();
    let x = ctx.upload_f32(&fill(k * n_cols))?;
    let q = ctx.buffer(q_bytes)?;
    let d = b.quantize_dispatch(&b.tuning(), mode, k, n_cols, &x, &q)?;
    let t = measure::median_time(ctx, &[Command::Dispatch(d)], reps)?;
    Ok(Timing {
        median_ns: t,
        bytes: 4 * (k * n_cols) as u64 + q_bytes,
    })
}

/// The L2 cache the GEMV bench defeats: the H200's is about 60 MB.
pub const L2_BYTES: u64 = 60_000_000;

/// Weight bytes one timed GEMV submission aims to read (about
/// one timed submission at 4 TB/s).
const GEMV_SUBMISSION_BYTES: u64 = 16_000_000_000;

/// One-column GEMVs of an `m × k` matrix in one weight format with no
/// epilogue, over enough copies of the weights (at least four, at least
/// `2 × L2_BYTES` in all) that every call reads them from memory, not L2.
/// A timed submission runs rounds of one call per copy, each call with its
/// own output, until it has read about `GEMV_SUBMISSION_BYTES`.
#[derive(Debug)]
pub struct GemvBench<'a> {
    backend: &'a VulkanBackend,
    dtype: GemvType,
    mode: ActQuant,
    m: usize,
    k: usize,
    weight_bytes: usize,
    weights: Vec<Buffer<'a>>,
    x: Buffer<'a>,
    /// The activations quantized per `mode` (quantized once, untimed).
    xq: Option<Buffer<'a>>,
    ops: Buffer<'a>,
    ys: Vec<Buffer<'a>>,
}

impl<'a> GemvBench<'a> {
    /// Quantizes one row, repeats it over the matrix and uploads enough
    /// copies (at least four, at least `2 × L2_BYTES` in all).
    pub fn new(
        b: &'a VulkanBackend,
        dtype: DType,
        m: usize,
        k: usize,
    ) -> Result<GemvBench<'a>, VulkanError> {
        GemvBench::with_mode(b, dtype, ActQuant::F32, m, k)
    }

    /// [`GemvBench::new`] with the activations fed per `mode`: f32, or
    /// quantized (once, before timing; the GEMVs read the quantized
    /// activations, see [`quantize`] for the quantizer's own time).
    pub fn with_mode(
        b: &'a VulkanBackend,
        dtype: DType,
        mode: ActQuant,
        m: usize,
        k: usize,
    ) -> Result<GemvBench<'a>, VulkanError> {
        let bytes = dtype.row_bytes(k)?.saturating_mul(m).max(1) as u64;
        let copies = (2 * L2_BYTES).div_ceil(bytes).max(4);
        let rounds = GEMV_SUBMISSION_BYTES
            .div_ceil(bytes * copies)
            .clamp(1, MAX_ROUNDS as u64);
        let mut g = GemvBench::with_copies(b, dtype, m, k, copies as usize, rounds as usize)?;
        g.set_mode(mode)?;
        Ok(g)
    }

    /// Feeds the activations per `mode` from now on (quantizing them once
    /// on the device for a quantized mode).
    pub fn set_mode(&mut self, mode: ActQuant) -> Result<(), VulkanError> {
        check_mode(self.dtype, mode)?;
        self.xq = match quantized_bytes(mode, self.k, 1)? {
            Some(bytes) => {
                let ctx = self.backend.context();
                let q = ctx.buffer(bytes)?;
                let d = self.backend.quantize_dispatch(
                    &self.backend.tuning(),
                    mode,
                    self.k,
                    1,
                    &self.x,
                    &q,
                )?;
                ctx.submit(&[Command::Dispatch(d)], false)?;
                Some(q)
            }
            None => None,
        };
        self.mode = mode;
        Ok(())
    }

    /// [`GemvBench::new`] with a given number of copies and of rounds per
    /// submission (each at least one).
    pub fn with_copies(
        b: &'a VulkanBackend,
        dtype: DType,
        m: usize,
        k: usize,
        copies: usize,
        rounds: usize,
    ) -> Result<GemvBench<'a>, VulkanError> {
        let ctx = b.context();
        let gt = gemv_type(dtype)?;
        let rb = dtype.row_bytes(k)?;
        let mut row = vec![0u8; rb];
        quantize_row(dtype, &fill(k), &mut row)?;
        let bytes = row.repeat(m);
        let copies = copies.max(1);
        let weights = (0..copies)
            .map(|_| ctx.upload(&bytes))
            .collect::<Result<Vec<_>, _>>()?;
        // Rounds of one call per copy, each call with its own output: no
        // two calls of a round read the same weights (calls running side by
        // side cannot share them through L2), a copy's next read is a round
        // later, and back-to-back calls need no barrier.
        let ys = (0..copies * rounds.max(1))
            .map(|_| ctx.buffer(4 * m as u64))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(GemvBench {
            backend: b,
            dtype: gt,
            mode: ActQuant::F32,
            m,
            k,
            weight_bytes: bytes.len(),
            weights,
            x: ctx.upload_f32(&fill(k))?,
            xq: None,
            ops: ctx.buffer(4)?,
            ys,
        })
    }

    /// The weight format.
    pub fn dtype(&self) -> DType {
        self.dtype.dtype()
    }

    /// Weight rows `M` and columns `K`.
    pub fn shape(&self) -> (usize, usize) {
        (self.m, self.k)
    }

    /// The number of weight copies.
    pub fn copies(&self) -> usize {
        self.weights.len()
    }

    /// The calls one timed submission makes (rounds of one per copy).
    pub fn calls(&self) -> usize {
        self.ys.len()
    }

    /// The median time of one call with `shape` (`None`: the backend's),
    /// timed over a submission of one call per copy: back to back
    /// (`ordered` false: no barriers, as independent calls run) or with a
    /// full barrier between calls (as dependent calls run).
    pub fn time(
        &self,
        shape: Option<GemvShape>,
        ordered: bool,
        reps: usize,
    ) -> Result<Timing, VulkanError> {
        self.time_loads(shape, ordered, reps, true)
    }

    /// [`GemvBench::time`] with 16-bit weight loads allowed (where the
    /// backend's tuning and the device allow them) or not.
    pub fn time_loads(
        &self,
        shape: Option<GemvShape>,
        ordered: bool,
        reps: usize,
        loads16: bool,
    ) -> Result<Timing, VulkanError> {
        let b = self.backend;
        let base = b.tuning();
        let tuning = base
            .with_gemv_shape(shape.or(base.gemv_shape))
            .with_16bit_loads(loads16 && base.gemv_16bit_loads);
        let x = self.xq.as_ref().unwrap_or(&self.x);
        let x_bytes = match &self.xq {
            Some(q) => q.size(),
            None => 4 * self.k as u64,
        };
        let commands = self
            .ys
            .iter()
            .zip(self.weights.iter().cycle())
            .map(|(y, w)| {
                b.gemv_dispatch(
                    &tuning,
                    self.dtype,
                    self.mode,
                    None,
                    self.m,
                    self.k,
                    1,
                    ChainWords::default(),
                    vec![w, x, y, &self.ops],
                )
                .map(Command::Dispatch)
            })
            .collect::<Result<Vec<_>, _>>()?;
        let t =
            measure::median_time_of_rounds(b.context(), &commands, ordered, commands.len(), reps)?;
        Ok(Timing {
            median_ns: t,
            bytes: self.weight_bytes as u64 + x_bytes + 4 * self.m as u64,
        })
    }
}

/// One-column GEMV of an `m × k` matrix in `dtype` with no epilogue, with
/// the backend's shape, back to back over rotating weight copies
/// ([`GemvBench`]).
pub fn gemv(
    b: &VulkanBackend,
    dtype: DType,
    m: usize,
    k: usize,
    reps: usize,
) -> Result<Timing, VulkanError> {
    GemvBench::new(b, dtype, m, k)?.time(None, false, reps)
}
