//! The scalar kernel: exactly the core's reference dot products.

use fused_core::weights::WeightMatrix;
use fused_core::reference::gemv::dot_f32;
use fused_core::{DType, Error};

use crate::acts::Acts;

/// The reference accumulator: [`dot_f32`] for f32 activations, the core's
/// [`fused_core::quant::vec_dot`] for quantized ones.
pub fn row_dot(dtype: DType, w_row: &[u8], acts: &Acts<'_>, k: usize) -> Result<f32, Error> {
    match acts {
        Acts::F32(x) => dot_f32(&WeightMatrix::new(dtype, 1, k, w_row)?, 0, x),
        Acts::Quant { bytes, .. } => fused_core::quant::vec_dot(dtype, w_row, bytes, k),
    }
}
