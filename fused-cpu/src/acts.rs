//! Activations prepared for the dot kernels: f32, or quantized once per call
//! into the format GGML's CPU path uses for the weight format.

use fused_core::DType;
use fused_core::Error;
use fused_core::reference::ActQuant;

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
    },
}

/// Bytes needed to hold one column of `k` activations in `mode` (0 for f32).
pub fn prepared_bytes(mode: ActQuant, k: usize) -> Result<usize, Error> {
    match mode.dtype() {
        None => Ok(0),
        Some(d) => d.row_bytes(k),
    }
}

/// Quantizes every column of `x` (`n_cols` columns of `k`) into `scratch`
/// (`n_cols · prepared_bytes(mode, k)` bytes). GGML's reference rounding.
pub fn quantize_columns(
    mode: ActQuant,
    x: &[f32],
    k: usize,
    scratch: &mut [u8],
) -> Result<(), Error> {
    let Some(d) = mode.dtype() else { return Ok(()) };
    let rb = d.row_bytes(k)?;
    if k == 0 || !x.len().is_multiple_of(k) || scratch.len() != x.len() / k * rb {
        return Err(Error::LengthMismatch {
            what: "activation scratch",
            expected: x.len().checked_div(k).unwrap_or(0) * rb,
            actual: scratch.len(),
        });
    }
    for (col, dst) in x.chunks_exact(k).zip(scratch.chunks_exact_mut(rb)) {
        fused_core::quant::quantize_row(d, col, dst)?;
    }
    Ok(())
}

/// Column `col` of prepared activations.
pub fn column<'a>(
    mode: ActQuant,
    x: &'a [f32],
    scratch: &'a [u8],
    k: usize,
    col: usize,
) -> Acts<'a> {
    match mode.dtype() {
        None => Acts::F32(&x[col * k..(col + 1) * k]),
        Some(d) => {
            let rb = scratch.len() / (x.len() / k).max(1);
            Acts::Quant {
                dtype: d,
                bytes: &scratch[col * rb..(col + 1) * rb],
            }
        }
    }
}
