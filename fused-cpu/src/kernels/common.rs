//! Architecture-neutral pieces of the SIMD kernels: argument validation and
//! little-endian field reads from packed blocks.

use fused_core::error::check_len;
use fused_core::{DType, Error};

use crate::acts::Acts;

/// Errors unless `dtype` is `kernel`, the weight format the kernel is
/// written for.
fn check_weight_format(kernel: DType, dtype: DType) -> Result<(), Error> {
    if dtype != kernel {
        return Err(Error::UnsupportedDType {
            what: "weights for this SIMD kernel",
            dtype,
        });
    }
    Ok(())
}

/// Checks that `w_row` is one row of `k` weights in `kernel`'s format.
fn check_weight_row(kernel: DType, w_row: &[u8], k: usize) -> Result<(), Error> {
    check_len(
        "SIMD kernel: weight row bytes",
        kernel.row_bytes(k)?,
        w_row.len(),
    )
}

/// Checks that every row of a multi-row call is as long as the first one,
/// which the caller validated with [`check_quant`] or [`check_f32`]: the
/// rows share the format and `k`, so this is their whole check, without
/// recomputing the expected lengths (a division by the block length) per
/// row.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(super) fn check_rows_alike(rows: &[&[u8]]) -> Result<(), Error> {
    let want = rows.first().map_or(0, |r| r.len());
    for row in rows {
        check_len("SIMD kernel: weight row bytes", want, row.len())?;
    }
    Ok(())
}

/// Checks a quantized-activation call for a kernel written for weights of
/// `kernel`: the weight format, the activation variant and format, and both
/// byte lengths. Returns the activation bytes.
pub(super) fn check_quant<'a>(
    kernel: DType,
    dtype: DType,
    w_row: &[u8],
    acts: &Acts<'a>,
    k: usize,
) -> Result<&'a [u8], Error> {
    check_weight_format(kernel, dtype)?;
    let Some(want) = kernel.vec_dot_type() else {
        return Err(Error::UnsupportedDType {
            what: "weights for a quantized SIMD kernel",
            dtype,
        });
    };
    let bytes = match *acts {
        Acts::Quant {
            dtype: ad, bytes, ..
        } if ad == want => bytes,
        Acts::Quant { dtype: ad, .. } => {
            return Err(Error::UnsupportedDType {
                what: "activation format for this SIMD kernel",
                dtype: ad,
            });
        }
        Acts::F32(_) => {
            return Err(Error::UnsupportedDType {
                what: "f32 activations for a quantized SIMD kernel",
                dtype,
            });
        }
    };
    check_weight_row(kernel, w_row, k)?;
    check_len(
        "SIMD kernel: activation bytes",
        want.row_bytes(k)?,
        bytes.len(),
    )?;
    Ok(bytes)
}

/// Checks an f32-activation call for a kernel written for weights of
/// `kernel`. Returns the activations.
pub(super) fn check_f32<'a>(
    kernel: DType,
    dtype: DType,
    w_row: &[u8],
    acts: &Acts<'a>,
    k: usize,
) -> Result<&'a [f32], Error> {
    check_weight_format(kernel, dtype)?;
    let Acts::F32(x) = *acts else {
        return Err(Error::UnsupportedDType {
            what: "quantized activations for an f32 SIMD kernel",
            dtype,
        });
    };
    check_weight_row(kernel, w_row, k)?;
    check_len("SIMD kernel: activation length", k, x.len())?;
    Ok(x)
}

/// Reads a little-endian u16.
///
/// # Safety
/// `p..p + 2` must be readable.
#[inline(always)]
pub(super) unsafe fn rd16(p: *const u8) -> u64 {
    // SAFETY: the caller guarantees two readable bytes; unaligned read.
    u64::from(u16::from_le(unsafe { p.cast::<u16>().read_unaligned() }))
}

/// Reads a little-endian f32.
///
/// # Safety
/// `p..p + 4` must be readable.
#[inline(always)]
pub(super) unsafe fn rdf32(p: *const u8) -> f32 {
    // SAFETY: the caller guarantees four readable bytes; unaligned read.
    f32::from_bits(u32::from_le(unsafe { p.cast::<u32>().read_unaligned() }))
}

/// Reads a little-endian f16 and widens it to f32.
///
/// # Safety
/// `p..p + 2` must be readable.
#[inline(always)]
pub(super) unsafe fn rdf16(p: *const u8) -> f32 {
    // SAFETY: forwarded from the caller.
    half::f16::from_bits(unsafe { rd16(p) } as u16).to_f32()
}

/// The eight 6-bit scales and eight mins of a Q4_K/Q5_K block (`scales` at
/// `p`), as two u64 of eight bytes each (GGML's `utmp` shuffle).
///
/// # Safety
/// `p..p + 12` must be readable.
#[inline(always)]
pub(super) unsafe fn kscales(p: *const u8) -> (u64, u64) {
    const K1: u32 = 0x3f3f_3f3f;
    const K2: u32 = 0x0f0f_0f0f;
    const K3: u32 = 0x0303_0303;
    // SAFETY: the caller guarantees 12 readable bytes; unaligned reads.
    let (u0, u1, u2) = unsafe {
        let p = p.cast::<u32>();
        (
            u32::from_le(p.read_unaligned()),
            u32::from_le(p.add(1).read_unaligned()),
            u32::from_le(p.add(2).read_unaligned()),
        )
    };
    let sc_lo = u0 & K1;
    let sc_hi = (u2 & K2) | (((u0 >> 6) & K3) << 4);
    let m_lo = u1 & K1;
    let m_hi = ((u2 >> 4) & K2) | (((u1 >> 6) & K3) << 4);
    (
        u64::from(sc_lo) | u64::from(sc_hi) << 32,
        u64::from(m_lo) | u64::from(m_hi) << 32,
    )
}
