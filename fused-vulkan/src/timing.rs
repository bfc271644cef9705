//! Device-timed kernels (timestamp queries around one submission) for the
//! bench binary. Each function builds its buffers once, runs `reps` timed
//! submissions and returns the median device time.

use fused_core::DType;
use fused_core::fwht::FwhtDesc;
use fused_core::quant::quantize_row;

use crate::backend::{ChainWords, EltOp, FwhtVariant, VulkanBackend, gemv_type};
use crate::context::{Command, VulkanContext};
use crate::error::VulkanError;
use fused_core::element::Activation;

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

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn timed(ctx: &VulkanContext, commands: &[Command<'_>], reps: usize) -> Result<f64, VulkanError> {
    let mut times = Vec::with_capacity(reps.max(1));
    ctx.submit(commands, false)?; // warm-up
    for _ in 0..reps.max(1) {
        let t = ctx.submit(commands, true)?;
        times.push(t.unwrap_or(f64::NAN));
    }
    Ok(median(times))
}

/// A deterministic fill (values in [-1, 1)).
fn fill(n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| ((i.wrapping_mul(2_654_435_761) >> 7) % 2001) as f32 / 1000.0 - 1.0)
        .collect()
}

/// A device-to-device copy of `bytes` bytes: the bandwidth ceiling.
pub fn copy(b: &VulkanBackend, bytes: u64, reps: usize) -> Result<Timing, VulkanError> {
    let ctx = b.context();
    let src = ctx.buffer(bytes)?;
    let dst = ctx.buffer(bytes)?;
    let t = timed(ctx, &[Command::Copy(&src, &dst)], reps)?;
    Ok(Timing {
        median_ns: t,
        bytes: 2 * bytes,
    })
}

/// Signed FWHT of block size `n` over `floats` values (one sign block):
/// fused (signs multiplied at load, one dispatch) or unfused (sign-multiply
/// dispatch, barrier, unsigned FWHT dispatch).
pub fn fwht(
    b: &VulkanBackend,
    variant: FwhtVariant,
    n: usize,
    floats: usize,
    fused: bool,
    reps: usize,
) -> Result<Timing, VulkanError> {
    let ctx = b.context();
    let rows = floats / n;
    let len = rows * n;
    let signed = FwhtDesc::new(n)?.with_signs(n)?;
    let signs: Vec<f32> = fill(n).iter().map(|v| v.signum()).collect();
    let x = ctx.upload_f32(&fill(len))?;
    let s = ctx.upload_f32(&signs)?;
    let out = ctx.buffer(4 * len as u64)?;
    let t = if fused {
        let d = b.fwht_dispatch(&signed, variant, rows, &x, &s, &out)?;
        timed(ctx, &[Command::Dispatch(d)], reps)?
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
        let f = b.fwht_dispatch(&unsigned, variant, rows, &tmp, &s, &out)?;
        timed(ctx, &[Command::Dispatch(mul), Command::Dispatch(f)], reps)?
    };
    let traffic = if fused { 2 } else { 4 };
    Ok(Timing {
        median_ns: t,
        bytes: traffic * 4 * len as u64,
    })
}

/// One-column GEMV of an `m × k` matrix in `dtype` with no epilogue.
pub fn gemv(
    b: &VulkanBackend,
    dtype: DType,
    m: usize,
    k: usize,
    reps: usize,
) -> Result<Timing, VulkanError> {
    let ctx = b.context();
    let gt = gemv_type(dtype)?;
    let rb = dtype.row_bytes(k)?;
    let row = fill(k);
    let mut bytes = vec![0u8; rb * m];
    for dst in bytes.chunks_exact_mut(rb) {
        quantize_row(dtype, &row, dst)?;
    }
    let w = ctx.upload(&bytes)?;
    let x = ctx.upload_f32(&fill(k))?;
    let y = ctx.buffer(4 * m as u64)?;
    let ops = ctx.buffer(4)?;
    let chain = ChainWords::default();
    let d = b.gemv_dispatch(gt, None, m, k, 1, chain, vec![&w, &x, &y, &ops])?;
    let t = timed(ctx, &[Command::Dispatch(d)], reps)?;
    Ok(Timing {
        median_ns: t,
        bytes: (bytes.len() + 4 * k + 4 * m) as u64,
    })
}
