//! Random weights in any format.

use fused_core::DType;
use fused_core::quant::quantize_row;

use crate::rng::Rng;

/// `rows × k` weights of `dtype` (packed rows), quantized row by row from
/// values uniform in `[-1, 1) / √k` (so a dot product with unit activations
/// stays near 1).
pub fn weights(rng: &mut Rng, dtype: DType, rows: usize, k: usize) -> Vec<u8> {
    let rb = dtype.row_bytes(k).expect("k is a whole number of blocks");
    let scale = 1.0 / (k as f32).sqrt();
    let mut out = vec![0u8; rows * rb];
    for row in out.chunks_exact_mut(rb.max(1)) {
        let v = rng.vec_scaled(k, scale);
        quantize_row(dtype, &v, row).expect("a weight format");
    }
    out
}

/// The weight formats the GEMV kernels take (every format but the
/// activation-only Q8_1 and Q8_K).
pub fn weight_dtypes() -> Vec<DType> {
    DType::ALL
        .into_iter()
        .filter(|d| d.is_weight_format())
        .collect()
}
