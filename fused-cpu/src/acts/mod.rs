//! Activations prepared for the dot kernels: f32, or quantized once per call
//! into the format GGML's CPU path uses for the weight format (an
//! [`ActQuant`]), plus side data derived from the quantized blocks once per
//! call (so that no kernel recomputes it for every weight row).
//!
//! The no_std path starts here: [`prepared_bytes`] sizes a scratch buffer,
//! [`quantize_columns`] fills it, and [`column()`] hands each column to
//! [`crate::gemv::gemv_rows`]. The side data's layout is the kernels'
//! business (public as `acts::side` with the `lab` feature).

use fused_core::DType;
use fused_core::Error;
use fused_core::acts::ActQuant;
use fused_core::error::check_len;

lab_mod! {
    /// The side data's layout and writer.
    side
}
#[cfg(target_arch = "x86_64")]
mod x86_quant;

use side::{side_bytes, write_side};

/// One activation column as the kernels read it.
#[derive(Clone, Copy, Debug)]
pub enum Acts<'a> {
    /// Plain f32 values.
    F32(&'a [f32]),
    /// Blocks of `dtype` (Q8_0, Q8_1 or Q8_K) as written by
    /// [`fused_core::quant::quantize_row`].
    Quant {
        /// The activation block format.
        dtype: DType,
        /// The blocks.
        bytes: &'a [u8],
        /// Side data derived from `bytes` (as [`quantize_columns`] writes
        /// it after the blocks), or empty. Kernels that use it check its
        /// length and fall back to `bytes` alone when it is missing.
        side: &'a [u8],
    },
}

/// Bytes needed to hold one column of `k` activations in `mode` (0 for
/// f32): the quantized blocks followed by their side data.
pub fn prepared_bytes(mode: ActQuant, k: usize) -> Result<usize, Error> {
    match mode.dtype() {
        None => Ok(0),
        Some(d) => Ok(d.row_bytes(k)? + side_bytes(d, k)),
    }
}

/// Quantizes every column of `x` (`n_cols` columns of `k`) into `scratch`
/// (`n_cols · prepared_bytes(mode, k)` bytes), each column's blocks followed
/// by their side data. GGML's reference rounding.
pub fn quantize_columns(
    mode: ActQuant,
    x: &[f32],
    k: usize,
    scratch: &mut [u8],
) -> Result<(), Error> {
    let Some(d) = mode.dtype() else { return Ok(()) };
    let rb = d.row_bytes(k)?;
    let pb = prepared_bytes(mode, k)?;
    if k == 0 {
        // Columns of no value: nothing to quantize, every dot product the
        // empty sum, 0 (as the core's reference has it).
        check_len("activations (K = 0)", 0, x.len())?;
        return check_len("activation scratch (K = 0)", 0, scratch.len());
    }
    if !x.len().is_multiple_of(k) || scratch.len() != x.len() / k * pb {
        return Err(Error::LengthMismatch {
            what: "activation scratch",
            expected: x.len().checked_div(k).unwrap_or(0) * pb,
            actual: scratch.len(),
        });
    }
    for (col, dst) in x.chunks_exact(k).zip(scratch.chunks_exact_mut(pb)) {
        let (blocks, side) = dst.split_at_mut(rb);
        quantize_row(d, col, blocks)?;
        write_side(d, blocks, k, side)?;
    }
    Ok(())
}

/// [`fused_core::quant::quantize_row`], through a vectorized quantizer
/// with the same bytes where this machine has one (Q8_0 and Q8_1 on AVX2
/// and AVX-512, Q8_K on AVX-512).
fn quantize_row(d: DType, col: &[f32], blocks: &mut [u8]) -> Result<(), Error> {
    #[cfg(target_arch = "x86_64")]
    {
        use crate::isa::Isa;
        let isa = Isa::detect();
        let x86: Option<x86_quant::Quantizer> = match d {
            DType::Q8_0 if isa >= Isa::Avx512 => Some(x86_quant::quantize_q8_0),
            DType::Q8_1 if isa >= Isa::Avx512 => Some(x86_quant::quantize_q8_1),
            DType::Q8_K if isa >= Isa::Avx512 => Some(x86_quant::quantize_q8_k),
            DType::Q8_0 if isa >= Isa::Avx2 => Some(x86_quant::quantize_q8_0_avx2),
            DType::Q8_1 if isa >= Isa::Avx2 => Some(x86_quant::quantize_q8_1_avx2),
            _ => None,
        };
        if let Some(quantize) = x86 {
            fused_core::error::check_len(
                "activation blocks",
                d.row_bytes(col.len())?,
                blocks.len(),
            )?;
            // SAFETY: `Isa::detect()` confirmed the features the quantizer
            // needs: AVX-512 F/BW/VL for the Avx512 level, AVX2 for Avx2.
            return unsafe { quantize(col, blocks) };
        }
    }
    fused_core::quant::quantize_row(d, col, blocks)
}

/// Column `col` of prepared activations: `x` holds the call's columns of
/// `k` values each and `scratch` what [`quantize_columns`] wrote for them
/// (empty in f32 mode). A column index past the last column, a `k` that
/// does not divide `x`, or a scratch buffer of the wrong size is an error.
pub fn column<'a>(
    mode: ActQuant,
    x: &'a [f32],
    scratch: &'a [u8],
    k: usize,
    col: usize,
) -> Result<Acts<'a>, Error> {
    let bad_column =
        |n_cols: usize| fused_core::error::out_of_range("activation column", col, n_cols);
    match mode.dtype() {
        None => {
            let end = col
                .checked_add(1)
                .and_then(|c| c.checked_mul(k))
                .filter(|&end| end <= x.len())
                .ok_or_else(|| bad_column(x.len().checked_div(k).unwrap_or(0)))?;
            Ok(Acts::F32(&x[end - k..end]))
        }
        Some(d) if k == 0 => {
            // Every column of K = 0 is empty (as in f32 mode above).
            check_len("activations (K = 0)", 0, x.len())?;
            Ok(Acts::Quant {
                dtype: d,
                bytes: &[],
                side: &[],
            })
        }
        Some(d) => {
            let pb = prepared_bytes(mode, k)?;
            if !x.len().is_multiple_of(k) {
                return Err(Error::LengthMismatch {
                    what: "activations (a whole number of columns of k values)",
                    expected: x.len().next_multiple_of(k.max(1)),
                    actual: x.len(),
                });
            }
            let n_cols = x.len() / k;
            fused_core::error::check_len("activation scratch", n_cols * pb, scratch.len())?;
            if col >= n_cols {
                return Err(bad_column(n_cols));
            }
            let (bytes, side) = scratch[col * pb..(col + 1) * pb].split_at(d.row_bytes(k)?);
            Ok(Acts::Quant {
                dtype: d,
                bytes,
                side,
            })
        }
    }
}
