//! The scalar float micro-kernel: one lane, `acc += w·x` in `k` order for
//! every (row, column), which is the core's reference dot product operation
//! for operation (the weights decoded by the core's own dequantizer).

use fused_core::{DType, Error};

use super::{CN, FloatAcc, FloatTile, RR};

/// Dequantizes one block-aligned piece of a weight row (the core's
/// [`fused_core::quant::dequantize_row`]).
pub fn decode(dtype: DType, src: &[u8], dst: &mut [f32]) -> Result<(), Error> {
    fused_core::quant::dequantize_row(dtype, src, dst)
}

/// `acc[c][r][0] += Σ_{k < len} w[r][k]·x[c][k]`, `k` ascending, one
/// rounding per multiply and per add.
pub fn micro(w: &FloatTile, len: usize, x: [&[f32]; CN], acc: &mut [FloatAcc; CN]) {
    for k in 0..len {
        for r in 0..RR {
            let wv = w[r][k];
            for c in 0..CN {
                acc[c][r][0] += wv * x[c][k];
            }
        }
    }
}

/// The accumulator: the single lane.
pub fn reduce(lanes: &[f32]) -> f32 {
    lanes[0]
}
